//! A Source acts only as its team: the daemon impersonates the Source's ServiceAccount,
//! so that RBAC decides what it changes; the Source's spec and the daemon's flags
//! confine it before any request, and the repository can only narrow that. Two
//! namespaces per test: the team's (A), where its ServiceAccount has a Role, and
//! another team's (B), which holds a ConfigMap the repository also names and which
//! must never change.

use std::time::Duration;

use crate::daemon::{
    Daemon, audit_entries_since, audit_offset, condition, install_crd, kubectl_apply_text,
    kubectl_ok, source_yaml, status,
};
use crate::harness::{eventually, fresh_namespace};
use crate::reconcile::{Repo, all_output, config_map, live_config_map, tether};
use tether_testkit::remote::Remote;

/// The team's namespace with its ServiceAccount `deployer` (a Role on ConfigMaps
/// there, nothing elsewhere, no right on Namespaces), and another team's namespace
/// holding its own ConfigMap `theirs` (key: theirs).
struct Teams {
    client: kube::Client,
    a: String,
    b: String,
}

async fn teams(test: &str) -> Teams {
    install_crd();
    let client = crate::harness::cluster().client().await;
    let a = fresh_namespace(&client, &format!("{test}-a")).await;
    let b = fresh_namespace(&client, &format!("{test}-b")).await;
    kubectl_apply_text(&format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: deployer\n  namespace: {a}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: deployer\n  namespace: {a}\n\
         rules:\n- apiGroups: [\"\"]\n  resources: [configmaps]\n  verbs: [get, list, watch, create, update, patch, delete]\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: deployer\n  namespace: {a}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: deployer}}\n\
         subjects: [{{kind: ServiceAccount, name: deployer, namespace: {a}}}]\n---\n\
         apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: theirs\n  namespace: {b}\ndata:\n  key: theirs\n"
    ));
    Teams { client, a, b }
}

impl Teams {
    /// The team's repository: both namespaces as the platform team made them
    /// (`xos_managed: false`: the repository makes neither), its ConfigMap `settings`
    /// in A, and a ConfigMap `theirs` in B (another team's).
    fn remote(&self, settings: Option<&str>) -> Remote {
        let (a, b) = (&self.a, &self.b);
        let base = format!(
            "kind: KubernetesService\nname: kubernetes\n---\n\
             kind: TrustDomain\nname: {a}\nxos_managed: false\n---\n\
             kind: TrustDomain\nname: {b}\nxos_managed: false\n"
        );
        let mut files = vec![
            ("base.yaml", base),
            ("ours.yaml", config_map("settings", a, "v1")),
            ("intruder.yaml", config_map("theirs", b, "ours")),
        ];
        if let Some(settings) = settings {
            files.push((".tether.yaml", settings.to_string()));
        }
        let files: Vec<(&str, &str)> = files.iter().map(|(p, t)| (*p, t.as_str())).collect();
        Remote::new(&files)
    }

    /// The value of B's ConfigMap: another team's, which must stay `theirs`.
    async fn theirs(&self) -> Option<String> {
        live_config_map(&self.client, &self.b, "theirs")
            .await
            .and_then(|c| c.data)
            .and_then(|mut d| d.remove("key"))
    }

    async fn ours(&self) -> Option<String> {
        live_config_map(&self.client, &self.a, "settings")
            .await
            .and_then(|c| c.data)
            .and_then(|mut d| d.remove("key"))
    }

    /// A daemon for the Sources of A, with `flags`.
    fn daemon(&self, flags: &[&str]) -> Daemon {
        let mut args = vec!["--sources", "--sources-namespace", &self.a];
        args.extend_from_slice(flags);
        Daemon::start(&args)
    }

