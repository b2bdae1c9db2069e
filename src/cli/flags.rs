//! The raw layer from the command line: flag groups as clap parses them (each flag
//! also read from its `TETHER_*` variable). Nothing here is checked beyond its type;
//! `tether_engine::config` resolves them, with the settings file, into typed
//! configurations.

use std::path::PathBuf;
use std::time::Duration;

use tether_core::inventory::budget::DeletionBudget;
use tether_core::ownership::Inventory;
use tether_core::settings::parse_duration;
use tether_engine::config::{DiscoverOverrides, EventOverrides, cache_home};
use tether_engine::discovery::Destination;
use tether_engine::git::verify::{Verification, VerifyMode};
use tether_engine::oci::Reference;
use tether_engine::repo::Repo;
use tether_engine::writeback::WritebackError;
use tether_trust::sign::SigningKey;
use tether_trust::trusted_keys::TrustedKeys;
use tether_trust::trusted_root::Identity;

/// How to reach the cluster: flattened into each command that talks to one (and
/// only those, so that `--help` of an offline command shows no connection flags).
#[derive(Clone, Debug, clap::Args)]
#[command(next_help_heading = "Connection")]
pub struct ClusterFlags {
    /// Kubeconfig file (default: KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, env = "TETHER_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the current context).
    #[arg(long, env = "TETHER_CONTEXT")]
    pub context: Option<String>,
    /// How long one request to the API server may take, e.g. 30s, 2m.
    #[arg(long, env = "TETHER_REQUEST_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub request_timeout: Duration,
    /// Act as this user or service account
    /// (`system:serviceaccount:<namespace>:<name>`), as kubectl's --as does, so that
    /// the API server's RBAC decides what this run may change.
    #[arg(long = "as", env = "TETHER_AS", value_name = "USER")]
    pub impersonate: Option<String>,
    /// With --as, act as a member of this group too (repeatable).
    #[arg(long = "as-group", requires = "impersonate", value_name = "GROUP")]
    pub impersonate_groups: Vec<String>,
    /// The kubeconfig context of a KubernetesService's cluster (repeatable), when the
    /// models name several and the context is not named like it. Without it, the
    /// repository's `.tether.yaml` `clusters:` mapping, then the context of the
    /// KubernetesService's name.
    #[arg(long = "cluster", env = "TETHER_CLUSTERS", value_name = "NAME=CONTEXT", value_delimiter = ',', value_parser = parse_cluster_context)]
    pub clusters: Vec<(String, String)>,
}

/// `NAME=CONTEXT` of `--cluster`.
fn parse_cluster_context(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, context)) if !name.is_empty() && !context.is_empty() => {
            Ok((name.to_string(), context.to_string()))
        }
        _ => Err(format!(
            "\"{text}\" is not NAME=CONTEXT (a KubernetesService and a kubeconfig context)"
        )),
    }
}

