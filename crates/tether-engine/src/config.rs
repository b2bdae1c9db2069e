//! Configuration in two layers, as ripgrep does it: the raw layer is what the command
//! line sets (the CLI's flags and `TETHER_*` variables, handed in as
//! [`DiscoverOverrides`] and [`EventOverrides`]) and what the settings file
//! (`tether_core::settings`, `.tether.yaml`) says; one resolution step per command
//! turns them into the typed configurations the library runs on (durations, paths,
//! author, scope, sinks). The command line wins over the file, the file over the
//! default. A bad value in the file is a [`ConfigError`] that names the file, line and
//! column it came from.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_saphyr::Spanned;
use thiserror::Error;

use crate::directory::Contents;
use crate::writeback::Author;
use tether_core::k8s::Scope;
use tether_core::settings::{self, parse_duration};
pub use tether_core::settings::{SETTINGS_FILE, Settings, SettingsError};

#[derive(Debug, Error)]
pub enum ConfigError {
    /// A setting of the file has a value that does not parse.
    #[error("{file}:{line}:{column}: {key}: {message}")]
    Setting {
        file: String,
        line: u64,
        column: u64,
        key: &'static str,
        message: String,
    },
    /// The file is not valid YAML or has an unknown key (its message has the line).
    #[error(transparent)]
    File(#[from] SettingsError),
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The Kafka topic of pod events when none is set: the XOS synchronizer's.
pub(crate) const DEFAULT_TOPIC: &str = "xos.kubernetes.pod-details";

/// `$XDG_CACHE_HOME/tether`, else `~/.cache/tether`: fetched repositories, the outbox.
pub fn cache_home() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("tether")
}

/// A setting checked with `parse`, its error placed at the setting's position.
fn checked<T>(
    file: &str,
    key: &'static str,
    setting: &Spanned<String>,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Result<T, ConfigError> {
    parse(&setting.value).map_err(|message| ConfigError::Setting {
        file: file.to_string(),
        line: setting.referenced.line(),
        column: setting.referenced.column(),
        key,
        message,
    })
}

/// Reads a settings file; a missing one gives the defaults. One past the size limit
/// is refused unread.
pub fn read_settings(path: &Path) -> Result<Settings, ConfigError> {
    let shown = path.display().to_string();
    match crate::directory::read_within_limit(path) {
        Ok(Contents::Bytes(bytes)) => {
            let text = String::from_utf8(bytes).map_err(|_| SettingsError {
                path: shown.clone(),
                message: "the file is not UTF-8 text".into(),
            })?;
            Ok(settings::parse(&shown, &text)?)
        }
        Ok(Contents::TooLarge(too_large)) => Err(SettingsError {
            path: shown,
            message: format!(
                "the file is {}, past the limit of {} MiB per file",
                too_large.shown_size(),
                tether_core::load::limits::FILE_MIB
            ),
        }
        .into()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Settings::default()),
        Err(source) => Err(ConfigError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// What the command line sets for discovery; unset values fall back to the settings
/// file.
#[derive(Clone, Debug, Default)]
pub struct DiscoverOverrides {
    pub branch: Option<String>,
    pub debounce: Option<Duration>,
    /// Empty: not set.
    pub namespaces: Vec<String>,
    pub author: Option<Author>,
}

/// What the command line sets for event delivery; unset values fall back to the
/// settings file.
#[derive(Clone, Debug, Default)]
pub struct EventOverrides {
    /// Empty: not set.
    pub kafka_brokers: Vec<String>,
    pub kafka_topic: Option<String>,
    pub events_jsonl: Option<PathBuf>,
    pub kube_events: bool,
    pub outbox: Option<PathBuf>,
}

/// What `discover` runs with.
#[derive(Clone, Debug)]
pub struct DiscoverConfig {
    pub author: Author,
    pub scope: Scope,
    /// With `--watch`, how long changes are gathered into one commit.
    pub debounce: Duration,
    /// The branch to commit to; `None`: the checked-out branch (with `--repo`, main).
    pub branch: Option<String>,
}

impl DiscoverConfig {
    /// The command line, else the settings file (`file` names it in errors), else the
    /// defaults.
    pub fn resolve(
        flags: &DiscoverOverrides,
        settings: &settings::DiscoverSettings,
        file: &str,
    ) -> Result<Self, ConfigError> {
        let author = match (&flags.author, &settings.author) {
            (Some(author), _) => author.clone(),
            (None, Some(setting)) => checked(file, "discover.author", setting, |text| {
                text.parse()
                    .map_err(|e: crate::writeback::WritebackError| e.to_string())
            })?,
            (None, None) => Author::default(),
        };
        let namespaces = match (&flags.namespaces, &settings.namespaces) {
            (flag, _) if !flag.is_empty() => flag.clone(),
            (_, Some(set)) => set.clone(),
            _ => Vec::new(),
        };
        let debounce = match (flags.debounce, &settings.debounce) {
            (Some(d), _) => d,
            (None, Some(setting)) => checked(file, "discover.debounce", setting, parse_duration)?,
            (None, None) => Duration::from_secs(2),
        };
        Ok(DiscoverConfig {
            author,
            scope: Scope::from_names(namespaces),
            debounce,
            branch: flags.branch.clone().or_else(|| settings.branch.clone()),
        })
    }
}

/// One place events are published to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SinkConfig {
    Kafka {
        brokers: Vec<String>,
        topic: String,
    },
    /// A file, or standard output.
    JsonLines(Option<PathBuf>),
    KubernetesEvents,
}

/// Where pod events go, and the outbox that keeps them until every sink has them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventsConfig {
    pub sinks: Vec<SinkConfig>,
    pub outbox: PathBuf,
}

impl EventsConfig {
    /// The command line, else the settings file's `events:`, else the defaults (no
    /// sinks).
    pub fn resolve(flags: &EventOverrides, settings: &settings::EventSettings) -> Self {
        let mut sinks = Vec::new();
        let brokers = match &flags.kafka_brokers {
            flag if !flag.is_empty() => flag.clone(),
            _ => settings.kafka_brokers.clone().unwrap_or_default(),
        };
        if !brokers.is_empty() {
            let topic = flags
                .kafka_topic
                .clone()
                .or_else(|| settings.kafka_topic.clone())
                .unwrap_or_else(|| DEFAULT_TOPIC.to_string());
            sinks.push(SinkConfig::Kafka { brokers, topic });
        }
        let jsonl = flags
            .events_jsonl
            .clone()
            .or_else(|| settings.jsonl.as_ref().map(PathBuf::from));
        if let Some(path) = jsonl {
            sinks.push(SinkConfig::JsonLines(
                (path.as_os_str() != "-").then_some(path),
            ));
        }
        if flags.kube_events || settings.kube_events.unwrap_or(false) {
            sinks.push(SinkConfig::KubernetesEvents);
        }
        let outbox = flags
            .outbox
            .clone()
            .or_else(|| settings.outbox.as_ref().map(PathBuf::from))
            .unwrap_or_else(|| cache_home().join("outbox"));
        EventsConfig { sinks, outbox }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_setting_names_its_file_line_and_column() {
        let settings = settings::parse(
            ".tether.yaml",
            "discover:\n  branch: main\n  debounce: soon\n",
        )
        .unwrap();
        let error = DiscoverConfig::resolve(
            &DiscoverOverrides::default(),
            &settings.discover,
            ".tether.yaml",
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            ".tether.yaml:3:13: discover.debounce: \"soon\" is not a duration (e.g. 30s, 5m)"
        );
        let settings = settings::parse(".tether.yaml", "discover:\n  author: nobody\n").unwrap();
        let error = DiscoverConfig::resolve(
            &DiscoverOverrides::default(),
            &settings.discover,
            ".tether.yaml",
        )
        .unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with(".tether.yaml:2:11: discover.author: "),
            "{error}"
        );
    }

    #[test]
    fn flags_win_over_the_file_and_the_file_over_defaults() {
        let settings = settings::parse(
            ".tether.yaml",
            "discover:\n  branch: inventory\n  debounce: 5s\n  namespaces: [shop]\nevents:\n  jsonl: events.jsonl\n  kube_events: true\n",
        )
        .unwrap();
        let flags = DiscoverOverrides {
            debounce: Some(Duration::from_secs(1)),
            ..DiscoverOverrides::default()
        };
        let config = DiscoverConfig::resolve(&flags, &settings.discover, ".tether.yaml").unwrap();
        assert_eq!(config.debounce, Duration::from_secs(1));
        assert_eq!(config.branch.as_deref(), Some("inventory"));
        assert_eq!(config.scope, Scope::from_names(["shop".to_string()]));
        assert_eq!(config.author, Author::default());
        let events = EventsConfig::resolve(
            &EventOverrides {
                events_jsonl: Some(PathBuf::from("-")),
                ..EventOverrides::default()
            },
            &settings.events,
        );
        assert_eq!(
            events.sinks,
            [SinkConfig::JsonLines(None), SinkConfig::KubernetesEvents]
        );
    }
}