    /// The Source `team` of `remote` in A (its spec ends with `extra`); waits until its
    /// status is not ready, and returns the Ready condition's reason and message.
    async fn refused_source(&self, remote: &Remote, extra: &str) -> (String, String) {
        kubectl_apply_text(&source_yaml(
            "team",
            &self.a,
            &remote.url,
            &format!("  interval: 1h\n{extra}"),
        ));
        eventually(Duration::from_secs(30), || async {
            condition(&status(&self.a, "team"), "Ready").is_some_and(|c| c.0 == "False")
        })
        .await;
        let status = status(&self.a, "team");
        let ready = status["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
            .cloned()
            .unwrap_or_default();
        (
            ready["reason"].as_str().unwrap_or_default().to_string(),
            ready["message"].as_str().unwrap_or_default().to_string(),
        )
    }

    /// The messages of the Warning Events on the Source `team` with `reason`.
    fn events(&self, reason: &str) -> Vec<String> {
        let text = kubectl_ok(&["get", "events", "-n", &self.a, "-o", "json"]);
        let events: serde_json::Value = serde_json::from_str(&text).unwrap();
        events["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| {
                e["reason"] == reason
                    && e["type"] == "Warning"
                    && e["involvedObject"]["kind"] == "Source"
                    && e["involvedObject"]["name"] == "team"
            })
            .filter_map(|e| e["message"].as_str().or(e["note"].as_str()))
            .map(str::to_string)
            .collect()
    }
}

/// The ConfigMap writes the API server logged since `offset` in `namespace`, as
/// "verb name by USER" (the impersonated user when there is one).
fn config_map_writes(offset: u64, namespace: &str) -> Vec<String> {
    audit_entries_since(offset)
        .into_iter()
        .filter(|e| {
            e["objectRef"]["namespace"] == namespace
                && e["objectRef"]["resource"] == "configmaps"
                && !matches!(e["verb"].as_str(), Some("get" | "list" | "watch"))
                && e["stage"] == "ResponseComplete"
        })
        .map(|e| {
            let user = e["impersonatedUser"]["username"]
                .as_str()
                .or(e["user"]["username"].as_str())
                .unwrap_or_default()
                .to_string();
            format!(
                "{} {} by {user} ({})",
                e["verb"].as_str().unwrap_or_default(),
                e["objectRef"]["name"].as_str().unwrap_or_default(),
                e["responseStatus"]["code"]
            )
        })
        .collect()
}

#[tokio::test]
async fn a_source_acting_as_its_service_account_is_refused_by_rbac_beyond_its_namespace() {
    let teams = teams("identity-rbac").await;
    let remote = teams.remote(None);
    let _daemon = teams.daemon(&[]);
    let offset = audit_offset();
    let (reason, message) = teams
        .refused_source(&remote, "  serviceAccountName: deployer\n")
        .await;
    let identity = format!("system:serviceaccount:{}:deployer", teams.a);
    // A's object is applied, as the ServiceAccount, and so is the inventory.
    assert_eq!(teams.ours().await.as_deref(), Some("v1"));
    let written = config_map_writes(offset, &teams.a);
    assert!(
        written
            .iter()
            .any(|w| w.starts_with("patch settings by ") && w.contains(&identity)),
        "{written:?}"
    );
    assert!(
        written
            .iter()
            .filter(|w| !w.contains("(403)"))
            .all(|w| w.contains(&identity)),
        "everything for the Source is done as its ServiceAccount: {written:?}"
    );
    assert!(
        live_config_map(&teams.client, &teams.a, "tether-inventory-team")
            .await
            .is_some(),
        "the inventory's record is written as the ServiceAccount too"
    );
    // B's is refused: unchanged, and no write of the Source there went through.
    assert_eq!(teams.theirs().await.as_deref(), Some("theirs"));
    let in_b = config_map_writes(offset, &teams.b);
    assert!(in_b.iter().all(|w| w.contains("(403)")), "{in_b:?}");
    // The status and an Event name the object, the verb and the identity.
    let refusal = format!(
        "ConfigMap {}/theirs: apply refused for {identity}: ",
        teams.b
    );
    assert_eq!(reason, "ObjectsFailed", "{message}");
    assert!(message.contains(&refusal), "{message}");
    eventually(Duration::from_secs(10), || async {
        teams
            .events("Forbidden")
            .iter()
            .any(|m| m.contains(&refusal))
    })
    .await;
}

