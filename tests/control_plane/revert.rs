//! Revert that sticks (`spec.revert`), on the real node: a daemon (`tether run`)
//! applies a Source whose Deployment runs the node's workload image. A person's commit
//! whose container fails its readiness probe is reverted by a commit tether pushes
//! (naming the Deployment), within the timeout and a pass; the person's answer to the
//! revert (bringing the change back) is not reverted again; an image automation's
//! update to a tag whose container fails its probe is reverted too, and the policy is
//! held (the tag does not come back) until a person's commit. Git is read with the
//! `git` CLI, a second client beside tether's git2.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tether_testkit::cluster::{LocalCluster, real_node};
use tether_testkit::remote::{Remote, free_port};

use crate::cli::{Cli, text};

/// How long a rollout may take before it is reverted (the Source's `spec.timeout`).
const TIMEOUT: &str = "30s";

/// The person's clone of the models repository, and what they do with it.
struct Person {
    dir: PathBuf,
}

impl Person {
    fn git(&self, args: &[&str]) -> String {
        let out = Command::new("git")
            .current_dir(&self.dir)
            .args([
                "-c",
                "user.name=Person",
                "-c",
                "user.email=person@example.org",
            ])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        text(&out.stdout).trim().to_string()
    }

    /// The branch as the remote has it now.
    fn pull(&self) {
        self.git(&["fetch", "-q", "origin"]);
        self.git(&["reset", "-q", "--hard", "origin/main"]);
    }

    /// Writes `models/name`, commits and pushes; returns the commit.
    fn commit(&self, name: &str, content: &str, message: &str) -> String {
        self.pull();
        std::fs::write(self.dir.join("models").join(name), content).unwrap();
        self.git(&["commit", "-qam", message]);
        self.git(&["push", "-q", "origin", "HEAD:main"]);
        self.git(&["rev-parse", "HEAD"])
    }

    /// The remote's branch head: its id, author, and message.
    fn head(&self) -> (String, String, String) {
        self.pull();
        (
            self.git(&["rev-parse", "HEAD"]),
            self.git(&["log", "-1", "--format=%an"]),
            self.git(&["log", "-1", "--format=%B"]),
        )
    }

    fn trailer(&self, key: &str) -> String {
        self.git(&[
            "log",
            "-1",
            &format!("--format=%(trailers:key={key},valueonly)"),
        ])
    }
}

/// `examples/real-node/web.yaml` as the repository holds it: the image of the node's
/// registry at `tag` (written by the policy `web`), the readiness probe at `probe`.
fn web(registry: &str, tag: &str, probe: &str) -> String {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/real-node/web.yaml");
    let text = std::fs::read_to_string(example).unwrap();
    let image = "registry.tether.test/workload:1.0.0";
    assert!(text.contains(image) && text.contains("path: /ready,"));
    text.replace(
        image,
        &format!("{registry}/workload:{tag} # tether:image-policy web"),
    )
    .replace("path: /ready,", &format!("path: {probe},"))
}

fn policy(registry: &str, range: &str) -> String {
    format!(
        "kind: ImagePolicy\nname: web\nimage: {registry}/workload\nsemver: \"{range}\"\ninterval: 10s\ninsecure: true\n"
    )
}

/// A process stopped when the test ends, however it ends.
struct Stopped(Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `tether run` for the Sources of `tether-system`, on the host.
fn daemon(cluster: &LocalCluster, dir: &Path) -> Stopped {
    let secret = dir.join("webhook-secret");
    std::fs::write(&secret, "a-secret-of-the-test\n").unwrap();
    Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["run", "--sources", "--sources-namespace", "tether-system"])
        .args(["--log-format", "json", "--log-level", "warn"])
        .arg(format!("--listen=127.0.0.1:{}", free_port()))
        .arg("--webhook-secret-file")
        .arg(&secret)
        .arg("--cache-dir")
        .arg(dir.join("cache"))
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig())
        .env("TETHER_COLOR", "never")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map(Stopped)
        .unwrap()
}

fn source(cli: &Cli) -> Value {
    cli.json(&["get", "source", "web", "-n", "tether-system"])
}

