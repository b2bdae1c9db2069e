//! The cluster edge: a client from a kubeconfig, the API resources of the kinds we
//! render (discovery, so newer servers work the same), and the errors of the cluster
//! edge (`record` reads and writes the inventory's record).
//!
//! A client has a context, optional impersonation, a whole-request timeout and the
//! same bound on a silence inside an answer's body (`body_timeout`), kube's own
//! retry off and `ReadRetry` on (reads the server answers "not now" asked again for
//! about 10 s; writes never), and a [`Fence`]: past it, a client made from a `Target`
//! that carries one sends no write.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use kube::api::{Api, DynamicObject, ListParams};
use kube::client::ClientBuilder;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::discovery::v2::APIGroupDiscovery;
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{Discovery, Scope};
use kube::{Client, Config};
use thiserror::Error;

use tether_core::k8s::api_group;
use tether_core::remedy::Remedy;

mod body_timeout;

#[derive(Debug, Error)]
pub enum ClusterError {
    #[error("cannot load the kubeconfig")]
    Kubeconfig(#[source] kube::config::KubeconfigError),
    #[error(
        "no cluster is configured: no KUBECONFIG, no ~/.kube/config, and not running in a cluster"
    )]
    NoCluster,
    #[error("cannot create a client")]
    Client(#[source] kube::Error),
    #[error("the API server at {url} did not answer")]
    Unreachable {
        url: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "the server does not serve {api_version} {kind} (is its CustomResourceDefinition installed?)"
    )]
    UnknownKind { api_version: String, kind: String },
    #[error("cannot {action}")]
    Api {
        action: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "the ConfigMap {namespace}/{name} exists but is not tether's (no matching applyset.kubernetes.io/id label): the name is reserved for tether's inventory records"
    )]
    ForeignInventory { namespace: String, name: String },
    #[error("KubernetesService {service}: the kubeconfig has no context {context}")]
    NoContext { service: String, context: String },
    #[error("KubernetesService {service}'s cluster cannot be reached: {reason}")]
    NotReachable { service: String, reason: String },
    #[error(
        "KubernetesServices {} reach one cluster: they would share its inventory and prune each other's objects, so neither is planned",
        .services.join(" and ")
    )]
    SharedCluster { services: Vec<String> },
    #[error("the inventory {namespace}/{name} is unreadable: {reason}")]
    BadInventory {
        namespace: String,
        name: String,
        reason: String,
    },
}

impl ClusterError {
    /// What the user can do about it, when something can.
    pub fn remedy(&self) -> Option<Remedy> {
        match self {
            ClusterError::NoCluster => Some(Remedy::GiveCluster),
            ClusterError::NoContext { .. } => Some(Remedy::MapCluster),
            ClusterError::ForeignInventory { .. } => Some(Remedy::ChooseAnotherInventory),
            ClusterError::Api {
                action,
                source: kube::Error::Api(status),
            } if action.contains("the inventory") => match status.code {
                404 => Some(Remedy::CreateInventoryNamespace),
                422 => Some(Remedy::ValidInventoryName),
                _ => None,
            },
            _ => None,
        }
    }

    /// Whether the server refused the request for what it is, so that sending it
    /// again cannot help: another inventory's or a malformed record, or a 4xx answer
    /// other than a conflict (409) or a rate limit (429).
    pub fn is_permanent(&self) -> bool {
        match self {
            ClusterError::ForeignInventory { .. }
            | ClusterError::BadInventory { .. }
            | ClusterError::NoContext { .. }
            | ClusterError::NotReachable { .. }
            | ClusterError::SharedCluster { .. } => true,
            ClusterError::Api {
                source: kube::Error::Api(status),
                ..
            } => (400..500).contains(&status.code) && status.code != 409 && status.code != 429,
            _ => false,
        }
    }
}

