//! `tether run` as a developer runs it on a models directory: the source is applied at
//! once, a saved model is applied within seconds (not at the next interval), and
//! SIGTERM ends it with exit 0.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{cluster, eventually};
use crate::reconcile::{Repo, base, config_map, live_config_map, setup};

#[tokio::test]
async fn run_applies_at_once_then_each_saved_model_within_seconds_and_stops_on_sigterm() {
    let (client, ns, inventory) = setup("run-directory").await;
    let repo = Repo::new(&[
        ("base.yaml", &base(&ns)),
        ("cm.yaml", &config_map("settings", &ns, "v1")),
    ]);
    let mut run = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["run", "--interval", "1h", "--inventory-name", &inventory])
        .arg("--kubeconfig")
        .arg(cluster().kubeconfig())
        .arg(repo.path())
        .env("TETHER_COLOR", "never")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = run.stdout.take().unwrap();
    let lines = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
    });

    let value = || async {
        live_config_map(&client, &ns, "settings")
            .await
            .and_then(|c| c.data)
            .and_then(|mut d| d.remove("key"))
    };
    eventually(Duration::from_secs(30), || async {
        value().await.as_deref() == Some("v1")
    })
    .await;

    // A saved model is applied within seconds, although the interval is an hour.
    let saved = Instant::now();
    repo.write("cm.yaml", &config_map("settings", &ns, "v2"));
    eventually(Duration::from_secs(10), || async {
        value().await.as_deref() == Some("v2")
    })
    .await;
    let took = saved.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "applied {took:?} after the save"
    );

    // An editor's backup file is no model and triggers nothing harmful.
    repo.write("cm.yaml~", "not: a model\n");

    let stopped = Command::new("kill")
        .args(["-TERM", &run.id().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = run.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "tether run did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0));
    let lines = lines.join().unwrap();
    assert!(
        lines.iter().filter(|l| l.starts_with("applied ")).count() >= 2,
        "a line per pass: {lines:?}"
    );
}
