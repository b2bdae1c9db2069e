//! Objects that other engines make from the repository's files, the way teams keep
//! them beside models: kustomizations (built by Kustomize) and Helm charts (rendered
//! by Helm, named by `HelmChart` models). The core decides what must be built and
//! reads what was built; the engine runs the tools (`tether_engine::generate`):
//!
//! ```text
//! SourceFiles ──layout──▶ Layout (kustomizations to build; files that are not models)
//!       ──prepare──▶ models + Generators ══engine: kustomize build, helm template══▶
//!       Generated ──read_generated──▶ steps of the workflow (KubernetesResourceInstances
//!       of kind Kustomization and HelmChart) ──resolve, render──▶ objects
//! ```
//!
//! A kustomization directory's files are the kustomization's, never models; so are a
//! chart directory's (one holding `Chart.yaml`) and the values files a chart names. A
//! kustomization that another one includes (a base of overlays), or that lies inside
//! another one, is not built on its own; include cycles and remote bases (unless
//! allowed) are located errors. Read back, a chart's hooks become steps before and
//! after it by weight, its objects are placed in its namespace, and a hook Job carries
//! the chart's revision, so that it runs again on an upgrade.

use std::collections::{BTreeMap, BTreeSet};

use crate::diagnostic::{Diagnostic, Diagnostics, Span};
use crate::k8s;
use crate::load::{Dialect, Node, Value, parse_yaml, point_span};
use crate::model::{
    ChartSource, Dependency, DependencyTarget, HelmChart, Kind, KubernetesResourceInstance, Models,
    Origin, ResourceObject, Spanned, resolve_data_path,
};
use crate::source::{FileId, SourceFiles};

/// The names Kustomize reads a kustomization from, in its order.
pub const KUSTOMIZATION_FILES: [&str; 3] =
    ["kustomization.yaml", "kustomization.yml", "Kustomization"];
/// The file that makes a directory a Helm chart.
pub const CHART_FILE: &str = "Chart.yaml";
/// The annotation that makes a chart's object a hook.
pub const HOOK_ANNOTATION: &str = "helm.sh/hook";
/// The annotation that orders a chart's hooks of one phase.
pub const HOOK_WEIGHT_ANNOTATION: &str = "helm.sh/hook-weight";
/// The pod template annotation that runs a chart's hook Job again when the chart's
/// objects change, as Helm runs hooks on every upgrade.
pub const HOOK_REVISION_ANNOTATION: &str = "tether.dev/chart-revision";

/// What the repository's files are, besides models.
#[derive(Clone, Debug, Default)]
pub struct Layout {
    /// The kustomizations to build: directories (relative to the models root, `.`
    /// for the root itself) and their kustomization files.
    pub kustomizations: Vec<(String, FileId)>,
    /// Files that are not models: a kustomization's or a chart's.
    pub not_models: BTreeSet<FileId>,
}

/// A file's directory, relative to the models root (`""` for the root).
fn directory_of(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(dir, _)| dir)
}

fn file_name_of(path: &str) -> &str {
    path.rsplit_once('/').map_or(path, |(_, name)| name)
}

