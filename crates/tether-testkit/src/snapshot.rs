//! Snapshots: what a test prints, compared with a file checked in beside it. With
//! `TETHER_BLESS=1` the files are (re)written instead, to be reviewed in the diff
//! before committing; without it a mismatch fails with a unified diff.
//!
//! [`check`] compares one file; [`Cases`] runs a directory of data-driven cases, each
//! an input whose expected output is a file beside it.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

/// Whether this run rewrites the snapshots (`TETHER_BLESS` is set).
fn blessing() -> bool {
    std::env::var_os("TETHER_BLESS").is_some()
}

/// Compares `actual` with the snapshot file at `path` (rewrites it when blessing).
pub fn check(path: &Path, actual: &str) {
    if let Err(failure) = compare(path, actual, blessing()) {
        panic!("{failure}");
    }
}

/// The snapshot at `path` against `actual`: written when `bless`, else the reason they
/// differ (with a diff).
fn compare(path: &Path, actual: &str, bless: bool) -> Result<(), String> {
    if bless {
        std::fs::write(path, actual)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        return Ok(());
    }
    let Ok(expected) = std::fs::read_to_string(path) else {
        return Err(format!(
            "no snapshot at {}: run with TETHER_BLESS=1 and review it",
            path.display()
        ));
    };
    if expected == actual {
        return Ok(());
    }
    let diff = similar::TextDiff::from_lines(&expected, actual)
        .unified_diff()
        .context_radius(3)
        .header("expected", "actual")
        .to_string();
    Err(format!(
        "{} does not match (TETHER_BLESS=1 rewrites it):\n{diff}",
        path.display()
    ))
}

/// Where the cases of a directory are, and where each one's expectation is.
#[derive(Clone, Debug)]
enum Layout {
    /// `<dir>/*.<ext>`, each expecting `<case>.expected` beside it.
    Files { ext: String },
    /// `<dir>/*/`, each expecting the file `<case>/<expected>`.
    Dirs { expected: String },
}

/// A directory of data-driven cases: each case is run, and what it returns is compared
/// with its expectation (or, when blessing, written to it). Every case runs, also
/// after one failed or panicked, and the failures are reported together.
#[derive(Clone, Debug)]
pub struct Cases {
    dir: PathBuf,
    layout: Layout,
    minimum: usize,
}

impl Cases {
    /// Every `<dir>/*.<ext>` file is a case; its expectation is `<case>.expected`.
    pub fn files(dir: impl Into<PathBuf>, ext: &str) -> Cases {
        Cases {
            dir: dir.into(),
            layout: Layout::Files { ext: ext.into() },
            minimum: 1,
        }
    }

    /// Every directory below `dir` is a case; its expectation is the file `expected`
    /// inside it.
    pub fn dirs(dir: impl Into<PathBuf>, expected: &str) -> Cases {
        Cases {
            dir: dir.into(),
            layout: Layout::Dirs {
                expected: expected.into(),
            },
            minimum: 1,
        }
    }

    /// Fails unless there are at least `minimum` cases (so that a moved or emptied
    /// directory is not a silent pass). One by default.
    pub fn at_least(mut self, minimum: usize) -> Cases {
        self.minimum = minimum;
        self
    }

    /// The cases' paths, sorted.
    fn paths(&self) -> Vec<PathBuf> {
        let entries = std::fs::read_dir(&self.dir)
            .unwrap_or_else(|e| panic!("cannot read the cases in {}: {e}", self.dir.display()));
        let mut cases: Vec<PathBuf> = entries
            .map(|entry| entry.unwrap().path())
            .filter(|path| match &self.layout {
                Layout::Files { ext } => {
                    path.is_file() && path.extension().is_some_and(|x| x == ext.as_str())
                }
                Layout::Dirs { .. } => path.is_dir(),
            })
            .collect();
        cases.sort();
        cases
    }

    /// Where the expectation of `case` is.
    fn expectation(&self, case: &Path) -> PathBuf {
        match &self.layout {
            Layout::Files { .. } => case.with_extension("expected"),
            Layout::Dirs { expected } => case.join(expected),
        }
    }