/// Where to find the cluster: the kubeconfig and context to use, and how long a
/// request may take.
#[derive(Clone, Debug, Default)]
pub struct Target {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    pub request_timeout: Option<Duration>,
    /// The user to act as (impersonation), so that RBAC confines what a run changes.
    pub impersonate: Option<String>,
    pub impersonate_groups: Vec<String>,
    /// The User-Agent of every request (the API server's audit log records it): the
    /// daemon names its replica there.
    pub user_agent: Option<String>,
    /// Past it, the client sends no request that writes (see [`Fence`]).
    pub fence: Option<Fence>,
}

/// Until when this process may write: for a replica whose right to run its Sources is
/// a Lease (`tether run --shard`), its Lease's renewal plus its duration, less a
/// margin. Checked by every client made from a [`Target`] that carries it, before
/// each request that writes, so that a replica cut off from the API server, or paused
/// past its Lease, writes nothing more even before it learns that its Lease is gone
/// (the others take its Sources only once the Lease expired). Unlimited by default.
///
/// A fence that lapsed and is then moved on (the Lease renewed after all) begins a new
/// [`Tenure`]: while it was lapsed, another replica may have taken this one's Sources,
/// so what began before must not write again.
#[derive(Clone, Debug)]
pub struct Fence(Arc<FenceState>);

#[derive(Debug)]
struct FenceState {
    /// Unix milliseconds.
    deadline: AtomicI64,
    /// How many times the fence was moved on after it lapsed.
    tenure: AtomicU64,
}

impl Default for Fence {
    fn default() -> Self {
        Fence(Arc::new(FenceState {
            deadline: AtomicI64::new(i64::MAX),
            tenure: AtomicU64::new(0),
        }))
    }
}

impl Fence {
    /// Writes are allowed until `deadline` (wall-clock time, as Leases are renewed).
    /// The tenure in which they are: a new one when the fence had lapsed.
    pub fn until(&self, deadline: SystemTime) -> Tenure {
        let now = unix_millis(SystemTime::now());
        let deadline = unix_millis(deadline);
        let lapsed = self.0.deadline.load(Ordering::Acquire) <= now;
        if lapsed && deadline > now {
            // Counted before the deadline moves: whoever sees the new deadline sees
            // the new tenure too.
            self.0.tenure.fetch_add(1, Ordering::AcqRel);
        }
        self.0.deadline.store(deadline, Ordering::Release);
        self.tenure()
    }

    /// May this process write now?
    pub fn holds(&self) -> bool {
        unix_millis(SystemTime::now()) < self.0.deadline.load(Ordering::Acquire)
    }

    /// The tenure now: it holds until the fence next lapses.
    pub fn tenure(&self) -> Tenure {
        Tenure {
            fence: self.clone(),
            number: self.0.tenure.load(Ordering::Acquire),
        }
    }
}

/// One unbroken stretch of a [`Fence`]: work that began in it (a Source's loop, and
/// the passes and applies of that loop) may write while the fence holds and has not
/// lapsed since. Checked as each object of an apply starts (`ApplyOptions::fence`),
/// so that a replica paused past its Lease and renewed on waking does not go on with
/// the pass it was in: its Sources may have had another owner meanwhile.
#[derive(Clone, Default)]
pub struct Tenure {
    fence: Fence,
    number: u64,
}

impl Tenure {
    /// May work begun in this tenure write now?
    pub fn holds(&self) -> bool {
        // The deadline first: a fence moved on after a lapse has counted its new
        // tenure before its new deadline shows.
        self.fence.holds() && self.fence.0.tenure.load(Ordering::Acquire) == self.number
    }
}

/// Its number alone: the fence's state is logged where it changes.
impl std::fmt::Debug for Tenure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tenure({})", self.number)
    }
}

/// Tenures of one fence are equal when they are the same stretch.
impl PartialEq for Tenure {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.fence.0, &other.fence.0) && self.number == other.number
    }
}

impl Eq for Tenure {}