/// Is `path` inside `dir` (or `dir` itself)?
fn is_within(path: &str, dir: &str) -> bool {
    dir.is_empty()
        || path == dir
        || path
            .strip_prefix(dir)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Is a kustomization's entry a remote base (a Git repository or a URL)?
fn is_remote(entry: &str) -> bool {
    entry.contains("://")
        || entry.starts_with("github.com/")
        || entry.starts_with("git@")
        || entry.starts_with("git::")
}

/// Finds the kustomizations and charts among the files. `allow_remote_bases`: may a
/// kustomization include a remote base (Kustomize would fetch it at every build)?
pub fn layout(files: &SourceFiles, allow_remote_bases: bool) -> (Layout, Diagnostics) {
    let mut diagnostics = Diagnostics::default();
    let mut kustomizations: BTreeMap<String, FileId> = BTreeMap::new();
    let mut charts: BTreeSet<String> = BTreeSet::new();
    for (id, file) in files.iter() {
        let name = file_name_of(&file.path);
        let dir = directory_of(&file.path).to_string();
        if KUSTOMIZATION_FILES.contains(&name) {
            kustomizations.entry(dir).or_insert(id);
        } else if name == CHART_FILE {
            charts.insert(dir);
        }
    }
    let mut included: BTreeSet<String> = BTreeSet::new();
    let mut refused: BTreeSet<String> = BTreeSet::new();
    let mut edges: BTreeMap<&str, Vec<(String, Span)>> = BTreeMap::new();
    let mut not_models = BTreeSet::new();
    for (dir, id) in &kustomizations {
        let file = files.get(*id);
        for (entry, span) in kustomization_entries(files, *id) {
            if is_remote(&entry) {
                if !allow_remote_bases {
                    diagnostics.push(
                        Diagnostic::error(span, format!("remote base \"{entry}\": Kustomize would fetch it from the network at every build"))
                            .in_model(format!("Kustomization \"{}\"", shown_dir(dir)))
                            .with_hint("vendor the base into the repository, or allow remote bases in .tether.yaml (kustomize: {remote_bases: true})"),
                    );
                    refused.insert(dir.clone());
                }
                continue;
            }
            let Some(target) = resolve_data_path(&file.path, &entry) else {
                continue;
            };
            if kustomizations.contains_key(&target) {
                edges.entry(dir).or_default().push((target.clone(), span));
                included.insert(target);
            } else if let Some((target_id, _)) = files.by_path(&target) {
                // A file of another directory, taken in whole by this kustomization.
                not_models.insert(target_id);
            }
        }
    }
    for (cycle, span) in include_cycles(&edges) {
        diagnostics.push(
            Diagnostic::error(span, format!("kustomization cycle: {}", cycle.join(" → ")))
                .in_model(format!("Kustomization \"{}\"", cycle[cycle.len() - 2]))
                .with_hint("a kustomization cannot include itself, through others or directly: remove one of these entries"),
        );
    }
    let nested = |dir: &str| {
        kustomizations
            .keys()
            .any(|outer| outer != dir && is_within(dir, outer))
    };
    let built: Vec<(String, FileId)> = kustomizations
        .iter()
        .filter(|(dir, _)| !included.contains(*dir) && !nested(dir) && !refused.contains(*dir))
        .map(|(dir, id)| (dir.clone(), *id))
        .collect();
    for (id, file) in files.iter() {
        let owned = kustomizations
            .keys()
            .any(|dir| is_within(directory_of(&file.path), dir))
            || charts
                .iter()
                .any(|dir| is_within(directory_of(&file.path), dir));
        if owned {
            not_models.insert(id);
        }
    }
    (
        Layout {
            kustomizations: built,
            not_models,
        },
        diagnostics,
    )
}

/// The cycles of kustomizations including one another, each with the entry that
/// closes it.
fn include_cycles(edges: &BTreeMap<&str, Vec<(String, Span)>>) -> Vec<(Vec<String>, Span)> {
    let mut cycles = Vec::new();
    let mut done: BTreeSet<&str> = BTreeSet::new();
    for start in edges.keys() {
        let mut path: Vec<&str> = Vec::new();
        visit(start, edges, &mut path, &mut done, &mut cycles);
    }
    cycles
}

fn visit<'e>(
    dir: &'e str,
    edges: &'e BTreeMap<&str, Vec<(String, Span)>>,
    path: &mut Vec<&'e str>,
    done: &mut BTreeSet<&'e str>,
    cycles: &mut Vec<(Vec<String>, Span)>,
) {
    if done.contains(dir) {
        return;
    }
    path.push(dir);
    for (target, span) in edges.get(dir).into_iter().flatten() {
        if let Some(at) = path.iter().position(|p| p == target) {
            let mut cycle: Vec<String> = path[at..]
                .iter()
                .map(|d| shown_dir(d).to_string())
                .collect();
            cycle.push(shown_dir(target).to_string());
            cycles.push((cycle, *span));
        } else {
            visit(target, edges, path, done, cycles);
        }
    }
    path.pop();
    done.insert(dir);
}

/// A kustomization directory as messages show it.
pub fn shown_dir(dir: &str) -> &str {
    if dir.is_empty() { "." } else { dir }
}

