//! tether apply/diff side by side with kubectl, on the same rendered objects, against
//! a local control plane this benchmark starts (scripts/local-cluster). For 1,000 and
//! 5,000 ConfigMaps: first apply, a diff with no change, a diff with one change. The
//! first apply is measured against the server's floor too: a minimal client applying
//! the same objects with server-side apply at the concurrency (of 8, 16, 32, 64) that
//! applies up to 1,000 ConfigMaps fastest, run first, each in a namespace of its own.
//! Run with `cargo bench --bench reconcile` (`-- --sizes 1000` to pick sizes); a smoke
//! run (`cargo test --bench reconcile`) takes 20 ConfigMaps and one run of each diff.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

#[path = "common/compare.rs"]
mod compare;
use compare::{check, median, timed};

#[path = "common/floor.rs"]
mod floor;
#[allow(dead_code)]
#[path = "common/kube.rs"]
mod kube_helpers;
#[allow(dead_code)]
#[path = "common/mode.rs"]
mod mode;

use tether_testkit::cluster::LocalCluster;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let sizes: Vec<usize> = args
        .iter()
        .position(|a| a == "--sizes")
        .and_then(|i| args.get(i + 1))
        .map(|s| s.split(',').filter_map(|n| n.parse().ok()).collect())
        .unwrap_or_else(|| mode::size(vec![1000, 5000], vec![20]));
    // No simulated nodes: the benchmark measures tether, not pods starting.
    let cluster = LocalCluster::start(0);
    // The peer: kubectl of the server's own release, built from the same module
    // (KUBECTL names another).
    let kubectl = std::env::var_os("KUBECTL")
        .map(PathBuf::from)
        .unwrap_or_else(|| tether_testkit::cluster::binaries().join("kubectl"));
    let version = Command::new(&kubectl)
        .args(["version", "--client"])
        .output()
        .expect("kubectl version");
    let version = String::from_utf8_lossy(&version.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let bench = Bench {
        kubeconfig: cluster.kubeconfig().to_path_buf(),
        kubectl,
        tether: PathBuf::from(env!("CARGO_BIN_EXE_tether")),
        client: runtime.block_on(cluster.client()),
        runtime,
    };

    println!(
        "tether vs kubectl ({version}) on a local kube-apiserver {} (2 cores); {} for diffs",
        cluster.release(),
        compare::median_of()
    );
    println!(
        "{:>6}  {:<18} {:>10} {:>10} {:>8}",
        "objects", "operation", "tether", "kubectl", "ratio"
    );
    for size in sizes {
        bench.run(size);
    }
}

struct Bench {
    kubeconfig: PathBuf,
    kubectl: PathBuf,
    tether: PathBuf,
    /// The floor's client, and its runtime.
    client: kube::Client,
    runtime: tokio::runtime::Runtime,
}

/// ConfigMaps in one models file: a repository spreads its models over files (one
/// file of all 5,000 is read too: a document costs what its values cost).
const PER_FILE: usize = 1_000;

/// Writes `size` objects' models into `dir` (a namespace and `size - 1` ConfigMaps,
/// the one at `changed` with another value), `PER_FILE` ConfigMaps a file.
fn write_models(dir: &Path, namespace: &str, size: usize, changed: Option<usize>) {
    let mut text = format!(
        "kind: KubernetesService\nname: kubernetes\n---\nkind: TrustDomain\nname: {namespace}\n"
    );
    for i in 0..size - 1 {
        let value = if Some(i) == changed {
            "changed"
        } else {
            "original"
        };
        text.push_str(&format!(
            "---\nkind: KubernetesConfigMap\nname: cm-{i}\ntrust_domain: {namespace}\ndata:\n  index: \"{i}\"\n  value: {value}\n"
        ));
        if (i + 1) % PER_FILE == 0 || i == size - 2 {
            let file = dir.join(format!("models-{:03}.yaml", i / PER_FILE));
            std::fs::write(file, std::mem::take(&mut text)).expect("write");
        }
    }
}

impl Bench {
    fn tether(&self, args: &[&str]) -> Output {
        Command::new(&self.tether)
            .args(args)
            // By variable: `render` takes no --kubeconfig.
            .env("TETHER_KUBECONFIG", &self.kubeconfig)
            .output()
            .expect("tether")
    }

    fn kubectl(&self, args: &[&str]) -> Output {
        Command::new(&self.kubectl)
            .args(args)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .output()
            .expect("kubectl")
    }

