//! Discovered pods to model files: which files under `discovered/` to write and which
//! to remove so that the repo describes the pods in scope. Pure; deterministic (same
//! pods and repo, same bytes).
//!
//! Layout, relative to the models root:
//! - `discovered/<namespace>/pods/<pod>.yaml`: one KubernetesServiceInstance per pod;
//! - `discovered/<namespace>/namespace.yaml`: the TrustDomain, Principals and Slices
//!   the namespace's pods need and the user's models do not define;
//! - `discovered/images.yaml`: the Images they need (Images are not namespaced);
//! - `discovered/kubernetes-services.yaml`: the KubernetesServices discovery was
//!   told to put pods under (`--kubernetes-service`) and the user's models lack.
//!
//! With several KubernetesServices in the repo, each is a cluster and one namespace
//! name may be in two of them: a namespace's directory is then
//! `discovered/<service>/<namespace>/`, so one cluster's discovery never rewrites or
//! removes another's pods. With one (or none), the directory stays
//! `discovered/<namespace>/`, so that existing repos do not move; the files a
//! cluster's discovery wrote there move under the cluster's directory when a second
//! KubernetesService appears (recognised by their `owner`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::k8s::Scope;
use crate::model::{self, ControllerKind, Kind, Models, split_image_reference};
use crate::ownership::{MANAGED_BY_LABEL, MANAGER, MODEL_ANNOTATION, PART_OF_LABEL};
use crate::render::SLICE_LABEL;
use crate::source::SourceFiles;

use super::cluster_choice::{ClusterChoice, ClusterChoiceError};
use super::facts::{ControllerFacts, PodFacts};

/// The directory, under the models root, that discovery owns.
pub const DISCOVERED_DIR: &str = "discovered";
const IMAGES_FILE: &str = "discovered/images.yaml";
const SERVICES_FILE: &str = "discovered/kubernetes-services.yaml";
const HEADER: &str =
    "# Discovered by tether from the cluster (xos_managed: false): tether rewrites this file.\n";

/// Where the watched cluster's files go, and which files its discovery owns.
struct Layout<'s> {
    scope: &'s Scope,
    /// The watched cluster's KubernetesService, when the repo has one or one is named.
    service: Option<String>,
    /// The repo has several KubernetesServices: `discovered/<service>/<namespace>/`.
    per_cluster: bool,
    /// Directories of the one-cluster layout (`discovered/<namespace>/`) holding this
    /// cluster's models: written before the repo had several clusters, moved now.
    earlier: BTreeSet<String>,
}

impl<'s> Layout<'s> {
    fn new(
        repo: &Repo,
        choice: &ClusterChoice,
        scope: &'s Scope,
    ) -> Result<Self, ClusterChoiceError> {
        let known = repo.services();
        let service = choice.service(&known)?;
        let mut all = known.clone();
        all.extend(service.as_deref());
        let per_cluster = all.len() > 1;
        let mut earlier = BTreeSet::new();
        if let (true, Some(service)) = (per_cluster, &service) {
            let discovered = &repo.discovered;
            let owned_models = discovered
                .trust_domains
                .iter()
                .map(|t| (&t.owner, &t.origin))
                .chain(discovered.instances.iter().map(|i| (&i.owner, &i.origin)));
            for (owner, origin) in owned_models {
                let first = repo
                    .path(origin)
                    .strip_prefix("discovered/")
                    .and_then(|rest| rest.split_once('/'))
                    .map(|(first, _)| first);
                if let Some(first) = first
                    && owner.as_ref().is_some_and(|o| o.value == *service)
                    && !all.contains(first)
                    && scope.contains(first)
                {
                    earlier.insert(first.to_string());
                }
            }
        }
        Ok(Layout {
            scope,
            service,
            per_cluster,
            earlier,
        })
    }

    /// The directory of `namespace`'s files.
    fn namespace_dir(&self, namespace: &str) -> String {
        match (&self.service, self.per_cluster) {
            (Some(service), true) => format!("{DISCOVERED_DIR}/{service}/{namespace}"),
            _ => format!("{DISCOVERED_DIR}/{namespace}"),
        }
    }