/// The `resources`, `bases` and `components` entries of a kustomization file, with
/// where each is written. A file that does not parse yields none: Kustomize reports it.
fn kustomization_entries(files: &SourceFiles, id: FileId) -> Vec<(String, Span)> {
    let file = files.get(id);
    let Ok(documents) = parse_yaml(&file.text, Dialect::Models) else {
        return Vec::new();
    };
    let mut entries = Vec::new();
    for document in &documents {
        for field in ["resources", "bases", "components"] {
            let Some(Value::Seq(items)) = document.field(field).map(|f| &f.value) else {
                continue;
            };
            for item in items {
                if let Value::Str(entry) = &item.value {
                    entries.push((
                        entry.clone(),
                        point_span(id, file, item.pos.line, item.pos.column),
                    ));
                }
            }
        }
    }
    entries
}

/// What the engine must build for the repository to be complete.
#[derive(Clone, Debug, PartialEq)]
pub enum Generator {
    /// `kustomize build` of a directory (relative to the models root).
    Kustomize { dir: String, file: FileId },
    /// `helm template` of the chart of `models.charts[chart]`.
    Helm(HelmRequest),
}

impl Generator {
    /// The step it becomes, as messages name it.
    pub fn label(&self) -> String {
        match self {
            Generator::Kustomize { dir, .. } => format!("Kustomization \"{}\"", shown_dir(dir)),
            Generator::Helm(request) => format!("HelmChart \"{}\"", request.model),
        }
    }
}

/// One chart to render, with everything Helm needs but the tool and the cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct HelmRequest {
    /// The index of the model in `Models::charts`.
    pub chart_index: usize,
    /// The model's name.
    pub model: String,
    pub release: String,
    pub namespace: String,
    pub chart: ChartSource,
    pub version: Option<String>,
    /// The values files' texts (decrypted, when sops-encrypted) in Helm's merge order,
    /// each with its path; the model's own `values` last, as JSON.
    pub values: Vec<(String, String)>,
}

/// The paths of the values files that the repository's HelmChart documents name: a
/// cheap look before the models are read, so that those files are not read as models.
pub fn values_file_paths(
    files: &SourceFiles,
    documents: &[crate::load::Document],
) -> BTreeSet<String> {
    let mut paths = BTreeSet::new();
    for document in documents {
        let is_chart = document
            .root
            .field("kind")
            .is_some_and(|k| k.value == Value::Str(Kind::HelmChart.name().into()));
        let Some(Value::Seq(entries)) = document.root.field("values_files").map(|f| &f.value)
        else {
            continue;
        };
        if !is_chart {
            continue;
        }
        let model_file = files.path(document.file);
        paths.extend(entries.iter().filter_map(|entry| match &entry.value {
            Value::Str(written) => resolve_data_path(model_file, written),
            _ => None,
        }));
    }
    paths
}

/// The generators of a repository's kustomizations and charts; a values file that is
/// missing is reported at the entry naming it.
pub fn generators(
    layout: &Layout,
    models: &Models,
    files: &SourceFiles,
    diagnostics: &mut Diagnostics,
) -> Vec<Generator> {
    let mut generators: Vec<Generator> = layout
        .kustomizations
        .iter()
        .map(|(dir, file)| Generator::Kustomize {
            dir: dir.clone(),
            file: *file,
        })
        .collect();
    for (index, chart) in models.charts.iter().enumerate() {
        let label = format!("HelmChart \"{}\"", chart.name.value);
        let model_file = files.path(chart.origin.span.file).to_string();
        let mut values = Vec::new();
        let mut complete = true;
        for written in &chart.values_files {
            let found = resolve_data_path(&model_file, &written.value)
                .and_then(|path| files.by_path(&path));
            match found {
                Some((_, file)) => values.push((file.path.clone(), file.text.clone())),
                None => {
                    complete = false;
                    diagnostics.push(
                        Diagnostic::error(written.span, format!("values file \"{}\" does not exist", written.value))
                            .in_model(label.clone())
                            .with_hint("values files are YAML files of the repository, named relative to this file"),
                    );
                }
            }
        }
        if let Some(inline) = &chart.values {
            values.push((
                format!("{model_file} (values of {label})"),
                inline.value.to_string(),
            ));
        }
        if complete {
            generators.push(Generator::Helm(HelmRequest {
                chart_index: index,
                model: chart.name.value.clone(),
                release: chart.release().to_string(),
                namespace: chart.trust_domain.value.clone(),
                chart: chart.chart.value.clone(),
                version: chart.version.as_ref().map(|v| v.value.clone()),
                values,
            }));
        }
    }
    generators
}

