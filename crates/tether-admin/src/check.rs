//! `tether check`: is the cluster fit for tether (`--pre`), and is tether's install
//! sound? Each check asks the server, then a pure function turns the answer into a
//! [`Finding`] (`judge_version`, `judge_daemon`, `judge_webhook_secret`,
//! `judge_permissions`). RBAC is asked as `kubectl auth can-i` asks it: an access
//! review the server answers from its own rules.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec, SubjectAccessReview,
    SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{Endpoints, PersistentVolumeClaim, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, ResourceExt};

use tether_engine::cluster::Resources;
use tether_engine::record::read_inventory;

use crate::install::manifests::{NAME, WEBHOOK_SECRET};
use crate::install::{
    InstallError, NEWEST_SUPPORTED, OLDEST_SUPPORTED, ServerVersion, Support, established, request,
    server_version,
};
use tether_api::source_spec::Source;
use tether_api::webhook::judge_secret;

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    /// Works, but deserves a look.
    Warn,
    Fail,
}

/// One check's outcome, as printed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub verdict: Verdict,
    pub text: String,
    pub hint: Option<String>,
}

impl Finding {
    fn pass(text: impl Into<String>) -> Self {
        Finding {
            verdict: Verdict::Pass,
            text: text.into(),
            hint: None,
        }
    }

    fn fail(text: impl Into<String>, hint: impl Into<String>) -> Self {
        Finding {
            verdict: Verdict::Fail,
            text: text.into(),
            hint: Some(hint.into()),
        }
    }

    fn warn(text: impl Into<String>, hint: impl Into<String>) -> Self {
        Finding {
            verdict: Verdict::Warn,
            text: text.into(),
            hint: Some(hint.into()),
        }
    }
}

/// The server's version against the supported range.
pub fn judge_version(version: ServerVersion) -> Finding {
    let range = format!("{OLDEST_SUPPORTED} to {NEWEST_SUPPORTED}");
    match version.support() {
        Support::Supported => Finding::pass(format!("Kubernetes {version} (supported: {range})")),
        Support::Newer => Finding {
            verdict: Verdict::Warn,
            text: format!("Kubernetes {version} is newer than tested (supported: {range})"),
            hint: Some("it likely works; report what does not".into()),
        },
        Support::TooOld => Finding::fail(
            format!("Kubernetes {version} is not supported ({range})"),
            "upgrade the cluster",
        ),
    }
}

/// What `tether install` needs the user to be allowed: (group, resource, namespaced).
const INSTALL_NEEDS: [(&str, &str, bool); 10] = [
    ("", "namespaces", false),
    ("apiextensions.k8s.io", "customresourcedefinitions", false),
    ("rbac.authorization.k8s.io", "clusterroles", false),
    ("rbac.authorization.k8s.io", "clusterrolebindings", false),
    ("rbac.authorization.k8s.io", "roles", true),
    ("rbac.authorization.k8s.io", "rolebindings", true),
    ("", "serviceaccounts", true),
    ("", "services", true),
    ("", "secrets", true),
    ("apps", "statefulsets", true),
];

/// Before install: the server's version, and whether this user may install.
pub async fn before_install(
    client: &Client,
    namespace: &str,
) -> Result<Vec<Finding>, InstallError> {
    let mut findings = vec![judge_version(server_version(client).await?)];
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let mut denied = Vec::new();
    for (group, resource, namespaced) in INSTALL_NEEDS {
        for verb in ["create", "patch"] {
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(attributes(
                        group,
                        resource,
                        verb,
                        namespaced.then_some(namespace),
                    )),
                    ..Default::default()
                },
                ..Default::default()
            };
            let answer = api
                .create(&PostParams::default(), &review)
                .await
                .map_err(request(format!("ask whether you may {verb} {resource}")))?;
            if !answer.status.is_some_and(|s| s.allowed) {
                denied.push(format!("{verb} {resource}"));
            }
        }
    }
    findings.push(judge_permissions(
        "you may install tether",
        &denied,
        "an administrator of the cluster installs it (cluster-admin, or the rights listed)",
    ));
    Ok(findings)
}

fn attributes(
    group: &str,
    resource: &str,
    verb: &str,
    namespace: Option<&str>,
) -> ResourceAttributes {
    let (resource, subresource) = match resource.split_once('/') {
        Some((resource, sub)) => (resource, Some(sub.to_string())),
        None => (resource, None),
    };
    ResourceAttributes {
        group: Some(group.into()),
        resource: Some(resource.into()),
        subresource,
        verb: Some(verb.into()),
        namespace: namespace.map(str::to_string),
        ..Default::default()
    }
}

