//! Image updates as data: each `tests/image/<case>/` holds a repository (`in/`), the
//! versions its policies chose (`updates`: `policy image tag [digest] | why` a line), data files (`assets/`),
//! the files the edit must write, byte for byte (`out/`), and `expected.txt`: the
//! markers found, each policy's targets, the commit message or the refusal
//! (`TETHER_BLESS=1` rewrites `out/` and `expected.txt`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tether_core::image_automation::markers;
use tether_core::image_automation::update::{self, Update};
use tether_core::source::{Sealing, SourceFile, SourceFiles};
use tether_testkit::snapshot::Cases;

/// The files below `dir`, by path relative to it.
fn tree(dir: &Path) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return files;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            for (inner, text) in tree(&path) {
                files.insert(format!("{name}/{inner}"), text);
            }
        } else {
            files.insert(name, std::fs::read_to_string(&path).unwrap());
        }
    }
    files
}

/// The repository (`in/`): a `*.sops.yaml` file stands for one opened from sops; the
/// files of `assets/`, if any, are data files models take (not models).
fn repository(case: &Path) -> SourceFiles {
    let files = tree(&case.join("in"))
        .into_iter()
        .map(|(path, text)| {
            let mut file = SourceFile::new(path.clone(), text.clone());
            if path.ends_with(".sops.yaml") {
                file.sealing = Sealing::Opened { stored: text };
            }
            file
        })
        .collect();
    let assets = tree(&case.join("assets"))
        .into_iter()
        .map(|(path, text)| (path, text.into_bytes()))
        .collect();
    SourceFiles::from_files(files).with_assets(assets)
}

fn run_case(case: &Path) -> String {
    let files = repository(case);
    let mut report = String::from("## markers\n");
    let (found, errors) = markers::find(&files);
    for marker in found {
        report.push_str(&format!("{marker:?}\n"));
    }
    for error in errors {
        report.push_str(&format!("error: {error}\n"));
    }
    let mut updates = Vec::new();
    for line in std::fs::read_to_string(case.join("updates"))
        .unwrap()
        .lines()
    {
        let (chosen, why) = line.split_once(" | ").unwrap();
        let words: Vec<&str> = chosen.split(' ').collect();
        let (policy, image, tag) = (words[0], words[1], words[2]);
        report.push_str(&format!("## targets of {policy} ({image})\n"));
        match update::targets(&files, policy, image) {
            Ok(targets) => {
                for target in targets {
                    report.push_str(&format!("{target:?}\n"));
                    updates.push(Update {
                        policy: policy.to_string(),
                        image: image.to_string(),
                        target,
                        to_tag: tag.to_string(),
                        to_digest: words.get(3).map(|d| d.to_string()),
                        why: why.to_string(),
                    });
                }
            }
            Err(e) => report.push_str(&format!("error: {e}\n")),
        }
    }
    report.push_str("## edit\n");
    let out = case.join("out");
    match update::plan(&files, &updates) {
        Ok(edit) => {
            assert_eq!(
                edit.summary,
                update::message(&updates).lines().next().unwrap()
            );
            report.push_str(&update::message(&updates));
            check_written(&out, &edit.writes);
        }
        Err(e) => {
            report.push_str(&format!("error: {e}\n"));
            check_written(&out, &BTreeMap::new());
        }
    }
    report.replace('\r', "␍")
}

/// The files written are those of `out/`, byte for byte.
fn check_written(out: &Path, writes: &BTreeMap<String, String>) {
    if std::env::var_os("TETHER_BLESS").is_some() {
        let _ = std::fs::remove_dir_all(out);
        for (path, text) in writes {
            let path = out.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        return;
    }
    let expected = tree(out);
    assert_eq!(
        writes.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>(),
        "the files written"
    );
    for (path, text) in writes {
        assert!(
            text == &expected[path],
            "{path} differs from out/{path}:\n{text}"
        );
    }
}

#[test]
fn chosen_images_are_written_where_policies_write_and_nothing_else_changes() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/image");
    Cases::dirs(dir, "expected.txt")
        .at_least(10)
        .check(run_case);
}

#[test]
fn a_new_value_is_plain_only_where_plain_reads_back_as_the_same_string() {
    use tether_core::edit::spell_string;
    let plain = Some("x");
    let cases = [
        ("nginx:1.27.0", plain, "nginx:1.27.0"),
        (
            "registry.local:5000/shop/api:2.5.0@sha256:ab12",
            plain,
            "registry.local:5000/shop/api:2.5.0@sha256:ab12",
        ),
        ("2.4.1", plain, "2.4.1"),
        (
            "127.0.0.1:5000/shop/app:1.1.0",
            plain,
            "127.0.0.1:5000/shop/app:1.1.0",
        ),
        ("10.0.0.7/app", plain, "10.0.0.7/app"),
        ("1.25-alpine", plain, "1.25-alpine"),
        ("v1.10", plain, "v1.10"),
        ("1.10", plain, "\"1.10\""),
        ("10", plain, "\"10\""),
        ("1e3", plain, "\"1e3\""),
        ("2024-01-01", plain, "\"2024-01-01\""),
        ("0x1F", plain, "\"0x1F\""),
        ("1:20", plain, "\"1:20\""),
        ("on", plain, "\"on\""),
        ("nginx:", plain, "\"nginx:\""),
        ("", plain, "\"\""),
        ("1.10", Some("'7.2'"), "'1.10'"),
        ("1.10", Some("\"\""), "\"1.10\""),
    ];
    for (value, written, spelled) in cases {
        assert_eq!(
            spell_string(value, written),
            spelled,
            "{value} written like {written:?}"
        );
    }
}

/// A Pod whose container image is marked for policy `web`.
fn marked_pod(image: &str) -> SourceFiles {
    let text = format!(
        "kind: Pod\nspec:\n  containers:\n    - image: {image} # tether:image-policy web\n"
    );
    SourceFiles::from_files(vec![SourceFile::new("pod.yaml", text)])
}

fn update_to(target: update::Target, tag: &str) -> Update {
    Update {
        policy: "web".into(),
        image: "nginx".into(),
        target,
        to_tag: tag.into(),
        to_digest: None,
        why: "semver".into(),
    }
}

#[test]
fn a_value_changed_since_its_target_was_read_is_not_overwritten() {
    let read = update::targets(&marked_pod("nginx:1.25"), "web", "nginx").unwrap();
    let updates = [update_to(read[0].clone(), "1.26")];
    let error = update::plan(&marked_pod("nginx:1.27"), &updates).unwrap_err();
    assert_eq!(
        error.to_string(),
        "pod.yaml:4:14: the value image policy web read there has changed since (the files are not those its targets came from)"
    );
    let edit = update::plan(&marked_pod("nginx:1.25"), &updates).unwrap();
    assert_eq!(
        edit.writes["pod.yaml"],
        "kind: Pod\nspec:\n  containers:\n    - image: nginx:1.26 # tether:image-policy web\n"
    );
    assert_eq!(edit.summary, "images: web nginx 1.25 → 1.26");
}

#[test]
fn two_updates_of_one_value_to_different_versions_are_refused() {
    let files = marked_pod("nginx:1.25");
    let target = update::targets(&files, "web", "nginx").unwrap().remove(0);
    let updates = [update_to(target.clone(), "1.26"), update_to(target, "1.27")];
    let error = update::plan(&files, &updates).unwrap_err();
    assert_eq!(
        error.to_string(),
        "pod.yaml:4:14: two updates write different values here: nginx:1.26 and nginx:1.27"
    );
}
