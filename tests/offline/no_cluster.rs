//! The offline commands never look for a cluster: with the kubeconfig a FIFO (opening
//! it for reading blocks until a writer comes, so any read of it hangs) and the
//! in-cluster variables pointing at an address that never answers, `validate`,
//! `render`, `graph`, `schema` and `crd` finish at once.
//! A command that does need the cluster (`diff`) is caught by the same trap, which
//! shows the trap works. A repository whose KubernetesService says `enabled: false`
//! (or whose `.tether.yaml` does) is dormant: `diff` and `apply --prune` finish in
//! the same trap, saying so.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The command with every way to a cluster leading into the trap.
fn trapped(home: &Path, fifo: &Path, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("KUBECONFIG", fifo)
        .env("KUBERNETES_SERVICE_HOST", "10.255.255.1")
        .env("KUBERNETES_SERVICE_PORT", "443")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The exit code, or `None` when it did not end within `limit` (then it is killed).
fn finish(child: Child, limit: Duration) -> Option<i32> {
    finish_with_output(child, limit).0
}

/// The exit code (as [`finish`]) and what the command printed. Its output is read as
/// it comes (a command printing more than a pipe holds would otherwise wait forever).
fn finish_with_output(mut child: Child, limit: Duration) -> (Option<i32>, String) {
    let deadline = Instant::now() + limit;
    let reader = child.stdout.take().map(|mut stdout| {
        std::thread::spawn(move || {
            let mut out = String::new();
            let _ = std::io::Read::read_to_string(&mut stdout, &mut out);
            out
        })
    });
    let drain = |reader: Option<std::thread::JoinHandle<String>>| {
        reader.map(|r| r.join().unwrap()).unwrap_or_default()
    };
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (status.code(), drain(reader));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            drain(reader);
            return (None, String::new());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn offline_commands_never_read_a_kubeconfig_or_reach_a_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("kubeconfig");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success(), "mkfifo");
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    for args in [
        &["validate", "examples/models"][..],
        &["render", "examples/models"],
        &["render", "examples/openstack", "-o", "json"],
        &["graph", "examples/openstack", "--format", "dot"],
        &["schema"],
        &["crd"],
    ] {
        let code = finish(trapped(&home, &fifo, args), Duration::from_secs(20));
        assert_eq!(code, Some(0), "tether {args:?} did not finish offline");
    }
    // The trap catches a command that looks for the cluster.
    let diff = trapped(&home, &fifo, &["diff", "examples/models"]);
    assert_eq!(
        finish(diff, Duration::from_secs(3)),
        None,
        "diff should have blocked on the kubeconfig"
    );
}

#[test]
fn a_repository_with_kubernetes_off_is_left_alone_without_a_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("kubeconfig");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let models = "kind: TrustDomain\nname: shop\n---\nkind: Node\nname: worker-1\nlocked: true\n";
    let by_model = dir.path().join("by-model");
    std::fs::create_dir(&by_model).unwrap();
    std::fs::write(
        by_model.join("models.yaml"),
        format!("kind: KubernetesService\nname: kubernetes\nenabled: false\n---\n{models}"),
    )
    .unwrap();
    let by_setting = dir.path().join("by-setting");
    std::fs::create_dir(&by_setting).unwrap();
    std::fs::write(
        by_setting.join("models.yaml"),
        format!("kind: KubernetesService\nname: kubernetes\n---\n{models}"),
    )
    .unwrap();
    std::fs::write(
        by_setting.join(".tether.yaml"),
        "kubernetes:\n  enabled: false\n",
    )
    .unwrap();
    for (root, why) in [
        (
            &by_model,
            // The file as named from where tether ran (the root as given).
            format!(
                "KubernetesService kubernetes has enabled: false, at {}/models.yaml:3:10",
                by_model.display()
            ),
        ),
        (
            &by_setting,
            ".tether.yaml: kubernetes.enabled: false".to_string(),
        ),
    ] {
        let root = root.to_str().unwrap();
        for args in [&["diff", root][..], &["apply", root, "--prune"]] {
            let (code, out) =
                finish_with_output(trapped(&home, &fifo, args), Duration::from_secs(20));
            assert_eq!(code, Some(0), "tether {args:?} reached for the cluster");
            assert_eq!(
                out.trim(),
                format!(
                    "Kubernetes is off for this repository ({why}): nothing was compared or applied"
                ),
                "tether {args:?}"
            );
        }
    }
}