/// Denied permissions as a finding: a pass when none.
pub fn judge_permissions(subject: &str, denied: &[String], hint: &str) -> Finding {
    match denied.is_empty() {
        true => Finding::pass(subject),
        false => Finding::fail(format!("{subject}: denied {}", denied.join(", ")), hint),
    }
}

/// The daemon's StatefulSet as `check` and `version` read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DaemonState {
    pub version: Option<String>,
    pub image: Option<String>,
    pub replicas: i32,
    pub ready: i32,
    /// The replicas' state volumes that no PersistentVolume holds yet (a cluster
    /// without a default StorageClass leaves them Pending, and the pods with them).
    pub unbound_claims: Vec<String>,
}

/// The daemon's state, when it is installed in `namespace`.
pub async fn daemon_state(
    client: &Client,
    namespace: &str,
) -> Result<Option<DaemonState>, InstallError> {
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
    let Some(set) = api
        .get_opt(NAME)
        .await
        .map_err(request(format!("read StatefulSet/{namespace}/{NAME}")))?
    else {
        return Ok(None);
    };
    let image = set
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.containers.first())
        .and_then(|c| c.image.clone());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let listed = claims
        .list(&ListParams::default())
        .await
        .map_err(request(format!("list the volume claims of {namespace}")))?;
    let unbound_claims = listed
        .items
        .iter()
        .filter(|c| c.name_any().starts_with(&format!("state-{NAME}-")))
        .filter(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound"))
        .map(ResourceExt::name_any)
        .collect();
    Ok(Some(DaemonState {
        unbound_claims,
        version: set.labels().get("app.kubernetes.io/version").cloned(),
        image,
        replicas: set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
        ready: set
            .status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0),
    }))
}

/// The daemon's readiness and version against this client's.
pub fn judge_daemon(namespace: &str, state: Option<&DaemonState>, client_version: &str) -> Finding {
    let Some(state) = state else {
        return Finding::fail(format!("no daemon in {namespace}"), "tether install");
    };
    let version = state.version.as_deref().unwrap_or("unknown");
    let text = format!(
        "daemon {version}: {} of {} replicas ready",
        state.ready, state.replicas
    );
    if state.ready < 1 && !state.unbound_claims.is_empty() {
        return Finding::fail(
            format!(
                "{text}: volume claims not bound ({})",
                state.unbound_claims.join(", ")
            ),
            "does the cluster have a default StorageClass (kubectl get storageclass)? If not, delete the claims and install again naming a class (tether install --help)".to_string(),
        );
    }
    if state.ready < 1 {
        return Finding::fail(
            text,
            format!("kubectl -n {namespace} describe pods -l app.kubernetes.io/name={NAME}"),
        );
    }
    if version != client_version {
        return Finding {
            verdict: Verdict::Warn,
            text: format!("{text}; this client is {client_version}"),
            hint: Some("tether install upgrades the daemon to this client's version".into()),
        };
    }
    Finding::pass(text)
}

/// Everything of an installed tether, in the order a user would look.
pub async fn installation(
    client: &Client,
    namespace: &str,
    client_version: &str,
) -> Result<Vec<Finding>, InstallError> {
    let mut findings = vec![judge_version(server_version(client).await?)];
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd_name = "sources.tether.dev";
    let crd = crds
        .get_opt(crd_name)
        .await
        .map_err(request(format!("read CustomResourceDefinition/{crd_name}")))?;
    findings.push(match crd.as_ref().map(established) {
        Some(true) => Finding::pass(format!("CustomResourceDefinition {crd_name} established")),
        Some(false) => Finding::fail(
            format!("CustomResourceDefinition {crd_name} not established"),
            format!("kubectl describe crd {crd_name}"),
        ),
        None => Finding::fail(
            format!("no CustomResourceDefinition {crd_name}"),
            "tether install",
        ),
    });
    let daemon = daemon_state(client, namespace).await?;
    findings.push(judge_daemon(namespace, daemon.as_ref(), client_version));
    findings.push(webhook_secret(client, namespace).await?);
    findings.push(webhook_endpoints(client, namespace).await?);
    if crd.is_some() {
        findings.extend(source_identities(client, namespace).await?);
    }
    Ok(findings)
}