#[tokio::test]
async fn what_a_source_recorded_where_its_service_account_may_not_list_is_kept_not_forgotten() {
    let teams = teams("identity-keep").await;
    let (a, b) = (&teams.a, &teams.b);
    // Applied first as the daemon (no ServiceAccount yet), with prune: one object in B.
    let base = format!(
        "kind: KubernetesService\nname: kubernetes\n---\n\
         kind: TrustDomain\nname: {a}\nxos_managed: false\n---\n\
         kind: TrustDomain\nname: {b}\nxos_managed: false\n"
    );
    let remote = Remote::new(&[
        ("base.yaml", &base),
        ("ours.yaml", &config_map("settings", a, "v1")),
        ("old.yaml", &config_map("old", b, "v1")),
    ]);
    let _daemon = teams.daemon(&[]);
    kubectl_apply_text(&source_yaml(
        "team",
        a,
        &remote.url,
        "  interval: 1h\n  prune: true\n",
    ));
    let old = || live_config_map(&teams.client, b, "old");
    eventually(Duration::from_secs(30), || async { old().await.is_some() }).await;
    // B's model goes, and the platform team gives the Source its ServiceAccount, which
    // may not list (nor delete) in B.
    remote.remove("main", "old.yaml");
    let (reason, message) = teams
        .refused_source(&remote, "  prune: true\n  serviceAccountName: deployer\n")
        .await;
    let identity = format!("system:serviceaccount:{a}:deployer");
    assert_eq!(reason, "ObjectsFailed", "{message}");
    assert!(
        message.contains(&format!(
            "ConfigMap {b}/old: prune refused for {identity}: "
        )),
        "{message}"
    );
    assert!(old().await.is_some(), "B's object stays");
    let inventory = tether_core::ownership::Inventory {
        name: "team".into(),
        namespace: a.clone(),
    };
    let record = tether_engine::record::read_inventory(&teams.client, &inventory)
        .await
        .unwrap();
    assert!(
        record
            .entries
            .keys()
            .any(|e| e.name == "old" && e.namespace.as_deref() == Some(b.as_str())),
        "still recorded, for a prune once the rights allow it"
    );
}

#[tokio::test]
async fn without_cross_namespace_objects_the_source_is_refused_before_any_request() {
    let teams = teams("identity-own-ns").await;
    let remote = teams.remote(None);
    let _daemon = teams.daemon(&["--no-cross-namespace-objects"]);
    let offset = audit_offset();
    let (reason, message) = teams
        .refused_source(&remote, "  serviceAccountName: deployer\n")
        .await;
    let identity = format!("system:serviceaccount:{}:deployer", teams.a);
    assert_eq!(reason, "InvalidModels", "{message}");
    assert!(
        message.contains(&format!(
            "intruder.yaml:1:1: error: KubernetesConfigMap \"theirs\": apply ConfigMap {}/theirs refused for {identity}: the daemon confines a Source to its own namespace ({}) unless the Source's spec.confine lists namespaces",
            teams.b, teams.a
        )),
        "{message}"
    );
    // Nothing at all was written: not A's object, not its inventory, nothing in B.
    assert_eq!(config_map_writes(offset, &teams.a), Vec::<String>::new());
    assert_eq!(config_map_writes(offset, &teams.b), Vec::<String>::new());
    assert_eq!(teams.ours().await, None);
    assert_eq!(teams.theirs().await.as_deref(), Some("theirs"));
    eventually(Duration::from_secs(10), || async {
        teams
            .events("InvalidModels")
            .iter()
            .any(|m| m.contains("the daemon confines a Source to its own namespace"))
    })
    .await;
}

#[tokio::test]
async fn a_repository_cannot_widen_the_confinement_of_its_source() {
    let teams = teams("identity-confine").await;
    let (a, b) = (&teams.a, &teams.b);
    // The repository's author lists both namespaces; the platform team only A.
    let remote = teams.remote(Some(&format!("confine:\n  namespaces: [{a}, {b}]\n")));
    let _daemon = teams.daemon(&[]);
    let offset = audit_offset();
    let (reason, message) = teams
        .refused_source(&remote, &format!("  confine:\n    namespaces: [{a}]\n"))
        .await;
    assert_eq!(reason, "InvalidModels", "{message}");
    assert!(
        message.contains(&format!(
            "apply ConfigMap {b}/theirs refused for the daemon's own identity: the Source's spec confines it to the namespaces {a}"
        )),
        "{message}"
    );
    assert_eq!(config_map_writes(offset, b), Vec::<String>::new());
    assert_eq!(teams.theirs().await.as_deref(), Some("theirs"));
    assert_eq!(teams.ours().await, None, "nothing is applied");
}

