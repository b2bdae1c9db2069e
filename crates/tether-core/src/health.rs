//! Health checks as data: CEL expressions per kind in Flux's `healthCheckExprs`
//! spelling (`apiVersion`, `kind`, `current`, `inProgress`, `failed`), so a Flux
//! user's library works unchanged. A repository's checks come from `.tether.yaml`;
//! the shipped library (`health/library.yaml`) covers common custom resources. Pure:
//! compiled once by the `cel` crate, judged on an object as the server gives it;
//! [`crate::readiness`] phrases the verdict.
//!
//! A check matches by group and kind, as Flux's does: any version of the kind.

use std::sync::{Arc, LazyLock};

use cel::{Context, Env, Program};
use serde::Deserialize;
use serde_json::Value;
use serde_saphyr::Spanned;
use thiserror::Error;

use crate::k8s::api_group;
use crate::load::{Dialect, yaml_options};

/// One kind's expressions, as written (Flux's `spec.healthCheckExprs[]`).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HealthCheckExprs {
    pub api_version: Spanned<String>,
    pub kind: Spanned<String>,
    /// True when the object is healthy.
    pub current: Spanned<String>,
    /// True while the object is still progressing (looked at first).
    #[serde(default)]
    pub in_progress: Option<Spanned<String>>,
    /// True when the object will not become healthy without a change.
    #[serde(default)]
    pub failed: Option<Spanned<String>>,
}

/// A check's expression that does not compile, or a check that repeats a kind, at its
/// place: `file:line:column: healthCheckExprs` in a file, `spec.healthCheckExprs[i].field`
/// in a Source.
#[derive(Debug, Error)]
#[error("{at}: {what}\n  hint: {hint}")]
pub struct HealthCheckError {
    pub at: String,
    pub what: String,
    pub hint: String,
}

/// One kind's expressions as plain text (a Source's `spec.healthCheckExprs[]`, read
/// from the API server rather than from a file).
#[derive(Clone, Copy, Debug)]
pub struct PlainCheck<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub current: &'a str,
    pub in_progress: Option<&'a str>,
    pub failed: Option<&'a str>,
}

