//! Registry credentials from Secrets of a Source's namespace, for the image policies
//! and the attestation registry alike.

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

use tether_engine::image_automation::automation::{SecretCredentials, Secrets};
use tether_engine::oci::Credentials;

/// Registry credentials by a Secret's name (an image policy's `secret`, an
/// attestation registry's `secretRef`): Secrets of the Source's namespace, a Docker
/// config (`kubectl create secret docker-registry`) or a `username` and `password`.
pub(crate) struct NamespaceSecrets<'a>(pub(crate) &'a Api<Secret>);

impl Secrets for NamespaceSecrets<'_> {
    async fn get(&self, name: &str) -> Result<SecretCredentials, String> {
        let secret = self
            .0
            .get(name)
            .await
            .map_err(|e| format!("cannot read the Secret {name}: {e}"))?;
        let data = secret.data.unwrap_or_default();
        if let Some(config) = data.get(".dockerconfigjson") {
            return Ok(SecretCredentials::DockerConfig(config.0.clone()));
        }
        let text = |key: &str| {
            data.get(key)
                .and_then(|v| String::from_utf8(v.0.clone()).ok())
        };
        match (text("username"), text("password")) {
            (Some(username), Some(password)) => {
                Ok(SecretCredentials::Basic(Credentials { username, password }))
            }
            _ => Err(format!(
                "the Secret {name} has neither .dockerconfigjson nor username and password"
            )),
        }
    }
}