/// What a generator made: its YAML output, or why it could not.
#[derive(Clone, Debug, PartialEq)]
pub struct Generated {
    pub output: Result<String, Failure>,
}

/// A generator that did not build: the tool's own words, and what to do.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    pub message: String,
    pub hint: String,
}

/// Where a generator's problems are reported: its kustomization file, or its model.
fn generator_span(generator: &Generator, models: &Models, files: &SourceFiles) -> Span {
    match generator {
        Generator::Kustomize { file, .. } => point_span(*file, files.get(*file), 1, 1),
        Generator::Helm(request) => models.charts[request.chart_index].origin.span,
    }
}

/// Reads what the generators made into steps of the workflow, each problem reported
/// at the kustomization file or the chart model with the object it is about.
pub fn read_generated(
    generators: &[Generator],
    generated: Vec<Generated>,
    models: &mut Models,
    files: &SourceFiles,
    diagnostics: &mut Diagnostics,
) {
    for (generator, made) in generators.iter().zip(generated) {
        let span = generator_span(generator, models, files);
        let label = generator.label();
        let text = match made.output {
            Ok(text) => text,
            Err(Failure { message, hint }) => {
                diagnostics.push(
                    Diagnostic::error(span, format!("cannot build it: {message}"))
                        .in_model(label.clone())
                        .with_hint(hint),
                );
                // Its step stays, empty, so that what depends on it reports nothing more.
                String::new()
            }
        };
        let objects = read_output(&text, span, &label, diagnostics);
        match generator {
            Generator::Kustomize { dir, .. } => models.resources.push(KubernetesResourceInstance {
                origin: Origin {
                    kind: Kind::Kustomization,
                    span,
                },
                name: Spanned::new(shown_dir(dir).to_string(), span),
                objects: objects.into_iter().map(|(object, _)| object).collect(),
                hooks: Vec::new(),
                owner: None,
                depends_on: Vec::new(),
                ready_when: None,
            }),
            Generator::Helm(request) => {
                let chart = models.charts[request.chart_index].clone();
                let trust_domain_model = models
                    .trust_domains
                    .iter()
                    .any(|td| td.name.value == chart.trust_domain.value);
                models
                    .resources
                    .extend(chart_steps(&chart, request, objects, trust_domain_model));
            }
        }
    }
}

/// The objects of a tool's YAML output, each with the template it came from (Helm
/// writes `# Source: chart/templates/x.yaml` above each).
fn read_output(
    text: &str,
    span: Span,
    label: &str,
    diagnostics: &mut Diagnostics,
) -> Vec<(ResourceObject, Option<String>)> {
    let mut objects = Vec::new();
    for chunk in split_documents(text) {
        let template = chunk
            .lines()
            .find_map(|line| line.strip_prefix("# Source: "))
            .map(str::to_string);
        let nodes = match parse_yaml(chunk, Dialect::Kubernetes) {
            Ok(nodes) => nodes,
            Err(e) => {
                let source = template
                    .as_deref()
                    .map(|t| format!(" ({t})"))
                    .unwrap_or_default();
                diagnostics.push(
                    Diagnostic::error(
                        span,
                        format!(
                            "{label} made YAML that does not parse{source}: line {}: {}",
                            e.line, e.message
                        ),
                    )
                    .in_model(label),
                );
                continue;
            }
        };
        let at = |_: &Node| span;
        for node in &nodes {
            let object_label = object_label(node, chunk);
            let read = crate::model::ObjectReader {
                text: chunk,
                at: &at,
                label: &object_label,
                context: "",
                octal: false,
            }
            .read(node, diagnostics);
            if let Some(value) = read {
                objects.push((
                    ResourceObject {
                        value,
                        span,
                        template: template.clone(),
                    },
                    template.clone(),
                ));
            }
        }
    }
    objects
}

