//! Charts and overlays beside models, against a local control plane this benchmark
//! starts, with the pinned Helm and Kustomize (`scripts/helm-tools`). The repository:
//! 20 copies of `helm create`'s chart (each a HelmChart model in its own namespace) and
//! 20 overlays of one base. Measures, side by side with the peer tools on the same
//! objects (kubectl's copies in namespaces of their own):
//! - building: `tether render` of the whole repository beside `helm template` ×20 and
//!   `kubectl kustomize` ×20 one after another (what tether adds to the engines);
//! - the first apply, beside `helm template | kubectl apply --server-side` and
//!   `kubectl kustomize | kubectl apply --server-side`;
//! - a diff with no change (median of 3), beside `… | kubectl diff --server-side`;
//! - the daemon (`tether run`, a Git source): a pass at an unchanged commit that a
//!   drift correction starts renders nothing (Helm and Kustomize are counted through
//!   wrappers).
//!
//! Run with `cargo bench --bench generate` (`-- --charts 5 --overlays 5`); a smoke run
//! (`cargo test --bench generate`) takes 2 charts and 2 overlays, one run of each
//! build and diff, and shorter waits around the daemon's passes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

#[allow(dead_code)]
#[path = "common/kube.rs"]
mod kube_helpers;

#[path = "common/compare.rs"]
mod compare;
use compare::{check, median, timed};

#[path = "common/mode.rs"]
mod mode;

use kube_helpers::Killed;
use mode::arg;
use tether_testkit::cluster::LocalCluster;
use tether_testkit::tools::helm_tools;

fn main() {
    let charts = arg("--charts", 20, 2);
    let overlays = arg("--overlays", 20, 2);
    let cluster = LocalCluster::start(0);
    let dir = tempfile::tempdir().expect("dir");
    let bench = Bench::new(cluster.kubeconfig(), dir.path());
    let repo = dir.path().join("repo");
    write_repository(&repo, charts, overlays);
    println!(
        "{charts} charts (helm create's) and {overlays} overlays on a local kube-apiserver {} (2 cores); helm 4.1.4, kubectl 1.35.2 (Kustomize 5.7.1); {} for builds and diffs",
        cluster.release(),
        compare::median_of()
    );
    println!(
        "{:<34} {:>10} {:>10} {:>8}",
        "operation", "tether", "peers", "ratio"
    );
    bench.building(&repo, charts, overlays);
    bench.apply_and_diff(&repo, charts, overlays);
    bench.daemon(&repo);
}