    /// Runs `run` on every case (its path) and compares what it returns with the
    /// case's expectation; `TETHER_BLESS=1` rewrites the expectations instead. Fails
    /// with every case that differs or panicked; returns how many cases there were.
    pub fn check(&self, run: impl Fn(&Path) -> String) -> usize {
        self.check_blessing(blessing(), run)
    }

    fn check_blessing(&self, bless: bool, run: impl Fn(&Path) -> String) -> usize {
        let cases = self.paths();
        assert!(
            cases.len() >= self.minimum,
            "{} has {} cases, fewer than {}",
            self.dir.display(),
            cases.len(),
            self.minimum
        );
        let mut failures = Vec::new();
        for case in &cases {
            let outcome = catch_unwind(AssertUnwindSafe(|| run(case)))
                .map_err(|panic| {
                    let message = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "panicked".into());
                    format!("{}: {message}", case.display())
                })
                .and_then(|actual| compare(&self.expectation(case), &actual, bless));
            if let Err(failure) = outcome {
                failures.push(failure);
            }
        }
        assert!(
            failures.is_empty(),
            "{} of {} cases failed:\n{}",
            failures.len(),
            cases.len(),
            failures.join("\n")
        );
        cases.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory with two `.txt` cases whose expectations are their text upper-cased,
    /// one of them stale.
    fn cases() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text, expected) in [("a", "one\n", "ONE\n"), ("b", "two\n", "stale\n")] {
            std::fs::write(dir.path().join(format!("{name}.txt")), text).unwrap();
            std::fs::write(dir.path().join(format!("{name}.expected")), expected).unwrap();
        }
        dir
    }

    fn upper(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap().to_uppercase()
    }

    #[test]
    fn a_stale_expectation_fails_with_a_diff_and_every_case_runs() {
        let dir = cases();
        let failure = catch_unwind(|| Cases::files(dir.path(), "txt").check_blessing(false, upper))
            .unwrap_err();
        let message = failure.downcast_ref::<String>().unwrap();
        assert!(message.starts_with("1 of 2 cases failed:"), "{message}");
        assert!(message.contains("b.expected does not match"), "{message}");
        assert!(message.contains("-stale\n+TWO\n"), "{message}");
    }

    #[test]
    fn blessing_rewrites_the_expectations_then_they_match() {
        let dir = cases();
        let cases = Cases::files(dir.path(), "txt").at_least(2);
        assert_eq!(cases.check_blessing(true, upper), 2);
        let b = std::fs::read_to_string(dir.path().join("b.expected")).unwrap();
        assert_eq!(b, "TWO\n");
        assert_eq!(cases.check_blessing(false, upper), 2);
    }

    #[test]
    fn a_panicking_case_is_reported_with_the_others() {
        let dir = cases();
        let failure = catch_unwind(|| {
            Cases::files(dir.path(), "txt").check_blessing(false, |path| {
                assert!(!path.ends_with("a.txt"), "a is broken");
                upper(path)
            })
        })
        .unwrap_err();
        let message = failure.downcast_ref::<String>().unwrap();
        assert!(message.starts_with("2 of 2 cases failed:"), "{message}");
        assert!(message.contains("a.txt: a is broken"), "{message}");
    }

    #[test]
    fn too_few_cases_fail() {
        let dir = cases();
        let failure = catch_unwind(|| {
            Cases::files(dir.path(), "txt")
                .at_least(3)
                .check_blessing(false, upper)
        })
        .unwrap_err();
        let message = failure.downcast_ref::<String>().unwrap();
        assert!(message.contains("has 2 cases, fewer than 3"), "{message}");
    }

    #[test]
    fn directory_cases_expect_a_file_inside_them() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("case")).unwrap();
        std::fs::write(dir.path().join("case/expected.txt"), "case").unwrap();
        std::fs::write(dir.path().join("not-a-case.txt"), "").unwrap();
        let cases = Cases::dirs(dir.path(), "expected.txt");
        let count = cases.check_blessing(false, |path| {
            path.file_name().unwrap().to_string_lossy().into_owned()
        });
        assert_eq!(count, 1);
    }
}
