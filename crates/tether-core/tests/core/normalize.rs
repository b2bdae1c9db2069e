//! Normalization of hand-written objects, data-driven: each `tests/normalize/*.yaml`
//! holds objects as people write them; `*.expected` beside it holds what tether applies.
//! `tests/normalize/quantities.txt` holds quantities and the spelling the API server
//! itself stored for them.

use std::path::Path;

use serde_json::Value;
use tether_core::normalize::{canonical_quantity, normalize, place};
use tether_testkit::snapshot::Cases;

/// Each document normalized, then placed as discovery would for its kind (a
/// `# namespaced: false` line in the document says the kind is cluster-scoped).
fn run(text: &str) -> String {
    text.split("\n---\n")
        .map(|document| {
            let mut object: Value = serde_saphyr::from_str(document).unwrap();
            normalize(&mut object);
            let namespaced = !document.contains("# namespaced: false");
            let namespace = place(&mut object, namespaced);
            format!(
                "# namespace: {}\n{}",
                namespace.as_deref().unwrap_or("(none)"),
                serde_saphyr::to_string(&object).unwrap()
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

#[test]
fn hand_written_objects_normalize_to_their_expectations() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/normalize");
    Cases::files(dir, "yaml")
        .at_least(5)
        .check(|case| run(&std::fs::read_to_string(case).unwrap()));
}

#[test]
fn quantities_are_spelled_as_the_api_server_stores_them() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/normalize/quantities.txt"
    );
    let table = std::fs::read_to_string(path).unwrap();
    let mut wrong = Vec::new();
    let mut count = 0;
    for line in table.lines().filter(|l| !l.starts_with('#')) {
        let (written, stored) = line.split_once(' ').unwrap();
        count += 1;
        let ours = canonical_quantity(written);
        if ours.as_deref() != Some(stored) {
            wrong.push(format!(
                "{written}: the server stores {stored}, we say {ours:?}"
            ));
        }
    }
    assert!(count >= 40, "{count} quantities");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn what_is_not_a_quantity_is_left_to_the_server() {
    for text in ["", "abc", "1.2.3", "1Xi", "--1", "1e", "m"] {
        assert_eq!(canonical_quantity(text), None, "{text:?}");
    }
}

#[test]
fn quantities_compare_by_value() {
    use tether_core::normalize::same_quantity;
    for (a, b) in [
        ("1e+09", "1G"),
        ("0.5", "500m"),
        ("1024Mi", "1Gi"),
        ("2", "2000m"),
    ] {
        assert!(same_quantity(a, b), "{a} = {b}");
    }
    for (a, b) in [("1", "1.5"), ("1Gi", "1G"), ("abc", "abc")] {
        assert!(!same_quantity(a, b), "{a} ≠ {b}");
    }
}
