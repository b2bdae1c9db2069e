//! One repository, several clusters: a KubernetesService is a cluster, reached by the
//! kubeconfig context named like it (or mapped to one). Two real control planes, the
//! run's shared one and one of the test's own.

use std::path::Path;
use std::process::Output;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::Api;
use serde_json::Value;
use tether_testkit::cluster::{LocalCluster, kubeconfig_of};

use crate::harness::cluster;
use crate::reconcile::{Repo, all_output, live_config_map, setup, stdout};

/// tether with `kubeconfig` (contexts named like the clusters) and the test's
/// inventory.
fn tether(kubeconfig: &Path, inventory: &str, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--inventory-name", inventory])
        .env("TETHER_COLOR", "never")
        .output()
        .unwrap()
}

/// Two KubernetesServices: `edge` with the trust domain `shop`, `core` with `bill`,
/// a ConfigMap in each.
fn two_clusters(shop: &str, bill: &str, edge_value: &str, core_value: &str) -> String {
    format!(
        "kind: KubernetesService\nname: edge\n---\nkind: KubernetesService\nname: core\n---\n\
         kind: TrustDomain\nname: {shop}\nowner: edge\n---\n\
         kind: TrustDomain\nname: {bill}\nowner: core\n---\n\
         kind: KubernetesConfigMap\nname: settings\ntrust_domain: {shop}\ndata: {{key: \"{edge_value}\"}}\n---\n\
         kind: KubernetesConfigMap\nname: ledger\ntrust_domain: {bill}\ndata: {{key: \"{core_value}\"}}\n"
    )
}

/// The objects an inventory recorded on a cluster (its ConfigMap's entries).
async fn recorded(client: &Client, inventory: &str) -> String {
    let parent = Api::<ConfigMap>::namespaced(client.clone(), "default")
        .get(inventory)
        .await
        .unwrap();
    serde_json::to_string(&parent.data).unwrap()
}

fn value_of(config_map: Option<ConfigMap>) -> Option<String> {
    config_map?.data?.get("key").cloned()
}

#[tokio::test(flavor = "multi_thread")]
async fn each_kubernetes_service_is_applied_to_its_own_cluster_with_its_own_inventory() {
    let (edge, namespace, inventory) = setup("clusters").await;
    let own = LocalCluster::start(0);
    let core = own.client().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    // The second cluster's context is not named like its KubernetesService: the
    // repository maps it.
    kubeconfig_of(&[("edge", cluster()), ("far-core", &own)], &kubeconfig);
    let (shop, bill) = (format!("{namespace}-shop"), format!("{namespace}-bill"));
    let repo = Repo::new(&[
        ("models.yaml", &two_clusters(&shop, &bill, "1", "1")),
        (".tether.yaml", "clusters:\n  core: {context: far-core}\n"),
    ]);
    let path = repo.path().to_str().unwrap();

    let applied = tether(&kubeconfig, &inventory, &["apply", path, "--prune"]);
    assert!(applied.status.success(), "{}", all_output(&applied));
    let out = stdout(&applied);
    assert!(
        out.contains("cluster core (context far-core): 2 created"),
        "{out}"
    );
    assert!(
        out.contains("cluster edge (context edge): 2 created"),
        "{out}"
    );
    // Each part is in its cluster only.
    assert_eq!(
        value_of(live_config_map(&edge, &shop, "settings").await).as_deref(),
        Some("1")
    );
    assert_eq!(
        value_of(live_config_map(&core, &bill, "ledger").await).as_deref(),
        Some("1")
    );
    assert!(live_config_map(&core, &shop, "settings").await.is_none());
    assert!(live_config_map(&edge, &bill, "ledger").await.is_none());
    // Each inventory records its own cluster's objects only.
    let (edge_record, core_record) = (
        recorded(&edge, &inventory).await,
        recorded(&core, &inventory).await,
    );
    assert!(
        edge_record.contains(&shop) && !edge_record.contains(&bill),
        "{edge_record}"
    );
    assert!(
        core_record.contains(&bill) && !core_record.contains(&shop),
        "{core_record}"
    );

    // A diff reports per cluster: core's change under core, nothing under edge.
    repo.write("models.yaml", &two_clusters(&shop, &bill, "1", "2"));
    let diff = tether(&kubeconfig, &inventory, &["diff", path]);
    assert_eq!(diff.status.code(), Some(1), "{}", all_output(&diff));
    let text = stdout(&diff);
    let (core_part, edge_part) = text.split_at(text.find("→ cluster edge").expect(&text));
    assert!(core_part.contains("→ cluster core"), "{text}");
    assert!(
        core_part.contains(&format!("update ConfigMap {bill}/ledger")),
        "{text}"
    );
    assert!(
        edge_part.contains("0 to create, 0 to update, 0 to delete"),
        "edge has no change:\n{text}"
    );
    let json = tether(&kubeconfig, &inventory, &["diff", path, "--output", "json"]);
    let report: Value = serde_json::from_slice(&json.stdout).expect("a JSON report");
    let clusters: Vec<(&str, u64)> = report["clusters"]
        .as_array()
        .expect("a report per cluster")
        .iter()
        .map(|c| {
            (
                c["cluster"].as_str().unwrap(),
                c["summary"]["update"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(clusters, [("core", 1), ("edge", 0)]);

    // A KubernetesService mapped to a context the kubeconfig lacks: its part fails
    // with the remedy, the other is planned.
    let unmapped = tether(
        &kubeconfig,
        &inventory,
        &["diff", path, "--cluster", "core=nowhere"],
    );
    assert_eq!(unmapped.status.code(), Some(2), "{}", all_output(&unmapped));
    let said = all_output(&unmapped);
    assert!(
        said.contains("KubernetesService core: the kubeconfig has no context nowhere"),
        "{said}"
    );
    assert!(said.contains("--cluster NAME=CONTEXT"), "{said}");
    assert!(said.contains("→ cluster edge"), "{said}");

    // core's API server goes away: its part fails, edge's applies and prunes.
    own.down();
    let without_settings = two_clusters(&shop, &bill, "1", "2").replace(
        &format!("---\nkind: KubernetesConfigMap\nname: settings\ntrust_domain: {shop}\ndata: {{key: \"1\"}}\n"),
        "",
    );
    assert!(!without_settings.contains("name: settings"));
    repo.write("models.yaml", &without_settings);
    let partial = tether(&kubeconfig, &inventory, &["apply", path, "--prune"]);
    assert_eq!(partial.status.code(), Some(2), "{}", all_output(&partial));
    let said = all_output(&partial);
    assert!(
        said.contains("cluster core (context far-core): not applied"),
        "{said}"
    );
    assert!(said.contains("did not answer"), "{said}");
    assert!(
        said.contains(
            "cluster edge (context edge): 0 created, 0 configured, 1 unchanged, 1 pruned"
        ),
        "{said}"
    );
    assert!(
        live_config_map(&edge, &shop, "settings").await.is_none(),
        "pruned on edge"
    );
}
