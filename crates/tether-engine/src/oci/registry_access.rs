//! How to reach a registry: its [`Credentials`] (read from a Docker config too) and
//! whether it is spoken to over plain HTTP ([`Access`]).

use serde::Deserialize;

/// How to authenticate to a registry (basic auth, or the password exchanged for a
/// token when the registry asks for one). Its `Debug` never shows the password.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"***")
            .finish()
    }
}

impl Credentials {
    /// `USER:PASSWORD`, as Flux's `--creds` takes them.
    pub fn parse(text: &str) -> Option<Credentials> {
        let (username, password) = text.split_once(':')?;
        Some(Credentials {
            username: username.to_string(),
            password: password.to_string(),
        })
    }
}

impl Credentials {
    /// The credentials a Docker config (`~/.docker/config.json`, a Secret's
    /// `.dockerconfigjson`, as `kubectl create secret docker-registry` and Flux make
    /// them) holds for `registry` (`host[:port]`): `username` and `password`, or
    /// `auth` (base64 of `user:password`). An entry may be keyed by a URL.
    pub fn from_docker_config(config: &[u8], registry: &str) -> Option<Credentials> {
        use base64::Engine as _;
        #[derive(Deserialize)]
        struct DockerConfig {
            #[serde(default)]
            auths: std::collections::BTreeMap<String, Entry>,
        }
        #[derive(Deserialize)]
        struct Entry {
            username: Option<String>,
            password: Option<String>,
            auth: Option<String>,
        }
        let config: DockerConfig = serde_json::from_slice(config).ok()?;
        let host_of = |key: &str| {
            let key = key
                .strip_prefix("https://")
                .or_else(|| key.strip_prefix("http://"))
                .unwrap_or(key);
            key.split('/').next().unwrap_or(key).to_string()
        };
        let entry = config
            .auths
            .into_iter()
            .find(|(key, _)| host_of(key) == registry)?
            .1;
        match (entry.username, entry.password, entry.auth) {
            (Some(username), Some(password), _) => Some(Credentials { username, password }),
            (_, _, Some(auth)) => {
                let pair = base64::engine::general_purpose::STANDARD
                    .decode(auth)
                    .ok()?;
                Credentials::parse(&String::from_utf8(pair).ok()?)
            }
            _ => None,
        }
    }
}

/// How to reach one registry.
#[derive(Clone, Debug, Default)]
pub struct Access {
    pub credentials: Option<Credentials>,
    /// Plain HTTP instead of HTTPS (Flux's `--insecure-registry`, `spec.insecure`).
    pub insecure: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_docker_config_gives_the_registrys_credentials() {
        let config = br#"{"auths": {
            "https://index.docker.io/v1/": {"auth": "aHViOnNlY3JldA=="},
            "ghcr.io": {"username": "bot", "password": "token"}
        }}"#;
        let hub = Credentials::from_docker_config(config, "index.docker.io").unwrap();
        assert_eq!(
            (hub.username.as_str(), hub.password.as_str()),
            ("hub", "secret")
        );
        let ghcr = Credentials::from_docker_config(config, "ghcr.io").unwrap();
        assert_eq!(
            (ghcr.username.as_str(), ghcr.password.as_str()),
            ("bot", "token")
        );
        assert_eq!(Credentials::from_docker_config(config, "quay.io"), None);
        assert_eq!(
            Credentials::from_docker_config(b"not json", "ghcr.io"),
            None
        );
    }
}
