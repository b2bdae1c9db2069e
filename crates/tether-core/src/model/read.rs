//! Reading models: every document of a repo ([`read_models`]), one YAML document to one
//! model, checking every field on the way.

use super::data::{read_data, read_resource_definition};
use super::depends::FieldReader;
use super::files::{self, resolve_data_path};
use super::image_reference::is_digest;
use super::kind::{CONFIG_MOUNT_ALIAS, Kind, XOS_FEEDBACK_FIELDS};
use super::kubernetes;
use super::model_set::Models;
use super::model_types::{
    ChartSource, ControllerKind, DataKind, DataModel, Dependency, HelmChart, Host, Image,
    IntOrPercent, KubernetesResourceInstance, KubernetesService, KubernetesServiceInstance,
    MountTarget, Origin, Principal, Protocol, ReadyWhen, ResourceObject, Rollout, Service,
    ServicePort, Site, Slice, Spanned, Text, TrustDomain, UpdateStrategy, VolumeMount,
};
use crate::diagnostic::{Diagnostic, Diagnostics, Span, suggestion};
use crate::load::{Document, Node, Value, is_yaml_1_1_boolean};
use crate::source::{SourceFile, SourceFiles};

/// Reads every document into models, reporting every problem.
pub fn read_models(files: &SourceFiles, documents: &[Document]) -> (Models, Diagnostics) {
    let mut models = Models::default();
    let mut diagnostics = Diagnostics::default();
    for document in documents {
        read_document(
            files.get(document.file),
            document,
            &mut models,
            &mut diagnostics,
        );
    }
    files::attach_files(&mut models.data, files, &mut diagnostics);
    (models, diagnostics)
}

pub(super) fn read_document(
    file: &SourceFile,
    document: &Document,
    models: &mut Models,
    diagnostics: &mut Diagnostics,
) {
    let root_span = document.span(&document.root);
    let Value::Map(entries) = &document.root.value else {
        diagnostics.push(
            Diagnostic::error(
                root_span,
                format!(
                    "a model is a YAML mapping, found {}",
                    document.root.value.describe()
                ),
            )
            .with_hint("write `kind: <Kind>` and the model's fields, one per line"),
        );
        return;
    };
    let mut fields = Vec::with_capacity(entries.len());
    for (key, value) in entries {
        match &key.value {
            Value::Str(name) => fields.push((name.as_str(), key, value)),
            other => diagnostics.push(Diagnostic::error(
                document.span(key),
                format!("a field name must be a string, found {}", other.describe()),
            )),
        }
    }
    if is_kubernetes_object(&fields) {
        read_plain_object(file, document, models, diagnostics);
        return;
    }
    let Some(kind) = read_kind(document, root_span, &fields, diagnostics) else {
        return;
    };
    // One problem, not one for each field of metadata and spec.
    if let Some((section, hint)) = kubernetes::object_shape(kind, &fields) {
        diagnostics.push(
            Diagnostic::error(
                document.span(section),
                format!(
                    "a {kind} model is written flat, not as a Kubernetes object (metadata, spec)"
                ),
            )
            .with_hint(hint),
        );
        return;
    }
    let name = fields
        .iter()
        .find(|f| f.0 == "name")
        .and_then(|f| match &f.2.value {
            Value::Str(s) => Some(s.clone()),
            _ => None,
        });
    let label = match name {
        Some(name) => format!("{kind} \"{name}\""),
        None => kind.name().to_string(),
    };
    let mut reader = Reader {
        file,
        document,
        fields,
        origin: Origin {
            kind,
            span: root_span,
        },
        label,
        diagnostics,
    };
    reader.check_field_names();
    reader.read_into(models);
}

/// Is this document a Kubernetes object (its `apiVersion` is not tether's)?
fn is_kubernetes_object(fields: &[(&str, &Node, &Node)]) -> bool {
    fields.iter().any(|(name, _, value)| {
        *name == "apiVersion"
            && matches!(&value.value, Value::Str(v) if !v.is_empty() && !v.starts_with("tether/"))
    })
}

