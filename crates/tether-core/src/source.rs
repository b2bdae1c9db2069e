//! The source files of a models repo as every later stage sees them: the in-memory
//! table that the stages refer to by [`FileId`], each file's sealing (plain, or opened
//! from sops), and the commit the files came from. Reading them is the engine's
//! (`tether_engine::directory`, `tether_engine::git`). A file the engine refused for
//! its size is a [`TooLarge`], reported at its first line; [`SourceFiles::redact`]
//! stars the decrypted values in a message.

use std::path::Path;

/// The commit that models were read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Revision {
    pub commit: String,
    /// Uncommitted changes in the models of a local checkout.
    pub dirty: bool,
    /// The digests of deletions its message approves (its
    /// [`crate::inventory::budget::APPROVE_DELETIONS_TRAILER`] trailers).
    pub approvals: Vec<String>,
}

impl std::fmt::Display for Revision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}{}",
            self.commit,
            if self.dirty {
                " (with uncommitted changes)"
            } else {
                ""
            }
        )
    }
}

/// Index of a file in [`SourceFiles`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileId(pub u32);

#[derive(Clone, Debug)]
pub struct SourceFile {
    /// Path relative to the models root, with `/` separators, as shown to users.
    pub path: String,
    pub text: String,
    /// Byte offset of the start of each line.
    line_starts: Vec<u32>,
    /// How the file was stored, if it was encrypted (sops).
    pub sealing: Sealing,
    /// Set when the file was left unread for its size: `text` is then empty, and
    /// loading reports the file instead of parsing it.
    pub too_large: Option<TooLarge>,
}

/// A file past the size limit (`load::limits::check_file_size`), refused on the size
/// the filesystem or Git's object header gave before any byte was read: a generated
/// file of tens of MiB costs a metadata call, not its size in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooLarge {
    pub bytes: u64,
}

impl TooLarge {
    /// The size in MiB, one decimal, as messages give it.
    pub fn shown_size(self) -> String {
        // Tenths of a MiB in integers: exact for every size a file can have.
        let tenths = self.bytes.saturating_mul(10) / (1024 * 1024);
        format!("{}.{} MiB", tenths / 10, tenths % 10)
    }
}

/// Whether a file was stored encrypted, and what became of it.
#[derive(Clone, Debug, Default)]
pub enum Sealing {
    #[default]
    Plain,
    /// Decrypted in memory: `text` is the plain text, every line where it was;
    /// `stored` is the file as written, which is what snippets show.
    Opened { stored: String },
    /// It could not be decrypted: the reason, at its place in the file.
    Closed(SealingProblem),
    /// No key given opens it, but its structure is readable (sops keeps keys, and the
    /// values its rule leaves out, in clear): `text` is the stored file with each
    /// encrypted value replaced by a placeholder of its type, every line where it
    /// was, so kinds, names and references are checked; values are not. `stored` is
    /// the file as written; `problem` says why it was not opened.
    Unopened {
        stored: String,
        problem: SealingProblem,
    },
}

/// Why an encrypted file stays closed. Never holds a decrypted value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SealingProblem {
    pub line: u32,
    pub column: u32,
    pub message: String,
    pub hint: Option<String>,
}

impl SourceFile {
    pub fn new(path: impl Into<String>, text: impl Into<String>) -> Self {
        let text = text.into();
        let line_starts = std::iter::once(0)
            .chain(
                text.bytes()
                    .enumerate()
                    .filter(|(_, b)| *b == b'\n')
                    .map(|(i, _)| to_u32(i + 1)),
            )
            .collect();
        SourceFile {
            path: path.into(),
            text,
            line_starts,
            sealing: Sealing::Plain,
            too_large: None,
        }
    }

    /// A file left unread because of its size (see [`TooLarge`]).
    pub fn too_large(path: impl Into<String>, too_large: TooLarge) -> Self {
        SourceFile {
            too_large: Some(too_large),
            ..SourceFile::new(path, "")
        }
    }

