//! The `Source` custom resource (`tether.dev/v1alpha1`): a Git repository, a ref and a
//! path (or an OCI artifact) that the daemon keeps applied, with the status a GitOps user reads
//! (`kubectl get sources`): revisions, kstatus conditions, the last plan's counts.
//! Its CRD is generated from these types (`tether crd`, `deploy/crd.yaml`).

use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use tether_core::feedback::GitHost;
use tether_core::health::{HealthCheckError, HealthChecks, PlainCheck};
use tether_core::inventory::budget::DeletionBudget;
use tether_core::ownership::Inventory;

/// The annotation `tether reconcile` sets (to the time of the request) for a pass now;
/// the status echoes the value it handled.
pub const RECONCILE_REQUESTED_ANNOTATION: &str = "tether.dev/reconcile-requested-at";

/// The merge patch that asks for a pass of a Source now (`tether reconcile`, a push
/// forwarded to the replica that runs the Source): [`RECONCILE_REQUESTED_ANNOTATION`]
/// set to `at`, the time of the request.
pub fn reconcile_request(at: &str) -> serde_json::Value {
    serde_json::json!({
        "metadata": {"annotations": {RECONCILE_REQUESTED_ANNOTATION: at}}
    })
}

/// The annotation that approves a prune beyond the Source's deletion budget: the
/// digest of exactly the deletions approved (`tether approve`, the page's action). A
/// plan whose deletions have another digest is held again.
pub const APPROVE_DELETIONS_ANNOTATION: &str = "tether.dev/approve-deletions";