async fn webhook_secret(client: &Client, namespace: &str) -> Result<Finding, InstallError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = match api.get_opt(WEBHOOK_SECRET).await {
        Ok(secret) => secret,
        Err(kube::Error::Api(status)) if status.code == 403 => {
            return Ok(Finding {
                verdict: Verdict::Warn,
                text: format!("webhook Secret {WEBHOOK_SECRET} not readable by you"),
                hint: None,
            });
        }
        Err(e) => return Err(request(format!("read Secret/{namespace}/{WEBHOOK_SECRET}"))(e)),
    };
    let value = secret
        .and_then(|s| s.data)
        .and_then(|data| data.get("secret").map(|v| v.0.clone()));
    Ok(judge_webhook_secret(value.as_deref()))
}

/// The webhook Secret's value: none turns webhooks off; a weak one stops the daemon.
pub fn judge_webhook_secret(value: Option<&[u8]>) -> Finding {
    match value.map(|v| {
        let trimmed = v.trim_ascii_end();
        judge_secret(trimmed)
    }) {
        None => Finding {
            verdict: Verdict::Warn,
            text: format!("no webhook Secret {WEBHOOK_SECRET}: webhooks are off"),
            hint: Some(
                "tether install makes one; Sources are still polled at their interval".into(),
            ),
        },
        Some(Err(weak)) => Finding::fail(
            weak.to_string(),
            format!(
                "kubectl delete secret {WEBHOOK_SECRET}, then tether install makes a random one"
            ),
        ),
        Some(Ok(())) => Finding::pass("webhook secret set"),
    }
}

async fn webhook_endpoints(client: &Client, namespace: &str) -> Result<Finding, InstallError> {
    let api: Api<Endpoints> = Api::namespaced(client.clone(), namespace);
    let endpoints = api
        .get_opt(NAME)
        .await
        .map_err(request(format!("read Endpoints/{namespace}/{NAME}")))?;
    let ready = endpoints
        .and_then(|e| e.subsets)
        .unwrap_or_default()
        .iter()
        .map(|s| s.addresses.as_ref().map_or(0, Vec::len))
        .sum::<usize>();
    Ok(match ready {
        0 => Finding::fail(
            format!("webhook Service {namespace}/{NAME} has no ready endpoint"),
            "the daemon's pods are not ready: see the daemon's line",
        ),
        n => Finding::pass(format!(
            "webhook Service {namespace}/{NAME}: {n} ready endpoints"
        )),
    })
}

/// The verbs a Source's identity needs on each kind it applied.
const APPLY_VERBS: [&str; 6] = ["get", "list", "watch", "create", "patch", "delete"];

/// For each Source, whether the identity it acts as may do what its inventory needs:
/// the daemon's own (cluster-wide), or its `serviceAccountName` (in the namespaces of
/// what it applied, which the daemon must be allowed to impersonate). A Source that
/// acts as the daemon's `--default-service-account` is checked as the daemon: the
/// check does not read the daemon's flags.
async fn source_identities(client: &Client, namespace: &str) -> Result<Vec<Finding>, InstallError> {
    let sources: Api<Source> = Api::all(client.clone());
    let listed = sources
        .list(&ListParams::default())
        .await
        .map_err(request("list the Sources".into()))?;
    let mut inventories = Vec::new();
    for source in listed.items {
        let (ns, name) = (source.namespace().unwrap_or_default(), source.name_any());
        let inventory = source.spec.inventory_of(&ns, &name);
        let record = read_inventory(client, &inventory).await?;
        inventories.push((source, inventory, record));
    }
    // One discovery for every Source's kinds, and each question asked once.
    let every_kind = inventories
        .iter()
        .flat_map(|(_, _, record)| record.entries.keys())
        .map(|e| (e.api_version.clone(), e.kind.clone()))
        .collect();
    let resources = Resources::discover(client, &every_kind).await?;
    let daemon = format!("system:serviceaccount:{namespace}:{NAME}");
    let mut answers = Answers::default();
    let mut findings = Vec::new();
    for (source, inventory, record) in inventories {
        let ns = source.namespace().unwrap_or_default();
        let account = source.spec.service_account_name.as_deref();
        let identity = account.map_or(daemon.clone(), |sa| {
            format!("system:serviceaccount:{ns}:{sa}")
        });
        let mut needs = needs_of(
            &resources,
            &record,
            &identity,
            account.is_some(),
            &inventory.namespace,
        );
        // The daemon writes the status, and acts as the account: it must be allowed to.
        needs.insert(Need {
            identity: daemon.clone(),
            group: "tether.dev".into(),
            resource: "sources/status".into(),
            verb: "patch",
            namespace: None,
        });
        if account.is_some() {
            needs.insert(Need {
                identity: daemon.clone(),
                group: String::new(),
                resource: "serviceaccounts".into(),
                verb: "impersonate",
                namespace: Some(ns.clone()),
            });
        }
        let mut denied = Vec::new();
        for need in needs {
            if !answers.may(client, &need).await? {
                denied.push(need);
            }
        }
        findings.push(judge_source(
            &format!(
                "Source {ns}/{}: {identity} may apply its kinds",
                source.name_any()
            ),
            &denied,
            &daemon,
        ));
    }
    Ok(findings)
}