#[tokio::test]
async fn a_source_without_a_service_account_acts_as_the_daemons_default_one() {
    let teams = teams("identity-default").await;
    let a = &teams.a;
    // Only A's object: the default ServiceAccount has no Role at all.
    let remote = Remote::new(&[
        (
            "base.yaml",
            &format!(
                "kind: KubernetesService\nname: kubernetes\n---\nkind: TrustDomain\nname: {a}\nxos_managed: false\n"
            ),
        ),
        ("ours.yaml", &config_map("settings", a, "v1")),
    ]);
    let _daemon = teams.daemon(&["--default-service-account", "default"]);
    let (reason, message) = teams.refused_source(&remote, "").await;
    assert_eq!(reason, "ClusterRefused", "{message}");
    assert!(
        message.contains(&format!("User \"system:serviceaccount:{a}:default\"")),
        "{message}"
    );
    assert!(message.contains("forbidden"), "{message}");
    assert_eq!(teams.ours().await, None);
}

/// Many new ConfigMaps in two namespaces are looked up by one list of names across the
/// cluster, which the team's identity may not make (`tether apply --as` its
/// ServiceAccount): each is then read on its own, so the team's are applied and each in
/// the other team's namespace is refused by name, never taken for new.
#[tokio::test]
async fn a_list_of_names_the_identity_may_not_make_falls_back_to_reading_each_object() {
    let teams = teams("names-refused").await;
    let (a, b) = (&teams.a, &teams.b);
    let mut files = vec![(
        "base.yaml".to_string(),
        format!(
            "kind: KubernetesService\nname: kubernetes\n---\n\
             kind: TrustDomain\nname: {a}\nxos_managed: false\n---\n\
             kind: TrustDomain\nname: {b}\nxos_managed: false\n"
        ),
    )];
    for i in 0..20 {
        files.push((
            format!("team-{i}.yaml"),
            config_map(&format!("team-{i}"), a, "v1"),
        ));
        files.push((
            format!("other-{i}.yaml"),
            config_map(&format!("other-{i}"), b, "v1"),
        ));
    }
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(f, t)| (f.as_str(), t.as_str()))
        .collect();
    let repo = Repo::new(&files);
    let identity = format!("system:serviceaccount:{a}:deployer");
    let args = [
        "apply",
        "--as",
        &identity,
        "--inventory-namespace",
        a,
        repo.path().to_str().unwrap(),
    ];
    let offset = audit_offset();
    let applied = tether("names-refused", &args);
    let text = all_output(&applied);
    // The names were asked for across the cluster, as the ServiceAccount, and refused.
    let refused_lists = audit_entries_since(offset)
        .into_iter()
        .filter(|e| {
            e["verb"] == "list"
                && e["objectRef"]["resource"] == "configmaps"
                && e["objectRef"]["namespace"].is_null()
                && e["impersonatedUser"]["username"] == identity.as_str()
                && e["responseStatus"]["code"] == 403
                && e["requestURI"]
                    .as_str()
                    .is_some_and(|uri| !uri.contains("labelSelector"))
        })
        .count();
    assert!(refused_lists >= 1, "{text}");
    assert_eq!(applied.status.code(), Some(2), "{text}");
    for i in 0..20 {
        let name = format!("team-{i}");
        assert!(
            live_config_map(&teams.client, a, &name).await.is_some(),
            "{name}: {text}"
        );
        let other = format!("other-{i}");
        assert!(
            live_config_map(&teams.client, b, &other).await.is_none(),
            "{other}"
        );
    }
    assert!(
        text.contains(&format!("ConfigMap {b}/other-0")) && text.contains("forbidden"),
        "each refused object is named: {text}"
    );
    assert_eq!(teams.theirs().await.as_deref(), Some("theirs"));
}
