//! The hub admin's side of a fleet: a cluster joins (its ServiceAccount, a Role that
//! lets it get, update and patch only its own `ClusterReport`, the binding, a token,
//! the empty report, and a kubeconfig for its daemon), is revoked, and the reports
//! are read (`tether fleet status`). Every request goes to the hub; none to a
//! cluster.
//!
//! **Invariant:** the hub holds no cluster's credentials and contacts no cluster:
//! nothing here builds a client from a report's content; the only client is the
//! hub's, from the caller's kubeconfig. (The daemon's side, its reporter, writes its
//! own cluster's report over an outbound connection.)

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tether_core::fleet::Report;
use tether_engine::driver::Poll;

use crate::install::{InstallError, wait_established};
use tether_api::cluster_report::{ClusterReport, ClusterReportSpec, crd};

/// The field manager of what `join` applies.
const MANAGER: &str = "tether-fleet";

/// How long `join` waits for the token controller to issue the ServiceAccount's token.
const TOKEN_TIMEOUT: Duration = Duration::from_secs(30);

/// The label naming the cluster on everything `join` makes.
pub const CLUSTER_LABEL: &str = "fleet.tether.dev/cluster";

#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error(
        "{0:?} is not a cluster name: lowercase letters, digits and '-', starting and ending with a letter or digit, at most 50 characters"
    )]
    Name(String),
    #[error("cannot {action}")]
    Request {
        action: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    Install(#[from] InstallError),
    #[error(
        "the token of ServiceAccount {0} was not issued within {1:?}: does the hub run kube-controller-manager (its token controller)?"
    )]
    NoToken(String, Duration),
    #[error("cannot write the kubeconfig")]
    Kubeconfig(#[source] serde_saphyr::ser::Error),
}

fn request(action: String) -> impl FnOnce(kube::Error) -> FleetError {
    move |source| FleetError::Request { action, source }
}

/// A cluster's name: a DNS label short enough for `cluster-NAME-token`.
pub fn check_name(name: &str) -> Result<(), FleetError> {
    match tether_core::k8s::is_dns1123_label(name) && name.len() <= 50 {
        true => Ok(()),
        false => Err(FleetError::Name(name.to_string())),
    }
}

/// The ServiceAccount of cluster `name` in the hub.
pub fn service_account(name: &str) -> String {
    format!("cluster-{name}")
}

/// The Role and RoleBinding of cluster `name`.
fn role(name: &str) -> String {
    format!("tether-fleet-cluster-{name}")
}

fn token_secret(name: &str) -> String {
    format!("cluster-{name}-token")
}

/// What `join` made.
#[derive(Debug)]
pub struct Joined {
    /// The kubeconfig the cluster's daemon reports with (it holds the token: a secret).
    pub kubeconfig: String,
    pub service_account: String,
}

/// Joins cluster `name` to the hub `client` reaches, in `namespace`: installs the
/// `ClusterReport` CRD and the namespace when missing, then the cluster's
/// ServiceAccount, Role (its own report only), RoleBinding, token Secret and empty
/// report. Returns a kubeconfig for the daemon, whose server is `server` (the hub's
/// address as the cluster reaches it). Safe to run again.
pub async fn join(
    client: &Client,
    namespace: &str,
    name: &str,
    server: &str,
) -> Result<Joined, FleetError> {
    check_name(name)?;
    prepare(client, namespace).await?;
    let labels = json!({"app.kubernetes.io/managed-by": "tether", CLUSTER_LABEL: name});
    for (kind, object_name, mut object) in cluster_objects(namespace, name) {
        object["metadata"]["name"] = json!(object_name);
        object["metadata"]["namespace"] = json!(namespace);
        object["metadata"]["labels"] = labels.clone();
        let api = dynamic(client, namespace, kind);
        api.patch(&object_name, &apply(), &Patch::Apply(&object))
            .await
            .map_err(request(format!(
                "apply {kind}/{object_name} in {namespace}"
            )))?;
    }
    let reports: Api<ClusterReport> = Api::namespaced(client.clone(), namespace);
    let empty = ClusterReport::new(name, ClusterReportSpec::default());
    match reports.create(&PostParams::default(), &empty).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(source) => {
            return Err(FleetError::Request {
                action: format!("create ClusterReport/{name} in {namespace}"),
                source,
            });
        }
    }
    let (token, ca) = issued_token(client, namespace, name).await?;
    let kubeconfig = kubeconfig(name, server, &token, &ca)?;
    Ok(Joined {
        kubeconfig,
        service_account: service_account(name),
    })
}

/// The ClusterReport CRD (established) and the hub's namespace, when missing.
async fn prepare(client: &Client, namespace: &str) -> Result<(), FleetError> {
    let crd = crd();
    let crd_name = crd.name_any();
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    crds.patch(&crd_name, &apply(), &Patch::Apply(&crd))
        .await
        .map_err(request(format!(
            "apply CustomResourceDefinition/{crd_name}"
        )))?;
    wait_established(client, &crd_name).await?;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let namespace_object = json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": namespace, "labels": {"app.kubernetes.io/managed-by": "tether"}},
    });
    namespaces
        .patch(namespace, &apply(), &Patch::Apply(&namespace_object))
        .await
        .map_err(request(format!("apply Namespace/{namespace}")))?;
    Ok(())
}