fn row(operation: &str, tether: Duration, peers: Duration) {
    println!(
        "{operation:<34} {:>9.2}s {:>9.2}s {:>7.2}x",
        tether.as_secs_f64(),
        peers.as_secs_f64(),
        tether.as_secs_f64() / peers.as_secs_f64()
    );
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

/// The repository: models (a KubernetesService, a TrustDomain and a HelmChart per
/// chart), the charts under `charts/`, one base and the overlays under `overlays/`.
fn write_repository(repo: &Path, charts: usize, overlays: usize) {
    let helm = &helm_tools().helm;
    std::fs::create_dir_all(repo.join("charts")).expect("mkdir");
    let created = Command::new(helm)
        .args(["create", "hello"])
        .current_dir(repo.join("charts"))
        .output()
        .expect("helm create");
    check(&created, &[0], "helm create");
    let mut models = String::from("kind: KubernetesService\nname: kubernetes\n");
    for i in 0..charts {
        models.push_str(&format!(
            "---\nkind: TrustDomain\nname: chart-{i}\n---\nkind: HelmChart\nname: hello-{i}\nchart: charts/hello\ntrust_domain: chart-{i}\nvalues:\n  podAnnotations:\n    copy: \"{i}\"\n"
        ));
    }
    write(&repo.join("models.yaml"), &models);
    write(
        &repo.join("base/kustomization.yaml"),
        "resources:\n- deployment.yaml\nconfigMapGenerator:\n- name: settings\n  literals: [color=blue]\n",
    );
    write(
        &repo.join("base/deployment.yaml"),
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - name: web\n        image: nginx:1.25\n        envFrom:\n        - configMapRef:\n            name: settings\n",
    );
    for i in 0..overlays {
        write_overlay(
            &repo.join(format!("overlays/o{i}")),
            &format!("overlay-{i}"),
            "../../base",
        );
    }
}

fn write_overlay(dir: &Path, namespace: &str, base: &str) {
    write(
        &dir.join("kustomization.yaml"),
        &format!(
            "namespace: {namespace}\nresources:\n- {base}\n- namespace.yaml\nimages:\n- name: nginx\n  newTag: \"1.27\"\n"
        ),
    );
    write(
        &dir.join("namespace.yaml"),
        &format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {namespace}\n"),
    );
}

struct Bench {
    kubeconfig: PathBuf,
    tether: PathBuf,
    /// The peers' copies: charts and overlays in namespaces of their own.
    peers: PathBuf,
    home: PathBuf,
}

impl Bench {
    fn new(kubeconfig: &Path, dir: &Path) -> Bench {
        Bench {
            kubeconfig: kubeconfig.to_path_buf(),
            tether: PathBuf::from(env!("CARGO_BIN_EXE_tether")),
            peers: dir.join("peers"),
            home: dir.join("home"),
        }
    }

    fn tether(&self, args: &[&str]) -> Output {
        let mut command = Command::new(&self.tether);
        command
            .args(args)
            .env("TETHER_KUBECONFIG", &self.kubeconfig)
            .env("HOME", &self.home);
        for (name, value) in helm_tools().env() {
            command.env(name, value);
        }
        command.output().expect("tether")
    }

    /// A shell pipeline of the peer tools (`$HELM`, `$KUBECTL`), in the peers' directory.
    fn shell(&self, script: &str) -> Output {
        let tools = helm_tools();
        Command::new("bash")
            .args(["-euo", "pipefail", "-c", script])
            .current_dir(&self.peers)
            .env("HELM", &tools.helm)
            .env("KUBECTL", &tools.kubectl)
            .env("KUBECONFIG", &self.kubeconfig)
            .output()
            .expect("bash")
    }

    fn building(&self, repo: &Path, charts: usize, overlays: usize) {
        let path = repo.to_str().expect("utf-8");
        // Once first: a cold cache of the tools' own (Go's) start-up is not ours.
        check(&self.tether(&["render", path]), &[0], "tether render");
        let tether =
            median(|| timed(|| check(&self.tether(&["render", path]), &[0], "tether render")));
        std::fs::create_dir_all(&self.peers).expect("mkdir");
        let mut script = String::new();
        for i in 0..charts {
            script.push_str(&format!(
                "$HELM template hello-{i} {repo}/charts/hello --namespace chart-{i} --set-string podAnnotations.copy={i} > /dev/null\n",
                repo = repo.display()
            ));
        }
        for i in 0..overlays {
            script.push_str(&format!(
                "$KUBECTL kustomize {}/overlays/o{i} > /dev/null\n",
                repo.display()
            ));
        }
        let peers = median(|| {
            timed(|| {
                check(
                    &self.shell(&script),
                    &[0],
                    "helm template, kubectl kustomize",
                )
            })
        });
        row("build (render) all", tether, peers);
        let per = |d: Duration| d / u32::try_from(charts + overlays).unwrap_or(1);
        row("build, per chart or overlay", per(tether), per(peers));
    }

    fn apply_and_diff(&self, repo: &Path, charts: usize, overlays: usize) {
        let path = repo.to_str().expect("utf-8");
        let apply = timed(|| {
            check(
                &self.tether(&["apply", path, "--inventory-name", "generate-bench"]),
                &[0],
                "tether apply",
            )
        });
        // The peers' copies: the same charts and overlays into namespaces of their own.
        let mut setup = String::new();
        let mut applies = String::new();
        let mut diffs = String::new();
        for i in 0..charts {
            setup.push_str(&format!(
                "$KUBECTL create namespace peer-chart-{i} > /dev/null\n"
            ));
            let template = format!(
                "$HELM template hello-{i} {repo}/charts/hello --namespace peer-chart-{i} --set-string podAnnotations.copy={i} | $KUBECTL --namespace peer-chart-{i}",
                repo = repo.display()
            );
            applies.push_str(&format!(
                "{template} apply --server-side -f - > /dev/null\n"
            ));
            diffs.push_str(&format!("{template} diff --server-side -f - > /dev/null\n"));
        }
        for i in 0..overlays {
            write_overlay(
                &self.peers.join(format!("o{i}")),
                &format!("peer-overlay-{i}"),
                // Kustomize takes a base by a relative path only: peers/oN → repo/base.
                "../../repo/base",
            );
            applies.push_str(&format!(
                "$KUBECTL kustomize o{i} | $KUBECTL apply --server-side -f - > /dev/null\n"
            ));
            diffs.push_str(&format!(
                "$KUBECTL kustomize o{i} | $KUBECTL diff --server-side -f - > /dev/null\n"
            ));
        }
        check(&self.shell(&setup), &[0], "kubectl create namespace");
        let peers_apply =
            timed(|| check(&self.shell(&applies), &[0], "helm template | kubectl apply"));
        row("first apply", apply, peers_apply);
        let diff = median(|| {
            timed(|| {
                check(
                    &self.tether(&["diff", path, "--inventory-name", "generate-bench"]),
                    &[0],
                    "tether diff",
                )
            })
        });
        let peers_diff = median(|| timed(|| check(&self.shell(&diffs), &[0], "… | kubectl diff")));
        row("diff, no change (same objects)", diff, peers_diff);
    }

    /// `tether run` on a Git copy of the repository; the tools wrapped to count their
    /// runs. After the first pass, a drift (a chart's Deployment scaled by hand) starts
    /// a pass at the same commit: it corrects the drift and builds nothing.
    fn daemon(&self, repo: &Path) {
        let git = |args: &[&str]| {
            let out = Command::new("git")
                .args(args)
                .current_dir(repo)
                .output()
                .expect("git");
            check(&out, &[0], "git");
        };
        git(&["init", "-q", "-b", "main"]);
        git(&["add", "-A"]);
        git(&[
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@example.org",
            "commit",
            "-qm",
            "charts and overlays",
        ]);
        let counter = self.home.join("runs.log");
        let wrapper = |name: &str, real: &Path| {
            let path = self.home.join(format!("{name}-counted"));
            write(
                &path,
                &format!(
                    "#!/bin/sh\necho {name} >> {}\nexec {} \"$@\"\n",
                    counter.display(),
                    real.display()
                ),
            );
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .expect("chmod");
            path
        };
        let tools = helm_tools();
        let (helm, kubectl) = (
            wrapper("helm", &tools.helm),
            wrapper("kubectl", &tools.kubectl),
        );
        let url = format!("file://{}", repo.display());
        let log = self.home.join("daemon.log");
        let daemon = Command::new(&self.tether)
            .args([
                "run",
                "--repo",
                &url,
                "--ref",
                "main",
                "--interval",
                "1s",
                "--inventory-name",
                "generate-bench",
            ])
            .args([
                "--cache-dir",
                self.home.join("git-cache").to_str().expect("utf-8"),
                "--listen",
                "127.0.0.1:0",
            ])
            .env("TETHER_KUBECONFIG", &self.kubeconfig)
            .env("HOME", &self.home)
            .env("TETHER_HELM", &helm)
            .env("TETHER_KUSTOMIZE", &kubectl)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("the daemon's log"))
            .spawn()
            .expect("tether run");
        let mut daemon = Killed(daemon);
        // What went wrong, when a wait below gives up: the end of the daemon's log.
        let give_up = |what: &str| -> ! {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(20)..].join("\n");
            panic!("{what}; the end of tether run's log:\n{tail}")
        };
        let runs = || std::fs::read_to_string(&counter).map_or(0, |t| t.lines().count());
        let started = Instant::now();
        while runs() == 0 {
            if started.elapsed() > Duration::from_secs(120) {
                give_up("tether run ran neither Helm nor Kustomize in 120 s");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        // The first pass applied the Deployment the drift is made on; then the rest of
        // the pass is given a while (a little in a smoke run).
        let deployment = "$KUBECTL --namespace chart-0 get deployment hello-0 > /dev/null 2>&1";
        while !self.shell(deployment).status.success() {
            if started.elapsed() > Duration::from_secs(120) {
                give_up("the first pass did not apply chart-0's Deployment in 120 s");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        std::thread::sleep(Duration::from_secs(mode::size(10, 2)));
        let after_first = runs();
        let scaled = self.shell(
            "$KUBECTL --namespace chart-0 scale deployment hello-0 --replicas 3 > /dev/null",
        );
        check(&scaled, &[0], "kubectl scale");
        let corrected = Instant::now();
        loop {
            let replicas = self.shell("$KUBECTL --namespace chart-0 get deployment hello-0 -o jsonpath='{.spec.replicas}'");
            if String::from_utf8_lossy(&replicas.stdout) == "1" {
                break;
            }
            if corrected.elapsed() > Duration::from_secs(60) {
                give_up("the drift (hello-0 scaled to 3) was not corrected in 60 s");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let took = corrected.elapsed();
        std::thread::sleep(Duration::from_secs(mode::size(5, 2)));
        let after_drift = runs();
        if let Ok(Some(status)) = daemon.0.try_wait() {
            give_up(&format!("tether run exited: {status}"));
        }
        drop(daemon);
        println!(
            "daemon: first pass ran the tools {after_first} times; the drift corrected in {:.2}s; quiet and correcting passes since ran them {} times",
            took.as_secs_f64(),
            after_drift - after_first
        );
    }
}
