//! `.tether.yaml`: repo-wide defaults (the raw layer of configuration, with the
//! position of each value that is checked later), at the models root beside the models (a settings
//! file, never read as models). Flags and `TETHER_*` variables win over it.
//!
//! ```yaml
//! discover:
//!   branch: main
//!   author: "Inventory Bot <bot@example.org>"
//!   namespaces: [shop, demo-trust]
//!   debounce: 5s
//! events:
//!   kafka_brokers: [kafka-0.kafka:9092]
//!   kafka_topic: xos.kubernetes.pod-details
//!   jsonl: /var/log/tether/events.jsonl
//!   kube_events: true
//!   outbox: /var/lib/tether/outbox
//! kubernetes:
//!   enabled: false   # apply and the daemon leave the cluster alone
//! ignoreDifferences: # Argo CD's spelling; see crate::ignore
//!   - {group: apps, kind: Deployment, name: web, jsonPointers: [/spec/replicas]}
//! healthCheckExprs:  # Flux's spelling; see crate::health
//!   - apiVersion: example.org/v1
//!     kind: Gadget
//!     current: status.?conditions.orValue([]).exists(c, c.type == 'Ready' && c.status == 'True')
//! ```

use std::time::Duration;

use serde::Deserialize;
use serde_saphyr::Spanned;

use crate::health::HealthCheckExprs;
use crate::ignore::IgnoreDifferences;
use crate::load::{Dialect, limit_message, yaml_options};
use thiserror::Error;

pub const SETTINGS_FILE: &str = ".tether.yaml";

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    #[serde(default)]
    pub discover: DiscoverSettings,
    #[serde(default)]
    pub events: EventSettings,
    /// What this repository's models may make (see [`crate::confine`]).
    #[serde(default)]
    pub confine: Option<ConfineSettings>,
    #[serde(default)]
    pub kubernetes: KubernetesSettings,
    #[serde(default)]
    pub kustomize: KustomizeSettings,
    /// The kubeconfig context of each KubernetesService's cluster, for the CLI, when
    /// it is not named like the KubernetesService. A context is a name in the user's
    /// own kubeconfig: no address or credential is ever in the repository.
    #[serde(default)]
    pub clusters: std::collections::BTreeMap<String, ClusterSettings>,
    /// Health checks of custom kinds, in Flux's spelling (see [`crate::health`]).
    #[serde(default, rename = "healthCheckExprs")]
    pub health_check_exprs: Vec<HealthCheckExprs>,
    /// Fields tether leaves to others, in Argo CD's spelling (see [`crate::ignore`]).
    #[serde(default, rename = "ignoreDifferences")]
    pub ignore_differences: Vec<IgnoreDifferences>,
}

/// How the CLI reaches one KubernetesService's cluster.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ClusterSettings {
    pub context: String,
}

/// How the repository's kustomizations are built: `remote_bases: true` lets one
/// include a remote base (fetched by Kustomize from the network at every build).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct KustomizeSettings {
    #[serde(default)]
    pub remote_bases: bool,
}

/// Kubernetes for this repository: `enabled: false` turns it off, and `apply` and
/// the daemon then leave the cluster alone.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct KubernetesSettings {
    pub enabled: Option<bool>,
}

/// Limits on what a repository's models may make: the namespaces its objects may be
/// in, and the kinds it may make (`Kind` or `Kind.group`); cluster-scoped kinds only
/// when listed.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ConfineSettings {
    pub namespaces: Option<Vec<String>>,
    pub kinds: Option<Vec<String>>,
}

/// Event sinks, for `discover --watch` and `events --watch`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct EventSettings {
    pub kafka_brokers: Option<Vec<String>>,
    pub kafka_topic: Option<String>,
    /// A file, or `-` for standard output.
    pub jsonl: Option<String>,
    pub kube_events: Option<bool>,
    pub outbox: Option<String>,
}

/// Defaults for `tether discover`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DiscoverSettings {
    pub branch: Option<String>,
    /// `Name <email>`.
    pub author: Option<Spanned<String>>,
    pub namespaces: Option<Vec<String>>,
    /// A duration such as `2s`.
    pub debounce: Option<Spanned<String>>,
}

#[derive(Debug, Error)]
#[error("{path} is not valid: {message}")]
pub struct SettingsError {
    pub path: String,
    pub message: String,
}

/// Reads the settings file's text; one without any setting (empty, or comments only)
/// gives the defaults.
pub fn parse(path: &str, text: &str) -> Result<Settings, SettingsError> {
    let has_content = text
        .lines()
        .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
    if !has_content {
        return Ok(Settings::default());
    }
    let options = yaml_options(Dialect::Models);
    serde_saphyr::from_str_with_options(text, options).map_err(|e| SettingsError {
        path: path.to_string(),
        message: limit_message(&e).unwrap_or_else(|| e.to_string()),
    })
}

/// `90s`, `5m`, `1h`, `250ms` or plain seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(text.len()),
    );
    let value: f64 = number
        .parse()
        .map_err(|_| format!("\"{text}\" is not a duration (e.g. 30s, 5m)"))?;
    let seconds = match unit {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(format!("\"{text}\" is not a duration (e.g. 30s, 5m)")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert!(parse_duration("5x").is_err());
    }

    #[test]
    #[expect(
        clippy::disallowed_methods,
        reason = "the test times the parse; the parse itself reads no clock"
    )]
    fn an_alias_bomb_is_refused_before_it_expands() {
        // Anchors defined inside the first item of each level, under a known setting.
        let mut bomb = String::from("&a0 [x, x, x, x, x, x, x, x, x, x]");
        for level in 1..9 {
            let rest = vec![format!("*a{}", level - 1); 9].join(", ");
            bomb = format!("&a{level} [{bomb}, {rest}]");
        }
        let text = format!("discover:\n  namespaces: {bomb}\n");
        let started = std::time::Instant::now();
        assert!(parse(".tether.yaml", &text).is_err());
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn reads_discovery_defaults() {
        let settings = parse(
            ".tether.yaml",
            "# defaults\ndiscover:\n  branch: inventory\n  namespaces: [shop]\n  debounce: 5s\n",
        )
        .unwrap();
        assert_eq!(settings.discover.branch.as_deref(), Some("inventory"));
        assert_eq!(settings.discover.namespaces, Some(vec!["shop".to_string()]));
        let debounce = settings.discover.debounce.unwrap();
        assert_eq!(debounce.value, "5s");
        assert_eq!(
            (debounce.referenced.line(), debounce.referenced.column()),
            (5, 13)
        );
        assert_eq!(
            parse(".tether.yaml", "# nothing yet\n").unwrap(),
            Settings::default()
        );
        let events = parse(
            ".tether.yaml",
            "events:\n  kafka_brokers: [k:9092]\n  kube_events: true\n",
        )
        .unwrap()
        .events;
        assert_eq!(events.kafka_brokers, Some(vec!["k:9092".to_string()]));
        assert_eq!(events.kube_events, Some(true));
    }

    #[test]
    fn a_misspelled_setting_is_an_error_with_its_line() {
        let error = parse(".tether.yaml", "discover:\n  branch: main\n  autor: me\n").unwrap_err();
        assert!(
            error.to_string().starts_with(".tether.yaml is not valid: "),
            "{error}"
        );
        assert!(error.message.contains("autor"), "{error}");
        assert!(error.message.contains('3'), "no line in: {error}");
    }
}