/// The merge patch that approves the deletions of digest `digest` (`sha256:…`) and asks
/// for the pass that carries them out (`tether approve`, the page's action): a
/// [`reconcile_request`] at `at` besides.
pub fn approval_request(at: &str, digest: &str) -> serde_json::Value {
    serde_json::json!({
        "metadata": {"annotations": {
            RECONCILE_REQUESTED_ANNOTATION: at,
            APPROVE_DELETIONS_ANNOTATION: digest,
        }}
    })
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "tether.dev",
    version = "v1alpha1",
    kind = "Source",
    namespaced,
    status = "SourceStatus",
    shortname = "tsrc",
    category = "tether",
    doc = "A Git repository (or OCI artifact) of tether models that the daemon keeps applied",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].message"}"#,
    printcolumn = r#"{"name":"Revision","type":"string","jsonPath":".status.lastAppliedRevision"}"#,
    printcolumn = r#"{"name":"Last Success","type":"date","jsonPath":".status.lastSuccessTime"}"#,
    printcolumn = r#"{"name":"Images","type":"string","priority":1,"jsonPath":".status.imagesSummary"}"#,
    printcolumn = r#"{"name":"Owner","type":"string","jsonPath":".status.owner"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct SourceSpec {
    /// The repository: https://, ssh:// or file:// URL; or an OCI artifact in Flux's
    /// format (`tether push artifact`, `flux push artifact`): oci://HOST/REPOSITORY,
    /// with its tag in `ref` (default latest) or in the URL (oci://HOST/REPOSITORY:TAG,
    /// or @sha256:DIGEST).
    pub url: String,
    /// Branch, tag or full commit id (default: the remote's default branch); for an
    /// oci:// URL, its tag or digest (sha256:…).
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// For an oci:// URL: talk to the registry over plain HTTP (Flux's
    /// `spec.insecure`).
    #[serde(default)]
    pub insecure: bool,
    /// The models directory inside the repository (or artifact).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// How often the remote is asked for its ref (e.g. 30s, 5m; default 1m). Webhooks
    /// and drift trigger passes in between.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    /// Delete what the inventory recorded and the models no longer render.
    #[serde(default)]
    pub prune: bool,
    /// With prune, let a revision that renders nothing prune everything.
    #[serde(default)]
    pub allow_empty: bool,
    /// How much one pass may prune before a person approves it: `COUNT,PERCENT%`
    /// (default `10,25%`: held when it deletes more than 10 objects and more than 25%
    /// of the inventory), or `off`. A held prune deletes nothing; the status says
    /// `PruneHeld` with the digest that `tether approve` (the annotation
    /// `tether.dev/approve-deletions`) approves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_budget: Option<String>,
    /// Health checks of custom resources, in Flux's `healthCheckExprs` spelling: CEL
    /// expressions per kind, judged on the object as the server gives it. A kind's
    /// check is the repository's (`.tether.yaml`) if it has one, else this, else the
    /// shipped library's. An expression that does not compile stalls the Source
    /// (`InvalidSpec`), naming the field.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub health_check_exprs: Vec<HealthCheckExpr>,
    /// What to do when someone changes a field tether applied: Correct it (default) or
    /// only Report it (an Event and a metric).
    #[serde(default)]
    pub drift: DriftPolicy,
    /// What to do when the ref moves to a commit that does not descend from the one
    /// applied (a force-push): Apply it (default; recorded in an Event, the status's
    /// `lastHistoryRewrite`, the log and a metric) or Refuse it (the Source stalls
    /// until the ref descends again from the applied commit, or this is set back to
    /// Apply).
    #[serde(default)]
    pub rewrites: RewritePolicy,
    /// Stop reconciling (the objects stay as they are).
    #[serde(default)]
    pub suspend: bool,
    /// The inventory ConfigMap (in the Source's namespace); default: the Source's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory: Option<String>,
    /// Commit the cluster's pods that tether did not create back to the repository
    /// (under `discovered/` of `path`) and publish pod events to the sinks its
    /// `.tether.yaml` names. The credentials must allow a push.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovery: Option<DiscoverySpec>,
    /// Update the images the models' ImagePolicies choose, as commits to the
    /// repository (the credentials must allow a push). Registry credentials are the
    /// Secrets the policies' `secret` names, in the Source's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_automation: Option<ImageAutomationSpec>,
    /// A Secret in the Source's namespace with Git (or registry) credentials:
    /// `username`, and `password` or `token`; for an oci:// URL, also a
    /// `.dockerconfigjson` (`kubectl create secret docker-registry`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,
    /// Apply only commits signed by a trusted key (Flux's `spec.verify`): the head
    /// commit, the tag the ref names, or both; for an oci:// URL, an artifact signed
    /// by a trusted cosign key (`cosign sign --key`). What is not verified applies
    /// nothing: the Source stalls, naming the commit (or digest), its signer and the
    /// keys, and the last verified one stays applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<VerifySpec>,
    /// Sign every commit tether writes to the repository (discovery, image automation,
    /// the web page's and API's actions) with the SSH key of a Secret in the Source's
    /// namespace: its `ssh-privatekey` entry (`kubectl create secret generic NAME
    /// --type=kubernetes.io/ssh-auth --from-file=ssh-privatekey=KEY`), without a
    /// passphrase. Git hosts show such commits verified when the key is registered as
    /// a signing key; read when the Source's loop starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing_key: Option<SigningKeySpec>,
    /// After each pass that changed the cluster, sign an attestation of what it
    /// applied (an in-toto statement in a DSSE envelope: the commit, who signed it,
    /// each object's digest and the fields tether set) with the ECDSA P-256 key of a
    /// Secret in the Source's namespace (its `attestation.pem` entry, read before each
    /// pass; a key that cannot be read applies nothing), and keep it as a ConfigMap
    /// in the Source's namespace. `tether verify` checks it against the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attestation: Option<AttestationSpec>,
    /// Render only charts signed by a trusted key: a chart from a chart repository
    /// by its provenance file (`helm package --sign`, armored OpenPGP keys), a chart
    /// from an OCI registry by its cosign signature (cosign public keys). The keys are
    /// every entry of a Secret in the Source's namespace, read before each pass. A
    /// chart that is not verified renders nothing, and the last good revision stays
    /// applied. (A chart fetched from a repository is always checked against the
    /// digest its index lists.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_charts: Option<VerifyChartsSpec>,
    /// Decrypt the repository's sops-encrypted files with the age keys of a Secret in
    /// the Source's namespace (read before each pass, so a rotated key needs no
    /// restart). Without it, an encrypted file is an error and nothing is applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decryption: Option<Decryption>,
    /// The ServiceAccount of the Source's namespace that the Source acts as (Flux's
    /// `serviceAccountName`): its objects and its inventory are read, planned, applied,
    /// pruned and watched as `system:serviceaccount:NAMESPACE:NAME`, impersonated, so
    /// that RBAC decides what the Source may change. Default: the daemon's
    /// `--default-service-account`, else the daemon's own identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// What the Source's objects may be: the namespaces they may be in and the kinds
    /// (`Kind` or `Kind.group`; cluster-scoped kinds only when listed). Set by the
    /// platform team; the repository's `confine:` (`.tether.yaml`) may only narrow it.
    /// An object outside is an error at its model, and nothing is applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confine: Option<SourceConfine>,
    /// Day-2 actions from the web page and API (scale, restart, roll back, host labels
    /// and locks) are committed to a new branch each, for a pull request, instead of
    /// the ref's branch.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub propose_actions: bool,
    /// How long a wave may wait for what it needs, and a commit's rollout for its
    /// objects to be ready before its commit status fails (e.g. 90s, 10m; default 5m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Revert a commit whose rollout does not become healthy within `timeout`: tether
    /// commits Git's revert of it to the branch (naming the objects that failed), and
    /// image automation holds the policy whose update it was until a person commits.
    /// A revert is never reverted, nor a person's commit after one, nor a commit the
    /// branch has moved on from.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub revert: bool,
    /// Tell how commits fared where people look: commit statuses (one context per
    /// cluster and Source), the plan of each pull request's head as a comment, and
    /// notices to webhooks, Slack, Kafka or Kubernetes Events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback: Option<FeedbackSpec>,
}