/// The keys rendering uses, flattened into each command that reads models: the age
/// keys that open models files encrypted with sops, and the keys fetched charts must
/// be signed by.
#[derive(Clone, Debug, clap::Args)]
#[command(next_help_heading = "Decryption")]
pub struct KeyFlags {
    /// A file of age private keys (as age-keygen writes it) that open the models
    /// files encrypted with sops. Also read: TETHER_AGE_KEY and SOPS_AGE_KEY (key
    /// text), SOPS_AGE_KEY_FILE, and sops' own ~/.config/sops/age/keys.txt.
    #[arg(long, env = "TETHER_AGE_KEY_FILE", value_name = "FILE")]
    pub age_key_file: Option<PathBuf>,
    /// Render only charts signed by one of these keys: armored OpenPGP public keys
    /// for a chart repository's provenance files (`helm package --sign`), cosign
    /// public keys (cosign.pub) for charts in an OCI registry. Repeat the flag, or
    /// separate with commas. A chart fetched from a repository is always checked
    /// against the digest its index lists.
    #[arg(
        long,
        env = "TETHER_CHART_KEYS",
        value_name = "FILE",
        value_delimiter = ',',
        help_heading = "Verification"
    )]
    pub chart_keys: Vec<PathBuf>,
    /// For a registry's chart signed with a certificate of a trusted root's authority
    /// (a Sigstore trusted_root.json among --chart-keys): the subject it must be
    /// issued for, a regular expression matched against the whole subject.
    #[arg(
        long,
        env = "TETHER_CHART_CERTIFICATE_IDENTITY",
        value_name = "REGEX",
        requires_all = ["chart_keys", "chart_certificate_oidc_issuer"],
        help_heading = "Verification"
    )]
    pub chart_certificate_identity: Option<String>,
    /// The OIDC issuer that certificate must name, a regular expression matched
    /// against the whole issuer.
    #[arg(
        long,
        env = "TETHER_CHART_CERTIFICATE_OIDC_ISSUER",
        value_name = "REGEX",
        requires = "chart_certificate_identity",
        help_heading = "Verification"
    )]
    pub chart_certificate_oidc_issuer: Option<String>,
}

/// How much one prune may delete before a person approves it (`apply --prune`, and
/// each pass of `run --prune`).
#[derive(Clone, Copy, Debug, clap::Args)]
pub struct BudgetFlags {
    /// How much one prune may delete: it is held (nothing deleted) when it deletes
    /// more than COUNT objects and more than PERCENT of the inventory; `off` for no
    /// bound. A held prune is carried out once the deletions' digest is approved (the
    /// `Tether-Approve-Deletions` trailer of the commit applied, or apply's
    /// --approve-deletions).
    #[arg(long, env = "TETHER_DELETION_BUDGET", value_name = "COUNT,PERCENT%|off", default_value = "10,25%", value_parser = parse_budget)]
    pub deletion_budget: Budget,
}

/// A `--deletion-budget`: a bound, or none.
#[derive(Clone, Copy, Debug)]
pub struct Budget(pub Option<DeletionBudget>);

/// `COUNT,PERCENT%` (`10,25%`), or `off`.
fn parse_budget(text: &str) -> Result<Budget, String> {
    DeletionBudget::parse(text).map(Budget)
}

/// Where the models come from: a directory, a Git repository, or an OCI artifact.
#[derive(Clone, Debug, clap::Args)]
pub struct SourceFlags {
    /// Models root: a directory searched for *.yaml and *.yml, or one file; with
    /// --repo, a directory inside the repository or artifact.
    #[arg(default_value = ".", env = "TETHER_PATH", value_name = "PATH")]
    pub path: PathBuf,
    /// Git repository to read the models from (file://, https:// or ssh:// URL), or
    /// an OCI artifact in Flux's format: oci://HOST/REPOSITORY:TAG or
    /// oci://HOST/REPOSITORY@sha256:DIGEST (`tether push artifact` makes one).
    #[arg(long, env = "TETHER_REPO", value_name = "REPO")]
    pub repo: Option<String>,
    /// Branch, tag or commit of a Git --repo (default: the remote's default branch).
    /// An oci:// --repo carries its tag or digest itself.
    #[arg(long = "ref", env = "TETHER_REF", requires = "repo")]
    pub reference: Option<String>,
    #[command(flatten)]
    pub git: GitFlags,
    #[command(flatten)]
    pub verify: VerifyFlags,
    #[command(flatten)]
    pub registry: RegistryFlags,
}