/// `Kind "name"` of an object, for messages.
fn object_label(node: &Node, text: &str) -> String {
    let field = |n: Option<&Node>| n.and_then(|n| n.scalar_text(text)).unwrap_or_default();
    format!(
        "{} \"{}\"",
        field(node.field("kind")),
        field(node.field("metadata").and_then(|m| m.field("name")))
    )
}

/// A YAML stream cut at its document markers (`---` lines).
fn split_documents(text: &str) -> Vec<&str> {
    let mut chunks = Vec::new();
    let mut start = 0;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if line.trim_end() == "---" {
            chunks.push(&text[start..offset]);
            start = offset + line.len();
        }
        offset += line.len();
    }
    chunks.push(&text[start..]);
    chunks
        .into_iter()
        .filter(|c| !c.trim().is_empty())
        .collect()
}

/// When a chart's object is applied, by its `helm.sh/hook` annotation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    /// `pre-install`/`pre-upgrade`: before the chart's objects.
    Pre,
    /// The chart's objects.
    Main,
    /// `post-install`/`post-upgrade`: once they are ready.
    Post,
}

/// The phase of an object; `None` for hooks tether does not run: tests (`helm test`),
/// and delete and rollback hooks (tether has no release to delete or roll back).
fn phase_of(object: &serde_json::Value) -> Option<Phase> {
    let Some(hook) = object
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(HOOK_ANNOTATION))
        .and_then(serde_json::Value::as_str)
    else {
        return Some(Phase::Main);
    };
    let hooks: Vec<&str> = hook.split(',').map(str::trim).collect();
    if hooks.iter().any(|h| h.starts_with("test")) {
        None
    } else if hooks
        .iter()
        .any(|h| matches!(*h, "pre-install" | "pre-upgrade"))
    {
        Some(Phase::Pre)
    } else if hooks
        .iter()
        .any(|h| matches!(*h, "post-install" | "post-upgrade"))
    {
        Some(Phase::Post)
    } else {
        None
    }
}

fn hook_weight(object: &serde_json::Value) -> i64 {
    object
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(HOOK_WEIGHT_ANNOTATION))
        .and_then(serde_json::Value::as_str)
        .and_then(|w| w.trim().parse().ok())
        .unwrap_or(0)
}

/// A chart's objects as steps of the workflow: its pre-install hooks by weight, its
/// objects, its post-install hooks by weight, each step waiting for the one before.
/// Objects without a namespace are placed in the chart's (cluster-scoped kinds are
/// left without one), as `helm install --namespace` does.
fn chart_steps(
    chart: &HelmChart,
    request: &HelmRequest,
    objects: Vec<(ResourceObject, Option<String>)>,
    trust_domain_model: bool,
) -> Vec<KubernetesResourceInstance> {
    let mut groups: BTreeMap<(Phase, i64), Vec<ResourceObject>> = BTreeMap::new();
    groups.entry((Phase::Main, 0)).or_default();
    for (mut object, _) in objects {
        let Some(phase) = phase_of(&object.value) else {
            continue;
        };
        place_in_namespace(&mut object.value, &request.namespace);
        let weight = if phase == Phase::Main {
            0
        } else {
            hook_weight(&object.value)
        };
        groups.entry((phase, weight)).or_default().push(object);
    }
    let revision = chart_revision(&groups);
    let phases = groups.keys().filter(|(p, _)| *p == Phase::Pre).count();
    let posts = groups.keys().filter(|(p, _)| *p == Phase::Post).count();
    let span = chart.origin.span;
    let mut steps: Vec<KubernetesResourceInstance> = Vec::new();
    let mut previous: Option<String> = None;
    for ((phase, weight), mut objects) in groups {
        let name = match phase {
            Phase::Main => chart.name.value.clone(),
            Phase::Pre if phases == 1 => format!("{}:pre-install", chart.name.value),
            Phase::Post if posts == 1 => format!("{}:post-install", chart.name.value),
            Phase::Pre => format!("{}:pre-install@{weight}", chart.name.value),
            Phase::Post => format!("{}:post-install@{weight}", chart.name.value),
        };
        if phase != Phase::Main {
            for object in &mut objects {
                mark_hook_revision(&mut object.value, &revision);
            }
        }
        // The first step waits for what the chart waits for; each next one for the
        // step before it.
        let mut depends_on: Vec<Dependency> = Vec::new();
        match &previous {
            None => {
                depends_on.extend(chart.depends_on.iter().cloned());
                if trust_domain_model {
                    depends_on.push(model_dependency(
                        Kind::TrustDomain,
                        &chart.trust_domain.value,
                        span,
                    ));
                }
            }
            Some(before) => depends_on.push(model_dependency(Kind::HelmChart, before, span)),
        }
        previous = Some(name.clone());
        steps.push(KubernetesResourceInstance {
            origin: Origin {
                kind: Kind::HelmChart,
                span,
            },
            name: Spanned::new(name, chart.name.span),
            objects,
            hooks: Vec::new(),
            owner: None,
            depends_on,
            ready_when: match phase {
                Phase::Main => chart.ready_when.clone(),
                _ => None,
            },
        });
    }
    steps
}

