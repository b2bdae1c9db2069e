//! Argo CD's `argocd.argoproj.io/sync-wave` read as Argo CD reads it, against the
//! local control plane: the objects of one plain file, in the order of their
//! sync-waves, each wave ready (by the repository's health checks) before the next
//! starts.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::health::{gadget_exists, set_status, settings};
use crate::reconcile::{Repo, all_output, base, live_config_map, setup, tether_command};

/// One file as an Argo CD repository has it: the definition in sync-wave -1, a
/// Gadget in 0 (no annotation), and a ConfigMap in 1 that must wait for it.
fn app(ns: &str, group: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: after\n  namespace: {ns}\n  annotations:\n    argocd.argoproj.io/sync-wave: \"1\"\ndata:\n  value: one\n---\n\
         apiVersion: {group}/v1\nkind: Gadget\nmetadata:\n  name: flux-capacitor\n  namespace: {ns}\nspec:\n  size: 1\n---\n\
         apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: gadgets.{group}\n  annotations:\n    argocd.argoproj.io/sync-wave: \"-1\"\n\
         spec:\n  group: {group}\n  scope: Namespaced\n  names: {{plural: gadgets, singular: gadget, kind: Gadget}}\n  versions:\n    - name: v1\n      served: true\n      storage: true\n      subresources: {{status: {{}}}}\n      schema:\n        openAPIV3Schema:\n          type: object\n          x-kubernetes-preserve-unknown-fields: true\n"
    )
}

#[tokio::test]
async fn a_later_sync_wave_of_one_file_waits_until_the_earlier_one_is_healthy() {
    let (client, ns, inventory) = setup("sync-waves").await;
    let group = format!("{ns}.tether.dev");
    let repo = Repo::new(&[
        (".tether.yaml", &settings(&group)),
        ("models.yaml", &base(&ns)),
        ("app.yaml", &app(&ns, &group)),
    ]);
    let path = repo.path().to_str().unwrap();

    // The plan shows the three sync-waves of the one file as three waves.
    let plan = tether_command(&inventory, &["diff", path])
        .output()
        .unwrap();
    let out = all_output(&plan);
    let order: Vec<usize> = ["CustomResourceDefinition gadgets", "Gadget ", "ConfigMap "]
        .iter()
        .map(|what| {
            out.find(what)
                .unwrap_or_else(|| panic!("{what} in:\n{out}"))
        })
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{out}");
    assert!(out.contains("wave 3"), "{out}");

    let apply = tether_command(&inventory, &["apply", "--timeout", "90s", path])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !gadget_exists(&group, &ns) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no Gadget made"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Sync-wave 1 waits while the Gadget of sync-wave 0 is not healthy.
    tokio::time::sleep(Duration::from_secs(2)).await;
    set_status(
        &group,
        &ns,
        r#"{"type":"Ready","status":"False","reason":"Charging"}"#,
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        live_config_map(&client, &ns, "after").await.is_none(),
        "sync-wave 1 started before sync-wave 0 was healthy"
    );
    set_status(
        &group,
        &ns,
        r#"{"type":"Ready","status":"True","reason":"Charged"}"#,
    );
    let applied = apply.wait_with_output().unwrap();
    let out = all_output(&applied);
    assert_eq!(applied.status.code(), Some(0), "{out}");
    let after = live_config_map(&client, &ns, "after").await.unwrap();
    assert_eq!(after.data.unwrap()["value"], "one");
}