/// Which signatures a Git --repo's commit must carry (Flux's `spec.verify`).
#[derive(Clone, Debug, Default, clap::Args)]
#[command(next_help_heading = "Verification")]
pub struct VerifyFlags {
    /// Apply only a commit signed by one of these keys: an allowed-signers file
    /// (git's gpg.ssh.allowedSignersFile), SSH public keys, or armored OpenPGP public
    /// keys; for an oci:// --repo, cosign public keys (cosign.pub). Repeat the flag,
    /// or separate with commas. What is not verified is refused before anything of it
    /// is read.
    #[arg(
        long,
        env = "TETHER_VERIFY_KEYS",
        value_name = "FILE",
        value_delimiter = ',',
        requires = "repo"
    )]
    pub verify_keys: Vec<PathBuf>,
    /// What must be signed: the commit the ref names, the annotated tag the ref names,
    /// or both.
    #[arg(
        long,
        env = "TETHER_VERIFY_MODE",
        value_enum,
        default_value = "head",
        requires = "verify_keys"
    )]
    pub verify_mode: VerifyModeFlag,
    /// For an oci:// --repo signed with a certificate of a trusted root's authority
    /// (a Sigstore trusted_root.json among --verify-keys): the subject (an email
    /// address or a URI) it must be issued for, a regular expression matched against
    /// the whole subject.
    #[arg(
        long,
        env = "TETHER_CERTIFICATE_IDENTITY",
        value_name = "REGEX",
        requires_all = ["verify_keys", "certificate_oidc_issuer"]
    )]
    pub certificate_identity: Option<String>,
    /// The OIDC issuer that certificate must name, a regular expression matched
    /// against the whole issuer.
    #[arg(
        long,
        env = "TETHER_CERTIFICATE_OIDC_ISSUER",
        value_name = "REGEX",
        requires = "certificate_identity"
    )]
    pub certificate_oidc_issuer: Option<String>,
}

#[derive(Clone, Copy, Debug, Default, clap::ValueEnum)]
pub enum VerifyModeFlag {
    #[default]
    Head,
    Tag,
    TagAndHead,
}

impl VerifyFlags {
    /// The verification the flags ask, their key files read; none without keys.
    fn verification(&self) -> miette::Result<Option<Verification>> {
        if self.verify_keys.is_empty() {
            return Ok(None);
        }
        let mut keys = trusted_keys(&self.verify_keys, "--verify-keys")?;
        trust_identity(
            &mut keys,
            &self.certificate_identity,
            &self.certificate_oidc_issuer,
            "--certificate-identity or --certificate-oidc-issuer",
        )?;
        Ok(Some(Verification {
            mode: match self.verify_mode {
                VerifyModeFlag::Head => VerifyMode::Head,
                VerifyModeFlag::Tag => VerifyMode::Tag,
                VerifyModeFlag::TagAndHead => VerifyMode::TagAndHead,
            },
            keys: std::sync::Arc::new(keys),
        }))
    }
}

/// Lets certificates of `keys`' trusted roots sign for `subject` of `issuer`, when
/// given (with `flags`, named when one is not a regular expression).
fn trust_identity(
    keys: &mut TrustedKeys,
    subject: &Option<String>,
    issuer: &Option<String>,
    flags: &str,
) -> miette::Result<()> {
    if let (Some(subject), Some(issuer)) = (subject, issuer) {
        let identity = Identity::new(issuer, subject)
            .map_err(|e| miette::miette!("{flags}: not a regular expression: {e}"))?;
        keys.trust_identities(vec![identity]);
    }
    Ok(())
}

/// The keys of `files`, given with `flag`, each problem named by its file and line.
pub fn trusted_keys(files: &[PathBuf], flag: &str) -> miette::Result<TrustedKeys> {
    let mut keys = TrustedKeys::default();
    for file in files {
        let text = std::fs::read_to_string(file)
            .map_err(|e| miette::miette!("{flag} {}: {e}", file.display()))?;
        let origin = format!("{flag} {}", file.display());
        keys.add(TrustedKeys::parse(&text, &origin).map_err(|e| miette::miette!("{e}"))?);
    }
    Ok(keys)
}