/// Where a Source tells how its commits fared (`spec.feedback`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FeedbackSpec {
    /// The Git host's API: github or gitlab (default: by the URL's host, github.com
    /// or gitlab.com).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "git_host_schema")]
    pub provider: Option<GitHost>,
    /// The API's base URL (default: https://api.github.com, https://HOST/api/v3 for a
    /// GitHub Enterprise, https://HOST/api/v4 for GitLab).
    #[serde(default, rename = "apiURL", skip_serializing_if = "Option::is_none")]
    pub api_url: Option<String>,
    /// The repository on the host (`owner/name`; a GitLab project's full path), when
    /// `url` does not name it (a mirror).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// A Secret in the Source's namespace with the host's `token` (a personal or
    /// project access token; no GitHub App needed), and `ca.crt` for a host with a
    /// private CA. Without it, nothing goes to the Git host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,
    /// Post a commit status per cluster for each commit (default true).
    #[serde(default = "yes")]
    pub commit_statuses: bool,
    /// On a pull (merge) request's webhook, plan its head against the cluster and
    /// keep one comment on it with the plan (default true).
    #[serde(default = "yes")]
    pub pull_requests: bool,
    /// Where notices go.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notifications: Vec<NotificationSpec>,
    /// Notices not sent: applied, failed, stalled, drift-corrected, drift-reported,
    /// pruned, wave-blocked, host-removed, reverted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// At most this many notices a minute (default 20); the next one says how many
    /// were held back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notices_per_minute: Option<u32>,
}

fn yes() -> bool {
    true
}

/// `github` or `gitlab`: an optional enum whose schema has no `null` among its values
/// (the API server refuses one).
fn git_host_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "enum": ["github", "gitlab"],
        "description": "The Git host's API: github or gitlab (default: by the URL's host, github.com or gitlab.com)."
    })
}