fn model_dependency(kind: Kind, name: &str, span: Span) -> Dependency {
    Dependency {
        target: DependencyTarget::Model {
            kind,
            name: Spanned::new(name.to_string(), span),
        },
        ready_when: None,
        span,
    }
}

fn place_in_namespace(object: &mut serde_json::Value, namespace: &str) {
    let kind = object["kind"].as_str().unwrap_or_default().to_string();
    if k8s::is_cluster_scoped(&kind) {
        return;
    }
    if let Some(metadata) = object
        .get_mut("metadata")
        .and_then(serde_json::Value::as_object_mut)
        && metadata
            .get("namespace")
            .and_then(serde_json::Value::as_str)
            .is_none_or(str::is_empty)
    {
        metadata.insert(
            "namespace".into(),
            serde_json::Value::String(namespace.to_string()),
        );
    }
}

/// A digest of the chart's objects (hooks aside): it changes on every upgrade that
/// changes anything, which is when Helm runs the hooks again.
fn chart_revision(groups: &BTreeMap<(Phase, i64), Vec<ResourceObject>>) -> String {
    let main: Vec<serde_json::Value> = groups
        .iter()
        .filter(|((phase, _), _)| *phase == Phase::Main)
        .flat_map(|(_, objects)| objects.iter().map(|o| o.value.clone()))
        .collect();
    crate::plan::applied_hash(&serde_json::Value::Array(main))
}

/// A hook Job (or bare Pod) carries the chart's revision in its pod template, so that
/// a new revision replaces it and it runs again (Helm's `before-hook-creation`, its
/// default delete policy).
fn mark_hook_revision(object: &mut serde_json::Value, revision: &str) {
    let pointer = match object["kind"].as_str() {
        Some("Job") => "/spec/template/metadata",
        Some("Pod") => "/metadata",
        _ => return,
    };
    let Some(parent) = ensure_object(object, pointer) else {
        return;
    };
    let annotations = parent
        .entry("annotations")
        .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
    if let Some(annotations) = annotations.as_object_mut() {
        annotations.insert(
            HOOK_REVISION_ANNOTATION.into(),
            serde_json::Value::String(revision.to_string()),
        );
    }
}