/// A check's fields, each with where it is written.
struct Located<'a> {
    api_version: &'a str,
    kind: (&'a str, String),
    fields: [(Field, Option<(&'a str, String)>); 3],
}

/// What a check says of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Current,
    /// Its controller has not seen the latest spec (`status.observedGeneration`).
    NotObserved {
        observed: i64,
        generation: i64,
    },
    /// `inProgress` is true, or nothing is: the expression that decided.
    InProgress(String),
    /// `failed` is true: its expression.
    Failed(String),
    /// An expression could not be evaluated on this object (a field it reads is not
    /// there yet): which, and why.
    Unknown(String),
}

/// Compiled checks, by group and kind.
#[derive(Clone, Debug, Default)]
pub struct HealthChecks {
    checks: Vec<Check>,
}

#[derive(Clone, Debug)]
struct Check {
    group: String,
    kind: String,
    /// In the order they are looked at: `inProgress`, `failed`, `current`.
    expressions: Vec<(Field, Expression)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    InProgress,
    Failed,
    Current,
}

impl Field {
    fn name(self) -> &'static str {
        match self {
            Field::InProgress => "inProgress",
            Field::Failed => "failed",
            Field::Current => "current",
        }
    }
}

#[derive(Clone, Debug)]
struct Expression {
    source: String,
    program: Arc<Program>,
}

/// The environment every expression is compiled and run in: CEL's standard library
/// with optional fields (`status.?conditions.orValue([])`), as Flux's has.
fn env() -> Arc<Env> {
    static ENV: LazyLock<Arc<Env>> =
        LazyLock::new(|| Arc::new(Env::stdlib().with_optional_support(true)));
    ENV.clone()
}

/// The shipped library's text (Flux's spelling, one entry per kind).
const LIBRARY: &str = include_str!("health/library.yaml");

/// The library's file name in messages.
pub const LIBRARY_FILE: &str = "crates/tether-core/src/health/library.yaml";

impl HealthChecks {
    /// Compiles a file's checks; `file` names it in errors. Two checks of one kind
    /// are an error at the second.
    pub fn compile(file: &str, exprs: &[HealthCheckExprs]) -> Result<Self, HealthCheckError> {
        fn field<'a>(file: &str, value: &'a Spanned<String>) -> (&'a str, String) {
            let place = &value.referenced;
            let at = format!(
                "{file}:{}:{}: healthCheckExprs",
                place.line(),
                place.column()
            );
            (value.value.as_str(), at)
        }
        let field = |value| field(file, value);
        Self::compile_located(exprs.iter().map(|written| Located {
            api_version: &written.api_version.value,
            kind: field(&written.kind),
            fields: [
                (Field::InProgress, written.in_progress.as_ref().map(field)),
                (Field::Failed, written.failed.as_ref().map(field)),
                (Field::Current, Some(field(&written.current))),
            ],
        }))
    }

    /// Compiles the checks of a Source's `spec.healthCheckExprs`; an error names the
    /// field (`spec.healthCheckExprs[1].current`).
    pub fn compile_spec(checks: &[PlainCheck<'_>]) -> Result<Self, HealthCheckError> {
        Self::compile_located(checks.iter().enumerate().map(|(i, check)| {
            let at = |name: &str| format!("spec.healthCheckExprs[{i}].{name}");
            Located {
                api_version: check.api_version,
                kind: (check.kind, at("kind")),
                fields: [
                    (
                        Field::InProgress,
                        check.in_progress.map(|e| (e, at("inProgress"))),
                    ),
                    (Field::Failed, check.failed.map(|e| (e, at("failed")))),
                    (Field::Current, Some((check.current, at("current")))),
                ],
            }
        }))
    }

    fn compile_located<'a>(
        written: impl Iterator<Item = Located<'a>>,
    ) -> Result<Self, HealthCheckError> {
        let mut checks: Vec<Check> = Vec::new();
        for written in written {
            let located = |at: &str, what: String, hint: &str| HealthCheckError {
                at: at.to_string(),
                what,
                hint: hint.to_string(),
            };
            let (group, (kind, kind_at)) =
                (api_group(written.api_version).to_string(), &written.kind);
            if kind.is_empty() || written.api_version.is_empty() {
                return Err(located(
                    kind_at,
                    "a check needs an apiVersion and a kind".into(),
                    "write the kind's apiVersion (cert-manager.io/v1) and kind (Certificate)",
                ));
            }
            if checks.iter().any(|c| c.group == group && c.kind == *kind) {
                return Err(located(
                    kind_at,
                    format!("{kind} ({group}) has a check already"),
                    "keep one check per kind: a check matches every version of its kind",
                ));
            }
            let mut expressions = Vec::new();
            for (field, source) in &written.fields {
                let Some((source, at)) = source else { continue };
                let program = env().compile(source).map_err(|e| {
                    let first = e.errors.first();
                    let position = first.map(|e| e.pos.1).unwrap_or(0);
                    let message = first.map(|e| e.msg.clone()).unwrap_or_else(|| e.to_string());
                    located(
                        at,
                        format!(
                            "the {} expression of {kind} does not compile, at character {position} of `{source}`: {message}",
                            field.name(),
                        ),
                        "write a CEL expression on the object's fields, such as status.?conditions.orValue([]).exists(c, c.type == 'Ready' && c.status == 'True')",
                    )
                })?;
                expressions.push((
                    *field,
                    Expression {
                        source: source.to_string(),
                        program: Arc::new(program),
                    },
                ));
            }
            checks.push(Check {
                group,
                kind: kind.to_string(),
                expressions,
            });
        }
        Ok(HealthChecks { checks })
    }

    /// Reads and compiles checks written in YAML (a list in Flux's spelling).
    pub fn parse(file: &str, text: &str) -> Result<Self, HealthCheckError> {
        let exprs: Vec<HealthCheckExprs> =
            serde_saphyr::from_str_with_options(text, yaml_options(Dialect::Models)).map_err(
                |e| HealthCheckError {
                    at: format!("{file}:1:1: healthCheckExprs"),
                    what: e.to_string(),
                    hint: "write a list of checks in Flux's healthCheckExprs spelling".into(),
                },
            )?;
        Self::compile(file, &exprs)
    }

    /// The shipped library of checks for common custom resources.
    pub fn library() -> &'static HealthChecks {
        static SHIPPED: LazyLock<HealthChecks> = LazyLock::new(|| {
            // Compiled by the library's own test: an error here is a bug in tether.
            HealthChecks::parse(LIBRARY_FILE, LIBRARY).unwrap_or_default()
        });
        &SHIPPED
    }

    /// These checks, then the library's for the kinds these do not cover.
    pub fn with_library(self) -> HealthChecks {
        self.then(HealthChecks::library())
    }

    /// These checks, then `others`' for the kinds these do not cover.
    pub fn then(mut self, others: &HealthChecks) -> HealthChecks {
        let missing: Vec<Check> = others
            .checks
            .iter()
            .filter(|l| {
                !self
                    .checks
                    .iter()
                    .any(|c| c.group == l.group && c.kind == l.kind)
            })
            .cloned()
            .collect();
        self.checks.extend(missing);
        self
    }

    /// The kinds checked, as `Kind.group` (`Kind` for the core group).
    pub fn kinds(&self) -> Vec<String> {
        self.checks
            .iter()
            .map(|c| match c.group.as_str() {
                "" => c.kind.clone(),
                group => format!("{}.{group}", c.kind),
            })
            .collect()
    }

    /// Is there a check for objects of this `apiVersion` and kind?
    pub fn covers(&self, api_version: &str, kind: &str) -> bool {
        let group = api_group(api_version);
        self.checks
            .iter()
            .any(|c| c.group == group && c.kind == kind)
    }

    /// The verdict on an object of a kind that has a check; `None` without one.
    /// As Flux does: an object whose controller has not seen its latest spec is in
    /// progress; then `inProgress`, `failed` and `current` are looked at in turn, and
    /// when none is true the object is in progress.
    pub fn judge(&self, object: &Value) -> Option<Verdict> {
        let group = api_group(object["apiVersion"].as_str()?);
        let kind = object["kind"].as_str()?;
        let check = self
            .checks
            .iter()
            .find(|c| c.group == group && c.kind == kind)?;
        if let (Some(observed), Some(generation)) = (
            object["status"]["observedGeneration"].as_i64(),
            object["metadata"]["generation"].as_i64(),
        ) && observed != generation
        {
            return Some(Verdict::NotObserved {
                observed,
                generation,
            });
        }
        let mut context = Context::with_env(env());
        for (name, value) in object.as_object()? {
            if let Err(e) = context.add_variable(name.clone(), value.clone()) {
                return Some(Verdict::Unknown(format!("its field {name}: {e}")));
            }
        }
        for (field, expression) in &check.expressions {
            match expression.program.execute(&context) {
                Ok(cel::Value::Bool(true)) => {
                    return Some(match field {
                        Field::InProgress => Verdict::InProgress(expression.source.clone()),
                        Field::Failed => Verdict::Failed(expression.source.clone()),
                        Field::Current => Verdict::Current,
                    });
                }
                Ok(cel::Value::Bool(false)) => {}
                Ok(other) => {
                    return Some(Verdict::Unknown(format!(
                        "{} is not true or false but {other:?}: `{}`",
                        field.name(),
                        expression.source
                    )));
                }
                // As Flux: an expression on a field the object does not have yet
                // (no status before its controller writes one) leaves it unknown.
                Err(cel::ExecutionError::UndeclaredReference(name)) => {
                    return Some(Verdict::Unknown(format!("the object has no {name} yet")));
                }
                Err(e) => {
                    return Some(Verdict::Unknown(format!(
                        "{} cannot be evaluated ({e}): `{}`",
                        field.name(),
                        expression.source
                    )));
                }
            }
        }
        let current = check
            .expressions
            .iter()
            .find(|(f, _)| *f == Field::Current)
            .map(|(_, e)| e.source.clone())
            .unwrap_or_default();
        Some(Verdict::InProgress(format!("not ({current})")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn checks(text: &str) -> Result<HealthChecks, HealthCheckError> {
        HealthChecks::parse(".tether.yaml", text)
    }

    #[test]
    fn the_shipped_library_compiles() {
        let library = HealthChecks::parse(LIBRARY_FILE, LIBRARY).unwrap();
        assert_eq!(library.kinds(), HealthChecks::library().kinds());
        assert!(library.kinds().len() >= 10, "{:?}", library.kinds());
    }

    #[test]
    fn expressions_are_looked_at_in_fluxs_order_and_none_true_is_in_progress() {
        let checks = checks(
            "- apiVersion: example.org/v1\n  kind: Gadget\n  current: status.phase == 'Up'\n  inProgress: status.phase == 'Up' && status.warming\n  failed: status.phase == 'Broken'\n",
        )
        .unwrap();
        let gadget = |status: Value| {
            json!({"apiVersion": "example.org/v2", "kind": "Gadget",
                   "metadata": {"name": "g", "generation": 2}, "status": status})
        };
        let judged = |status| checks.judge(&gadget(status)).unwrap();
        assert_eq!(
            judged(json!({"phase": "Up", "warming": false})),
            Verdict::Current
        );
        assert!(matches!(
            judged(json!({"phase": "Up", "warming": true})),
            Verdict::InProgress(e) if e.contains("warming")
        ));
        assert!(matches!(
            judged(json!({"phase": "Broken", "warming": false})),
            Verdict::Failed(_)
        ));
        assert!(matches!(
            judged(json!({"phase": "Starting", "warming": false})),
            Verdict::InProgress(e) if e == "not (status.phase == 'Up')"
        ));
        assert_eq!(
            judged(json!({"phase": "Up", "warming": false, "observedGeneration": 1})),
            Verdict::NotObserved {
                observed: 1,
                generation: 2
            }
        );
        assert!(matches!(judged(json!({})), Verdict::Unknown(_)));
        let other = json!({"apiVersion": "other.org/v1", "kind": "Gadget"});
        assert_eq!(checks.judge(&other), None);
    }

    #[test]
    fn a_malformed_expression_is_an_error_at_its_place() {
        let error = checks(
            "- apiVersion: example.org/v1\n  kind: Gadget\n  current: status.phase == 'Up'\n  failed: status.conditions.exists(c, c.type == 'Failed'\n",
        )
        .unwrap_err();
        assert_eq!(error.at, ".tether.yaml:4:11: healthCheckExprs", "{error}");
        let text = error.to_string();
        assert!(text.starts_with(".tether.yaml:4:11: healthCheckExprs: the failed expression of Gadget does not compile"), "{text}");
        let twice = checks(
            "- {apiVersion: example.org/v1, kind: Gadget, current: 'true'}\n- {apiVersion: example.org/v2, kind: Gadget, current: 'false'}\n",
        )
        .unwrap_err();
        assert!(twice.at.starts_with(".tether.yaml:2:"), "{twice}");
        assert!(twice.what.contains("has a check already"), "{twice}");
        let unknown =
            checks("- {apiVersion: a/v1, kind: B, current: 'true', healthy: 'x'}\n").unwrap_err();
        assert!(unknown.what.contains("healthy"), "{unknown}");
    }

    #[test]
    fn a_sources_checks_are_errors_at_their_field_and_come_after_the_repositorys() {
        let check = |kind, current| PlainCheck {
            api_version: "example.org/v1",
            kind,
            current,
            in_progress: None,
            failed: None,
        };
        let broken = HealthChecks::compile_spec(&[
            check("Gadget", "true"),
            PlainCheck {
                failed: Some("status.phase =="),
                ..check("Widget", "true")
            },
        ])
        .unwrap_err();
        assert_eq!(broken.at, "spec.healthCheckExprs[1].failed", "{broken}");
        assert!(
            broken.to_string().starts_with(
                "spec.healthCheckExprs[1].failed: the failed expression of Widget does not compile"
            ),
            "{broken}"
        );
        let twice = HealthChecks::compile_spec(&[check("Gadget", "true"), check("Gadget", "true")])
            .unwrap_err();
        assert_eq!(twice.at, "spec.healthCheckExprs[1].kind", "{twice}");

        let source =
            HealthChecks::compile_spec(&[check("Gadget", "false"), check("Widget", "true")])
                .unwrap();
        let repository = checks("- {apiVersion: example.org/v1, kind: Gadget, current: 'true'}\n")
            .unwrap()
            .then(&source);
        let object = |kind: &str| json!({"apiVersion": "example.org/v1", "kind": kind, "metadata": {"name": "a"}});
        assert_eq!(
            repository.judge(&object("Gadget")),
            Some(Verdict::Current),
            "the repository's"
        );
        assert_eq!(
            repository.judge(&object("Widget")),
            Some(Verdict::Current),
            "the Source's"
        );
    }

    #[test]
    fn a_repositorys_check_replaces_the_librarys_for_its_kind() {
        let mine = checks(
            "- {apiVersion: cert-manager.io/v1, kind: Certificate, current: \"metadata.name == 'mine'\"}\n",
        )
        .unwrap()
        .with_library();
        let certificate = json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
                                 "metadata": {"name": "mine"}});
        assert_eq!(mine.judge(&certificate), Some(Verdict::Current));
        assert_eq!(mine.kinds().len(), HealthChecks::library().kinds().len());
    }
}