/// One receiver of a Source's notices.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotificationSpec {
    #[serde(rename = "type")]
    pub receiver: ReceiverType,
    /// For cloudevents and slack: a Secret with the `url` (a Slack webhook's URL is
    /// a secret), and for cloudevents an `hmacKey` that signs each body
    /// (`X-Signature-256: sha256=…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,
    /// For kafka: the brokers (HOST:PORT).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub brokers: Vec<String>,
    /// For kafka: the topic (default tether.notices).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ReceiverType {
    /// CloudEvents 1.0 JSON, POSTed to a URL.
    Cloudevents,
    /// A Slack (or compatible) incoming webhook.
    Slack,
    Kafka,
    /// An Event on the Source (`kubectl describe source`).
    KubernetesEvents,
}

impl ReceiverType {
    /// As `spec.feedback.notifications[].type` spells it.
    pub fn name(self) -> &'static str {
        match self {
            ReceiverType::Cloudevents => "cloudevents",
            ReceiverType::Slack => "slack",
            ReceiverType::Kafka => "kafka",
            ReceiverType::KubernetesEvents => "kubernetes-events",
        }
    }
}

/// A Source's confinement (`spec.confine`); a list absent is unrestricted.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct SourceConfine {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kinds: Option<Vec<String>>,
}

/// How a Source's encrypted files are opened (Flux's `spec.decryption`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Decryption {
    /// The format of the encrypted files: sops (the default and only one).
    #[serde(default)]
    pub provider: DecryptionProvider,
    /// A Secret whose entries ending in `.agekey` hold age private keys
    /// (`AGE-SECRET-KEY-1…`, one per line, as `age-keygen` writes them).
    pub secret_ref: LocalObjectReference,
}

/// One kind's health check (`spec.healthCheckExprs[]`, Flux's spelling).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheckExpr {
    /// The kind's apiVersion; the check matches every version of its group.
    pub api_version: String,
    pub kind: String,
    /// True when the object is healthy.
    pub current: String,
    /// True while the object is still progressing (looked at first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_progress: Option<String>,
    /// True when the object will not become healthy without a change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

/// Which signatures a Source requires (`spec.verify`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerifySpec {
    /// What must be signed: the commit the ref names (HEAD, the default), the
    /// annotated tag the ref names (Tag), or both (TagAndHEAD).
    #[serde(default)]
    pub mode: VerifyMode,
    /// A Secret in the Source's namespace whose entries hold the trusted keys, read
    /// before each pass: an allowed-signers file (`ssh-keygen -Y verify`'s format,
    /// as git's `gpg.ssh.allowedSignersFile`), SSH public keys one per line, armored
    /// OpenPGP public keys (`gpg --export --armor`), or for an oci:// URL cosign
    /// public keys (`cosign.pub`) and Sigstore trusted roots (`trusted_root.json`, as
    /// `cosign trusted-root create` writes it), any entry name.
    pub secret_ref: LocalObjectReference,
    /// Who may sign with a certificate of a trusted root's authority (Flux's
    /// spelling): each an OIDC issuer and a subject (an email address or a URI),
    /// regular expressions that must match the whole value. None: no certificate
    /// signs.
    #[serde(
        default,
        rename = "matchOIDCIdentity",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub match_oidc_identity: Vec<OidcIdentityMatch>,
}

/// An identity a Sigstore certificate may be issued for.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct OidcIdentityMatch {
    /// The OIDC issuer (`https://token.actions.githubusercontent.com`), a regular
    /// expression matched against the whole issuer.
    pub issuer: String,
    /// The subject (`ci@example.org`, a workflow's URI), a regular expression matched
    /// against the whole subject.
    pub subject: String,
}

/// The keys a Source's charts must be signed by (`spec.verifyCharts`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerifyChartsSpec {
    /// A Secret in the Source's namespace whose entries hold the trusted keys:
    /// armored OpenPGP public keys (`gpg --export --armor`), cosign public keys
    /// (`cosign.pub`) and Sigstore trusted roots (`trusted_root.json`), any entry
    /// name.
    pub secret_ref: LocalObjectReference,
    /// Who may sign a registry's chart with a certificate of a trusted root's
    /// authority, as `spec.verify.matchOIDCIdentity`.
    #[serde(
        default,
        rename = "matchOIDCIdentity",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub match_oidc_identity: Vec<OidcIdentityMatch>,
}