/// A Source's permissions as a finding: what the daemon itself may not do (write the
/// status, impersonate the account, apply as itself) fails; what the Source's own
/// ServiceAccount may not do is RBAC confining the team, as meant: a warning that its
/// changes there are refused.
fn judge_source(subject: &str, denied: &[Need], daemon: &str) -> Finding {
    let (by_daemon, by_account): (Vec<&Need>, Vec<&Need>) =
        denied.iter().partition(|need| need.identity == daemon);
    let said = |needs: &[&Need]| needs.iter().map(|n| n.describe()).collect::<Vec<_>>();
    if !by_daemon.is_empty() {
        return judge_permissions(
            subject,
            &said(&by_daemon),
            "add the rules to the ClusterRole tether (a KubernetesResourceInstance may name kinds install does not grant)",
        );
    }
    match by_account.is_empty() {
        true => Finding::pass(subject),
        false => Finding::warn(
            format!(
                "{subject}: denied {}: those changes are refused",
                said(&by_account).join(", ")
            ),
            "bind a Role to the Source's ServiceAccount where it should apply",
        ),
    }
}

/// One permission a Source needs: `verb` on `resource` of `group`, cluster-wide or in
/// `namespace`, for `identity`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Need {
    identity: String,
    group: String,
    resource: String,
    verb: &'static str,
    namespace: Option<String>,
}

impl Need {
    fn describe(&self) -> String {
        match &self.namespace {
            Some(namespace) => format!("{} {} in {namespace}", self.verb, self.resource),
            None => format!("{} {}", self.verb, self.resource),
        }
    }
}

/// What an inventory's kinds need of `identity`: every verb of an apply on each kind,
/// cluster-wide, or (`per_namespace`, a ServiceAccount) in each namespace of what it
/// recorded, and on ConfigMaps in the inventory's.
fn needs_of(
    resources: &Resources,
    record: &tether_core::inventory::InventoryRecord,
    identity: &str,
    per_namespace: bool,
    inventory_namespace: &str,
) -> std::collections::BTreeSet<Need> {
    let mut wanted: BTreeSet<(String, String, Option<String>)> = BTreeSet::new();
    for entry in record.entries.keys() {
        let served = resources.served().find(|(api_version, kind, _)| {
            *api_version == entry.api_version && *kind == entry.kind
        });
        if let Some((_, _, resource)) = served {
            let namespace = entry.namespace.clone().filter(|_| per_namespace);
            wanted.insert((resource.group.clone(), resource.plural.clone(), namespace));
        }
    }
    if per_namespace {
        wanted.insert((
            String::new(),
            "configmaps".into(),
            Some(inventory_namespace.to_string()),
        ));
    }
    wanted
        .into_iter()
        .flat_map(|(group, resource, namespace)| {
            APPLY_VERBS.iter().map(move |verb| Need {
                identity: identity.to_string(),
                group: group.clone(),
                resource: resource.clone(),
                verb,
                namespace: namespace.clone(),
            })
        })
        .collect()
}

/// The answers of the API server, each question asked once.
#[derive(Default)]
struct Answers(BTreeMap<Need, bool>);

impl Answers {
    async fn may(&mut self, client: &Client, need: &Need) -> Result<bool, InstallError> {
        if let Some(allowed) = self.0.get(need) {
            return Ok(*allowed);
        }
        let allowed = may(client, need).await?;
        self.0.insert(need.clone(), allowed);
        Ok(allowed)
    }
}

