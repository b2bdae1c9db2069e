//! A models directory on disk: its model files, and the files models take data from.
//! Every file's size is taken from its metadata before it is read: a file past the
//! core's limit is never read, it becomes a [`TooLarge`] file that loading reports.
//! Blocking (a file walk): call it off the async runtime.

use std::io::Read;
use std::path::{Path, PathBuf};

use thiserror::Error;

use tether_core::load::limits::{self, check_file_size};
use tether_core::source::{Assets, SourceFile, SourceFiles, TooLarge, is_model_path};

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

/// The files models take data from, and those of them left unread for their size.
#[derive(Debug, Default)]
pub(crate) struct DataFiles {
    pub assets: Assets,
    pub too_large: Vec<SourceFile>,
}

impl DataFiles {
    pub fn insert(&mut self, path: String, contents: Contents) {
        match contents {
            Contents::Bytes(bytes) => {
                self.assets.insert(path, bytes);
            }
            Contents::TooLarge(too_large) => {
                self.too_large.push(SourceFile::too_large(path, too_large));
            }
        }
    }

    /// `files` with these data files (see [`SourceFiles::with_assets`]).
    pub fn attach_to(self, files: SourceFiles) -> SourceFiles {
        files
            .with_assets(self.assets)
            .with_too_large(self.too_large)
    }
}

/// A file's bytes, or why they were not read.
#[derive(Debug)]
pub(crate) enum Contents {
    Bytes(Vec<u8>),
    TooLarge(TooLarge),
}

/// Reads the files models take data from: each path (relative to `root`) a file, or
/// a directory whose files (not hidden, not in subdirectories) are read. Paths that
/// do not exist are left out (the models' check reports them).
pub(crate) fn read_assets_dir(root: &Path, paths: &[String]) -> Result<DataFiles, SourceError> {
    let mut data = DataFiles::default();
    for relative in paths {
        let path = root.join(relative);
        let Ok(metadata) = std::fs::metadata(&path) else {
            continue;
        };
        if metadata.is_file() {
            let contents = read_within_limit(&path).map_err(|e| read_error(&path, e))?;
            data.insert(relative.clone(), contents);
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
            let path = entry.path();
            let contents = read_within_limit(&path).map_err(|e| read_error(&path, e))?;
            data.insert(format!("{relative}/{name}"), contents);
        }
    }
    Ok(data)
}

fn read_one(path: &Path, shown: String) -> Result<SourceFile, SourceError> {
    match read_within_limit(path).map_err(|source| read_error(path, source))? {
        Contents::TooLarge(too_large) => Ok(SourceFile::too_large(shown, too_large)),
        Contents::Bytes(bytes) => {
            let text = String::from_utf8(bytes).map_err(|_| SourceError::NotUtf8 {
                path: path.to_path_buf(),
            })?;
            Ok(SourceFile::new(shown, text))
        }
    }
}

fn read_error(path: &Path, source: std::io::Error) -> SourceError {
    SourceError::Read {
        path: path.to_path_buf(),
        source,
    }
}

/// A file's bytes, unless its size is past the limit: the size comes from the open
/// file's metadata, so nothing is read for a refused file. The read itself stops one
/// byte past the limit, so that a file that grew after the metadata call cannot
/// bring more than that into memory either.
pub(crate) fn read_within_limit(path: &Path) -> std::io::Result<Contents> {
    let file = std::fs::File::open(path)?;
    let size = file.metadata()?.len();
    if let Some(too_large) = check_file_size(size) {
        return Ok(Contents::TooLarge(too_large));
    }
    // The capacity is the size just checked: at most the limit.
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(limits::FILE_BYTES + 1).read_to_end(&mut bytes)?;
    match check_file_size(bytes.len() as u64) {
        Some(too_large) => Ok(Contents::TooLarge(too_large)),
        None => Ok(Contents::Bytes(bytes)),
    }
}

/// The nearest `.sops.yaml` in `dir` or a directory above it.
pub fn find_sops_config(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .map(|d| d.join(tether_sops::creation_rules::CONFIG_FILE))
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