    /// The text to show people: the stored (encrypted) text of a decrypted file.
    pub fn shown_text(&self) -> &str {
        match &self.sealing {
            Sealing::Opened { stored } | Sealing::Unopened { stored, .. } => stored,
            Sealing::Plain | Sealing::Closed(_) => &self.text,
        }
    }

    /// A span's byte range in [`SourceFile::shown_text`]: in a decrypted file the
    /// same line and column, cut at the line's end (values have other lengths there).
    pub fn shown_range(
        &self,
        line: u32,
        column: u32,
        offset: u32,
        len: u32,
    ) -> std::ops::Range<usize> {
        match &self.sealing {
            Sealing::Opened { stored } | Sealing::Unopened { stored, .. } => {
                let shown = SourceFile::new("", stored.as_str());
                let start = shown.offset_of(line, column) as usize;
                let line_end = stored[start..]
                    .find('\n')
                    .map_or(stored.len(), |i| start + i);
                start..(start + len.max(1) as usize).min(line_end.max(start + 1))
            }
            Sealing::Plain | Sealing::Closed(_) => offset as usize..(offset + len.max(1)) as usize,
        }
    }

    /// Byte offset of a 1-based line and character column, clamped to the file.
    pub fn offset_of(&self, line: u32, column: u32) -> u32 {
        let line_index = (line.max(1) - 1) as usize;
        let Some(&start) = self.line_starts.get(line_index) else {
            return to_u32(self.text.len());
        };
        let rest = &self.text[start as usize..];
        let line_text = rest.split('\n').next().unwrap_or("");
        let within = line_text
            .char_indices()
            .nth((column.max(1) - 1) as usize)
            .map_or(line_text.len(), |(i, _)| i);
        start + to_u32(within)
    }
}

pub(crate) fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// All files of one repo, in path order.
#[derive(Clone, Debug, Default)]
pub struct SourceFiles {
    files: Vec<SourceFile>,
    assets: Assets,
    /// Values that were decrypted: kept out of what is shown (see [`SourceFiles::redact`]).
    secrets: Vec<zeroize::Zeroizing<String>>,
    /// What goes before a file's path when it is shown (see [`SourceFiles::shown_path`]).
    shown_root: String,
}

/// Files of the repo that models take data from (a KubernetesConfigMap's `files`):
/// their bytes by path relative to the models root, `/`-separated.
pub type Assets = std::collections::BTreeMap<String, Vec<u8>>;

impl SourceFiles {
    /// Files in the order given; [`read_models_dir`] sorts them by path first.
    pub fn from_files(files: Vec<SourceFile>) -> Self {
        SourceFiles {
            files,
            assets: Assets::new(),
            secrets: Vec::new(),
            shown_root: String::new(),
        }
    }

    /// Files shown under `root` (`tests/cases/x/`, ending in `/`): the models root
    /// as the user named it, so that a path in a message is one their editor and CI
    /// open from where tether ran. Paths stay relative to the models root
    /// everywhere else (identities, data files, ordering).
    pub fn with_shown_root(mut self, root: impl Into<String>) -> Self {
        self.shown_root = root.into();
        self
    }

    /// A file's path as shown to people: under the shown root, if one was given.
    pub fn shown_path(&self, id: FileId) -> String {
        format!("{}{}", self.shown_root, self.path(id))
    }

    /// With the files models take data from; a model file among them is data, not a
    /// model (a YAML file in a service's configuration directory).
    pub fn with_assets(self, assets: Assets) -> Self {
        let files = self
            .files
            .into_iter()
            .filter(|f| !assets.contains_key(&f.path))
            .collect();
        SourceFiles {
            files,
            assets,
            ..self
        }
    }

    /// With files left unread for their size that are not among the files yet (a
    /// data file or the settings file, refused while the model files were read), so
    /// that loading reports each once, at its own path.
    pub fn with_too_large(mut self, refused: Vec<SourceFile>) -> Self {
        for file in refused {
            if !self.files.iter().any(|f| f.path == file.path) {
                self.files.push(file);
            }
        }
        self.files.sort_by(|a, b| a.path.cmp(&b.path));
        self
    }