    /// The names of the `namespaces`' TrustDomains: each namespace's own, unless a
    /// TrustDomain of another cluster has it (the same namespace name in two
    /// clusters); then `<service>-<namespace>` (a namespace name too, as a
    /// TrustDomain's must be), numbered while taken. Stable once written, as a
    /// slice's name is.
    fn trust_domains(&self, repo: &Repo, namespaces: &BTreeSet<&str>) -> BTreeMap<String, String> {
        let mut names: BTreeMap<String, String> = namespaces
            .iter()
            .map(|n| (n.to_string(), n.to_string()))
            .collect();
        let (Some(service), true) = (&self.service, self.per_cluster) else {
            return names;
        };
        let mut taken: BTreeSet<&str> = repo
            .user
            .trust_domains
            .iter()
            .filter(|t| t.owner.as_ref().is_some_and(|o| o.value != *service))
            .chain(
                repo.discovered
                    .trust_domains
                    .iter()
                    .filter(|t| !self.owns(repo.path(&t.origin))),
            )
            .map(|t| t.name.value.as_str())
            .collect();
        let clashing: Vec<&str> = namespaces
            .iter()
            .copied()
            .filter(|n| taken.contains(n))
            .collect();
        // Every plain name this cluster keeps is reserved before any is qualified.
        taken.extend(namespaces.iter().copied().filter(|n| !clashing.contains(n)));
        let prefix: String = service
            .to_ascii_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let mut qualified: BTreeSet<String> = BTreeSet::new();
        for namespace in clashing {
            let base: String = format!("{prefix}-{namespace}").chars().take(60).collect();
            let base = base.trim_matches('-').to_string();
            let name = std::iter::once(base.clone())
                .chain((2..).map(|n| format!("{base}-{n}")))
                .find(|c| !taken.contains(c.as_str()) && !qualified.contains(c))
                .unwrap_or(base);
            qualified.insert(name.clone());
            names.insert(namespace.to_string(), name);
        }
        names
    }

    /// The namespace of an owned file under `discovered/`.
    fn namespace_of<'p>(&self, path: &'p str) -> Option<&'p str> {
        let rest = path.strip_prefix("discovered/")?;
        let rest = match (&self.service, self.per_cluster) {
            (Some(service), true) => rest
                .strip_prefix(service.as_str())
                .and_then(|r| r.strip_prefix('/'))
                .unwrap_or(rest),
            _ => rest,
        };
        rest.split_once('/').map(|(namespace, _)| namespace)
    }

    /// Whether discovery owns `path` (relative to the models root): its files in
    /// other namespaces, and other clusters' files, are left alone.
    fn owns(&self, path: &str) -> bool {
        if path == IMAGES_FILE || path == SERVICES_FILE {
            return true;
        }
        let Some((first, rest)) = path
            .strip_prefix("discovered/")
            .and_then(|rest| rest.split_once('/'))
        else {
            return false;
        };
        match (&self.service, self.per_cluster) {
            (Some(service), true) if first == service => rest
                .split_once('/')
                .is_some_and(|(namespace, _)| self.scope.contains(namespace)),
            (_, true) => self.earlier.contains(first),
            (_, false) => self.scope.contains(first),
        }
    }
}

/// Pods added, changed (a new IP, slice or image) and removed in one namespace
/// (`<service>/<namespace>` when the repo has several clusters).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodChanges {
    pub added: Vec<String>,
    pub updated: Vec<String>,
    pub removed: Vec<String>,
}

/// What discovery would change in the repo.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Paths relative to the models root, and their new text.
    pub writes: BTreeMap<String, String>,
    pub removes: BTreeSet<String>,
    /// Pod changes by namespace (`<service>/<namespace>` with several clusters).
    pub pods: BTreeMap<String, PodChanges>,
}