/// A plain Kubernetes object of a repository file: an object of the file's
/// [`Kind::Manifest`] step, applied as written.
fn read_plain_object(
    file: &SourceFile,
    document: &Document,
    models: &mut Models,
    diagnostics: &mut Diagnostics,
) {
    let root = &document.root;
    let shown = |field: &str| {
        root.field(field)
            .and_then(|n| n.scalar_text(&file.text))
            .unwrap_or_default()
    };
    let name = root
        .field("metadata")
        .and_then(|m| m.field("name"))
        .and_then(|n| n.scalar_text(&file.text))
        .unwrap_or_default();
    let label = format!("{} \"{name}\"", shown("kind"));
    let at = |n: &Node| document.span(n);
    let read = super::data::ObjectReader {
        text: &file.text,
        at: &at,
        label: &label,
        context: "",
        octal: true,
    }
    .read(root, diagnostics);
    let Some(value) = read else {
        return;
    };
    let object = ResourceObject {
        value,
        span: document.span(root),
        template: None,
    };
    let step = models
        .resources
        .iter_mut()
        .rev()
        .find(|r| r.origin.kind == Kind::Manifest && r.origin.span.file == document.file);
    match step {
        Some(step) => step.objects.push(object),
        None => models.resources.push(KubernetesResourceInstance {
            origin: Origin {
                kind: Kind::Manifest,
                span: document.span(root),
            },
            name: Spanned::new(file.path.clone(), document.span(root)),
            objects: vec![object],
            hooks: Vec::new(),
            owner: None,
            depends_on: Vec::new(),
            ready_when: None,
        }),
    }
}

fn read_kind(
    document: &Document,
    root_span: Span,
    fields: &[(&str, &Node, &Node)],
    diagnostics: &mut Diagnostics,
) -> Option<Kind> {
    let kind_names = || Kind::ALL.into_iter().map(Kind::name);
    let api_version = fields.iter().find(|f| f.0 == "apiVersion");
    let Some((_, _, kind_node)) = fields.iter().find(|f| f.0 == "kind") else {
        diagnostics.push(
            Diagnostic::error(root_span, "missing required field \"kind\"").with_hint(format!(
                "one of: {}",
                kind_names().collect::<Vec<_>>().join(", ")
            )),
        );
        return None;
    };
    let kind_span = document.span(kind_node);
    let Value::Str(kind_name) = &kind_node.value else {
        diagnostics.push(Diagnostic::error(
            kind_span,
            format!(
                "\"kind\" must be a string, found {}",
                kind_node.value.describe()
            ),
        ));
        return None;
    };
    if let Some((_, _, version)) = api_version
        && version.value != Value::Str("tether/v1".into())
    {
        let shown = match &version.value {
            Value::Str(s) => format!("\"{s}\""),
            other => other.describe().to_string(),
        };
        diagnostics.push(
            Diagnostic::error(
                document.span(version),
                format!("apiVersion {shown} is not a tether model (tether/v1)"),
            )
            .with_hint(
                "tether's models are apiVersion tether/v1 (or no apiVersion); \
                     a Kubernetes object is written with its own apiVersion (apps/v1, v1, …)",
            ),
        );
        return None;
    }
    let Some(kind) = Kind::parse(kind_name) else {
        let hint = match Kind::for_kubernetes_kind(kind_name) {
            Some(model) => Some(format!(
                "\"{kind_name}\" is a Kubernetes kind: a {model} model renders it, or use a \
                 KubernetesResourceInstance to apply Kubernetes YAML as written"
            )),
            None if kind_name.eq_ignore_ascii_case("container") => {
                Some("an Image's XOS `kind` field is written `image_kind: container`".to_string())
            }
            None => suggestion(kind_name, kind_names()).or_else(|| {
                Some(format!(
                    "one of: {}",
                    kind_names().collect::<Vec<_>>().join(", ")
                ))
            }),
        };
        diagnostics.push(
            Diagnostic::error(kind_span, format!("unknown kind \"{kind_name}\""))
                .with_optional_hint(hint),
        );
        return None;
    };
    if kind_name == CONFIG_MOUNT_ALIAS {
        diagnostics.push(
            Diagnostic::warning(
                kind_span,
                format!("\"{CONFIG_MOUNT_ALIAS}\" is a deprecated alias"),
            )
            .with_hint("write kind: KubernetesConfigVolumeMount"),
        );
    }
    Some(kind)
}

/// Reads one document's fields into its model; the kinds with many fields of their
/// own are read in their module (`image_policy`).
pub(super) struct Reader<'a> {
    file: &'a SourceFile,
    pub(super) document: &'a Document,
    fields: Vec<(&'a str, &'a Node, &'a Node)>,
    pub(super) origin: Origin,
    label: String,
    diagnostics: &'a mut Diagnostics,
}

