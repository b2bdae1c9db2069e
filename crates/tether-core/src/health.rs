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
/// place in the file.
#[derive(Debug, Error)]
#[error("{file}:{line}:{column}: healthCheckExprs: {what}\n  hint: {hint}")]
pub struct HealthCheckError {
    pub file: String,
    pub line: u64,
    pub column: u64,
    pub what: String,
    pub hint: String,
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
        let mut checks: Vec<Check> = Vec::new();
        for written in exprs {
            let located = |at: &Spanned<String>, what: String, hint: &str| HealthCheckError {
                file: file.to_string(),
                line: at.referenced.line(),
                column: at.referenced.column(),
                what,
                hint: hint.to_string(),
            };
            let (group, kind) = (
                api_group(&written.api_version.value).to_string(),
                &written.kind.value,
            );
            if kind.is_empty() || written.api_version.value.is_empty() {
                return Err(located(
                    &written.kind,
                    "a check needs an apiVersion and a kind".into(),
                    "write the kind's apiVersion (cert-manager.io/v1) and kind (Certificate)",
                ));
            }
            if checks.iter().any(|c| c.group == group && &c.kind == kind) {
                return Err(located(
                    &written.kind,
                    format!("{kind} ({group}) has a check already"),
                    "keep one check per kind: a check matches every version of its kind",
                ));
            }
            let fields = [
                (Field::InProgress, written.in_progress.as_ref()),
                (Field::Failed, written.failed.as_ref()),
                (Field::Current, Some(&written.current)),
            ];
            let mut expressions = Vec::new();
            for (field, source) in fields {
                let Some(source) = source else { continue };
                let program = env().compile(&source.value).map_err(|e| {
                    let first = e.errors.first();
                    let at = first.map(|e| e.pos.1).unwrap_or(0);
                    let message = first.map(|e| e.msg.clone()).unwrap_or_else(|| e.to_string());
                    located(
                        source,
                        format!(
                            "the {} expression of {kind} does not compile, at character {at} of `{}`: {message}",
                            field.name(),
                            source.value
                        ),
                        "write a CEL expression on the object's fields, such as status.?conditions.orValue([]).exists(c, c.type == 'Ready' && c.status == 'True')",
                    )
                })?;
                expressions.push((
                    field,
                    Expression {
                        source: source.value.clone(),
                        program: Arc::new(program),
                    },
                ));
            }
            checks.push(Check {
                group,
                kind: kind.clone(),
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
                    file: file.to_string(),
                    line: 1,
                    column: 1,
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
    pub fn with_library(mut self) -> HealthChecks {
        let library = HealthChecks::library();
        let missing: Vec<Check> = library
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
        assert_eq!((error.line, error.column), (4, 11), "{error}");
        let text = error.to_string();
        assert!(text.starts_with(".tether.yaml:4:11: healthCheckExprs: the failed expression of Gadget does not compile"), "{text}");
        let twice = checks(
            "- {apiVersion: example.org/v1, kind: Gadget, current: 'true'}\n- {apiVersion: example.org/v2, kind: Gadget, current: 'false'}\n",
        )
        .unwrap_err();
        assert_eq!(twice.line, 2, "{twice}");
        assert!(twice.what.contains("has a check already"), "{twice}");
        let unknown =
            checks("- {apiVersion: a/v1, kind: B, current: 'true', healthy: 'x'}\n").unwrap_err();
        assert!(unknown.what.contains("healthy"), "{unknown}");
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
