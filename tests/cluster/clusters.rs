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
        .get(&format!(
            "{}{inventory}",
            tether_core::ownership::RECORD_PREFIX
        ))
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

    // A model moved to the other cluster (its trust domain changed): with --prune it
    // is made on core and deleted from edge, whose namespace and other objects stay;
    // moved back, the reverse.
    let moved = two_clusters(&shop, &bill, "1", "2").replace(
        &format!("name: settings\ntrust_domain: {shop}"),
        &format!("name: settings\ntrust_domain: {bill}"),
    );
    repo.write("models.yaml", &moved);
    let applied = tether(&kubeconfig, &inventory, &["apply", path, "--prune"]);
    assert!(applied.status.success(), "{}", all_output(&applied));
    assert!(live_config_map(&edge, &shop, "settings").await.is_none());
    assert_eq!(
        value_of(live_config_map(&core, &bill, "settings").await).as_deref(),
        Some("1")
    );
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(edge.clone());
    assert!(
        namespaces.get_opt(&shop).await.unwrap().is_some(),
        "edge keeps {shop}"
    );
    let (edge_record, core_record) = (
        recorded(&edge, &inventory).await,
        recorded(&core, &inventory).await,
    );
    assert!(!edge_record.contains("settings"), "{edge_record}");
    assert!(core_record.contains("settings"), "{core_record}");
    repo.write("models.yaml", &two_clusters(&shop, &bill, "1", "2"));
    let back = tether(&kubeconfig, &inventory, &["apply", path, "--prune"]);
    assert!(back.status.success(), "{}", all_output(&back));
    assert!(live_config_map(&core, &bill, "settings").await.is_none());
    assert_eq!(
        value_of(live_config_map(&edge, &shop, "settings").await).as_deref(),
        Some("1")
    );
    assert_eq!(
        value_of(live_config_map(&core, &bill, "ledger").await).as_deref(),
        Some("2")
    );

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

    // Two KubernetesServices mapped to one cluster would share its inventory and prune
    // each other's objects: neither is planned, nothing changes.
    let before = recorded(&edge, &inventory).await;
    let shared = tether(
        &kubeconfig,
        &inventory,
        &["apply", path, "--prune", "--cluster", "core=edge"],
    );
    assert_eq!(shared.status.code(), Some(2), "{}", all_output(&shared));
    let said = all_output(&shared);
    assert!(
        said.contains("KubernetesServices core and edge reach one cluster"),
        "{said}"
    );
    assert!(!said.contains("pruned"), "{said}");
    assert_eq!(recorded(&edge, &inventory).await, before);
    assert_eq!(
        value_of(live_config_map(&edge, &shop, "settings").await).as_deref(),
        Some("1")
    );

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

/// Two KubernetesServices for the daemon: `edge` (its own cluster) keeps the test's
/// namespace, made by the platform team (`xos_managed: false`), with `settings`;
/// `core` the namespaces `bill` with `ledger`, and `vault` with `secrets`, which the
/// Source's ServiceAccount may not write.
fn daemon_models(ns: &str, bill: &str, vault: &str, value: &str) -> String {
    format!(
        "kind: KubernetesService\nname: edge\n---\nkind: KubernetesService\nname: core\n---\n\
         kind: TrustDomain\nname: {ns}\nowner: edge\nxos_managed: false\n---\n\
         kind: TrustDomain\nname: {bill}\nowner: core\nxos_managed: false\n---\n\
         kind: TrustDomain\nname: {vault}\nowner: core\nxos_managed: false\n---\n\
         kind: KubernetesConfigMap\nname: settings\ntrust_domain: {ns}\ndata: {{key: \"{value}\"}}\n---\n\
         kind: KubernetesConfigMap\nname: ledger\ntrust_domain: {bill}\ndata: {{key: \"{value}\"}}\n---\n\
         kind: KubernetesConfigMap\nname: secrets\ntrust_domain: {vault}\ndata: {{key: \"{value}\"}}\n"
    )
}

/// The entry of `name` in a Source's `status.clusters`: (ready, reason, message).
fn cluster_status(status: &Value, name: &str) -> Option<(String, String, String)> {
    status["clusters"].as_array()?.iter().find_map(|c| {
        (c["name"] == name).then(|| {
            let text = |field: &str| c[field].as_str().unwrap_or_default().to_string();
            (text("ready"), text("reason"), text("message"))
        })
    })
}