impl<'a> Reader<'a> {
    pub(super) fn error(&mut self, span: Span, message: impl Into<String>) -> &mut Diagnostic {
        self.push(Diagnostic::error(span, message))
    }

    fn push(&mut self, diagnostic: Diagnostic) -> &mut Diagnostic {
        self.diagnostics
            .push_mut(diagnostic.in_model(self.label.clone()))
    }

    fn check_field_names(&mut self) {
        let kind = self.origin.kind;
        let unknown: Vec<(String, Span)> = self
            .fields
            .iter()
            .filter(|(name, _, _)| {
                !matches!(*name, "kind" | "apiVersion") && !kind.fields().contains(name)
            })
            .map(|(name, key, _)| (name.to_string(), self.document.span(key)))
            .collect();
        for (name, span) in unknown {
            if XOS_FEEDBACK_FIELDS.contains(&name.as_str()) {
                self.push(
                    Diagnostic::warning(span, format!("XOS feedback field \"{name}\" is ignored"))
                        .with_hint("tether keeps state in the cluster, not in models; remove it"),
                );
                continue;
            }
            // A Kubernetes spelling is no typo: the model field that says it, and why.
            let hint = kubernetes::kubernetes_spelling(kind, &name)
                .or_else(|| suggestion(&name, kind.fields().iter().copied()))
                .unwrap_or_else(|| format!("fields of {kind}: {}", kind.fields().join(", ")));
            self.push(
                Diagnostic::error(span, format!("unknown field \"{name}\" in {kind}"))
                    .with_hint(hint),
            );
        }
    }

    fn node(&self, name: &str) -> Option<(&'a Node, &'a Node)> {
        self.fields
            .iter()
            .find(|f| f.0 == name)
            .map(|(_, key, value)| (*key, *value))
    }

    /// The field's node, unless it is absent or null.
    pub(super) fn present(&self, name: &str) -> Option<(&'a Node, &'a Node)> {
        self.node(name)
            .filter(|(_, value)| value.value != Value::Null)
    }

    fn missing(&mut self, name: &str) {
        let kind = self.origin.kind;
        let required: Vec<&str> = required_fields(kind).to_vec();
        self.error(
            self.origin.span,
            format!("missing required field \"{name}\""),
        )
        .hint = Some(format!(
            "{} {kind} needs {}",
            kind.article(),
            required.join(", ")
        ));
    }

    pub(super) fn text(&mut self, name: &str) -> Option<Text> {
        let (_, node) = self.present(name)?;
        let span = self.document.span(node);
        match node.scalar_text(&self.file.text) {
            Some(text) => Some(Spanned::new(text, span)),
            None => {
                let found = node.value.describe();
                self.error(span, format!("\"{name}\" must be a string, found {found}"));
                None
            }
        }
    }

    pub(super) fn required_text(&mut self, name: &str) -> Option<Text> {
        if self.present(name).is_none() {
            self.missing(name);
            return None;
        }
        self.text(name)
    }

    pub(super) fn boolean(&mut self, name: &str) -> Option<Spanned<bool>> {
        let (_, node) = self.present(name)?;
        let span = self.document.span(node);
        match &node.value {
            Value::Bool(b) => Some(Spanned::new(*b, span)),
            Value::Str(s) if is_yaml_1_1_boolean(s) => {
                let meant = matches!(s.to_ascii_lowercase().as_str(), "y" | "yes" | "on");
                self.error(
                    span,
                    format!(
                        "\"{s}\" is not a boolean: YAML 1.2 reads it as a string (YAML 1.1 read it as {meant})"
                    ),
                )
                .hint = Some(format!("write {meant}"));
                None
            }
            other => {
                let found = other.describe();
                self.error(
                    span,
                    format!("\"{name}\" must be true or false, found {found}"),
                );
                None
            }
        }
    }

