//! How a reconciler reaches the cluster of each KubernetesService of its models
//! (`tether_core`'s placement decides which objects go where). The repository never
//! says how: for the CLI, a context of the user's kubeconfig (named like the
//! KubernetesService, or mapped by `--cluster NAME=CONTEXT` or `.tether.yaml`'s
//! `clusters:`); for the daemon, the clients it was given (its own cluster's, and
//! those its `Cluster` resources reach).

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use kube::Client;
use tokio::sync::Mutex;

use crate::cluster::{ClusterError, Target, connect};

/// One cluster of a source: the KubernetesService it is, and whether the models name
/// several (then each is reached by its name; otherwise the target as given).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClusterName {
    /// `None` when the models name no KubernetesService.
    pub service: Option<String>,
    pub several: bool,
}

impl ClusterName {
    /// What reports call it: its KubernetesService's name.
    pub fn display(&self) -> &str {
        self.service.as_deref().unwrap_or("the cluster")
    }
}

/// The connections of one reconciler, one client per cluster once connected.
pub struct Clusters {
    reach: Reach,
    connected: Mutex<BTreeMap<Option<String>, Client>>,
}

enum Reach {
    /// Contexts of a kubeconfig (the CLI): `contexts` maps a KubernetesService to its
    /// context where it is not named like it.
    Kubeconfig {
        target: Target,
        contexts: BTreeMap<String, String>,
    },
    /// Clients given (the daemon): its own cluster's, which is the KubernetesService
    /// `own_name` when the models name several, and the others found by name at each
    /// plan (a cluster's connection removed is seen at the next one).
    Given {
        own: Client,
        own_name: Option<String>,
        others: Option<Resolver>,
    },
}

/// Finds the client of a KubernetesService's cluster by its name, or says why there
/// is none.
pub type Resolver = Arc<dyn Fn(String) -> BoxFuture<'static, Result<Client, String>> + Send + Sync>;

impl Clusters {
    /// The CLI's way: `target`'s kubeconfig, `contexts` (from the flags) taking
    /// precedence over the repository's mapping.
    pub fn kubeconfig(target: Target, contexts: BTreeMap<String, String>) -> Self {
        Clusters {
            reach: Reach::Kubeconfig { target, contexts },
            connected: Mutex::new(BTreeMap::new()),
        }
    }

    /// Reaches the KubernetesServices named in `contexts` through them (the CLI's
    /// `--cluster NAME=CONTEXT`).
    pub fn with_contexts(mut self, mapping: BTreeMap<String, String>) -> Self {
        if let Reach::Kubeconfig { contexts, .. } = &mut self.reach {
            *contexts = mapping;
        }
        self
    }

    /// The daemon's way: one client, its own cluster's.
    pub fn given(own: Client) -> Self {
        Clusters {
            reach: Reach::Given {
                own,
                own_name: None,
                others: None,
            },
            connected: Mutex::new(BTreeMap::new()),
        }
    }

    /// (The daemon) the KubernetesService its own cluster is, and how the others are
    /// reached.
    pub fn with_others(mut self, own_name: Option<String>, resolver: Resolver) -> Self {
        if let Reach::Given {
            own_name: name,
            others,
            ..
        } = &mut self.reach
        {
            *name = own_name;
            *others = Some(resolver);
        }
        self
    }

    /// The KubernetesService of the daemon's own cluster, when named.
    pub fn own_name(&self) -> Option<&str> {
        match &self.reach {
            Reach::Given { own_name, .. } => own_name.as_deref(),
            Reach::Kubeconfig { .. } => None,
        }
    }

    /// The context the CLI uses for `cluster` (none: the kubeconfig's current one);
    /// `mapped` is the repository's mapping.
    fn context(
        target: &Target,
        contexts: &BTreeMap<String, String>,
        mapped: &BTreeMap<String, String>,
        cluster: &ClusterName,
    ) -> Option<String> {
        let service = cluster.service.as_deref();
        let chosen = service.and_then(|s| contexts.get(s).or_else(|| mapped.get(s)));
        match (chosen, cluster.several) {
            (Some(context), _) => Some(context.clone()),
            (None, true) => service.map(str::to_string),
            (None, false) => target.context.clone(),
        }
    }

    /// A client for `cluster`, connecting on first use; `mapped` is the repository's
    /// own mapping of KubernetesServices to contexts.
    pub async fn client(
        &self,
        cluster: &ClusterName,
        mapped: &BTreeMap<String, String>,
    ) -> Result<Client, ClusterError> {
        let mut connected = self.connected.lock().await;
        if let Some(client) = connected.get(&cluster.service) {
            return Ok(client.clone());
        }
        let client = match &self.reach {
            Reach::Kubeconfig { target, contexts } => {
                let context = Self::context(target, contexts, mapped, cluster);
                let target = Target {
                    context: context.clone(),
                    ..target.clone()
                };
                connect(&target)
                    .await
                    .map_err(|error| match (error, context) {
                        (ClusterError::Kubeconfig(_), Some(context)) if cluster.several => {
                            ClusterError::NoContext {
                                service: cluster.display().to_string(),
                                context,
                            }
                        }
                        (error, _) => error,
                    })?
            }
            Reach::Given {
                own,
                own_name,
                others,
            } => match (&cluster.service, cluster.several) {
                (Some(service), true) if own_name.as_ref() != Some(service) => {
                    let not_reached = |reason| ClusterError::NotReachable {
                        service: service.clone(),
                        reason,
                    };
                    let Some(resolve) = others else {
                        return Err(not_reached(
                            "it is not the daemon's own cluster, and no other cluster can be reached".into(),
                        ));
                    };
                    // Found again at each plan, never kept: a connection removed
                    // stops its part at once.
                    return resolve(service.clone()).await.map_err(not_reached);
                }
                _ => own.clone(),
            },
        };
        connected.insert(cluster.service.clone(), client.clone());
        Ok(client)
    }

    /// Where a cluster is reached, for reports: the context, when the CLI chose one.
    pub fn describe(&self, cluster: &ClusterName, mapped: &BTreeMap<String, String>) -> String {
        match &self.reach {
            Reach::Kubeconfig { target, contexts } => {
                match Self::context(target, contexts, mapped, cluster) {
                    Some(context) => format!("context {context}"),
                    None => "the current context".to_string(),
                }
            }
            Reach::Given { .. } => match cluster.several {
                true => "its Cluster resource".to_string(),
                false => "this cluster".to_string(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(service: &str, several: bool) -> ClusterName {
        ClusterName {
            service: Some(service.into()),
            several,
        }
    }

    #[test]
    fn a_context_is_the_flags_then_the_repositorys_then_the_services_name() {
        let target = Target {
            context: Some("current".into()),
            ..Target::default()
        };
        let flags = BTreeMap::from([("edge".to_string(), "kind-edge".to_string())]);
        let repo = BTreeMap::from([
            ("edge".to_string(), "repo-edge".to_string()),
            ("core".to_string(), "repo-core".to_string()),
        ]);
        let context = |cluster| Clusters::context(&target, &flags, &repo, &cluster);
        assert_eq!(context(name("edge", true)).as_deref(), Some("kind-edge"));
        assert_eq!(context(name("core", true)).as_deref(), Some("repo-core"));
        assert_eq!(context(name("far", true)).as_deref(), Some("far"));
        // One KubernetesService: the context the user chose, unless mapped.
        assert_eq!(context(name("far", false)).as_deref(), Some("current"));
        assert_eq!(context(name("edge", false)).as_deref(), Some("kind-edge"));
    }
}
