//! A KubernetesConfigMap's `files`: configuration files of the repository as its
//! data, as kustomize's configMapGenerator and Kolla's per-service configuration
//! directories do. Which files are wanted is read from the model files (a cheap pass
//! before the real one, so that the I/O edges read only those); their bytes come
//! back in [`SourceFiles::assets`] and are attached here, each problem reported at
//! the entry that names it.

use super::model_types::{DataModel, Spanned};
use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::load::{Dialect, Value, parse_yaml};
use crate::source::SourceFiles;

/// The path (relative to the models root) that `written`, in the model file at
/// `model_file`, names; `None` when it leaves the repository.
pub fn resolve_data_path(model_file: &str, written: &str) -> Option<String> {
    if written.starts_with('/') {
        return None;
    }
    let mut parts: Vec<&str> = model_file.split('/').collect();
    parts.pop();
    for part in written.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            part => parts.push(part),
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

/// The paths the KubernetesConfigMaps of `files` take data from.
pub fn data_file_paths(files: &SourceFiles) -> Vec<String> {
    let mut paths = Vec::new();
    for (_, file) in files.iter().filter(|(_, f)| f.text.contains("files:")) {
        let Ok(documents) = parse_yaml(&file.text, Dialect::Models) else {
            continue;
        };
        for document in documents {
            let is_config = document
                .field("kind")
                .is_some_and(|k| k.value == Value::Str("KubernetesConfigMap".into()));
            let written = match document.field("files").map(|f| &f.value) {
                Some(Value::Str(one)) if is_config => vec![one.clone()],
                Some(Value::Seq(many)) if is_config => many
                    .iter()
                    .filter_map(|n| match &n.value {
                        Value::Str(s) => Some(s.clone()),
                        _ => None,
                    })
                    .collect(),
                _ => Vec::new(),
            };
            paths.extend(
                written
                    .iter()
                    .filter_map(|w| resolve_data_path(&file.path, w)),
            );
        }
    }
    paths.sort();
    paths.dedup();
    paths
}

/// Adds the data of each ConfigMap's `files`: the file name as the key, UTF-8 text
/// as `data`, anything else as `binaryData`.
pub(super) fn attach_files(
    data: &mut [DataModel],
    files: &SourceFiles,
    diagnostics: &mut Diagnostics,
) {
    for model in data.iter_mut().filter(|m| !m.files.is_empty()) {
        let label = format!("{} \"{}\"", model.origin.kind, model.name.value);
        let model_file = files.path(model.origin.span.file).to_string();
        for written in model.files.clone() {
            let error = |message: String, hint: String| {
                Diagnostic::error(written.span, message)
                    .in_model(label.clone())
                    .with_hint(hint)
            };
            let Some(path) = resolve_data_path(&model_file, &written.value) else {
                diagnostics.push(error(
                    format!("\"{}\" is outside the repository", written.value),
                    "write a path relative to the model's file, inside the models root".into(),
                ));
                continue;
            };
            let found = found_files(files, &path);
            // A file refused for its size is reported at its own path already.
            if found.is_empty() && !refused_for_size(files, &path) {
                diagnostics.push(error(
                    format!(
                        "no file or directory \"{}\" (looked for {path})",
                        written.value
                    ),
                    format!("the path is relative to the model's file, {model_file}"),
                ));
            }
            for (name, bytes) in found {
                let mut keys = (model.data.iter().map(|(k, _)| k))
                    .chain(model.binary_data.iter().map(|(k, _)| k));
                if keys.any(|k| k.value == name) {
                    diagnostics.push(error(
                        format!("the key \"{name}\" (from {path}) is already in the ConfigMap"),
                        "two files of one name, or a data entry of that name: rename one".into(),
                    ));
                    continue;
                }
                let key = Spanned::new(name.to_string(), written.span);
                match String::from_utf8(bytes.to_vec()) {
                    Ok(text) => model.data.push((key, Spanned::new(text, written.span))),
                    Err(_) => model.binary_data.push((key, bytes.to_vec())),
                }
            }
        }
    }
}

/// Is the file at `path`, or a file directly in the directory `path`, one left unread
/// for its size?
fn refused_for_size(files: &SourceFiles, path: &str) -> bool {
    let prefix = format!("{path}/");
    files.iter().any(|(_, f)| {
        f.too_large.is_some()
            && (f.path == path
                || f.path
                    .strip_prefix(&prefix)
                    .is_some_and(|name| !name.contains('/')))
    })
}

/// The file at `path`, or the files directly in the directory `path`, by name.
fn found_files<'a>(files: &'a SourceFiles, path: &str) -> Vec<(&'a str, &'a [u8])> {
    let assets = files.assets();
    if let Some((name, bytes)) = assets.get_key_value(path) {
        let name = name.rsplit('/').next().unwrap_or(name);
        return vec![(name, bytes.as_slice())];
    }
    let prefix = format!("{path}/");
    assets
        .range(prefix.clone()..)
        .take_while(|(k, _)| k.starts_with(&prefix))
        .filter_map(|(k, v)| {
            let name = &k[prefix.len()..];
            (!name.contains('/')).then_some((name, v.as_slice()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_file_refused_for_its_size_is_reported_once_at_its_own_path() {
        use crate::load::limits::check_file_size;
        use crate::source::{Assets, SourceFile};
        let models = "kind: KubernetesService\nname: kubernetes\n---\nkind: TrustDomain\nname: td\n---\nkind: KubernetesConfigMap\nname: web\ntrust_domain: td\nfiles: [conf/, big.json]\n";
        let refused = check_file_size(40 * 1024 * 1024).unwrap();
        let mut assets = Assets::new();
        assets.insert("conf/small.conf".into(), b"ok".to_vec());
        let files = SourceFiles::from_files(vec![SourceFile::new("models.yaml", models)])
            .with_assets(assets)
            .with_too_large(vec![
                SourceFile::too_large("big.json", refused),
                SourceFile::too_large("conf/huge.conf", refused),
            ]);
        let analysis = crate::analyze(&files);
        let errors: Vec<_> = analysis
            .diagnostics
            .sorted(&files)
            .into_iter()
            .map(|d| format!("{}:{}: {}", files.path(d.span.file), d.span.line, d.message))
            .collect();
        assert_eq!(errors.len(), 2, "{errors:#?}");
        assert!(
            errors[0].starts_with("big.json:1: this file is 40.0 MiB"),
            "{errors:#?}"
        );
        assert!(
            errors[1].starts_with("conf/huge.conf:1: this file is"),
            "{errors:#?}"
        );
        assert!(analysis.graph.is_none(), "nothing is rendered");
    }

    #[test]
    fn paths_are_relative_to_the_model_file_and_stay_in_the_repo() {
        assert_eq!(
            resolve_data_path("keystone/models.yaml", "config").as_deref(),
            Some("keystone/config")
        );
        assert_eq!(
            resolve_data_path("models.yaml", "./a/b.conf").as_deref(),
            Some("a/b.conf")
        );
        assert_eq!(
            resolve_data_path("a/b/m.yaml", "../shared/x").as_deref(),
            Some("a/shared/x")
        );
        assert_eq!(resolve_data_path("m.yaml", "../x"), None);
        assert_eq!(resolve_data_path("m.yaml", "/etc/passwd"), None);
    }
}