/// `kubectl auth can-i VERB RESOURCE --as USER [-n NAMESPACE]`.
async fn may(client: &Client, need: &Need) -> Result<bool, InstallError> {
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    let user = need.identity.as_str();
    let mut groups = vec!["system:authenticated".to_string()];
    if let Some(account_namespace) = user
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
        .map(|(ns, _)| ns)
    {
        groups.push("system:serviceaccounts".into());
        groups.push(format!("system:serviceaccounts:{account_namespace}"));
    }
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.into()),
            groups: Some(groups),
            resource_attributes: Some(attributes(
                &need.group,
                &need.resource,
                need.verb,
                need.namespace.as_deref(),
            )),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = api
        .create(&PostParams::default(), &review)
        .await
        .map_err(request(format!(
            "ask whether {user} may {}",
            need.describe()
        )))?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_teams_account_refused_warns_and_the_daemon_refused_fails() {
        let need = |identity: &str, verb: &'static str| Need {
            identity: identity.into(),
            group: String::new(),
            resource: "configmaps".into(),
            verb,
            namespace: Some("team-b".into()),
        };
        let daemon = "system:serviceaccount:tether-system:tether";
        let team = "system:serviceaccount:team-a:deployer";
        assert_eq!(judge_source("s", &[], daemon).verdict, Verdict::Pass);
        let refused = judge_source("s", &[need(team, "create")], daemon);
        assert_eq!(refused.verdict, Verdict::Warn);
        assert!(
            refused.text.contains("denied create configmaps in team-b"),
            "{}",
            refused.text
        );
        let both = [need(team, "create"), need(daemon, "impersonate")];
        assert_eq!(judge_source("s", &both, daemon).verdict, Verdict::Fail);
    }

    #[test]
    fn a_daemon_not_ready_fails_and_one_of_another_version_warns() {
        let state = |ready, version: &str| DaemonState {
            version: Some(version.into()),
            image: None,
            replicas: 2,
            ready,
            unbound_claims: Vec::new(),
        };
        assert_eq!(judge_daemon("t", None, "0.1.0").verdict, Verdict::Fail);
        assert_eq!(
            judge_daemon("t", Some(&state(0, "0.1.0")), "0.1.0").verdict,
            Verdict::Fail
        );
        assert_eq!(
            judge_daemon("t", Some(&state(2, "0.0.9")), "0.1.0").verdict,
            Verdict::Warn
        );
        let mut pending = state(0, "0.1.0");
        pending.unbound_claims = vec!["state-tether-0".into()];
        let unbound = judge_daemon("t", Some(&pending), "0.1.0");
        assert_eq!(unbound.verdict, Verdict::Fail);
        assert!(
            unbound
                .text
                .ends_with("volume claims not bound (state-tether-0)"),
            "{}",
            unbound.text
        );
        assert!(unbound.hint.unwrap().contains("default StorageClass"));
        let ok = judge_daemon("t", Some(&state(1, "0.1.0")), "0.1.0");
        assert_eq!(ok.verdict, Verdict::Pass);
        assert_eq!(ok.text, "daemon 0.1.0: 1 of 2 replicas ready");
    }

    #[test]
    fn the_old_placeholder_secret_fails_the_check() {
        let placeholder = judge_webhook_secret(Some(b"REPLACE-WITH-openssl-rand-hex-32\n"));
        assert_eq!(placeholder.verdict, Verdict::Fail);
        assert_eq!(judge_webhook_secret(None).verdict, Verdict::Warn);
        assert_eq!(
            judge_webhook_secret(Some(b"9f86d081884c7d659a2feaa0c55ad015")).verdict,
            Verdict::Pass
        );
    }

    #[test]
    fn versions_outside_the_range_fail_or_warn_and_name_the_range() {
        let too_old = judge_version(ServerVersion::new(1, 33));
        assert_eq!(too_old.verdict, Verdict::Fail);
        assert_eq!(
            too_old.text,
            "Kubernetes 1.33 is not supported (1.34 to 1.37)"
        );
        assert_eq!(too_old.hint.as_deref(), Some("upgrade the cluster"));
        for supported in [34, 37] {
            assert_eq!(
                judge_version(ServerVersion::new(1, supported)).verdict,
                Verdict::Pass
            );
        }
        let newer = judge_version(ServerVersion::new(1, 38));
        assert_eq!(newer.verdict, Verdict::Warn);
        assert_eq!(
            newer.text,
            "Kubernetes 1.38 is newer than tested (supported: 1.34 to 1.37)"
        );
    }
}