/// Attestations of what `apply` did.
#[derive(Clone, Debug, Default, clap::Args)]
#[command(next_help_heading = "Attestation")]
pub struct AttestFlags {
    /// After an apply that changed the cluster, sign an attestation of what it
    /// applied (an in-toto statement in a DSSE envelope: the commit, who signed it,
    /// each object's digest and the fields tether set) with this ECDSA P-256 private
    /// key (PEM), and keep it as a ConfigMap in the inventory's namespace. `tether
    /// verify` checks it later.
    #[arg(long, env = "TETHER_ATTESTATION_KEY", value_name = "FILE")]
    pub attestation_key: Option<PathBuf>,
    /// How many attestations of the inventory are kept; the oldest are deleted.
    #[arg(long, default_value_t = tether_engine::attestation::DEFAULT_KEEP, requires = "attestation_key")]
    pub attestations_kept: usize,
    /// Push each attestation to this OCI repository too (oci://HOST/PATH), tagged
    /// <inventory>-<time>-<digest> and <inventory> (the newest); the oldest beyond
    /// --attestations-kept are deleted.
    #[arg(
        long,
        env = "TETHER_ATTESTATION_REGISTRY",
        value_name = "URL",
        requires = "attestation_key"
    )]
    pub attestation_registry: Option<String>,
    /// Credentials of the attestation registry, USER:PASSWORD (anonymous without it).
    #[arg(
        long,
        env = "TETHER_ATTESTATION_REGISTRY_CREDS",
        hide_env_values = true,
        value_name = "USER:PASSWORD",
        requires = "attestation_registry"
    )]
    pub attestation_registry_creds: Option<String>,
    /// Talk to the attestation registry over plain HTTP.
    #[arg(long, requires = "attestation_registry")]
    pub attestation_registry_insecure: bool,
    /// Keep attestations in the registry only, not as ConfigMaps.
    #[arg(long, requires = "attestation_registry")]
    pub attestation_registry_only: bool,
}

/// How to reach an OCI registry (Flux's flag names).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct RegistryFlags {
    /// Registry credentials, USER:PASSWORD (anonymous without it).
    #[arg(
        long,
        env = "TETHER_REGISTRY_CREDS",
        hide_env_values = true,
        value_name = "USER:PASSWORD"
    )]
    pub creds: Option<String>,
    /// Talk to the registry over plain HTTP instead of HTTPS.
    #[arg(long, env = "TETHER_INSECURE_REGISTRY")]
    pub insecure_registry: bool,
}

impl RegistryFlags {
    pub fn access(&self) -> miette::Result<tether_engine::oci::Access> {
        access(self.creds.as_deref(), self.insecure_registry, "--creds")
    }
}

/// How to reach a registry: `creds` (USER:PASSWORD, given with `flag`), plain HTTP or
/// not.
pub fn access(
    creds: Option<&str>,
    insecure: bool,
    flag: &str,
) -> miette::Result<tether_engine::oci::Access> {
    let credentials = match creds {
        Some(text) => Some(
            tether_engine::oci::Credentials::parse(text)
                .ok_or_else(|| miette::miette!("{flag}: give USER:PASSWORD"))?,
        ),
        None => None,
    };
    Ok(tether_engine::oci::Access {
        credentials,
        insecure,
    })
}

/// How to reach a remote Git repository.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct GitFlags {
    /// Token for https remotes.
    #[arg(long, env = "TETHER_GIT_TOKEN", hide_env_values = true)]
    pub git_token: Option<String>,
    /// User name for https remotes (default: x-access-token with a token).
    #[arg(long, env = "TETHER_GIT_USERNAME")]
    pub git_username: Option<String>,
    /// Private key for ssh remotes (default: the ssh agent).
    #[arg(long, env = "TETHER_SSH_KEY")]
    pub ssh_key: Option<PathBuf>,
    /// Sign the commits tether writes with this OpenSSH private key (git's SSH
    /// signatures, as `gpg.format=ssh` makes them; no passphrase).
    #[arg(long, env = "TETHER_SIGNING_KEY", value_name = "FILE")]
    pub signing_key: Option<PathBuf>,
    /// Where fetched repositories and artifacts are cached (default:
    /// ~/.cache/tether/repos).
    #[arg(long, env = "TETHER_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
}