    /// The files, each replaced by what `open` makes of it, and the values it
    /// decrypted (to keep out of messages).
    pub fn map_files(
        self,
        mut open: impl FnMut(SourceFile) -> (SourceFile, Vec<zeroize::Zeroizing<String>>),
    ) -> Self {
        let mut secrets = self.secrets;
        let files = self
            .files
            .into_iter()
            .map(|file| {
                let (file, values) = open(file);
                secrets.extend(values);
                file
            })
            .collect();
        // Longest first, so that a value inside another is not half-replaced.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        SourceFiles {
            files,
            secrets,
            ..self
        }
    }

    /// `text` with every decrypted value starred: for messages and reports, which
    /// may quote a value a model holds.
    pub fn redact(&self, text: &str) -> String {
        let mut text = text.to_string();
        for secret in &self.secrets {
            if text.contains(secret.as_str()) {
                text = text.replace(secret.as_str(), "***");
            }
        }
        text
    }

    pub fn assets(&self) -> &Assets {
        &self.assets
    }

    pub fn get(&self, id: FileId) -> &SourceFile {
        &self.files[id.0 as usize]
    }

    pub fn path(&self, id: FileId) -> &str {
        &self.get(id).path
    }

    /// The file at `path` (relative to the models root), if there is one.
    pub fn by_path(&self, path: &str) -> Option<(FileId, &SourceFile)> {
        self.iter().find(|(_, f)| f.path == path)
    }

    pub fn iter(&self) -> impl Iterator<Item = (FileId, &SourceFile)> {
        self.files
            .iter()
            .enumerate()
            .map(|(i, f)| (FileId(to_u32(i)), f))
    }

    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

/// What goes before the paths of a models root's files when they are shown: the
/// root as the user named it (its directory, when it is one file), `./` steps left
/// out, `/`-separated, ending in `/`; empty for the working directory itself.
pub fn shown_root_of(root: &Path, root_is_file: bool) -> String {
    let directory = match root_is_file {
        true => root.parent().unwrap_or(Path::new("")),
        false => root,
    };
    let mut shown = String::new();
    for component in directory.components() {
        match component {
            std::path::Component::CurDir => continue,
            std::path::Component::RootDir => {}
            other => shown.push_str(&other.as_os_str().to_string_lossy()),
        }
        shown.push('/');
    }
    shown
}

/// Is this a file tether reads? `*.yaml`/`*.yml` (models, plain objects, a chart's or a
/// kustomization's files), but not dot-files such as the settings file `.tether.yaml`;
/// and a kustomization file spelled `Kustomization`.
pub fn is_model_path(path: &Path) -> bool {
    if path.file_name().and_then(|n| n.to_str()) == Some("Kustomization") {
        return true;
    }
    let is_yaml = matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    );
    let is_hidden = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with('.'));
    is_yaml && !is_hidden
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_count_characters_within_a_line() {
        let file = SourceFile::new("a.yaml", "kind: x\nname: \"é\" z\n");
        assert_eq!(file.offset_of(1, 1), 0);
        assert_eq!(file.offset_of(2, 1), 8);
        // `z` is the 11th character of line 2 but the 12th byte (é is two bytes).
        assert_eq!(&file.text[file.offset_of(2, 11) as usize..][..1], "z");
        assert_eq!(file.offset_of(99, 1), file.text.len() as u32);
    }

    #[test]
    fn a_shown_root_is_the_root_as_named_without_dot_steps() {
        let cases = [
            (".", false, ""),
            ("./", false, ""),
            ("models", false, "models/"),
            ("./tests/cases/x/", false, "tests/cases/x/"),
            ("/srv/models", false, "/srv/models/"),
            ("../ops/models", false, "../ops/models/"),
            ("models.yaml", true, ""),
            ("deploy/models.yaml", true, "deploy/"),
        ];
        for (root, is_file, shown) in cases {
            assert_eq!(shown_root_of(Path::new(root), is_file), shown, "{root}");
        }
    }
}
