//! An artifact's layer: a gzipped tar of the models directory. Packing is
//! deterministic (entries sorted, zero times and owners, fixed modes), so that the
//! same directory always gives the same digest. Unpacking trusts nothing: it refuses
//! absolute paths, `..`, entries through a link, links that could leave the root,
//! hard links and devices, and bounds each file by the core's file limit and the
//! whole by [`UNPACKED_BYTES`], all before anything is written past the bound.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};

use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use thiserror::Error;

use tether_core::load::limits::FILE_BYTES;

/// The most an artifact may hold once unpacked (and the most its gzipped tar stream
/// may inflate to): sixteen of the largest files tether reads.
pub const UNPACKED_BYTES: u64 = 16 * FILE_BYTES;
/// The most entries an artifact may hold.
pub const ENTRIES: usize = 100_000;

#[derive(Debug, Error)]
pub enum ArchiveError {
    #[error("cannot read or write {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the tar entry \"{entry}\" is refused: {why}")]
    Refused { entry: String, why: &'static str },
    #[error(
        "the tar entry \"{entry}\" is {bytes} bytes, past the limit of one file ({FILE_BYTES} bytes)"
    )]
    FileTooLarge { entry: String, bytes: u64 },
    #[error("the archive unpacks to more than {UNPACKED_BYTES} bytes or {ENTRIES} entries")]
    TooLarge,
    #[error("the layer is not a gzipped tar")]
    Corrupt(#[source] std::io::Error),
    #[error("{path} is {kind}: an artifact holds regular files and directories only")]
    NotPackable { path: PathBuf, kind: &'static str },
}

/// The gzipped tar of `dir`: every regular file and directory below it, skipping
/// dot-directories (`.git/`) as reading a models directory does.
pub fn pack(dir: &Path) -> Result<Vec<u8>, ArchiveError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ArchiveError::Io { path, source }
    };
    let mut builder = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::default()));
    let walk = walkdir::WalkDir::new(dir)
        .min_depth(1)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| {
            !(e.file_type().is_dir() && e.file_name().to_string_lossy().starts_with('.'))
        });
    for entry in walk {
        let entry = entry.map_err(|e| ArchiveError::Io {
            path: e.path().unwrap_or(dir).to_path_buf(),
            source: e.into(),
        })?;
        let relative = entry.path().strip_prefix(dir).unwrap_or(entry.path());
        let name = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        let mut header = tar::Header::new_gnu();
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        let file_type = entry.file_type();
        if file_type.is_dir() {
            header.set_entry_type(tar::EntryType::Directory);
            header.set_mode(0o755);
            header.set_size(0);
            builder
                .append_data(&mut header, format!("{name}/"), std::io::empty())
                .map_err(io(entry.path()))?;
        } else if file_type.is_file() {
            let file = std::fs::File::open(entry.path()).map_err(io(entry.path()))?;
            let size = file.metadata().map_err(io(entry.path()))?.len();
            header.set_entry_type(tar::EntryType::Regular);
            header.set_mode(0o644);
            header.set_size(size);
            builder
                .append_data(&mut header, &name, file.take(size))
                .map_err(io(entry.path()))?;
        } else {
            return Err(ArchiveError::NotPackable {
                path: entry.path().to_path_buf(),
                kind: if file_type.is_symlink() {
                    "a symbolic link"
                } else {
                    "not a regular file"
                },
            });
        }
    }
    builder
        .into_inner()
        .and_then(GzEncoder::finish)
        .map_err(io(dir))
}

/// Unpacks the gzipped tar in `compressed` into `root` (which must not exist yet):
/// into a temporary directory beside it first, renamed to `root` once whole, so that
/// `root` is either absent or complete.
pub fn unpack_into_cache(
    compressed: &tempfile::NamedTempFile,
    root: &Path,
) -> Result<(), ArchiveError> {
    let parent = root.parent().unwrap_or(root);
    let staging = tempfile::TempDir::new_in(parent).map_err(|source| ArchiveError::Io {
        path: parent.to_path_buf(),
        source,
    })?;
    let file = std::fs::File::open(compressed.path()).map_err(|source| ArchiveError::Io {
        path: compressed.path().to_path_buf(),
        source,
    })?;
    unpack(std::io::BufReader::new(file), staging.path())?;
    let staged = staging.keep();
    match std::fs::rename(&staged, root) {
        Ok(()) => Ok(()),
        // Another pass unpacked the same digest first: the same content.
        Err(_) if root.is_dir() => {
            let _ = std::fs::remove_dir_all(&staged);
            Ok(())
        }
        Err(source) => Err(ArchiveError::Io {
            path: root.to_path_buf(),
            source,
        }),
    }
}