fn unix_millis(time: SystemTime) -> i64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl Target {
    /// The name of the kubeconfig context `connect` uses: the one given, else the
    /// kubeconfig's current context; `None` in a cluster without a kubeconfig (or
    /// with one that cannot be read, which `connect` reports).
    pub fn context_name(&self) -> Option<String> {
        if let Some(context) = &self.context {
            return Some(context.clone());
        }
        let kubeconfig = match &self.kubeconfig {
            Some(path) => Kubeconfig::read_from(path),
            None => Kubeconfig::read(),
        };
        kubeconfig.ok()?.current_context
    }
}

/// Whom requests act as (impersonation), so that the API server's RBAC decides what
/// a run may change.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Impersonation {
    pub user: String,
    pub groups: Vec<String>,
}

impl Impersonation {
    /// A ServiceAccount, with the groups the API server gives one.
    pub fn service_account(namespace: &str, name: &str) -> Self {
        Impersonation {
            user: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
            ],
        }
    }

    /// Makes `config`'s requests act as this identity.
    pub fn apply_to(&self, config: &mut Config) {
        config.auth_info.impersonate = Some(self.user.clone());
        config.auth_info.impersonate_groups =
            (!self.groups.is_empty()).then(|| self.groups.clone());
    }
}

/// A client for `target`, checked by asking the server for its version.
pub async fn connect(target: &Target) -> Result<Client, ClusterError> {
    let (client, url) = configured(target).await?;
    client
        .apiserver_version()
        .await
        .map_err(|source| ClusterError::Unreachable { url, source })?;
    Ok(client)
}

/// A client for `target` without a request: the server may be away now and answer
/// later (a long-running caller's client of another identity).
pub async fn client_of(target: &Target) -> Result<Client, ClusterError> {
    Ok(configured(target).await?.0)
}

/// A client for `target`, and the server's URL.
async fn configured(target: &Target) -> Result<(Client, String), ClusterError> {
    let options = KubeConfigOptions {
        context: target.context.clone(),
        ..KubeConfigOptions::default()
    };
    let mut config = match &target.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path).map_err(ClusterError::Kubeconfig)?;
            Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(ClusterError::Kubeconfig)?
        }
        None if target.context.is_some() => Config::from_kubeconfig(&options)
            .await
            .map_err(ClusterError::Kubeconfig)?,
        None => Config::infer().await.map_err(|e| {
            tracing::debug!(error = %e, "no cluster configuration");
            ClusterError::NoCluster
        })?,
    };
    if let Some(user) = &target.impersonate {
        let identity = Impersonation {
            user: user.clone(),
            groups: target.impersonate_groups.clone(),
        };
        identity.apply_to(&mut config);
    }
    let url = config.cluster_url.to_string();
    Ok((client_for(config, target)?, url))
}

/// A client for `config` (a kubeconfig read elsewhere: a Cluster resource's Secret),
/// built as [`connect`]'s are: `target`'s user agent, request timeout, retried reads
/// and fence (its kubeconfig, context and identity aside). So a daemon's writes to
/// another cluster name its replica in that cluster's audit log and stop at its fence,
/// and a cluster that stops answering fails a request instead of hanging it.
pub fn client_for(mut config: Config, target: &Target) -> Result<Client, ClusterError> {
    // A name a header cannot carry (a control character) is not sent: the agent only
    // labels the audit log.
    if let Some(agent) = &target.user_agent
        && let Ok(value) = reqwest::header::HeaderValue::from_str(agent)
    {
        config.headers.push((reqwest::header::USER_AGENT, value));
    }
    // tether paces its own retries (`driver::Backoff`, per request where it helps):
    // kube's built-in retry of 429s would also wait out answers that are final for
    // now, such as an eviction a disruption budget refuses.
    config.default_retry = false;
    let timeout = target.request_timeout.unwrap_or(Duration::from_secs(30));
    config.connect_timeout = Some(timeout);
    // A whole request, not only a socket read, is bounded: a server that accepts
    // connections but stops answering (overloaded, paused) must not hang tether, not
    // even after its headers (a watch aside, see `body_timeout`).
    let fence = target.fence.clone().unwrap_or_default();
    Ok(ClientBuilder::try_from(config)
        .map_err(ClusterError::Client)?
        // A service that can be cloned, so that a read can be sent again.
        .with_layer(&tower::buffer::BufferLayer::new(1024))
        .with_layer(&body_timeout::BodyTimeoutLayer(timeout))
        .with_layer(&tower::timeout::TimeoutLayer::new(timeout))
        .with_layer(&tower::retry::RetryLayer::new(ReadRetry::new()))
        .with_layer(&tower::filter::FilterLayer::new(move |request| {
            fenced(&fence, request)
        }))
        .build())
}