/// The inventory (ApplySet parent) that records what tether applied.
#[derive(Clone, Debug, clap::Args)]
pub struct InventoryFlags {
    /// Name of the inventory ConfigMap; its id labels every object.
    #[arg(long, env = "TETHER_INVENTORY_NAME", default_value = "tether")]
    pub inventory_name: String,
    /// Namespace of the inventory ConfigMap.
    #[arg(long, env = "TETHER_INVENTORY_NAMESPACE", default_value = "default")]
    pub inventory_namespace: String,
}

/// Where pod events go. Each flag may also come from the `events:` section of the
/// settings file (.tether.yaml, or `events --config`); flags win.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct EventFlags {
    /// Kafka brokers (host:port, comma-separated) to publish pod events to.
    #[arg(long, env = "TETHER_KAFKA_BROKERS", value_delimiter = ',')]
    pub kafka_brokers: Vec<String>,
    /// Kafka topic, made with one partition if the broker lacks it (default:
    /// xos.kubernetes.pod-details).
    #[arg(long, env = "TETHER_KAFKA_TOPIC")]
    pub kafka_topic: Option<String>,
    /// Append events as JSON lines to this file ("-": standard output).
    #[arg(long, env = "TETHER_EVENTS_JSONL")]
    pub events_jsonl: Option<PathBuf>,
    /// Record events as Kubernetes Events on the pods (`kubectl describe pod`).
    #[arg(long, env = "TETHER_KUBE_EVENTS")]
    pub kube_events: bool,
    /// Directory of the outbox that keeps undelivered events (default:
    /// ~/.cache/tether/outbox; in a cluster, a persistent volume).
    #[arg(long, env = "TETHER_OUTBOX")]
    pub outbox: Option<PathBuf>,
}

impl EventFlags {
    /// Does any flag name a sink?
    pub fn any_sink(&self) -> bool {
        !self.kafka_brokers.is_empty() || self.events_jsonl.is_some() || self.kube_events
    }
}

/// Discovery's settings that `.tether.yaml` may also give (`discover:`); flags win.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct DiscoverFlags {
    /// Branch to commit to (default: .tether.yaml's `discover.branch`, else the
    /// checked-out branch; with --repo, main).
    #[arg(long, env = "TETHER_DISCOVER_BRANCH")]
    pub branch: Option<String>,
    /// With --watch, how long to gather changes into one commit (default 2s).
    #[arg(long, env = "TETHER_DISCOVER_DEBOUNCE", value_parser = parse_duration)]
    pub debounce: Option<Duration>,
    /// Only these namespaces (repeat the flag; default: all namespaces).
    #[arg(
        short,
        long = "namespace",
        env = "TETHER_DISCOVER_NAMESPACES",
        value_delimiter = ','
    )]
    pub namespaces: Vec<String>,
    /// Commit author, "Name <email>" (default: tether <tether@localhost>).
    #[arg(long, env = "TETHER_DISCOVER_AUTHOR")]
    pub author: Option<String>,
}

impl SourceFlags {
    /// The models root as a summary names it: the path, or with --repo the path
    /// inside the repository or artifact, after its URL.
    pub fn shown_root(&self) -> PathBuf {
        match &self.repo {
            Some(url) if self.path == std::path::Path::new(".") => PathBuf::from(url),
            Some(url) => PathBuf::from(url).join(&self.path),
            None => self.path.clone(),
        }
    }