impl Outcome {
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.removes.is_empty()
    }

    /// `discover: +2 -1 pods in demo-trust`, then a line per pod.
    pub fn commit_message(&self) -> String {
        let mut parts = Vec::new();
        for (namespace, c) in &self.pods {
            let mut counts = Vec::new();
            for (sign, list) in [('+', &c.added), ('~', &c.updated), ('-', &c.removed)] {
                if !list.is_empty() {
                    counts.push(format!("{sign}{}", list.len()));
                }
            }
            if !counts.is_empty() {
                parts.push(format!("{} pods in {namespace}", counts.join(" ")));
            }
        }
        let mut message = if parts.is_empty() {
            "discover: update discovered models".to_string()
        } else {
            format!("discover: {}", parts.join(", "))
        };
        message.push_str("\n\n");
        for (namespace, c) in &self.pods {
            for (word, list) in [
                ("added", &c.added),
                ("updated", &c.updated),
                ("removed", &c.removed),
            ] {
                for pod in list {
                    let _ = writeln!(message, "{word} pod {namespace}/{pod}");
                }
            }
        }
        let files = self.writes.keys().map(|p| ("wrote", p));
        for (word, path) in files.chain(self.removes.iter().map(|p| ("removed", p))) {
            if !path.contains("/pods/") {
                let _ = writeln!(message, "{word} {path}");
            }
        }
        let scope = self.pods.keys().map(String::as_str).collect::<Vec<_>>();
        let scope = if scope.is_empty() {
            "models".to_string()
        } else {
            scope.join(", ")
        };
        let _ = write!(message, "\n{DISCOVERY_TRAILER}: {scope}\n");
        message
    }
}

/// The trailer of discovery's commits (naming the namespaces whose pods changed):
/// tether's own commits, which a reader and tether itself tell from a person's.
pub const DISCOVERY_TRAILER: &str = "Tether-Discovery";

/// Where each model of the repo was written: by the user, or by discovery.
struct Repo<'a> {
    user: Models,
    discovered: Models,
    files: &'a SourceFiles,
}

impl<'a> Repo<'a> {
    fn read(files: &'a SourceFiles) -> Self {
        let (documents, _) = crate::load::load(files);
        let (all, _) = model::read_models(files, &documents);
        let is_discovered = |origin: &model::Origin| {
            files
                .path(origin.span.file)
                .starts_with(&format!("{DISCOVERED_DIR}/"))
        };
        let mut user = Models::default();
        let mut discovered = Models::default();
        macro_rules! split {
            ($($field:ident),*) => {$(
                for x in all.$field {
                    if is_discovered(&x.origin) { discovered.$field.push(x) } else { user.$field.push(x) }
                }
            )*};
        }
        split!(
            kubernetes_services,
            sites,
            images,
            trust_domains,
            principals,
            slices,
            instances,
            data,
            mounts,
            services,
            ports,
            resources
        );
        Repo {
            user,
            discovered,
            files,
        }
    }

    fn path(&self, origin: &model::Origin) -> &str {
        self.files.path(origin.span.file)
    }

    /// The KubernetesServices (clusters) the repo has, the user's and discovered.
    fn services(&self) -> BTreeSet<&str> {
        self.user
            .kubernetes_services
            .iter()
            .chain(&self.discovered.kubernetes_services)
            .map(|s| s.name.value.as_str())
            .collect()
    }
}

/// A slice discovery writes: one per top-level controller, and one per namespace for
/// the pods that no controller made.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct SliceKey {
    namespace: String,
    /// Empty for the bare pods of a namespace.
    controller_kind: String,
    controller_name: String,
}

struct SliceDraft {
    preferred: String,
    controller: Option<ControllerFacts>,
    /// Of the first pod by name, so the choice is stable.
    image: String,
    service_account: String,
}

/// How a discovered pod's models refer to each other.
struct PodDraft<'p> {
    pod: &'p PodFacts,
    slice: PodSlice,
    image: String,
}

enum PodSlice {
    /// A Slice of the user's models, whose controller tether applied.
    User(String),
    Discovered(SliceKey),
}