/// Makes `namespace` on the cluster of `client`, and lets the ServiceAccount
/// `account` (`namespace:name`) write ConfigMaps in each of `writable`.
async fn team_namespace_and_rights(
    client: &Client,
    namespaces: &[&str],
    writable: &[&str],
    account: (&str, &str),
) {
    use k8s_openapi::api::core::v1::Namespace;
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    for name in namespaces {
        let namespace: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
        let _ = Api::<Namespace>::all(client.clone())
            .create(&Default::default(), &namespace)
            .await;
    }
    for namespace in writable {
        let role: Role = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "deployer"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                       "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}],
        }))
        .unwrap();
        Api::<Role>::namespaced(client.clone(), namespace)
            .create(&Default::default(), &role)
            .await
            .unwrap();
        let binding: RoleBinding = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "deployer"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "deployer"},
            "subjects": [{"kind": "ServiceAccount", "namespace": account.0, "name": account.1}],
        }))
        .unwrap();
        Api::<RoleBinding>::namespaced(client.clone(), namespace)
            .create(&Default::default(), &binding)
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_daemon_applies_another_cluster_through_its_cluster_resource_as_the_sources_identity_and_stalls_only_that_part_without_it()
 {
    use crate::daemon::{
        Daemon, Remote, condition, install_crd, kubectl_apply_text, kubectl_ok, source_yaml,
        status, value_of,
    };
    use crate::harness::eventually;
    use std::time::Duration;

    install_crd();
    kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "crd/clusters.tether.dev",
        "--timeout=30s",
    ]);
    let (edge, ns, _) = setup("clusters-daemon").await;
    let own = LocalCluster::start(0);
    let core = own.client().await;
    let (bill, vault) = (format!("{ns}-bill"), format!("{ns}-vault"));
    // The platform team's work: the team's ServiceAccount may write ConfigMaps in its
    // namespace on edge, and in its namespace (the inventory) and bill on core, not
    // in vault.
    kubectl_ok(&["create", "serviceaccount", "deployer", "-n", &ns]);
    team_namespace_and_rights(&edge, &[], &[&ns], (&ns, "deployer")).await;
    team_namespace_and_rights(
        &core,
        &[&ns, &bill, &vault],
        &[&ns, &bill],
        (&ns, "deployer"),
    )
    .await;
    // The Cluster resource and the Secret with the kubeconfig of core.
    kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "core-kubeconfig",
        "-n",
        &ns,
        &format!("--from-file=value={}", own.kubeconfig().display()),
    ]);
    let cluster_yaml = format!(
        "apiVersion: tether.dev/v1alpha1\nkind: Cluster\nmetadata:\n  name: core\n  namespace: {ns}\nspec:\n  kubeConfig:\n    secretRef: {{name: core-kubeconfig}}\n"
    );
    kubectl_apply_text(&cluster_yaml);
    let remote = Remote::new(&[("models.yaml", &daemon_models(&ns, &bill, &vault, "v1"))]);
    let _daemon = Daemon::start(&[
        "--sources",
        "--sources-namespace",
        &ns,
        "--cluster-name",
        "edge",
    ]);
    kubectl_apply_text(&source_yaml(
        "web",
        &ns,
        &remote.url,
        "  interval: 2s\n  prune: true\n  serviceAccountName: deployer\n",
    ));

    // Each part lands in its cluster, as the Source's ServiceAccount on both: on core,
    // where it may not write, its change is refused and the status and an Event say so.
    eventually(Duration::from_secs(40), || async {
        value_of(&edge, &ns).await.as_deref() == Some("v1")
            && value_of_ledger(&core, &bill).await.as_deref() == Some("v1")
    })
    .await;
    assert!(live_config_map(&core, &ns, "settings").await.is_none());
    let identity = format!("refused for system:serviceaccount:{ns}:deployer");
    eventually(Duration::from_secs(20), || async {
        let now = status(&ns, "web");
        cluster_status(&now, "core").is_some_and(|c| {
            c.0 == "False"
                && c.1 == "Forbidden"
                && c.2
                    .contains(&format!("ConfigMap {vault}/secrets: apply {identity}"))
        }) && cluster_status(&now, "edge").is_some_and(|c| c.0 == "True")
            && condition(&now, "Ready").is_some_and(|c| c.1 == "Forbidden")
    })
    .await;
    assert!(
        live_config_map(&core, &vault, "secrets").await.is_none(),
        "refused on core"
    );
    let events = kubectl_ok(&[
        "get",
        "events",
        "-n",
        &ns,
        "--field-selector",
        "reason=Forbidden",
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert!(
        events.contains("cluster core") && events.contains(&identity),
        "{events}"
    );

    // Without its Cluster resource, core's part stalls with the reason; edge's goes on.
    kubectl_ok(&["delete", "cluster.tether.dev", "core", "-n", &ns]);
    remote.push(
        "main",
        &[("models.yaml", &daemon_models(&ns, &bill, &vault, "v2"))],
    );
    eventually(Duration::from_secs(30), || async {
        value_of(&edge, &ns).await.as_deref() == Some("v2")
    })
    .await;
    eventually(Duration::from_secs(20), || async {
        let now = status(&ns, "web");
        condition(&now, "Ready") == Some(("False".into(), "ClusterMissing".into()))
            && condition(&now, "Stalled").is_some_and(|c| c.0 == "True")
            && cluster_status(&now, "core").is_some_and(|c| {
                c.0 == "False" && c.1 == "ClusterMissing" && c.2.contains("no Cluster resource")
            })
            && cluster_status(&now, "edge").is_some_and(|c| c.0 == "True")
    })
    .await;
    assert_eq!(
        value_of_ledger(&core, &bill).await.as_deref(),
        Some("v1"),
        "core's part is left as it was"
    );
}

async fn value_of_ledger(client: &Client, namespace: &str) -> Option<String> {
    value_of(live_config_map(client, namespace, "ledger").await)
}
