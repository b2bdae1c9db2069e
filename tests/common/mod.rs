//! Helpers shared by the integration tests.

use std::path::Path;

/// Compares `actual` with the snapshot file at `path`. With `TETHER_BLESS=1` the file
/// is (re)written instead, to be reviewed in the diff before committing.
pub fn assert_snapshot(path: &Path, actual: &str) {
    if std::env::var_os("TETHER_BLESS").is_some() {
        std::fs::write(path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(path).unwrap_or_else(|_| {
        panic!(
            "no snapshot at {}: run with TETHER_BLESS=1 and review it",
            path.display()
        )
    });
    if expected != actual {
        let diff = similar::TextDiff::from_lines(&expected, actual)
            .unified_diff()
            .context_radius(3)
            .header("expected", "actual")
            .to_string();
        panic!("{} does not match:\n{diff}", path.display());
    }
}