    pub(super) fn integer(&mut self, name: &str) -> Option<Spanned<i64>> {
        let (_, node) = self.present(name)?;
        let span = self.document.span(node);
        let plain = node.is_plain(&self.file.text);
        match &node.value {
            Value::Int(i) => Some(Spanned::new(*i, span)),
            Value::Str(s)
                if plain
                    && s.len() > 1
                    && s.starts_with('0')
                    && s.bytes().all(|b| b.is_ascii_digit()) =>
            {
                let decimal = s.trim_start_matches('0');
                let octal = i64::from_str_radix(s, 8).ok();
                let message = match octal {
                    Some(o) => format!(
                        "{s} has a leading zero: octal ({o}) in YAML 1.1, decimal ({decimal}) in YAML 1.2"
                    ),
                    None => {
                        format!("{s} has a leading zero, which some YAML readers take as octal")
                    }
                };
                self.error(span, message).hint = Some(format!(
                    "write {} without the leading zero",
                    if decimal.is_empty() { "0" } else { decimal }
                ));
                None
            }
            Value::Str(s) if s.parse::<i64>().is_ok() => {
                self.error(
                    span,
                    format!("\"{name}\" must be an integer, found the string \"{s}\""),
                )
                .hint = Some("remove the quotes".into());
                None
            }
            other => {
                let found = match other {
                    Value::Float(_) => format!("the number {}", node.raw(&self.file.text)),
                    other => other.describe().to_string(),
                };
                self.error(
                    span,
                    format!("\"{name}\" must be an integer, found {found}"),
                );
                None
            }
        }
    }

    /// A text field whose value is one of a fixed set of names.
    pub(super) fn choice<T: Copy>(
        &mut self,
        name: &str,
        choices: &[T],
        spell: fn(T) -> &'static str,
    ) -> Option<Spanned<T>> {
        let text = self.text(name)?;
        if let Some(choice) = choices.iter().find(|c| spell(**c) == text.value) {
            return Some(Spanned::new(*choice, text.span));
        }
        let names: Vec<&str> = choices.iter().map(|c| spell(*c)).collect();
        let hint = suggestion(&text.value, names.iter().copied())
            .unwrap_or_else(|| format!("one of: {}", names.join(", ")));
        self.error(
            text.span,
            format!("\"{}\" is not a valid {name}", text.value),
        )
        .hint = Some(hint);
        None
    }