/// Flux's spelling of the verification modes.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum VerifyMode {
    #[default]
    #[serde(rename = "HEAD")]
    Head,
    Tag,
    #[serde(rename = "TagAndHEAD")]
    TagAndHead,
}

/// The key a Source's commits are signed with (`spec.signingKey`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SigningKeySpec {
    /// A Secret in the Source's namespace with an `ssh-privatekey` entry.
    pub secret_ref: LocalObjectReference,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttestationSpec {
    /// A Secret in the Source's namespace with an `attestation.pem` entry (`kubectl
    /// create secret generic NAME --from-file=attestation.pem=KEY`).
    pub secret_ref: LocalObjectReference,
    /// How many attestations of the Source are kept; the oldest are deleted.
    /// Default 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub keep: Option<u32>,
    /// Keep each attestation as a ConfigMap in the Source's namespace (the default).
    /// False with `registry`: in the registry only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_cluster: Option<bool>,
    /// Push each attestation to an OCI registry too, as an artifact whose layer is
    /// the DSSE envelope, tagged `<inventory>-<time>-<digest>` and `<inventory>` (the
    /// newest); the oldest beyond `keep` are deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<AttestationRegistrySpec>,
}

/// The repository a Source's attestations are pushed to.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttestationRegistrySpec {
    /// The repository, `oci://HOST/PATH` (no tag).
    pub url: String,
    /// Talk to the registry over plain HTTP.
    #[serde(default)]
    pub insecure: bool,
    /// A Secret in the Source's namespace with the registry's credentials: a Docker
    /// config (`kubectl create secret docker-registry`) or `username` and
    /// `password`, read before each push. Anonymous without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DecryptionProvider {
    #[default]
    Sops,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DriftPolicy {
    #[default]
    Correct,
    Report,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RewritePolicy {
    #[default]
    Apply,
    Refuse,
}

/// Image automation: the models' ImagePolicies scanned on their intervals (and at
/// once at a registry's webhook), the tags they choose committed to the Source's
/// branch (or each `update: branch` policy's own), then applied like any push.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageAutomationSpec {
    /// One commit for every policy that updates in a scan, instead of one each.
    #[serde(default)]
    pub batch: bool,
    /// The commits' author, "Name <email>" (default: tether <tether@localhost>).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
}

/// Where discovered models are committed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct DiscoverySpec {
    /// The branch to commit to (default: the Source's ref when it is a branch, else
    /// main).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct LocalObjectReference {
    pub name: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceStatus {
    /// The generation of the spec the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The revision of the last pass, applied or not: `<ref>@sha1:<commit>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempted_revision: Option<String>,
    /// The revision last applied without error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_revision: Option<String>,
    /// The value of the reconcile-requested annotation last handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
    /// When a revision was last applied without error (RFC 3339). A pass that finds
    /// nothing to do writes nothing, so this is the last success that changed state;
    /// the metric `tether_source_last_success_timestamp_seconds` has every pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success_time: Option<String>,
    /// The counts of the last applied plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_plan: Option<PlanCounts>,
    /// The last time the ref moved to a commit that does not descend from the one
    /// applied (a force-push): for an auditor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_history_rewrite: Option<HistoryRewrite>,
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// When the models name several KubernetesServices: how each one's cluster fared
    /// in the last pass.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterStatus>,
    /// The last commit whose rollout did not become healthy in time, with
    /// `spec.revert` (written beside the passes): reverted, or why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_revert: Option<RevertStatus>,
    /// Each image policy at its last scan (written by the image automation, not by
    /// the passes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImagePolicyStatus>,
    /// The image policies in one line (`kubectl get sources -o wide`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images_summary: Option<String>,
    /// The replica that runs the Source, when the daemon is sharded (`--shard`): its
    /// claim, written before its loop starts and cleared after it stops (not by the
    /// passes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// When the owner claimed it (RFC 3339). Each claim, a replica's own claim taken
    /// again included, writes a new time, so that it changes the Source: two replicas
    /// claiming at once, each on the resourceVersion it read, cannot both succeed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_since: Option<String>,
}