/// The files that describe `pods` (those in `scope`, minus the bare pods tether applied
/// from this repo's inventory `applyset` and pods the user's models describe), compared
/// with the repo's `existing` files. The pods run in the cluster `cluster` says; an
/// error when it cannot tell which of the repo's KubernetesServices that is.
pub fn plan(
    pods: &[PodFacts],
    existing: &SourceFiles,
    scope: &Scope,
    applyset: &str,
    cluster: &ClusterChoice,
) -> Result<Outcome, ClusterChoiceError> {
    let repo = Repo::read(existing);
    let layout = Layout::new(&repo, cluster, scope)?;
    let service = layout.service.as_deref();
    let pods = pods_to_describe(pods, &repo.user, scope, applyset, service);
    let (drafts, pod_drafts) = draft_pods(pods, &repo.user, applyset);
    let slice_names = name_slices(&drafts, &repo, &layout);

    // The files of the namespaces in scope, as they should be.
    let mut desired: BTreeMap<String, String> = BTreeMap::new();
    let mut needed_images: BTreeSet<String> = BTreeSet::new();
    for draft in &pod_drafts {
        let slice = match &draft.slice {
            PodSlice::User(name) => name.clone(),
            PodSlice::Discovered(key) => slice_names[key].clone(),
        };
        let p = draft.pod;
        let path = format!(
            "{}/pods/{}.yaml",
            layout.namespace_dir(&p.namespace),
            p.name
        );
        desired.insert(path, pod_file(draft, &slice, service));
        needed_images.insert(draft.image.clone());
    }
    let namespaces = namespaces_to_write(&pod_drafts, &repo, &layout);
    let trust_domains = layout.trust_domains(&repo, &namespaces);
    for namespace in namespaces {
        let slices: Vec<(&String, &SliceKey, &SliceDraft)> = drafts
            .iter()
            .filter(|(k, _)| k.namespace == namespace)
            .map(|(k, d)| (&slice_names[k], k, d))
            .collect();
        needed_images.extend(slices.iter().map(|(_, _, d)| d.image.clone()));
        let trust_domain = &trust_domains[namespace];
        if let Some(text) = namespace_file(trust_domain, &repo.user, slices, service) {
            let path = format!("{}/namespace.yaml", layout.namespace_dir(namespace));
            desired.insert(path, text);
        }
    }
    if let Some(text) = images_file(&repo, &layout, needed_images) {
        desired.insert(IMAGES_FILE.to_string(), text);
    }
    if let Some(text) = services_file(&repo, service) {
        desired.insert(SERVICES_FILE.to_string(), text);
    }
    Ok(compare(desired, existing, &layout))
}

/// The KubernetesService of the cluster `choice` says, among those of the repo's
/// `files` (`None`: the repo has none and none is named).
pub fn watched_service(
    files: &SourceFiles,
    choice: &ClusterChoice,
) -> Result<Option<String>, ClusterChoiceError> {
    choice.service(&Repo::read(files).services())
}

/// The KubernetesServices discovery wrote (and the watched cluster's, when the user's
/// models lack it); `None` when there are none. One stays while the repo has it: it is
/// a cluster, which other models and other clusters' files may name.
fn services_file(repo: &Repo, service: Option<&str>) -> Option<String> {
    let user: BTreeSet<&str> = repo
        .user
        .kubernetes_services
        .iter()
        .map(|s| s.name.value.as_str())
        .collect();
    let services: BTreeSet<&str> = repo
        .discovered
        .kubernetes_services
        .iter()
        .map(|s| s.name.value.as_str())
        .chain(service)
        .filter(|s| !user.contains(s))
        .collect();
    let text: String = services
        .into_iter()
        .map(|name| {
            document(
                Kind::KubernetesService,
                &[("name", Some(Scalar::Text(name)))],
            )
        })
        .collect();
    (!text.is_empty()).then(|| format!("{HEADER}{}", body(&text)))
}