    /// The models source: `--repo` (with `--ref` and the path inside it), else the
    /// path as a directory. An oci:// reference that cannot be parsed, or one given a
    /// `--ref`, is an error.
    pub fn repo(&self) -> miette::Result<Repo> {
        Ok(match &self.repo {
            Some(url) if Reference::is_oci(url) => {
                if let Some(reference) = &self.reference {
                    miette::bail!(
                        "--ref {reference} is not taken with an oci:// --repo: give the tag or digest in it ({url}:TAG or {url}@sha256:DIGEST)"
                    );
                }
                if !matches!(self.verify.verify_mode, VerifyModeFlag::Head) {
                    miette::bail!(
                        "--verify-mode: an oci:// --repo has no tag object to verify; its cosign signature is checked (leave --verify-mode out)"
                    );
                }
                Repo::Oci {
                    reference: Reference::parse(url).map_err(|e| miette::miette!("--repo: {e}"))?,
                    path: self.path.clone(),
                    cache: self.git.cache_dir(),
                    access: self.registry.access()?,
                    verify: self.verify.verification()?.map(|v| v.keys),
                }
            }
            Some(url) => Repo::Git {
                url: url.clone(),
                reference: self.reference.clone(),
                path: self.path.clone(),
                cache: self.git.cache_dir(),
                credentials: self.git.credentials()?,
                verify: self.verify.verification()?,
            },
            None => Repo::Directory(self.path.clone()),
        })
    }
}

impl GitFlags {
    pub fn credentials(&self) -> miette::Result<tether_engine::git::Credentials> {
        Ok(tether_engine::git::Credentials {
            token: self.git_token.clone(),
            username: self.git_username.clone(),
            ssh_key: self.ssh_key.clone(),
            signing_key: self.signing_key()?,
        })
    }

    /// The key of --signing-key, read and checked.
    fn signing_key(&self) -> miette::Result<Option<std::sync::Arc<SigningKey>>> {
        let Some(file) = &self.signing_key else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(file)
            .map_err(|e| miette::miette!("--signing-key {}: {e}", file.display()))?;
        let origin = format!("--signing-key {}", file.display());
        let key = SigningKey::parse(&text, &origin).map_err(|e| miette::miette!("{e}"))?;
        Ok(Some(std::sync::Arc::new(key)))
    }

    /// Where commits go: tether's clone of `repo` in `cache`, else the Git checkout
    /// around `path`; signed with --signing-key.
    pub fn destination(
        &self,
        repo: Option<&str>,
        path: &std::path::Path,
        cache: PathBuf,
    ) -> miette::Result<Destination> {
        Ok(match repo {
            Some(url) => Destination::Remote {
                url: url.to_string(),
                path: path.to_path_buf(),
                cache,
                credentials: self.credentials()?,
            },
            None => Destination::Checkout {
                path: path.to_path_buf(),
                signing_key: self.signing_key()?,
            },
        })
    }

    pub fn cache_dir(&self) -> PathBuf {
        self.cache_dir
            .clone()
            .unwrap_or_else(|| cache_home().join("repos"))
    }
}

impl InventoryFlags {
    pub fn inventory(&self) -> Inventory {
        Inventory {
            name: self.inventory_name.clone(),
            namespace: self.inventory_namespace.clone(),
        }
    }
}

impl ClusterFlags {
    pub fn target(&self) -> tether_engine::cluster::Target {
        tether_engine::cluster::Target {
            kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone(),
            request_timeout: Some(self.request_timeout),
            impersonate: self.impersonate.clone(),
            impersonate_groups: self.impersonate_groups.clone(),
            user_agent: None,
            fence: None,
        }
    }

    /// `--cluster`'s contexts by KubernetesService.
    pub fn contexts(&self) -> std::collections::BTreeMap<String, String> {
        self.clusters.iter().cloned().collect()
    }
}

impl KeyFlags {
    /// The age keys that open encrypted models files.
    pub fn keyring(&self) -> miette::Result<tether_sops::Keyring> {
        let keys =
            tether_engine::key_lookup::keyring_from_environment(self.age_key_file.as_deref())
                .map_err(super::terminal::error)?;
        Ok(keys.given_by("--age-key-file, TETHER_AGE_KEY, SOPS_AGE_KEY or SOPS_AGE_KEY_FILE"))
    }