/// An image policy at its last scan.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImagePolicyStatus {
    pub policy: String,
    pub image: String,
    /// When the registry was last scanned (RFC 3339).
    pub last_scan_time: String,
    /// How many tags the repository listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<u64>,
    /// The best tag (or digest) the policy admits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate: Option<String>,
    /// Updated, Kept or Failed.
    pub result: String,
    /// What was chosen and from what, why nothing was, or what went wrong.
    pub message: String,
    /// The policy's last update (`1.0.0 → 1.0.1 on main`), kept by the scans after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update: Option<String>,
    /// When it was committed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<String>,
}

/// One cluster of a Source whose models name several.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// Its KubernetesService.
    pub name: String,
    /// True or False.
    pub ready: String,
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// A rewrite of the tracked ref's history, as the status records it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HistoryRewrite {
    /// The revision applied before (`<ref>@sha1:<commit>`).
    pub from: String,
    /// The revision the ref moved to.
    pub to: String,
    /// When the daemon saw it (RFC 3339).
    pub time: String,
}

/// A commit whose rollout failed, and tether's revert of it (`status.lastRevert`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevertStatus {
    /// The revision whose rollout failed (`<ref>@sha1:<commit>`).
    pub failed: String,
    /// The revert tether committed (`<ref>@sha1:<commit>`); none when it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revert: Option<String>,
    /// The objects that were not healthy in time, and why; or why it was not reverted.
    pub message: String,
    /// The image policies the revert holds until a person commits.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<String>,
    /// When (RFC 3339).
    pub time: String,
}

/// What the last apply did, by action.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanCounts {
    pub created: u32,
    pub configured: u32,
    pub unchanged: u32,
    pub pruned: u32,
    pub released: u32,
    pub failed: u32,
}

/// A kstatus condition (`Ready`, `Reconciling`, `Stalled`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: String,
    pub reason: String,
    pub message: String,
    pub last_transition_time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl Source {
    /// The digest of the deletions a person approved (the annotation
    /// [`APPROVE_DELETIONS_ANNOTATION`]), if any.
    pub fn approved_deletions(&self) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()?
            .get(APPROVE_DELETIONS_ANNOTATION)
            .map(String::as_str)
    }
}

impl SourceSpec {
    /// `spec.timeout`, when given, or why it is no duration.
    pub fn timeout(&self) -> Result<Option<std::time::Duration>, String> {
        self.timeout
            .as_deref()
            .map(tether_core::settings::parse_duration)
            .transpose()
    }

    /// `spec.healthCheckExprs`, compiled, or the first that does not compile.
    pub fn health_checks(&self) -> Result<HealthChecks, HealthCheckError> {
        let checks: Vec<PlainCheck<'_>> = self
            .health_check_exprs
            .iter()
            .map(|c| PlainCheck {
                api_version: &c.api_version,
                kind: &c.kind,
                current: &c.current,
                in_progress: c.in_progress.as_deref(),
                failed: c.failed.as_deref(),
            })
            .collect();
        HealthChecks::compile_spec(&checks)
    }

    /// `spec.deletionBudget` (default: ten objects and a quarter of the inventory), or
    /// why it is no budget.
    pub fn deletion_budget(&self) -> Result<Option<DeletionBudget>, String> {
        match &self.deletion_budget {
            Some(text) => DeletionBudget::parse(text),
            None => Ok(Some(DeletionBudget::default())),
        }
    }

    /// The inventory of the Source `namespace`/`name`: `spec.inventory`, else the
    /// Source's name, in its namespace.
    pub fn inventory_of(&self, namespace: &str, name: &str) -> Inventory {
        Inventory {
            name: self.inventory.clone().unwrap_or_else(|| name.to_string()),
            namespace: namespace.to_string(),
        }
    }
}
