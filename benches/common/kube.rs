//! For the benchmarks that make pods: a client for their control plane, namespaces
//! ready for pods, and their `-- --name N` arguments.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

pub async fn client(kubeconfig: &Path) -> Client {
    let kubeconfig = Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("config");
    Client::try_from(config).expect("client")
}

/// A namespace, once pods may be made in it (its service account has its token).
pub async fn namespace(client: &Client, name: &str) {
    let mut namespace = Namespace::default();
    namespace.metadata.name = Some(name.into());
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .expect("namespace");
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), name);
    while accounts
        .get_opt("default")
        .await
        .ok()
        .flatten()
        .and_then(|sa| sa.secrets)
        .is_none_or(|s| s.is_empty())
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The number after `name` on the command line (`cargo bench -- --pods 500`).
pub fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