    /// The engines that build kustomizations and charts, charts checked against
    /// `--chart-keys` when given.
    pub fn generate(&self) -> miette::Result<tether_engine::generate::Generate> {
        let mut generate = tether_engine::generate::Generate::from_environment();
        if !self.chart_keys.is_empty() {
            let mut keys = trusted_keys(&self.chart_keys, "--chart-keys")?;
            trust_identity(
                &mut keys,
                &self.chart_certificate_identity,
                &self.chart_certificate_oidc_issuer,
                "--chart-certificate-identity or --chart-certificate-oidc-issuer",
            )?;
            generate.set_chart_keys(Some(std::sync::Arc::new(keys)));
        }
        Ok(generate)
    }
}

impl DiscoverFlags {
    /// What these flags set, for `DiscoverConfig::resolve`.
    pub fn overrides(&self) -> miette::Result<DiscoverOverrides> {
        let author = match &self.author {
            Some(text) => Some(
                text.parse()
                    .map_err(|e: WritebackError| miette::miette!("--author: {e}"))?,
            ),
            None => None,
        };
        Ok(DiscoverOverrides {
            branch: self.branch.clone(),
            debounce: self.debounce,
            namespaces: self.namespaces.clone(),
            author,
        })
    }
}

impl EventFlags {
    /// What these flags set, for `EventsConfig::resolve`.
    pub fn overrides(&self) -> EventOverrides {
        EventOverrides {
            kafka_brokers: self.kafka_brokers.clone(),
            kafka_topic: self.kafka_topic.clone(),
            events_jsonl: self.events_jsonl.clone(),
            kube_events: self.kube_events,
            outbox: self.outbox.clone(),
        }
    }
}

/// Where `tether diff --post` puts its report: one comment on a pull (merge) request,
/// edited on each run, and a commit status on the commit planned. The token is read
/// from TETHER_POST_TOKEN (else GITHUB_TOKEN, GITLAB_TOKEN), never from a flag: a
/// command line is seen by every process of the machine.
#[derive(Debug, Default, clap::Args)]
#[command(next_help_heading = "Posting to a pull request")]
pub struct PostFlags {
    /// Post the Markdown report on the pull request, and a commit status
    /// `tether/diff/NAME` (failure when an object would be refused).
    #[arg(long, env = "TETHER_POST")]
    pub post: bool,
    /// The pull request's number, or the merge request's iid (default: from the CI's
    /// environment: GITHUB_REF refs/pull/N/merge, CI_MERGE_REQUEST_IID).
    #[arg(long, env = "TETHER_PULL_REQUEST", requires = "post")]
    pub pull_request: Option<u64>,
    /// The repository on the host: OWNER/NAME, or a GitLab project's path (default:
    /// GITHUB_REPOSITORY, CI_PROJECT_PATH).
    #[arg(long, env = "TETHER_POST_REPOSITORY", requires = "post")]
    pub post_repository: Option<String>,
    /// The Git host (default: gitlab on GitLab CI, else github).
    #[arg(long, env = "TETHER_POST_PROVIDER", value_enum, requires = "post")]
    pub post_provider: Option<PostProvider>,
    /// The host's API (default: GITHUB_API_URL, CI_API_V4_URL, else
    /// https://api.github.com).
    #[arg(long, env = "TETHER_POST_API_URL", requires = "post")]
    pub post_api_url: Option<String>,
    /// PEM certificates the host's TLS is checked against, beside the system's (a
    /// host with a private CA).
    #[arg(long, env = "TETHER_POST_CA_FILE", requires = "post")]
    pub post_ca_file: Option<PathBuf>,
    /// What the comment and the status are named after: one per name on a request.
    #[arg(
        long,
        env = "TETHER_POST_NAME",
        default_value = "ci",
        requires = "post"
    )]
    pub post_name: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PostProvider {
    Github,
    Gitlab,
}
