//! The simulator's command line, as `scripts/local-cluster` calls it.

use std::process::Command;

fn nodesim(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tether-nodesim"))
        .args(args)
        .output()
        .expect("run tether-nodesim")
}

#[test]
fn its_help_names_the_commands_local_cluster_uses() {
    let output = nodesim(&["--help"]);
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for command in ["run", "restart", "fail", "finish", "ready"] {
        assert!(
            help.lines()
                .any(|line| line.trim_start().starts_with(command)),
            "{command} missing from:\n{help}"
        );
    }
}

#[test]
fn a_kubeconfig_that_does_not_exist_is_an_error_naming_it() {
    let output = nodesim(&[
        "run",
        "--nodes",
        "1",
        "--kubeconfig",
        "/nonexistent/kubeconfig",
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("/nonexistent/kubeconfig"), "{stderr}");
}