/// What lets cluster `name` write its report: kind, name and object (without
/// metadata).
fn cluster_objects(namespace: &str, name: &str) -> [(&'static str, String, serde_json::Value); 4] {
    let account = service_account(name);
    [
        (
            "ServiceAccount",
            account.clone(),
            json!({"apiVersion": "v1", "kind": "ServiceAccount"}),
        ),
        (
            "Role",
            role(name),
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                // `create` cannot be limited to a name: join makes the report itself.
                "rules": [{
                    "apiGroups": ["tether.dev"],
                    "resources": ["clusterreports"],
                    "resourceNames": [name],
                    "verbs": ["get", "update", "patch"],
                }],
            }),
        ),
        (
            "RoleBinding",
            role(name),
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role(name)},
                "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
            }),
        ),
        (
            "Secret",
            token_secret(name),
            json!({
                "apiVersion": "v1", "kind": "Secret",
                "type": "kubernetes.io/service-account-token",
                "metadata": {"annotations": {"kubernetes.io/service-account.name": account}},
            }),
        ),
    ]
}

fn apply() -> PatchParams {
    PatchParams::apply(MANAGER).force()
}

fn dynamic(client: &Client, namespace: &str, kind: &str) -> Api<kube::api::DynamicObject> {
    let (group, version, plural) = match kind {
        "Role" => ("rbac.authorization.k8s.io", "v1", "roles"),
        "RoleBinding" => ("rbac.authorization.k8s.io", "v1", "rolebindings"),
        "Secret" => ("", "v1", "secrets"),
        _ => ("", "v1", "serviceaccounts"),
    };
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, plural);
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// The token and CA the token controller wrote into the cluster's Secret.
async fn issued_token(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<(String, String), FleetError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret_name = token_secret(name);
    let mut poll = Poll::new(Duration::from_millis(200), TOKEN_TIMEOUT);
    loop {
        let secret = secrets
            .get_opt(&secret_name)
            .await
            .map_err(request(format!("read Secret/{secret_name} in {namespace}")))?;
        let data = secret.and_then(|s| s.data).unwrap_or_default();
        let text = |key: &str| {
            data.get(key)
                .and_then(|value| String::from_utf8(value.0.clone()).ok())
                .filter(|value| !value.is_empty())
        };
        if let (Some(token), Some(ca)) = (text("token"), text("ca.crt")) {
            return Ok((token, ca));
        }
        if !poll.next().await {
            return Err(FleetError::NoToken(service_account(name), TOKEN_TIMEOUT));
        }
    }
}

/// A kubeconfig of one context, `tether-fleet-hub`, as the cluster's ServiceAccount.
fn kubeconfig(name: &str, server: &str, token: &str, ca: &str) -> Result<String, FleetError> {
    use base64::Engine;
    let context = "tether-fleet-hub";
    let value = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {
            "server": server,
            "certificate-authority-data": base64::engine::general_purpose::STANDARD.encode(ca),
        }}],
        "users": [{"name": service_account(name), "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": service_account(name)}}],
        "current-context": context,
    });
    serde_saphyr::to_string(&value).map_err(FleetError::Kubeconfig)
}

/// What `revoke` deleted.
#[derive(Debug, Default)]
pub struct Revoked {
    pub deleted: Vec<String>,
}

/// Revokes cluster `name`: its RoleBinding, Role, token Secret and ServiceAccount
/// are deleted, so the API server refuses its token from now on; with `forget`, its
/// report too (else the view shows it as not reporting). Safe to run again.
pub async fn revoke(
    client: &Client,
    namespace: &str,
    name: &str,
    forget: bool,
) -> Result<Revoked, FleetError> {
    check_name(name)?;
    let mut revoked = Revoked::default();
    let objects = [
        ("RoleBinding", role(name)),
        ("Role", role(name)),
        ("Secret", token_secret(name)),
        ("ServiceAccount", service_account(name)),
    ];
    for (kind, object_name) in objects {
        let api = dynamic(client, namespace, kind);
        if deleted(api.delete(&object_name, &DeleteParams::default()).await).map_err(request(
            format!("delete {kind}/{object_name} in {namespace}"),
        ))? {
            revoked.deleted.push(format!("{kind}/{object_name}"));
        }
    }
    if forget {
        let reports: Api<ClusterReport> = Api::namespaced(client.clone(), namespace);
        if deleted(reports.delete(name, &DeleteParams::default()).await).map_err(request(
            format!("delete ClusterReport/{name} in {namespace}"),
        ))? {
            revoked.deleted.push(format!("ClusterReport/{name}"));
        }
    }
    Ok(revoked)
}

/// Whether a delete deleted (a missing object is not an error).
fn deleted<T>(result: Result<T, kube::Error>) -> Result<bool, kube::Error> {
    match result {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(error) => Err(error),
    }
}

/// Every report in the hub's `namespace`, by its object's name (the cluster's), read
/// page by page.
pub async fn reports(
    client: &Client,
    namespace: &str,
) -> Result<Vec<(String, Report)>, FleetError> {
    let api: Api<ClusterReport> = Api::namespaced(client.clone(), namespace);
    let mut reports = BTreeMap::new();
    let mut params = ListParams::default().limit(250);
    loop {
        let page = api
            .list(&params)
            .await
            .map_err(request(format!("list ClusterReports in {namespace}")))?;
        let next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
        for report in page.items {
            reports.insert(report.name_any(), report.spec.report);
        }
        match next {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    Ok(reports.into_iter().collect())
}

/// The server of `kubeconfig`'s cluster as a value (the hub's address in the
/// joined cluster's kubeconfig, unless the admin names another).
pub fn server_of(config: &kube::Config) -> String {
    config
        .cluster_url
        .to_string()
        .trim_end_matches('/')
        .to_string()
}