    fn run(&self, size: usize) {
        // Same objects for both tools: tether's models, and kubectl's copy of what tether
        // renders from them, each in its own namespace (size objects with the namespace).
        let dir = tempfile::tempdir().expect("dir");
        let (ours, theirs) = (
            format!("bench-tether-{size}"),
            format!("bench-kubectl-{size}"),
        );
        let models_dir = dir.path().join("models");
        let manifests = dir.path().join("manifests");
        std::fs::create_dir_all(&models_dir).expect("mkdir");
        std::fs::create_dir_all(&manifests).expect("mkdir");
        // What tether renders of the models in `namespace`.
        let rendered = |namespace: &str, changed: Option<usize>| {
            let source = dir.path().join(format!("for-{namespace}"));
            std::fs::create_dir_all(&source).expect("mkdir");
            write_models(&source, namespace, size, changed);
            let rendered = self.tether(&[
                "render",
                source.to_str().expect("utf-8"),
                "--inventory-name",
                "kubectl",
            ]);
            check(&rendered, &[0], "tether render");
            rendered.stdout
        };
        let write_manifests = |changed: Option<usize>| {
            std::fs::write(manifests.join("objects.yaml"), rendered(&theirs, changed))
                .expect("write");
        };
        write_manifests(None);

        // The floor first, on the server as the tools find it.
        // A document an object: more than the parser's default budget of documents.
        let options = serde_saphyr::options! {
            budget: serde_saphyr::budget! { max_documents: usize::MAX },
        };
        let floor_objects: Vec<serde_json::Value> = serde_saphyr::from_multiple_with_options(
            &String::from_utf8_lossy(&rendered(&format!("bench-floor-{size}"), None)),
            options,
        )
        .expect("the rendered objects");
        let trials = format!("bench-floor-{size}-trial");
        let (concurrency, rates) = self.runtime.block_on(floor::best_concurrency(
            &self.client,
            size.min(1000),
            &trials,
        ));
        let floor_apply = timed(|| {
            self.runtime
                .block_on(floor::apply_all(&self.client, floor_objects, concurrency))
        });
        write_models(&models_dir, &ours, size, None);
        let path = models_dir.to_str().expect("utf-8");
        let inventory = format!("bench-{size}");
        let manifests_path = manifests.to_str().expect("utf-8");

        let tether_apply = timed(|| {
            check(
                &self.tether(&["apply", path, "--inventory-name", &inventory]),
                &[0],
                "tether apply",
            )
        });
        let kubectl_apply = timed(|| {
            check(
                &self.kubectl(&[
                    "apply",
                    "--server-side",
                    "--field-manager",
                    "kubectl-bench",
                    "-f",
                    manifests_path,
                ]),
                &[0],
                "kubectl apply",
            )
        });
        row(size, "first apply", tether_apply, kubectl_apply);
        println!(
            "{size:>6}  {:<18} {:>8.0}ms (server-side apply, {concurrency} in flight): tether {:.2}x the floor; {rates}",
            "floor",
            floor_apply.as_secs_f64() * 1000.0,
            tether_apply.as_secs_f64() / floor_apply.as_secs_f64()
        );

        // A diff run three times (once in a smoke run), the median kept; `expect` is the exit code (1: differences).
        let tether_diff = |expect: i32| {
            median(|| {
                timed(|| {
                    check(
                        &self.tether(&["diff", path, "--inventory-name", &inventory]),
                        &[expect],
                        "tether diff",
                    )
                })
            })
        };
        let kubectl_diff = |expect: i32| {
            let args = [
                "diff",
                "--server-side",
                "--field-manager",
                "kubectl-bench",
                "-f",
                manifests_path,
            ];
            median(|| timed(|| check(&self.kubectl(&args), &[expect], "kubectl diff")))
        };
        let (tether_none, kubectl_none) = (tether_diff(0), kubectl_diff(0));
        row(size, "no-change diff", tether_none, kubectl_none);

        write_models(&models_dir, &ours, size, Some(size / 2));
        write_manifests(Some(size / 2));
        let (tether_one, kubectl_one) = (tether_diff(1), kubectl_diff(1));
        row(size, "one-change diff", tether_one, kubectl_one);
        let version = timed(|| {
            check(
                &self.kubectl(&["get", "--raw", "/version"]),
                &[0],
                "kubectl get --raw",
            )
        });
        println!(
            "{size:>6}  {:<18} {:>9.0}ms (one kubectl round trip, process start included)",
            "round trip",
            version.as_secs_f64() * 1000.0
        );
    }
}

fn row(size: usize, operation: &str, tether: Duration, kubectl: Duration) {
    println!(
        "{size:>6}  {operation:<18} {:>8.0}ms {:>8.0}ms {:>7.1}x",
        tether.as_secs_f64() * 1000.0,
        kubectl.as_secs_f64() * 1000.0,
        kubectl.as_secs_f64() / tether.as_secs_f64()
    );
}