/// The Deployment's template: its image and readiness probe's path.
fn template(cli: &Cli) -> (String, String) {
    let deployment = cli.json(&["get", "deployment", "web", "-n", "hello"]);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    (
        container["image"].as_str().unwrap_or_default().to_string(),
        container["readinessProbe"]["httpGet"]["path"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

fn rolled_out(cli: &Cli) {
    cli.kubectl_ok(&[
        "rollout",
        "status",
        "deployment/web",
        "-n",
        "hello",
        "--timeout=120s",
    ]);
}

/// Waits until the remote's head is tether's revert of `failed`; returns it.
fn reverted(cli: &Cli, person: &Person, failed: &str) -> String {
    let started = Instant::now();
    let mut head = String::new();
    cli.eventually(
        "tether's revert on the branch",
        Duration::from_secs(150),
        || {
            head = person.head().0;
            person.trailer("Tether-Revert") == failed
        },
    );
    eprintln!(
        "[revert] {failed} reverted {:?} after its push",
        started.elapsed()
    );
    head
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one story: a failed commit, the person's answer, an image update, the hold and its release"
)]
fn a_commit_whose_container_fails_its_probe_is_reverted_and_stays_reverted_until_a_person_commits()
{
    let node = real_node();
    let cluster = LocalCluster::start_real(&node);
    let cli = Cli {
        kubeconfig: cluster.kubeconfig(),
    };
    let registry = cluster.registry();
    let crd = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/base/crd.yaml");
    cli.kubectl_ok(&["apply", "--server-side", "-f", crd.to_str().unwrap()]);
    cli.kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "crd/sources.tether.dev",
        "--timeout=30s",
    ]);
    cli.kubectl_ok(&["create", "namespace", "tether-system"]);

    let remote = Remote::new(&[
        ("web.yaml", &web(&registry, "2.0.0", "/ready")),
        ("policy.yaml", &policy(&registry, ">=2.0.0")),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let person = Person {
        dir: dir.path().join("work"),
    };
    let cloned = Command::new("git")
        .args(["clone", "-q", &remote.file_url()])
        .arg(&person.dir)
        .status()
        .unwrap();
    assert!(cloned.success());
    let _daemon = daemon(&cluster, dir.path());
    let spec = format!(
        "apiVersion: tether.dev/v1alpha1
kind: Source
metadata: {{name: web, namespace: tether-system}}
spec:
  url: {}
  ref: main
  path: models
  interval: 5s
  timeout: {TIMEOUT}
  revert: true
  imageAutomation: {{author: 'tether <tether@example.org>'}}
  feedback:
    notifications: [{{type: kubernetes-events}}]
",
        remote.file_url()
    );
    let file = dir.path().join("source.yaml");
    std::fs::write(&file, spec).unwrap();
    cli.kubectl_ok(&["apply", "-f", file.to_str().unwrap()]);
    cli.eventually("the Deployment applied", Duration::from_secs(120), || {
        cli.kubectl(&["get", "deployment", "web", "-n", "hello"])
            .status
            .success()
    });
    rolled_out(&cli);

    // A person's commit whose readiness probe finds nothing: the new pod never becomes
    // ready, and tether reverts the commit.
    let bad = person.commit(
        "web.yaml",
        &web(&registry, "2.0.0", "/missing"),
        "probe /missing",
    );
    let revert = reverted(&cli, &person, &bad);
    let (_, author, message) = person.head();
    assert_eq!(author, "tether");
    assert!(
        message.starts_with("Revert \"probe /missing\"")
            && message.contains(&format!("This reverts commit {bad}."))
            && message.contains("- Deployment hello/web: "),
        "{message}"
    );
    cli.eventually("the revert applied", Duration::from_secs(60), || {
        template(&cli).1 == "/ready"
    });
    rolled_out(&cli);
    let status = source(&cli)["status"]["lastRevert"].clone();
    assert!(
        status["failed"].as_str().is_some_and(|f| f.ends_with(&bad))
            && status["revert"]
                .as_str()
                .is_some_and(|r| r.ends_with(&revert))
            && status["message"]
                .as_str()
                .is_some_and(|m| m.contains("Deployment hello/web")),
        "{status}"
    );
    let events = cli.json(&[
        "get",
        "events",
        "-n",
        "tether-system",
        "--field-selector",
        "involvedObject.name=web,reason=Reverted",
    ]);
    assert!(
        !events["items"].as_array().unwrap().is_empty(),
        "an Event on the Source says so"
    );

    // The person brings the change back on purpose: their answer to the revert wins.
    person.pull();
    person.git(&["revert", "--no-edit", "HEAD"]);
    person.git(&["push", "-q", "origin", "HEAD:main"]);
    let answer = person.git(&["rev-parse", "HEAD"]);
    cli.eventually("the answer applied", Duration::from_secs(60), || {
        template(&cli).1 == "/missing"
    });
    cli.eventually(
        "the answer's rollout failed, not reverted",
        Duration::from_secs(120),
        || {
            let status = &source(&cli)["status"]["lastRevert"];
            status["failed"]
                .as_str()
                .is_some_and(|f| f.ends_with(&answer))
                && status["revert"].is_null()
        },
    );
    let said = source(&cli)["status"]["lastRevert"]["message"].clone();
    assert!(
        said.as_str().is_some_and(
            |m| m.contains("not reverted: it is a person's commit after tether's revert")
        ),
        "{said}"
    );
    assert_eq!(person.head().0, answer, "nothing pushed over it");

    // The person fixes it; then a new tag whose container answers no probe (the node's
    // pause image) comes to the registry, and image automation takes it up.
    person.commit(
        "web.yaml",
        &web(&registry, "2.0.0", "/ready"),
        "probe /ready",
    );
    cli.eventually("the fix applied", Duration::from_secs(60), || {
        template(&cli).1 == "/ready"
    });
    rolled_out(&cli);
    let copied = Command::new("skopeo")
        .args([
            "copy",
            "-q",
            "--src-tls-verify=false",
            "--dest-tls-verify=false",
        ])
        .arg(format!("docker://{registry}/pause:1"))
        .arg(format!("docker://{registry}/workload:3.0.0"))
        .status()
        .unwrap();
    assert!(copied.success(), "skopeo copy");
    let mut update = String::new();
    cli.eventually(
        "image automation's update to 3.0.0",
        Duration::from_secs(60),
        || {
            update = person.head().0;
            person.trailer("Tether-Image-Policy") == "web"
        },
    );
    let revert = reverted(&cli, &person, &update);
    assert_eq!(person.trailer("Tether-Hold-Policy"), "web");
    cli.eventually("back to 2.0.0", Duration::from_secs(60), || {
        template(&cli).0 == format!("{registry}/workload:2.0.0")
    });
    rolled_out(&cli);
    // The policy is held: its scans go on (every 10 s) and commit nothing.
    let held = |cli: &Cli| {
        source(cli)["status"]["images"]
            .as_array()
            .and_then(|images| images.iter().find(|i| i["policy"] == "web").cloned())
            .unwrap_or_default()
    };
    cli.eventually("the policy held", Duration::from_secs(60), || {
        held(&cli)["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("held: tether reverted its update"))
    });
    let scanned = held(&cli)["lastScanTime"].clone();
    cli.eventually("scanned again", Duration::from_secs(60), || {
        held(&cli)["lastScanTime"] != scanned
    });
    assert_eq!(person.head().0, revert, "3.0.0 does not come back");
    assert_eq!(template(&cli).0, format!("{registry}/workload:2.0.0"));

    // A person's commit releases the hold (here narrowing the policy to 2.x).
    let release = person.commit(
        "policy.yaml",
        &policy(&registry, ">=2.0.0 <3.0.0"),
        "web: 2.x only",
    );
    cli.eventually("the policy released", Duration::from_secs(60), || {
        let web = held(&cli);
        web["result"] == "Kept"
            && web["message"]
                .as_str()
                .is_some_and(|m| !m.starts_with("held"))
    });
    assert_eq!(person.head().0, release);
}