/// Unpacks a gzipped tar read from `reader` into the empty directory `root`.
pub fn unpack(reader: impl Read, root: &Path) -> Result<(), ArchiveError> {
    let mut archive = tar::Archive::new(Bounded {
        inner: GzDecoder::new(reader),
        left: UNPACKED_BYTES,
    });
    let mut links = BTreeSet::new();
    let mut total = 0u64;
    let entries = archive.entries().map_err(read_error)?;
    for (count, entry) in entries.enumerate() {
        if count >= ENTRIES {
            return Err(ArchiveError::TooLarge);
        }
        let mut entry = entry.map_err(read_error)?;
        let raw = entry.path_bytes();
        let shown = String::from_utf8_lossy(&raw).into_owned();
        let relative = safe_path(&shown)?;
        if links
            .iter()
            .any(|link: &PathBuf| relative.starts_with(link))
        {
            return Err(refused(&shown, "it is written through a symbolic link"));
        }
        let target = root.join(&relative);
        let io = |source| ArchiveError::Io {
            path: target.clone(),
            source,
        };
        match entry.header().entry_type() {
            tar::EntryType::Directory => std::fs::create_dir_all(&target).map_err(io)?,
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let size = entry.size();
                if size > FILE_BYTES {
                    return Err(ArchiveError::FileTooLarge {
                        entry: shown,
                        bytes: size,
                    });
                }
                total += size;
                if total > UNPACKED_BYTES {
                    return Err(ArchiveError::TooLarge);
                }
                if let Some(parent) = target.parent() {
                    std::fs::create_dir_all(parent).map_err(io)?;
                }
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&target)
                    .map_err(io)?;
                std::io::copy(&mut (&mut entry).take(size), &mut file).map_err(read_error)?;
                file.flush().map_err(io)?;
            }
            tar::EntryType::Symlink => {
                let link_target = entry
                    .link_name()
                    .map_err(read_error)?
                    .ok_or_else(|| refused(&shown, "a symbolic link without a target"))?;
                if !stays_below(&link_target) {
                    return Err(refused(
                        &shown,
                        "a symbolic link that is absolute or goes up with '..' could leave the artifact",
                    ));
                }
                if let Some(parent) = target.parent() {
                    std::fs::create_dir_all(parent).map_err(io)?;
                }
                make_symlink(&link_target, &target).map_err(io)?;
                links.insert(relative);
            }
            tar::EntryType::Link => return Err(refused(&shown, "hard links are not taken")),
            // Extended headers are read by the tar crate itself; the rest (devices,
            // FIFOs) has no place among models.
            _ => {
                return Err(refused(
                    &shown,
                    "only files, directories and symbolic links are taken",
                ));
            }
        }
    }
    Ok(())
}

/// The entry's path below the root, or why it is refused: absolute, or with `..`.
fn safe_path(shown: &str) -> Result<PathBuf, ArchiveError> {
    let mut relative = PathBuf::new();
    for component in Path::new(shown).components() {
        match component {
            Component::Normal(part) => relative.push(part),
            Component::CurDir => {}
            Component::ParentDir => return Err(refused(shown, "its path goes up with '..'")),
            Component::RootDir | Component::Prefix(_) => {
                return Err(refused(shown, "its path is absolute"));
            }
        }
    }
    if relative.as_os_str().is_empty() {
        return Err(refused(shown, "its path is empty"));
    }
    Ok(relative)
}

