//! A prune is one pass: the deletions a pass made itself come back through the
//! Source's watch cache, and are not taken for drift (one pass each, hundreds after a
//! large prune).

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::ListParams;

use crate::daemon::{
    Daemon, SECRET, install_crd, kubectl_apply_text, kubectl_ok, push_hook, source_yaml,
};
use crate::harness::eventually;
use crate::reconcile::{base, config_map, live_config_map, setup};
use tether_testkit::remote::Remote;

/// The ConfigMaps the models make at first, and those the push removes of them.
const MADE: usize = 300;
const REMOVED: usize = 250;

/// How many ConfigMaps of the models are live in `ns`.
async fn live(client: &kube::Client, ns: &str) -> usize {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|c| {
            c.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("cm-"))
        })
        .count()
}

/// The passes of the Source `ns/web` so far, whatever their result.
fn passes(daemon: &Daemon, ns: &str) -> f64 {
    ["success", "failure"]
        .iter()
        .map(|result| {
            daemon
                .metric(&format!(
                    "tether_reconciles_total{{source=\"{ns}/web\",result=\"{result}\"}}"
                ))
                .unwrap_or(0.0)
        })
        .sum()
}

#[tokio::test]
async fn a_pass_that_prunes_hundreds_of_objects_is_not_followed_by_a_pass_for_each() {
    install_crd();
    let (client, ns, _) = setup("daemon-prune-quiet").await;
    let many = |range: std::ops::Range<usize>| {
        range
            .map(|i| config_map(&format!("cm-{i}"), &ns, "v1"))
            .collect::<Vec<_>>()
            .join("---\n")
    };
    let remote = Remote::new(&[
        ("base.yaml", &base(&ns)),
        ("kept.yaml", &many(0..MADE - REMOVED)),
        ("removed.yaml", &many(MADE - REMOVED..MADE)),
    ]);
    let daemon = Daemon::start(&["--sources", "--sources-namespace", &ns]);
    // The subject is the passes after a large prune, not its approval: no budget.
    kubectl_apply_text(&source_yaml(
        "web",
        &ns,
        &remote.url,
        "  interval: 1h\n  prune: true\n  deletionBudget: \"off\"\n",
    ));
    eventually(Duration::from_secs(60), || async {
        live(&client, &ns).await == MADE
    })
    .await;
    let pruned = format!("tether_applied_objects_total{{source=\"{ns}/web\",action=\"pruned\"}}");
    remote.remove("main", "removed.yaml");
    let (headers, body) = push_hook(&remote.url, "refs/heads/main", SECRET);
    assert_eq!(daemon.post("/hook/generic", &headers, &body).0, 202);
    // The pass that pruned them has counted itself once its pruned objects are counted.
    eventually(Duration::from_secs(60), || async {
        daemon.metric(&pruned) == Some(REMOVED as f64)
    })
    .await;
    assert_eq!(live(&client, &ns).await, MADE - REMOVED);
    let after_prune = passes(&daemon, &ns);
    tokio::time::sleep(Duration::from_secs(8)).await;
    let later = passes(&daemon, &ns);
    println!("passes: {after_prune} after the prune, {later} 8 s later");
    assert!(
        later - after_prune <= 2.0,
        "{} passes in the 8 s after a pass pruned {REMOVED} objects ({after_prune} then {later})",
        later - after_prune
    );
    // A deletion by someone else is still drift: the object is made again at once (the
    // interval is an hour).
    kubectl_ok(&["-n", &ns, "delete", "configmap", "cm-0"]);
    eventually(Duration::from_secs(15), || async {
        live_config_map(&client, &ns, "cm-0").await.is_some()
    })
    .await;
}