/// The pods in scope that discovery describes, by namespace and name: not those tether
/// applied as bare pods, nor those of a controller tether applied from objects written
/// in Git (a chart's, a kustomization's), nor those the user's models describe already.
fn pods_to_describe<'p>(
    pods: &'p [PodFacts],
    user: &Models,
    scope: &Scope,
    applyset: &str,
    service: Option<&str>,
) -> Vec<&'p PodFacts> {
    // A user's pod of another cluster (its owner, or its trust domain's) describes
    // a pod there, not this one.
    let trust_domain_owners: BTreeMap<&str, &str> = user
        .trust_domains
        .iter()
        .filter_map(|t| Some((t.name.value.as_str(), t.owner.as_ref()?.value.as_str())))
        .collect();
    let user_slice_namespaces: BTreeMap<&str, &str> = user
        .slices
        .iter()
        .filter_map(|s| {
            Some((
                s.name.value.as_str(),
                s.trust_domain.as_ref()?.value.as_str(),
            ))
        })
        .collect();
    let user_pods: BTreeSet<(&str, &str)> = user
        .instances
        .iter()
        .filter_map(|i| {
            let namespace = *user_slice_namespaces.get(i.slice.value.as_str())?;
            let owner = i
                .owner
                .as_ref()
                .map(|o| o.value.as_str())
                .or_else(|| trust_domain_owners.get(namespace).copied());
            let elsewhere = matches!((owner, service), (Some(o), Some(s)) if o != s);
            (!elsewhere).then_some((namespace, i.name.value.as_str()))
        })
        .collect();
    let mut pods: Vec<&PodFacts> = pods
        .iter()
        .filter(|p| {
            scope.contains(&p.namespace)
                && !applied_by_tether(&p.labels, applyset)
                && !p
                    .controller
                    .as_ref()
                    .is_some_and(|c| made_from_objects_in_git(c, applyset))
                && !user_pods.contains(&(p.namespace.as_str(), p.name.as_str()))
        })
        .collect();
    pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    pods
}

/// Each pod's slice (a user's Slice whose controller tether applied, else a
/// discovered one per top-level controller) and image; the discovered slices' drafts.
fn draft_pods<'p>(
    pods: Vec<&'p PodFacts>,
    user: &Models,
    applyset: &str,
) -> (BTreeMap<SliceKey, SliceDraft>, Vec<PodDraft<'p>>) {
    let user_slices: BTreeSet<&str> = user.slices.iter().map(|s| s.name.value.as_str()).collect();
    let mut drafts: BTreeMap<SliceKey, SliceDraft> = BTreeMap::new();
    let mut pod_drafts = Vec::with_capacity(pods.len());
    for pod in pods {
        let (name, tag) = split_image_reference(&pod.image);
        let image = format!("{name}:{}", tag.unwrap_or("latest"));
        let tether_slice = pod
            .controller
            .as_ref()
            .and_then(|c| tether_slice(c, applyset))
            .filter(|s| user_slices.contains(s));
        let slice = match tether_slice {
            Some(name) => PodSlice::User(name.to_string()),
            None => {
                let key = SliceKey {
                    namespace: pod.namespace.clone(),
                    controller_kind: pod
                        .controller
                        .as_ref()
                        .map(|c| c.kind.clone())
                        .unwrap_or_default(),
                    controller_name: pod
                        .controller
                        .as_ref()
                        .map(|c| c.name.clone())
                        .unwrap_or_default(),
                };
                drafts.entry(key.clone()).or_insert_with(|| SliceDraft {
                    preferred: match &pod.controller {
                        Some(c) => c.labels.get(SLICE_LABEL).unwrap_or(&c.name).clone(),
                        None => pod.namespace.clone(),
                    },
                    controller: pod.controller.clone(),
                    image: image.clone(),
                    service_account: pod.service_account.clone(),
                });
                PodSlice::Discovered(key)
            }
        };
        pod_drafts.push(PodDraft { pod, slice, image });
    }
    (drafts, pod_drafts)
}

/// A pod's file: its KubernetesServiceInstance in `slice`, owned by `service`.
fn pod_file(draft: &PodDraft, slice: &str, service: Option<&str>) -> String {
    let p = draft.pod;
    let made_by = p
        .controller
        .as_ref()
        .map(|c| format!(", made by {} {}", c.kind, c.name))
        .unwrap_or_default();
    let mut text = format!("{HEADER}# Pod {}/{}{made_by}.\n", p.namespace, p.name);
    text.push_str(body(&document(
        Kind::KubernetesServiceInstance,
        &[
            ("name", Some(Scalar::Text(&p.name))),
            ("slice", Some(Scalar::Text(slice))),
            ("image", Some(Scalar::Text(&draft.image))),
            ("owner", service.map(Scalar::Text)),
            ("xos_managed", Some(Scalar::Bool(false))),
            ("pod_ip", p.ip.as_deref().map(Scalar::Text)),
            ("node", p.node.as_deref().map(Scalar::Text)),
        ],
    )));
    text
}