/// A link target that resolves at or below the link's own directory: relative, and
/// never going up. (Entries are never written through a link, so each link's
/// directory is a real one inside the root.)
fn stays_below(target: &Path) -> bool {
    target
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

#[cfg(unix)]
fn make_symlink(target: &Path, link: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(target, link)
}

#[cfg(not(unix))]
fn make_symlink(_target: &Path, _link: &Path) -> std::io::Result<()> {
    Err(std::io::Error::other(
        "symbolic links are not made on this platform",
    ))
}

fn refused(entry: &str, why: &'static str) -> ArchiveError {
    ArchiveError::Refused {
        entry: entry.to_string(),
        why,
    }
}

/// A read error of the stream: past the bound, or not a gzipped tar.
fn read_error(error: std::io::Error) -> ArchiveError {
    if error
        .get_ref()
        .is_some_and(|inner| inner.is::<PastTheBound>())
    {
        ArchiveError::TooLarge
    } else {
        ArchiveError::Corrupt(error)
    }
}

#[derive(Debug, Error)]
#[error("the stream inflates past its bound")]
struct PastTheBound;

/// A reader that fails once more than `left` bytes came through it, so that a small
/// gzip stream cannot inflate without end (tar headers included).
struct Bounded<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = self.inner.read(buf)?;
        self.left = self
            .left
            .checked_sub(read as u64)
            .ok_or_else(|| std::io::Error::other(PastTheBound))?;
        Ok(read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(entries: &[(&str, tar::EntryType, &[u8], Option<&str>)]) -> Vec<u8> {
        let mut builder = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::default()));
        for (path, kind, data, link) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(*kind);
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            // Written raw, so that hostile paths reach the archive as they are.
            let name = &mut header.as_gnu_mut().unwrap().name;
            name[..path.len()].copy_from_slice(path.as_bytes());
            if let Some(link) = link {
                header.set_link_name(link).unwrap();
            }
            header.set_cksum();
            builder.append(&header, *data).unwrap();
        }
        builder.into_inner().unwrap().finish().unwrap()
    }

    #[test]
    fn packing_the_same_directory_twice_gives_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("apps/.git")).unwrap();
        std::fs::write(dir.path().join("apps/web.yaml"), "kind: x\n").unwrap();
        std::fs::write(dir.path().join("apps/.git/HEAD"), "ref\n").unwrap();
        std::fs::write(dir.path().join(".tether.yaml"), "a: 1\n").unwrap();
        let first = pack(dir.path()).unwrap();
        // The same content written again: a later modification time.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(dir.path().join("apps/web.yaml"), "kind: x\n").unwrap();
        assert_eq!(pack(dir.path()).unwrap(), first);
        let out = tempfile::tempdir().unwrap();
        let root = out.path().join("root");
        std::fs::create_dir(&root).unwrap();
        unpack(first.as_slice(), &root).unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("apps/web.yaml")).unwrap(),
            "kind: x\n"
        );
        assert!(root.join(".tether.yaml").is_file());
        assert!(!root.join("apps/.git").exists());
    }

    #[test]
    fn hostile_entries_are_refused_before_anything_escapes() {
        let regular = tar::EntryType::Regular;
        let symlink = tar::EntryType::Symlink;
        for (entries, expected) in [
            (vec![("../evil.yaml", regular, &b"x"[..], None)], "goes up"),
            (
                vec![("/etc/evil.yaml", regular, &b"x"[..], None)],
                "absolute",
            ),
            (
                vec![("up", symlink, &b""[..], Some("../.."))],
                "could leave",
            ),
            (
                vec![("abs", symlink, &b""[..], Some("/etc"))],
                "could leave",
            ),
            (
                vec![
                    ("d", symlink, &b""[..], Some("sub")),
                    ("d/evil.yaml", regular, &b"x"[..], None),
                ],
                "through a symbolic link",
            ),
            (
                vec![("h", tar::EntryType::Link, &b""[..], Some("x"))],
                "hard links",
            ),
        ] {
            let out = tempfile::tempdir().unwrap();
            let root = out.path().join("root");
            std::fs::create_dir(&root).unwrap();
            let error = unpack(tar_of(&entries).as_slice(), &root).unwrap_err();
            assert!(error.to_string().contains(expected), "{error}");
            assert!(!out.path().join("evil.yaml").exists());
        }
    }

    #[test]
    fn a_file_past_the_core_limit_is_refused_before_it_is_written() {
        let big = vec![b'a'; usize::try_from(FILE_BYTES).unwrap() + 1];
        let archive = tar_of(&[("big.yaml", tar::EntryType::Regular, &big, None)]);
        let out = tempfile::tempdir().unwrap();
        let error = unpack(archive.as_slice(), out.path()).unwrap_err();
        assert!(
            matches!(error, ArchiveError::FileTooLarge { bytes, .. } if bytes == FILE_BYTES + 1)
        );
        assert!(!out.path().join("big.yaml").exists());
    }
}