/// A server-side apply as `manager`, taking fields another manager holds when
/// `force`. Strict field validation, as kubectl's default: a field the schema does not
/// know is refused, also in a custom resource, whose structural schema would otherwise
/// drop it without a word.
pub fn apply_params(manager: &str, force: bool) -> kube::api::PatchParams {
    let params = kube::api::PatchParams::apply(manager).validation_strict();
    if force { params.force() } else { params }
}

/// Reads the server answers "not now" are asked again, within a bound: 429 (a new
/// resource's watch cache, or the server's own after a restart, says `storage is
/// (re)initializing` with a Retry-After), 503 (`the server is currently unable to
/// handle the request`) and 504. A read asked twice changes nothing; a write is never
/// sent again here (its caller decides: an eviction's 429 is a disruption budget's
/// final answer for now).
#[derive(Clone)]
struct ReadRetry(kube::client::retry::RetryPolicy);

impl ReadRetry {
    /// 0.2 s doubling to 2 s, or the server's Retry-After, at most 8 times: about 10 s.
    fn new() -> Self {
        let policy = kube::client::retry::RetryPolicy::new(
            Duration::from_millis(200),
            Duration::from_secs(2),
            8,
            true,
        );
        ReadRetry(policy.unwrap_or_default())
    }
}

impl<Res>
    tower::retry::Policy<http::Request<kube::client::Body>, http::Response<Res>, tower::BoxError>
    for ReadRetry
{
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        request: &mut http::Request<kube::client::Body>,
        result: &mut Result<http::Response<Res>, tower::BoxError>,
    ) -> Option<Self::Future> {
        if request.method() != http::Method::GET {
            return None;
        }
        let retry = self.0.retry(request, result);
        if retry.is_some()
            && let Ok(response) = result
        {
            tracing::debug!(uri = %request.uri(), status = %response.status(), "the server asks to read again later");
        }
        retry
    }

    fn clone_request(
        &mut self,
        request: &http::Request<kube::client::Body>,
    ) -> Option<http::Request<kube::client::Body>> {
        if request.method() != http::Method::GET {
            return None;
        }
        <kube::client::retry::RetryPolicy as tower::retry::Policy<
            _,
            http::Response<Res>,
            tower::BoxError,
        >>::clone_request(&mut self.0, request)
    }
}

/// A request as the fence lets it go: one that writes is refused once this process may
/// not write any more; reads (and watches) always go.
fn fenced<B>(
    fence: &Fence,
    request: http::Request<B>,
) -> Result<http::Request<B>, tower::BoxError> {
    let reads = matches!(
        *request.method(),
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
    );
    match reads || fence.holds() {
        true => Ok(request),
        false => Err("this replica may not write: its Lease was not renewed in time".into()),
    }
}

/// API resources by apiVersion and kind, found through discovery of only the groups
/// needed.
#[derive(Clone)]
pub struct Resources {
    client: Client,
    found: HashMap<(String, String), (ApiResource, bool)>,
}