/// The namespaces with a `namespace.yaml`: those of the pods, and those of discovered
/// trust domains in scope that the user's models still refer to (even with no pods
/// left) without defining them.
fn namespaces_to_write<'a>(
    pod_drafts: &'a [PodDraft],
    repo: &'a Repo,
    layout: &Layout,
) -> BTreeSet<&'a str> {
    let user = &repo.user;
    let user_trust_domain_refs: BTreeSet<&str> = user
        .principals
        .iter()
        .map(|p| &p.trust_domain)
        .chain(user.slices.iter().filter_map(|s| s.trust_domain.as_ref()))
        .chain(user.data.iter().map(|d| &d.trust_domain))
        .chain(user.services.iter().filter_map(|s| s.trust_domain.as_ref()))
        .map(|t| t.value.as_str())
        .collect();
    let mut namespaces: BTreeSet<&str> = pod_drafts
        .iter()
        .map(|d| d.pod.namespace.as_str())
        .collect();
    namespaces.extend(
        repo.discovered
            .trust_domains
            .iter()
            .filter(|t| user_trust_domain_refs.contains(t.name.value.as_str()))
            .map(|t| repo.path(&t.origin))
            .filter(|path| layout.owns(path))
            .filter_map(|path| layout.namespace_of(path)),
    );
    namespaces
}

/// A namespace's file: its TrustDomain (`trust_domain`, owned by `service`), the
/// Principals of its controller slices and its discovered `slices`, minus what the
/// user's models define; `None` when empty.
fn namespace_file(
    trust_domain: &str,
    user: &Models,
    mut slices: Vec<(&String, &SliceKey, &SliceDraft)>,
    service: Option<&str>,
) -> Option<String> {
    let mut text = String::new();
    if !user
        .trust_domains
        .iter()
        .any(|t| t.name.value == trust_domain)
    {
        text.push_str(&document(
            Kind::TrustDomain,
            &[
                ("name", Some(Scalar::Text(trust_domain))),
                ("owner", service.map(Scalar::Text)),
                ("xos_managed", Some(Scalar::Bool(false))),
            ],
        ));
    }
    let principals: BTreeSet<&str> = slices
        .iter()
        .filter(|(_, k, _)| !k.controller_kind.is_empty())
        .map(|(_, _, d)| d.service_account.as_str())
        .collect();
    for principal in principals {
        let defined = user
            .principals
            .iter()
            .any(|p| p.trust_domain.value == trust_domain && p.name.value == principal);
        if !defined {
            text.push_str(&document(
                Kind::Principal,
                &[
                    ("name", Some(Scalar::Text(principal))),
                    ("trust_domain", Some(Scalar::Text(trust_domain))),
                    ("xos_managed", Some(Scalar::Bool(false))),
                ],
            ));
        }
    }
    slices.sort_by_key(|(name, _, _)| *name);
    for (name, key, draft) in slices {
        text.push_str(&slice_document(name, trust_domain, key, draft));
    }
    (!text.is_empty()).then(|| format!("{HEADER}{}", body(&text)))
}