    fn field_reader(&mut self) -> FieldReader<'_> {
        FieldReader {
            file: self.file,
            document: self.document,
            label: &self.label,
            diagnostics: self.diagnostics,
        }
    }

    /// `depends_on`, without the entries that are wrong (each reported).
    fn depends_on(&mut self) -> Vec<Dependency> {
        match self.present("depends_on") {
            Some((_, node)) => self.field_reader().depends_on(node),
            None => Vec::new(),
        }
    }

    /// `ready_when`: `Some(None)` when absent, `None` when wrong.
    fn ready_when(&mut self) -> Option<Option<Spanned<ReadyWhen>>> {
        match self.present("ready_when") {
            Some((_, node)) => self.field_reader().ready_when(node).map(Some),
            None => Some(None),
        }
    }

    /// `files`: one path or a list of paths.
    fn data_files(&mut self) -> Vec<Text> {
        let Some((_, node)) = self.present("files") else {
            return Vec::new();
        };
        let nodes: Vec<&Node> = match &node.value {
            Value::Seq(items) => items.iter().collect(),
            _ => vec![node],
        };
        self.paths(
            &nodes,
            "a files entry",
            "write files: config/, or a list of paths relative to this file",
        )
    }

    /// Entries that are paths (non-empty strings); each other entry is reported.
    fn paths(&mut self, nodes: &[&Node], what: &str, hint: &str) -> Vec<Text> {
        let mut paths = Vec::new();
        for item in nodes {
            let span = self.document.span(item);
            match &item.value {
                Value::Str(path) if !path.is_empty() => {
                    paths.push(Spanned::new(path.clone(), span))
                }
                other => {
                    let found = other.describe();
                    self.error(span, format!("{what} is a path, found {found}"))
                        .hint = Some(hint.into());
                }
            }
        }
        paths
    }

    /// A read-only field that tether fills in; an error when set by hand.
    fn read_only(&mut self, name: &str, why: &str) {
        if let Some((key, _)) = self.present(name) {
            let span = self.document.span(key);
            self.error(span, format!("\"{name}\" is read-only: {why}"))
                .hint = Some(format!("remove \"{name}\""));
        }
    }

    fn read_into(mut self, models: &mut Models) {
        let origin = self.origin;
        match origin.kind {
            Kind::KubernetesService => {
                let name = self.required_text("name");
                let enabled = self.boolean("enabled");
                if let Some(name) = name {
                    models.kubernetes_services.push(KubernetesService {
                        origin,
                        name,
                        enabled,
                    });
                }
            }
            Kind::Site => {
                let name = self.required_text("name");
                let abbreviated_name = self.text("abbreviated_name");
                let site_url = self.text("site_url");
                if let Some(name) = name {
                    models.sites.push(Site {
                        origin,
                        name,
                        abbreviated_name,
                        site_url,
                    });
                }
            }
            Kind::Image => self.read_image(models),
            Kind::TrustDomain => {
                let name = self.required_text("name");
                let owner = self.text("owner");
                let xos_managed = self.boolean("xos_managed");
                if let Some(name) = name {
                    models.trust_domains.push(TrustDomain {
                        origin,
                        name,
                        owner,
                        xos_managed,
                    });
                }
            }
            Kind::Principal => {
                let name = self.required_text("name");
                let trust_domain = self.required_text("trust_domain");
                let xos_managed = self.boolean("xos_managed");
                if let (Some(name), Some(trust_domain)) = (name, trust_domain) {
                    models.principals.push(Principal {
                        origin,
                        name,
                        trust_domain,
                        xos_managed,
                    });
                }
            }
            Kind::Slice => self.read_slice(models),
            Kind::KubernetesServiceInstance => self.read_instance(models),
            Kind::KubernetesConfigMap => self.read_data_model(models, DataKind::Config),
            Kind::KubernetesSecret => self.read_data_model(models, DataKind::Secret),
            Kind::KubernetesConfigVolumeMount => self.read_mount(models, DataKind::Config),
            Kind::KubernetesSecretVolumeMount => self.read_mount(models, DataKind::Secret),
            Kind::Service => {
                let name = self.required_text("name");
                let description = self.text("description");
                let trust_domain = self.text("trust_domain");
                if let Some(name) = name {
                    models.services.push(Service {
                        origin,
                        name,
                        description,
                        trust_domain,
                    });
                }
            }
            Kind::ServicePort => self.read_port(models),
            Kind::KubernetesResourceInstance => self.read_resource(models),
            Kind::Node => self.read_host(models),
            Kind::HelmChart => self.read_chart(models),
            Kind::ImagePolicy => self.read_image_policy(models),
            // Not kinds one writes: `Kind::parse` does not know them.
            Kind::Manifest | Kind::Kustomization => {}
        }
    }

    fn read_chart(&mut self, models: &mut Models) {
        let name = self.required_text("name");
        let repository = self.text("repository");
        let chart = self
            .required_text("chart")
            .and_then(|chart| self.chart_source(chart, repository));
        let version = self.text("version");
        let release_name = self.text("release_name");
        let trust_domain = self.required_text("trust_domain");
        let values = self
            .present("values")
            .and_then(|(_, node)| self.chart_values(node));
        let values_files = self.values_files();
        let depends_on = self.depends_on();
        let ready_when = self.ready_when();
        if let (Some(name), Some(chart), Some(trust_domain), Some(ready_when)) =
            (name, chart, trust_domain, ready_when)
        {
            models.charts.push(HelmChart {
                origin: self.origin,
                name,
                chart,
                version,
                release_name,
                trust_domain,
                values,
                values_files,
                depends_on,
                ready_when,
            });
        }
    }

    /// `chart:` with `repository:`: a chart repository's chart, an `oci://` chart, or
    /// a chart directory of the repository (relative to this file).
    fn chart_source(
        &mut self,
        chart: Text,
        repository: Option<Text>,
    ) -> Option<Spanned<ChartSource>> {
        let span = chart.span;
        let source = match repository {
            Some(url) if url.value.starts_with("oci://") => ChartSource::Oci(format!(
                "{}/{}",
                url.value.trim_end_matches('/'),
                chart.value
            )),
            Some(url) if url.value.starts_with("https://") || url.value.starts_with("http://") => {
                ChartSource::Repository {
                    url: url.value,
                    name: chart.value,
                }
            }
            Some(url) => {
                self.error(url.span, format!("repository \"{}\" is not a chart repository URL", url.value))
                    .hint = Some("write an https:// chart repository (with index.yaml) or an oci:// registry path".into());
                return None;
            }
            None if chart.value.starts_with("oci://") => ChartSource::Oci(chart.value),
            None => match resolve_data_path(&self.file.path, &chart.value) {
                Some(path) => ChartSource::Path(path),
                None => {
                    self.error(span, format!("chart \"{}\" is outside the repository", chart.value))
                        .hint = Some("write a chart directory relative to this file, or name a chart with repository:".into());
                    return None;
                }
            },
        };
        Some(Spanned::new(source, span))
    }

    /// `values:`, a mapping (Helm's values), as JSON.
    fn chart_values(&mut self, node: &'a Node) -> Option<Spanned<serde_json::Value>> {
        let span = self.document.span(node);
        if !matches!(node.value, Value::Map(_) | Value::Null) {
            let found = node.value.describe();
            self.error(span, format!("values must be a mapping, found {found}"))
                .hint =
                Some("write the chart's values as in a values.yaml, indented under values:".into());
            return None;
        }
        let label = self.label.clone();
        let at = |n: &Node| self.document.span(n);
        let reader = super::data::ObjectReader {
            text: &self.file.text,
            at: &at,
            label: &label,
            context: "values: ",
            octal: true,
        };
        Some(Spanned::new(reader.convert(node, self.diagnostics), span))
    }

    /// `values_files`: paths relative to this file.
    fn values_files(&mut self) -> Vec<Text> {
        let Some((_, node)) = self.present("values_files") else {
            return Vec::new();
        };
        let Value::Seq(items) = &node.value else {
            let span = self.document.span(node);
            let found = node.value.describe();
            self.error(span, format!("values_files must be a list, found {found}"))
                .hint = Some("one path per line, relative to this file: - values/prod.yaml".into());
            return Vec::new();
        };
        let nodes: Vec<&Node> = items.iter().collect();
        self.paths(
            &nodes,
            "a values_files entry",
            "write a path relative to this file",
        )
    }

    fn read_host(&mut self, models: &mut Models) {
        let name = self.required_text("name");
        let owner = self.text("owner");
        let labels = match self.present("labels") {
            Some((_, node)) => self.field_reader().node_labels(node),
            None => Vec::new(),
        };
        let taints = match self.present("taints") {
            Some((_, node)) => self.field_reader().node_taints(node),
            None => Vec::new(),
        };
        let locked = self.boolean("locked");
        if let Some(name) = name {
            models.hosts.push(Host {
                origin: self.origin,
                name,
                owner,
                labels,
                taints,
                locked,
            });
        }
    }

    fn read_image(&mut self, models: &mut Models) {
        let name = self.required_text("name");
        let tag = self.text("tag");
        let image_kind = self.text("image_kind");
        if let Some(k) = &image_kind
            && k.value != "container"
        {
            self.error(k.span, format!("\"{}\" is not a valid image_kind", k.value))
                .hint = Some("the only image kind is \"container\"".into());
        }
        let digest = self.text("digest");
        if let Some(d) = &digest
            && !is_digest(&d.value)
        {
            self.error(d.span, format!("\"{}\" is not an image digest", d.value))
                .hint = Some("sha256: and 64 lowercase hex digits, as the registry gives it (a digest ImagePolicy writes it)".into());
        }
        if let Some(name) = name {
            models.images.push(Image {
                origin: self.origin,
                name,
                tag,
                image_kind,
                digest,
            });
        }
    }

    fn read_instance(&mut self, models: &mut Models) {
        let name = self.required_text("name");
        let slice = self.required_text("slice");
        let image = self.required_text("image");
        let owner = self.text("owner");
        let xos_managed = self.boolean("xos_managed");
        let pod_ip = self.text("pod_ip");
        let node = self.text("node");
        let depends_on = self.depends_on();
        if xos_managed.as_ref().is_none_or(|m| m.value) {
            self.read_only(
                "pod_ip",
                "the cluster assigns it; only discovered models (xos_managed: false) carry it",
            );
            self.read_only(
                "node",
                "the scheduler places the pod; only discovered models (xos_managed: false) carry it",
            );
        }
        if let (Some(name), Some(slice), Some(image)) = (name, slice, image) {
            models.instances.push(KubernetesServiceInstance {
                origin: self.origin,
                name,
                slice,
                image,
                owner,
                xos_managed,
                pod_ip,
                node,
                depends_on,
            });
        }
    }

    /// A KubernetesConfigMap or KubernetesSecret.
    fn read_data_model(&mut self, models: &mut Models, data_kind: DataKind) {
        let name = self.required_text("name");
        let trust_domain = self.required_text("trust_domain");
        let data = match self.present("data") {
            Some((key, node)) => {
                let label = self.label.clone();
                read_data(
                    self.file,
                    self.document,
                    key,
                    node,
                    data_kind,
                    &label,
                    self.diagnostics,
                )
            }
            None => Some(Vec::new()),
        };
        let files = self.data_files();
        if let (Some(name), Some(trust_domain), Some(data)) = (name, trust_domain, data) {
            models.data.push(DataModel {
                origin: self.origin,
                data_kind,
                name,
                trust_domain,
                data,
                files,
                binary_data: Vec::new(),
            });
        }
    }

    fn read_port(&mut self, models: &mut Models) {
        let name = self.required_text("name");
        let service = self.required_text("service");
        let internal_port = if self.present("internal_port").is_none() {
            self.missing("internal_port");
            None
        } else {
            self.integer("internal_port")
        };
        let external_port = self.integer("external_port");
        let protocol = self.choice("protocol", &Protocol::ALL, Protocol::name);
        if let (Some(name), Some(service), Some(internal_port)) = (name, service, internal_port) {
            models.ports.push(ServicePort {
                origin: self.origin,
                name,
                service,
                internal_port,
                external_port,
                protocol,
            });
        }
    }

    fn read_resource(&mut self, models: &mut Models) {
        let name = self.required_text("name");
        let owner = self.text("owner");
        self.read_only(
            "kubectl_state",
            "tether records what it applied in the cluster",
        );
        let objects = match self.present("resource_definition") {
            Some((key, node)) => {
                let label = self.label.clone();
                read_resource_definition(
                    self.file,
                    self.document,
                    key,
                    node,
                    &label,
                    self.diagnostics,
                )
            }
            None => {
                self.missing("resource_definition");
                None
            }
        };
        let depends_on = self.depends_on();
        let ready_when = self.ready_when();
        if let (Some(name), Some(objects), Some(ready_when)) = (name, objects, ready_when) {
            models.resources.push(KubernetesResourceInstance {
                origin: self.origin,
                name,
                objects,
                hooks: Vec::new(),
                owner,
                depends_on,
                ready_when,
            });
        }
    }

    fn read_slice(&mut self, models: &mut Models) {
        let name = self.required_text("name");
        let site = self.text("site");
        let trust_domain = self.text("trust_domain");
        let principal = self.text("principal");
        let service = self.text("service");
        let controller_kind = match self.text("controller_kind") {
            Some(t) if t.value.is_empty() || t.value.eq_ignore_ascii_case("none") => None,
            Some(_) => self.choice(
                "controller_kind",
                &ControllerKind::ALL,
                ControllerKind::name,
            ),
            None => None,
        };
        let controller_replica_count = self.integer("controller_replica_count");
        if let Some(count) = &controller_replica_count
            && (count.value < 0 || count.value > i64::from(i32::MAX))
        {
            self.error(
                count.span,
                format!("controller_replica_count {} is out of range", count.value),
            )
            .hint = Some("a replica count is 0 or more".into());
        }
        let default_image = self.text("default_image");
        let description = self.text("description");
        let enabled = self.boolean("enabled");
        let xos_managed = self.boolean("xos_managed");
        let depends_on = self.depends_on();
        let rollout = self.rollout();
        if let Some(name) = name {
            models.slices.push(Slice {
                origin: self.origin,
                name,
                site,
                trust_domain,
                principal,
                service,
                controller_kind,
                controller_replica_count,
                default_image,
                description,
                enabled,
                xos_managed,
                depends_on,
                rollout,
            });
        }
    }

    /// A slice's rollout fields, each checked on its own (which controller may use
    /// them is resolve's check).
    fn rollout(&mut self) -> Rollout {
        let update_strategy = self.choice(
            "update_strategy",
            &UpdateStrategy::ALL,
            UpdateStrategy::name,
        );
        let max_surge = self.int_or_percent("max_surge");
        let max_unavailable = self.int_or_percent("max_unavailable");
        let partition = self.integer("partition");
        if let Some(p) = &partition
            && (p.value < 0 || p.value > i64::from(i32::MAX))
        {
            self.error(p.span, format!("partition {} is out of range", p.value))
                .hint = Some("a partition is an ordinal, 0 or more".into());
        }
        let paused = self.boolean("paused");
        let restarted_at = self.text("restarted_at");
        if let Some(at) = &restarted_at
            && !is_timestamp(&at.value)
        {
            self.error(
                at.span,
                format!("restarted_at \"{}\" is not a timestamp", at.value),
            )
            .hint =
                Some("write an RFC 3339 time, as tether restart does: 2026-11-23T10:00:00Z".into());
        }
        Rollout {
            update_strategy,
            max_surge,
            max_unavailable,
            partition,
            paused,
            restarted_at,
        }
    }

    /// A count (`1`) or a percentage (`25%`), as Kubernetes writes maxSurge.
    fn int_or_percent(&mut self, name: &str) -> Option<Spanned<IntOrPercent>> {
        let (_, node) = self.present(name)?;
        let span = self.document.span(node);
        let parsed = match &node.value {
            Value::Int(i) => i32::try_from(*i)
                .ok()
                .filter(|i| *i >= 0)
                .map(IntOrPercent::Count),
            Value::Str(s) => s
                .strip_suffix('%')
                .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|n| n.parse::<i32>().ok())
                .filter(|p| *p <= 100)
                .map(IntOrPercent::Percent),
            _ => None,
        };
        if parsed.is_none() {
            let found = node.raw(&self.file.text).to_string();
            self.error(
                span,
                format!("{name} {found} is neither a pod count nor a percentage"),
            )
            .hint = Some(format!(
                "write a count (1) or a percentage of the replicas (\"25%\") for {name}"
            ));
        }
        parsed.map(|value| Spanned::new(value, span))
    }

    fn read_mount(&mut self, models: &mut Models, data_kind: DataKind) {
        let source_field = match data_kind {
            DataKind::Config => "config",
            DataKind::Secret => "secret",
        };
        let source = self.required_text(source_field);
        let instance = self.text("service_instance");
        let slice = self.text("slice");
        let mount_path = self.required_text("mount_path");
        let sub_path = self.text("sub_path");
        let target = match (instance, slice) {
            (Some(instance), None) => Some(MountTarget::ServiceInstance(instance)),
            (None, Some(slice)) => Some(MountTarget::Slice(slice)),
            (Some(_), Some(slice)) => {
                self.error(
                    slice.span,
                    "set either \"service_instance\" or \"slice\", not both",
                )
                .hint = Some("a mount goes into one pod, or into every pod of one slice".into());
                None
            }
            (None, None) => {
                self.error(
                    self.origin.span,
                    "missing \"service_instance\" or \"slice\"",
                )
                .hint = Some("name the pod (service_instance) or the slice to mount into".into());
                None
            }
        };
        if let (Some(source), Some(target), Some(mount_path)) = (source, target, mount_path) {
            models.mounts.push(VolumeMount {
                origin: self.origin,
                data_kind,
                source,
                target,
                mount_path,
                sub_path,
            });
        }
    }
}