impl Resources {
    pub async fn discover(
        client: &Client,
        kinds: &BTreeSet<(String, String)>,
    ) -> Result<Self, ClusterError> {
        let groups: BTreeSet<&str> = kinds.iter().map(|(v, _)| api_group(v)).collect();
        let groups: Vec<&str> = groups.into_iter().collect();
        let discovery = Discovery::new(client.clone())
            .filter(&groups)
            .run()
            .await
            .map_err(|source| ClusterError::Api {
                action: "discover the server's API".into(),
                source,
            })?;
        let mut found = HashMap::new();
        for (api_version, kind) in kinds {
            let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
            if let Some((resource, capabilities)) =
                discovery.resolve_gvk(&GroupVersionKind::gvk(group, version, kind))
            {
                found.insert(
                    (api_version.clone(), kind.clone()),
                    (resource, capabilities.scope == Scope::Namespaced),
                );
            }
        }
        Ok(Resources {
            client: client.clone(),
            found,
        })
    }

    /// Every kind the server serves, with its API resource.
    pub fn served(&self) -> impl Iterator<Item = (&str, &str, &ApiResource)> {
        self.found
            .iter()
            .map(|((api_version, kind), (resource, _))| {
                (api_version.as_str(), kind.as_str(), resource)
            })
    }

    /// Is the kind served, and is it namespaced?
    pub fn namespaced(&self, api_version: &str, kind: &str) -> Option<bool> {
        self.found
            .get(&(api_version.to_string(), kind.to_string()))
            .map(|(_, n)| *n)
    }

    /// An API for one object (namespaced or not, as the server says).
    pub fn api(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> Result<Api<DynamicObject>, ClusterError> {
        let (resource, namespaced) = self
            .found
            .get(&(api_version.to_string(), kind.to_string()))
            .ok_or_else(|| ClusterError::UnknownKind {
                api_version: api_version.into(),
                kind: kind.into(),
            })?;
        Ok(match (namespaced, namespace) {
            (true, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, resource),
            _ => Api::all_with(self.client.clone(), resource),
        })
    }

    /// An API over all namespaces, for listing.
    pub(crate) fn api_all(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<Api<DynamicObject>, ClusterError> {
        self.api(api_version, kind, None)
    }
}

/// A failed request as a [`ClusterError`] that says what was asked (`action`).
pub(crate) fn api_error(action: String) -> impl FnOnce(kube::Error) -> ClusterError {
    move |source| ClusterError::Api { action, source }
}

/// How many objects a list of the newest state asks for at a time: one page's
/// response and its parsed objects are what a list holds at once, however many
/// objects it selects (a whole list of 5,000 ConfigMaps at once made a daemon's
/// start-up peak).
pub const LIST_PAGE: u32 = 500;

/// What state a list reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Reads {
    /// The newest: from etcd, [`LIST_PAGE`] objects at a time. A label-selected list
    /// of it reads every object of the kind from etcd and keeps those selected. (The
    /// CLI: a user who just changed something sees it.)
    #[default]
    Newest,
    /// The API server's watch cache (`resourceVersion=0`), in one response: as
    /// current as a watch, and filtered in the server's memory without a read of
    /// etcd. (The daemon: a thousand Sources each listing their few objects would
    /// otherwise read every object of the kind from etcd a thousand times.)
    Cached,
}

/// Lists what `params` selects as `reads` says, handing each object to `each` (as
/// its page arrives, for the newest state).
pub async fn list_each<K>(
    api: &Api<K>,
    params: &ListParams,
    reads: Reads,
    mut each: impl FnMut(K),
) -> Result<(), kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    if reads == Reads::Cached {
        // The server's cache answers a limited list from etcd: no limit, one page.
        let list = api.list(&params.clone().match_any()).await?;
        list.items.into_iter().for_each(each);
        return Ok(());
    }
    let mut params = params.clone().limit(LIST_PAGE);
    loop {
        let page = api.list(&params).await?;
        let next = page.metadata.continue_.filter(|token| !token.is_empty());
        page.items.into_iter().for_each(&mut each);
        match next {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(()),
        }
    }
}