/// The shared `images.yaml`: the Images that discovered models need and the user's
/// models do not define; `None` when there are none.
fn images_file(
    repo: &Repo,
    layout: &Layout,
    mut needed_images: BTreeSet<String>,
) -> Option<String> {
    let user = &repo.user;
    // Images are shared by every namespace and cluster: keep those that discovered
    // models outside the scope (or of other clusters), or the user's models, still
    // refer to.
    let out_of_scope = |origin: &model::Origin| !layout.owns(repo.path(origin));
    needed_images.extend(
        repo.discovered
            .instances
            .iter()
            .filter(|x| out_of_scope(&x.origin))
            .map(|x| x.image.value.clone())
            .chain(
                repo.discovered
                    .slices
                    .iter()
                    .filter(|x| out_of_scope(&x.origin))
                    .filter_map(|x| x.default_image.as_ref().map(|i| i.value.clone())),
            ),
    );
    let user_images: BTreeSet<(&str, &str)> = user
        .images
        .iter()
        .map(|i| (i.name.value.as_str(), i.tag_or_default()))
        .collect();
    let discovered_images: BTreeSet<String> = repo
        .discovered
        .images
        .iter()
        .map(|i| format!("{}:{}", i.name.value, i.tag_or_default()))
        .collect();
    needed_images.extend(
        user.instances
            .iter()
            .map(|x| &x.image)
            .chain(user.slices.iter().filter_map(|x| x.default_image.as_ref()))
            .map(|i| i.value.clone())
            .filter(|i| discovered_images.contains(i)),
    );
    let mut images_text = String::new();
    for image in &needed_images {
        let (name, tag) = split_image_reference(image);
        let tag = tag.unwrap_or("latest");
        if !user_images.contains(&(name, tag)) {
            images_text.push_str(&document(
                Kind::Image,
                &[
                    ("name", Some(Scalar::Text(name))),
                    ("tag", Some(Scalar::Text(tag))),
                ],
            ));
        }
    }
    (!images_text.is_empty()).then(|| format!("{HEADER}{}", body(&images_text)))
}

/// Writes and removals that turn the owned files of `existing` into `desired`.
fn compare(desired: BTreeMap<String, String>, existing: &SourceFiles, layout: &Layout) -> Outcome {
    let current: BTreeMap<&str, &str> = existing
        .iter()
        .map(|(_, f)| f)
        .filter(|f| layout.owns(&f.path))
        .map(|f| (f.path.as_str(), f.text.as_str()))
        .collect();
    let mut outcome = Outcome::default();
    for path in current.keys() {
        if !desired.contains_key(*path) {
            outcome.removes.insert(path.to_string());
            if let Some((namespace, pod)) = pod_of_path(path) {
                outcome.pods.entry(namespace).or_default().removed.push(pod);
            }
        }
    }
    for (path, text) in desired {
        let before = current.get(path.as_str());
        if before == Some(&text.as_str()) {
            continue;
        }
        if let Some((namespace, pod)) = pod_of_path(&path) {
            let changes = outcome.pods.entry(namespace).or_default();
            if before.is_some() {
                changes.updated.push(pod);
            } else {
                changes.added.push(pod);
            }
        }
        outcome.writes.insert(path, text);
    }
    outcome
}

fn pod_of_path(path: &str) -> Option<(String, String)> {
    let rest = path.strip_prefix("discovered/")?;
    let (namespace, file) = rest.split_once("/pods/")?;
    let pod = file.strip_suffix(".yaml")?;
    Some((namespace.to_string(), pod.to_string()))
}

/// A pod that tether applied from a KubernetesServiceInstance of this repo.
fn applied_by_tether(labels: &BTreeMap<String, String>, applyset: &str) -> bool {
    labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGER)
        && labels.get(PART_OF_LABEL).map(String::as_str) == Some(applyset)
}

/// The Slice a controller was applied from, when tether applied it from this repo.
fn tether_slice<'c>(controller: &'c ControllerFacts, applyset: &str) -> Option<&'c str> {
    if !applied_by_tether(&controller.labels, applyset) {
        return None;
    }
    controller
        .annotations
        .get(MODEL_ANNOTATION)?
        .strip_prefix("Slice/")
}

/// Is this controller one tether applied from objects written in Git (a plain
/// manifest, a kustomization, a chart, a KubernetesResourceInstance)? Its pods are
/// described there already: discovery writes no model for them.
fn made_from_objects_in_git(controller: &ControllerFacts, applyset: &str) -> bool {
    applied_by_tether(&controller.labels, applyset)
        && controller
            .annotations
            .get(MODEL_ANNOTATION)
            .is_some_and(|model| !model.starts_with("Slice/"))
}