/// The fields in bold in the model reference (design.md).
fn required_fields(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::KubernetesService | Kind::Site | Kind::Image | Kind::TrustDomain | Kind::Node => {
            &["name"]
        }
        Kind::Slice | Kind::Service => &["name"],
        Kind::Principal => &["name", "trust_domain"],
        Kind::KubernetesServiceInstance => &["name", "slice", "image"],
        Kind::KubernetesConfigMap | Kind::KubernetesSecret => &["name", "trust_domain"],
        Kind::KubernetesConfigVolumeMount => &["config", "service_instance or slice", "mount_path"],
        Kind::KubernetesSecretVolumeMount => &["secret", "service_instance or slice", "mount_path"],
        Kind::ServicePort => &["name", "service", "internal_port"],
        Kind::KubernetesResourceInstance => &["name", "resource_definition"],
        Kind::HelmChart => &["name", "chart", "trust_domain"],
        Kind::ImagePolicy => &["name", "image", "semver, numerical, alphabetical or digest"],
        Kind::Manifest | Kind::Kustomization => &[],
    }
}

/// An RFC 3339 time (`2026-11-23T10:00:00Z`, fractions and offsets allowed), as
/// Kubernetes writes its timestamps.
pub fn is_timestamp(text: &str) -> bool {
    let b = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| {
        b.get(range)
            .is_some_and(|d| d.iter().all(u8::is_ascii_digit))
    };
    let shape = b.len() >= 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && matches!(b[10], b'T' | b't')
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19);
    if !shape {
        return false;
    }
    let mut rest = &text[19..];
    if let Some(fraction) = rest.strip_prefix('.') {
        let end = fraction
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(fraction.len());
        if end == 0 {
            return false;
        }
        rest = &fraction[end..];
    }
    let offset = rest.as_bytes();
    matches!(rest, "Z" | "z")
        || (offset.len() == 6
            && matches!(offset[0], b'+' | b'-')
            && offset[1..3].iter().all(u8::is_ascii_digit)
            && offset[3] == b':'
            && offset[4..6].iter().all(u8::is_ascii_digit))
}