/// What identifies a cluster whatever its address: the uid of its `kube-system`
/// namespace; none when it cannot be read.
pub async fn cluster_id(client: &Client) -> Option<String> {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    match namespaces.get_opt("kube-system").await {
        Ok(namespace) => namespace?.metadata.uid,
        Err(error) => {
            tracing::debug!(%error, "the cluster's identity is unknown");
            None
        }
    }
}

/// What the server serves, as Helm's `.Capabilities` name it: its version, every
/// group/version and each of its kinds. Three requests however many groups the server
/// has: its version and the aggregated discovery of `/api` and `/apis` (served since
/// Kubernetes 1.30, older than tether's oldest).
pub async fn capabilities(client: &Client) -> Result<crate::generate::Capabilities, ClusterError> {
    let api = |source| ClusterError::Api {
        action: "read the server's version and API groups".into(),
        source,
    };
    let version = client.apiserver_version().await.map_err(api)?;
    let core = client
        .list_core_api_versions_aggregated()
        .await
        .map_err(api)?;
    let groups = client.list_api_groups_aggregated().await.map_err(api)?;
    Ok(crate::generate::Capabilities {
        kube_version: version.git_version,
        api_versions: api_versions(core.items.iter().chain(&groups.items)),
    })
}

/// As `helm install` sees them: each group/version and each of its kinds
/// (`policy/v1/PodDisruptionBudget`), which charts ask for by name; sorted.
/// Subresources are not kinds (aggregated discovery lists them within their
/// resource), and an aggregated API that is down is there with what it last served.
fn api_versions<'g>(groups: impl Iterator<Item = &'g APIGroupDiscovery>) -> Vec<String> {
    let mut names = Vec::new();
    for group in groups {
        let group_name = group.metadata.as_ref().and_then(|m| m.name.as_deref());
        for version in &group.versions {
            let Some(version_name) = version.version.as_deref().filter(|v| !v.is_empty()) else {
                continue;
            };
            let group_version = match group_name.filter(|g| !g.is_empty()) {
                Some(group) => format!("{group}/{version_name}"),
                None => version_name.to_string(),
            };
            let kinds = version
                .resources
                .iter()
                .filter_map(|r| r.response_kind.as_ref()?.kind.as_deref())
                .filter(|kind| !kind.is_empty())
                .map(|kind| format!("{group_version}/{kind}"));
            names.extend(kinds);
            names.push(group_version);
        }
    }
    names.sort();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_name_each_group_version_and_its_kinds_as_helm_does() {
        // As `/api` and `/apis` answer with aggregated discovery (apidiscovery.k8s.io/v2).
        let discovery: kube::core::discovery::v2::APIGroupDiscoveryList =
            serde_json::from_value(serde_json::json!({"items": [
                {"metadata": {"name": ""}, "versions": [{"version": "v1", "resources": [
                    {"resource": "pods", "responseKind": {"group": "", "version": "v1", "kind": "Pod"},
                     "scope": "Namespaced", "verbs": ["get", "list"],
                     "subresources": [{"subresource": "status",
                        "responseKind": {"group": "", "version": "v1", "kind": "Pod"}}]},
                    {"resource": "configmaps", "responseKind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                     "scope": "Namespaced", "verbs": ["list"]}]}]},
                {"metadata": {"name": "autoscaling"}, "versions": [
                    {"version": "v2", "resources": [{"resource": "horizontalpodautoscalers",
                        "responseKind": {"group": "autoscaling", "version": "v2", "kind": "HorizontalPodAutoscaler"},
                        "scope": "Namespaced", "verbs": ["list"]}]},
                    {"version": "v1", "resources": []}]},
                {"metadata": {"name": "metrics.k8s.io"}, "versions": [
                    {"version": "v1beta1", "freshness": "Stale"}]}
            ]}))
            .unwrap();
        assert_eq!(
            api_versions(discovery.items.iter()),
            [
                "autoscaling/v1",
                "autoscaling/v2",
                "autoscaling/v2/HorizontalPodAutoscaler",
                "metrics.k8s.io/v1beta1",
                "v1",
                "v1/ConfigMap",
                "v1/Pod",
            ]
        );
    }

    fn request(method: http::Method) -> http::Request<()> {
        http::Request::builder()
            .method(method)
            .uri("/api/v1/namespaces/shop/configmaps/settings")
            .body(())
            .unwrap()
    }

    #[test]
    fn past_its_fence_a_client_still_reads_and_writes_nothing() {
        let fence = Fence::default();
        assert!(
            fenced(&fence, request(http::Method::PATCH)).is_ok(),
            "unlimited"
        );
        fence.until(SystemTime::now() + Duration::from_secs(60));
        assert!(fenced(&fence, request(http::Method::DELETE)).is_ok());
        fence.until(SystemTime::now() - Duration::from_millis(1));
        for write in [
            http::Method::POST,
            http::Method::PUT,
            http::Method::PATCH,
            http::Method::DELETE,
        ] {
            let refused = fenced(&fence, request(write.clone())).unwrap_err();
            assert!(refused.to_string().contains("may not write"), "{write}");
        }
        assert!(
            fenced(&fence, request(http::Method::GET)).is_ok(),
            "reads go on"
        );
    }

    #[test]
    fn a_fence_moved_on_after_it_lapsed_ends_the_tenure_before() {
        let fence = Fence::default();
        let unlimited = fence.tenure();
        assert!(unlimited.holds());
        let renewed = fence.until(SystemTime::now() + Duration::from_secs(60));
        assert_eq!(
            renewed, unlimited,
            "moved on before it lapsed: the same tenure"
        );
        let again = fence.until(SystemTime::now() + Duration::from_secs(120));
        assert_eq!(again, renewed);
        assert!(again.holds());
        let lapsed = fence.until(SystemTime::now() - Duration::from_millis(1));
        assert_eq!(lapsed, renewed, "a lapse alone begins nothing");
        assert!(!renewed.holds() && !lapsed.holds());
        let next = fence.until(SystemTime::now() + Duration::from_secs(60));
        assert_ne!(next, renewed);
        assert!(next.holds(), "the new tenure writes");
        assert!(fence.holds(), "and so does the process");
        assert!(!renewed.holds(), "what began before the lapse does not");
        assert_ne!(
            Fence::default().tenure(),
            Fence::default().tenure(),
            "two fences"
        );
    }

    /// A server that answers every request with its headers and the start of a body,
    /// then says nothing more (as an API server stopped mid-answer).
    async fn server_stopping_mid_body() -> std::net::SocketAddr {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut request = [0u8; 4096];
                    let _ = socket.read(&mut request).await;
                    let _ = socket
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                              content-length: 1000\r\n\r\n{\"kind\":",
                        )
                        .await;
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                });
            }
        });
        address
    }

    #[tokio::test]
    async fn an_answer_whose_body_stops_fails_within_the_request_timeout_and_a_watch_may_idle() {
        let address = server_stopping_mid_body().await;
        let config = Config::new(format!("http://{address}").parse().unwrap());
        let target = Target {
            request_timeout: Some(Duration::from_millis(500)),
            ..Target::default()
        };
        let client = client_for(config, &target).unwrap();
        let get = |uri: &str| http::Request::get(uri).body(Vec::new()).unwrap();

        let read = client.request_text(get("/api/v1/namespaces/shop/configmaps/settings"));
        let read = tokio::time::timeout(Duration::from_secs(5), read)
            .await
            .expect("a read whose body stopped hung past the request timeout");
        assert!(read.is_err(), "{read:?}");

        let watch = client.request_text(get(
            "/api/v1/namespaces/shop/configmaps?watch=true&timeoutSeconds=290",
        ));
        assert!(
            tokio::time::timeout(Duration::from_secs(2), watch)
                .await
                .is_err(),
            "a watch that idles is not ended by the body timeout"
        );
    }
}