/// A unique name per discovered slice: the controller's `xos_slice_name` label or its
/// name (as XOS named them), the namespace for bare pods; qualified by the namespace
/// when another slice already has the name, then by the cluster.
fn name_slices(
    drafts: &BTreeMap<SliceKey, SliceDraft>,
    repo: &Repo,
    layout: &Layout,
) -> BTreeMap<SliceKey, String> {
    let mut taken: BTreeSet<String> = repo
        .user
        .slices
        .iter()
        .map(|s| s.name.value.clone())
        .chain(
            repo.discovered
                .slices
                .iter()
                .filter(|s| !layout.owns(repo.path(&s.origin)))
                .map(|s| s.name.value.clone()),
        )
        .collect();
    let mut names = BTreeMap::new();
    for (key, draft) in drafts {
        let kind = key.controller_kind.to_ascii_lowercase();
        let qualified = format!("{}_{kind}_{}", key.namespace, key.controller_name);
        let mut candidates = vec![
            draft.preferred.clone(),
            format!("{}_{}", key.namespace, draft.preferred),
            qualified.clone(),
        ];
        // The same controller in a namespace of the same name on another cluster.
        if let (Some(service), true) = (&layout.service, layout.per_cluster) {
            candidates.push(format!("{service}_{}_{}", key.namespace, draft.preferred));
        }
        let name = candidates
            .iter()
            .find(|c| !taken.contains(*c))
            .cloned()
            .unwrap_or_else(|| {
                // Only reachable with hand-made names in the repo; numbered to stay unique.
                (2..)
                    .map(|n| format!("{qualified}_{n}"))
                    .find(|c| !taken.contains(c))
                    .unwrap_or_default()
            });
        taken.insert(name.clone());
        names.insert(key.clone(), name);
    }
    names
}

fn slice_document(name: &str, trust_domain: &str, key: &SliceKey, draft: &SliceDraft) -> String {
    let controller_kind = draft
        .controller
        .as_ref()
        .and_then(|c| ControllerKind::ALL.into_iter().find(|k| k.name() == c.kind));
    let replicas = draft
        .controller
        .as_ref()
        .and_then(|c| c.replicas)
        .filter(|_| controller_kind.is_some_and(|k| k != ControllerKind::DaemonSet));
    let description = match &draft.controller {
        Some(c) => format!("{} {}/{}", c.kind, key.namespace, c.name),
        None => format!("pods without a controller in {}", key.namespace),
    };
    let principal = controller_kind.map(|_| draft.service_account.as_str());
    document(
        Kind::Slice,
        &[
            ("name", Some(Scalar::Text(name))),
            ("trust_domain", Some(Scalar::Text(trust_domain))),
            ("principal", principal.map(Scalar::Text)),
            (
                "controller_kind",
                controller_kind.map(|k| Scalar::Text(k.name())),
            ),
            ("controller_replica_count", replicas.map(Scalar::Int)),
            (
                "default_image",
                controller_kind.map(|_| Scalar::Text(&draft.image)),
            ),
            ("description", Some(Scalar::Text(&description))),
            ("xos_managed", Some(Scalar::Bool(false))),
        ],
    )
}

/// Documents without the first `---`: a file starts with its header comment.
fn body(documents: &str) -> &str {
    documents.strip_prefix("---\n").unwrap_or(documents)
}

enum Scalar<'a> {
    Text(&'a str),
    Int(i64),
    Bool(bool),
}

/// One YAML document (starting with `---`), fields in the order given.
fn document(kind: Kind, fields: &[(&str, Option<Scalar>)]) -> String {
    let mut text = format!("---\nkind: {kind}\n");
    for (key, value) in fields {
        let Some(value) = value else { continue };
        let value = match value {
            Scalar::Text(s) => yaml_string(s),
            Scalar::Int(n) => n.to_string(),
            Scalar::Bool(b) => b.to_string(),
        };
        let _ = writeln!(text, "{key}: {value}");
    }
    text
}

/// A string as a YAML scalar: plain when no YAML reader could take it for anything
/// else, double-quoted (JSON escaping, which YAML shares) otherwise.
fn yaml_string(s: &str) -> String {
    const WORDS: &[&str] = &[
        "y", "n", "yes", "no", "on", "off", "true", "false", "null", "~",
    ];
    let plain = s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./@+: ".contains(&b))
        && !s.ends_with([':', ' '])
        && !s.contains(": ")
        && !WORDS.contains(&s.to_ascii_lowercase().as_str());
    if plain {
        s.to_string()
    } else {
        serde_json::Value::String(s.to_string()).to_string()
    }
}