/// The object at `pointer`, made (with its parents) when absent.
fn ensure_object<'v>(
    value: &'v mut serde_json::Value,
    pointer: &str,
) -> Option<&'v mut serde_json::Map<String, serde_json::Value>> {
    let mut current = value;
    for part in pointer.split('/').skip(1) {
        current = current
            .as_object_mut()?
            .entry(part)
            .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
    }
    current.as_object_mut()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::SourceFile;

    fn files(entries: &[(&str, &str)]) -> SourceFiles {
        SourceFiles::from_files(
            entries
                .iter()
                .map(|(p, t)| SourceFile::new(*p, *t))
                .collect(),
        )
    }

    fn built(layout: &Layout) -> Vec<&str> {
        layout
            .kustomizations
            .iter()
            .map(|(d, _)| d.as_str())
            .collect()
    }

    #[test]
    fn overlays_are_built_and_their_base_and_nested_kustomizations_are_not() {
        let repo = files(&[
            ("base/kustomization.yaml", "resources: [cm.yaml]\n"),
            (
                "base/cm.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
            ),
            (
                "overlays/prod/kustomization.yaml",
                "resources:\n- ../../base\n- ../../shared/quota.yaml\n",
            ),
            ("overlays/prod/extra/kustomization.yaml", "resources: []\n"),
            (
                "overlays/staging/kustomization.yaml",
                "bases: [../../base]\n",
            ),
            (
                "shared/quota.yaml",
                "apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: q}\n",
            ),
            (
                "charts/web/Chart.yaml",
                "apiVersion: v2\nname: web\nversion: 0.1.0\n",
            ),
            ("charts/web/templates/cm.yaml", "{{ if .Values.x }}\n"),
            ("models.yaml", "kind: TrustDomain\nname: shop\n"),
        ]);
        let (layout, diagnostics) = layout(&repo, false);
        assert!(
            diagnostics.is_empty(),
            "{}",
            diagnostics.render_plain(&repo)
        );
        assert_eq!(built(&layout), ["overlays/prod", "overlays/staging"]);
        let not_models: Vec<&str> = layout.not_models.iter().map(|id| repo.path(*id)).collect();
        assert_eq!(
            not_models,
            [
                "base/kustomization.yaml",
                "base/cm.yaml",
                "overlays/prod/kustomization.yaml",
                "overlays/prod/extra/kustomization.yaml",
                "overlays/staging/kustomization.yaml",
                "shared/quota.yaml",
                "charts/web/Chart.yaml",
                "charts/web/templates/cm.yaml",
            ]
        );
    }

    #[test]
    fn a_kustomization_at_the_root_is_the_whole_repository() {
        let repo = files(&[
            ("kustomization.yaml", "resources: [base]\n"),
            ("base/kustomization.yaml", "resources: [a.yaml]\n"),
            (
                "base/a.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
            ),
            ("v120/kustomization.yaml", "resources: [../base]\n"),
        ]);
        let (layout, _) = layout(&repo, false);
        assert_eq!(built(&layout), [""]);
        assert_eq!(layout.not_models.len(), 4);
    }

    #[test]
    fn include_cycles_and_remote_bases_are_errors_where_they_are_written() {
        let repo = files(&[
            ("a/kustomization.yaml", "resources:\n- ../b\n"),
            ("b/kustomization.yaml", "resources:\n- ../a\n"),
            (
                "c/kustomization.yaml",
                "resources:\n- github.com/org/repo//base?ref=v1\n",
            ),
        ]);
        let (refused, diagnostics) = layout(&repo, false);
        let report = diagnostics.render_plain(&repo);
        assert!(report.contains("b/kustomization.yaml:2:3: error: Kustomization \"b\": kustomization cycle: a → b → a"), "{report}");
        assert!(
            report.contains("c/kustomization.yaml:2:3: error: Kustomization \"c\": remote base"),
            "{report}"
        );
        assert!(built(&refused).is_empty());
        let (allowed, diagnostics) = layout(&repo, true);
        assert_eq!(diagnostics.render_plain(&repo).matches("error").count(), 1);
        assert_eq!(built(&allowed), ["c"]);
    }

    const HELM_OUTPUT: &str = "---
# Source: web/templates/sa.yaml
apiVersion: v1
kind: ServiceAccount
metadata:
  name: web
---
# Source: web/templates/role.yaml
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: web-reader
rules: []
---
# Source: web/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: elsewhere
spec: {}
---
# Source: web/templates/migrate.yaml
apiVersion: batch/v1
kind: Job
metadata:
  name: web-migrate
  annotations:
    helm.sh/hook: pre-install,pre-upgrade
    helm.sh/hook-weight: \"5\"
spec:
  template:
    spec: {}
---
# Source: web/templates/seed.yaml
apiVersion: batch/v1
kind: Job
metadata:
  name: web-seed
  annotations:
    helm.sh/hook: pre-upgrade
    helm.sh/hook-weight: \"-1\"
spec:
  template:
    spec: {}
---
# Source: web/templates/notify.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-notify
  annotations:
    helm.sh/hook: post-install
