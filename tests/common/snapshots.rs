//! Data-driven snapshot cases: every `<dir>/*.<ext>` is an input whose expected output
//! is the `.expected` file beside it. `TETHER_BLESS=1` rewrites the expectations.

use std::path::Path;

/// Runs `run` on every case of `dir` (at least `minimum` of them) and fails with every
/// case whose output differs from its expectation.
pub fn check(dir: &str, ext: &str, minimum: usize, run: impl Fn(&str) -> String) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let bless = std::env::var_os("TETHER_BLESS").is_some();
    let mut cases: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    cases.sort();
    assert!(cases.len() >= minimum, "cases missing in {}", dir.display());
    let mut failures = Vec::new();
    for path in cases {
        let actual = run(&std::fs::read_to_string(&path).unwrap());
        let expected_path = path.with_extension("expected");
        if bless {
            std::fs::write(&expected_path, &actual).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if actual != expected {
            failures.push(format!("{}:\n{actual}", path.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
