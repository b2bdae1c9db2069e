//! A models directory on disk: its model files, and the files models take data from.
//! Blocking (a file walk): call it off the async runtime.

use std::path::{Path, PathBuf};

use thiserror::Error;

use tether_core::source::{Assets, SourceFile, SourceFiles, is_model_path};

#[derive(Debug, Error)]
pub enum SourceError {
    #[error("cannot read models at {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot walk {path}")]
    Walk {
        path: PathBuf,
        #[source]
        source: walkdir::Error,
    },
    #[error("{path} is not UTF-8 text")]
    NotUtf8 { path: PathBuf },
}

/// Reads every model file below `root` (or `root` itself when it is a file), skipping
/// `.git/` and every other dot-directory. Blocking: call it off the async runtime.
pub fn read_models_dir(root: &Path) -> Result<SourceFiles, SourceError> {
    let metadata = std::fs::metadata(root).map_err(|source| SourceError::Read {
        path: root.to_path_buf(),
        source,
    })?;
    if metadata.is_file() {
        let name = root.file_name().map_or_else(
            || root.display().to_string(),
            |n| n.to_string_lossy().into(),
        );
        return Ok(SourceFiles::from_files(vec![read_one(root, name)?]));
    }
    let mut files = Vec::new();
    let walk = walkdir::WalkDir::new(root)
        .follow_links(true)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| {
            e.depth() == 0 || !e.file_name().to_str().is_some_and(|n| n.starts_with('.'))
        });
    for entry in walk {
        let entry = entry.map_err(|source| SourceError::Walk {
            path: root.to_path_buf(),
            source,
        })?;
        if !entry.file_type().is_file() || !is_model_path(entry.path()) {
            continue;
        }
        let relative = entry.path().strip_prefix(root).unwrap_or(entry.path());
        let shown = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        files.push(read_one(entry.path(), shown)?);
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(SourceFiles::from_files(files))
}

/// Reads the files models take data from: each path (relative to `root`) a file, or
/// a directory whose files (not hidden, not in subdirectories) are read. Paths that
/// do not exist are left out (the models' check reports them).
pub(crate) fn read_assets_dir(root: &Path, paths: &[String]) -> Result<Assets, SourceError> {
    let mut assets = Assets::new();
    let read = |path: &Path| {
        std::fs::read(path).map_err(|source| SourceError::Read {
            path: path.to_path_buf(),
            source,
        })
    };
    for relative in paths {
        let path = root.join(relative);
        let Ok(metadata) = std::fs::metadata(&path) else {
            continue;
        };
        if metadata.is_file() {
            assets.insert(relative.clone(), read(&path)?);
            continue;
        }
        let entries = std::fs::read_dir(&path).map_err(|source| SourceError::Read {
            path: path.clone(),
            source,
        })?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || !entry.path().is_file() {
                continue;
            }
            assets.insert(format!("{relative}/{name}"), read(&entry.path())?);
        }
    }
    Ok(assets)
}

fn read_one(path: &Path, shown: String) -> Result<SourceFile, SourceError> {
    let bytes = std::fs::read(path).map_err(|source| SourceError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let text = String::from_utf8(bytes).map_err(|_| SourceError::NotUtf8 {
        path: path.to_path_buf(),
    })?;
    Ok(SourceFile::new(shown, text))
}

/// The nearest `.sops.yaml` in `dir` or a directory above it.
pub fn find_sops_config(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .map(|d| d.join(tether_sops::config::CONFIG_FILE))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_yaml_below_root_but_not_dot_dirs_or_settings() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("b/.hidden")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join("b/one.yml"), "kind: Site\nname: s\n").unwrap();
        std::fs::write(root.join("a.yaml"), "").unwrap();
        std::fs::write(root.join("notes.txt"), "").unwrap();
        std::fs::write(root.join(".tether.yaml"), "").unwrap();
        std::fs::write(root.join(".git/x.yaml"), "").unwrap();
        std::fs::write(root.join("b/.hidden/y.yaml"), "").unwrap();
        let files = read_models_dir(root).unwrap();
        let paths: Vec<_> = files.iter().map(|(_, f)| f.path.as_str()).collect();
        assert_eq!(paths, ["a.yaml", "b/one.yml"]);
    }
}