---
# Source: web/templates/tests/test.yaml
apiVersion: v1
kind: Pod
metadata:
  name: web-test
  annotations:
    helm.sh/hook: test
---
# Source: web/templates/cleanup.yaml
apiVersion: batch/v1
kind: Job
metadata:
  name: web-cleanup
  annotations:
    helm.sh/hook: pre-delete
";

    fn chart_steps_of(output: &str) -> (Vec<KubernetesResourceInstance>, Diagnostics) {
        let repo = files(&[(
            "models.yaml",
            "kind: HelmChart\nname: web\nchart: charts/web\ntrust_domain: shop\n",
        )]);
        let prepared = crate::prepare(&repo, false);
        let mut models = prepared.models;
        let mut diagnostics = Diagnostics::default();
        read_generated(
            &prepared.generators,
            vec![Generated {
                output: Ok(output.to_string()),
            }],
            &mut models,
            &repo,
            &mut diagnostics,
        );
        (models.resources, diagnostics)
    }

    fn names(step: &KubernetesResourceInstance) -> Vec<&str> {
        step.objects
            .iter()
            .map(|o| o.value["metadata"]["name"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn a_charts_hooks_are_steps_before_and_after_it_by_weight_and_tests_are_left_out() {
        let (steps, diagnostics) = chart_steps_of(HELM_OUTPUT);
        assert!(diagnostics.is_empty());
        let shown: Vec<(&str, Vec<&str>)> = steps
            .iter()
            .map(|s| (s.name.value.as_str(), names(s)))
            .collect();
        assert_eq!(
            shown,
            [
                ("web:pre-install@-1", vec!["web-seed"]),
                ("web:pre-install@5", vec!["web-migrate"]),
                ("web", vec!["web", "web-reader", "web"]),
                ("web:post-install", vec!["web-notify"]),
            ]
        );
        let waits: Vec<Vec<String>> = steps
            .iter()
            .map(|s| {
                s.depends_on
                    .iter()
                    .map(|d| match &d.target {
                        DependencyTarget::Model { kind, name } => format!("{kind}/{}", name.value),
                        DependencyTarget::Object { .. } => "object".into(),
                    })
                    .collect()
            })
            .collect();
        assert_eq!(
            waits,
            [
                vec![],
                vec!["HelmChart/web:pre-install@-1".to_string()],
                vec!["HelmChart/web:pre-install@5".to_string()],
                vec!["HelmChart/web".to_string()],
            ]
        );
        // Placed in the chart's namespace, unless cluster-scoped or written elsewhere.
        let main = &steps[2];
        let namespace = |i: usize| main.objects[i].value["metadata"]["namespace"].as_str();
        assert_eq!(
            (namespace(0), namespace(1), namespace(2)),
            (Some("shop"), None, Some("elsewhere"))
        );
        assert_eq!(
            main.objects[0].template.as_deref(),
            Some("web/templates/sa.yaml")
        );
    }

    #[test]
    fn a_hook_job_carries_the_charts_revision_which_changes_with_the_chart() {
        let revision = |output: &str| {
            let (steps, _) = chart_steps_of(output);
            steps[1].objects[0].value["spec"]["template"]["metadata"]["annotations"]
                [HOOK_REVISION_ANNOTATION]
                .as_str()
                .unwrap()
                .to_string()
        };
        let before = revision(HELM_OUTPUT);
        assert_eq!(before, revision(HELM_OUTPUT));
        assert_ne!(
            before,
            revision(&HELM_OUTPUT.replace(
                "spec: {}\n---\n# Source: web/templates/migrate",
                "spec: {replicas: 2}\n---\n# Source: web/templates/migrate"
            ))
        );
    }

    #[test]
    fn output_that_does_not_parse_is_an_error_at_the_model_naming_the_template() {
        let (_, diagnostics) =
            chart_steps_of("---\n# Source: web/templates/bad.yaml\nkey: [unclosed\n");
        let repo = files(&[(
            "models.yaml",
            "kind: HelmChart\nname: web\nchart: charts/web\ntrust_domain: shop\n",
        )]);
        let report = diagnostics.render_plain(&repo);
        assert!(
            report.contains("made YAML that does not parse (web/templates/bad.yaml)"),
            "{report}"
        );
    }
}
