//! The book (`docs/book`, mdBook) as a reader meets it: every page listed in
//! SUMMARY.md and every listed page there, every link landing on a page and a heading
//! that exist, pages short enough to read at once, the offline getting-started page's
//! commands running as written, and the facts the book and README state (the Rust
//! version, the demo's steps are checked in `tests/control_plane/demo.rs`) equal to
//! the code's. `scripts/book build` renders it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use pulldown_cmark::{Event, Parser, Tag, TagEnd};
use tether_testkit::book;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn src() -> PathBuf {
    root().join("docs/book/src")
}

/// Every Markdown page under `docs/book/src`, by its path there.
fn pages() -> BTreeMap<String, String> {
    walkdir::WalkDir::new(src())
        .into_iter()
        .map(Result::unwrap)
        .filter(|e| e.path().extension().is_some_and(|x| x == "md"))
        .map(|e| {
            let name = e
                .path()
                .strip_prefix(src())
                .unwrap()
                .to_string_lossy()
                .into_owned();
            (name, std::fs::read_to_string(e.path()).unwrap())
        })
        .collect()
}

/// The id mdBook gives a heading: lower case, alphanumerics, `-` and `_` kept, spaces
/// as hyphens, everything else dropped; a repeated id gets `-1`, `-2`, ….
fn heading_ids(markdown: &str) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut heading: Option<String> = None;
    for event in Parser::new(markdown) {
        match event {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::Text(text) | Event::Code(text) => {
                if let Some(h) = &mut heading {
                    h.push_str(&text);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                let text = heading.take().unwrap_or_default();
                let id: String = text
                    .trim()
                    .to_lowercase()
                    .chars()
                    .filter_map(|c| match c {
                        ' ' => Some('-'),
                        c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                        _ => None,
                    })
                    .collect();
                let n = seen.entry(id.clone()).or_default();
                ids.insert(if *n == 0 {
                    id.clone()
                } else {
                    format!("{id}-{n}")
                });
                *n += 1;
            }
            _ => {}
        }
    }
    ids
}

/// The link and image targets of `markdown` (outside code).
fn targets(markdown: &str) -> Vec<String> {
    Parser::new(markdown)
        .filter_map(|event| match event {
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                Some(dest_url.into_string())
            }
            _ => None,
        })
        .collect()
}

/// The broken relative links of the file `from` (a path under `base`): each a target
/// whose file does not exist, or whose anchor is no heading of its page.
fn broken_links(base: &Path, from: &str, markdown: &str) -> Vec<String> {
    let dir = Path::new(from).parent().unwrap_or(Path::new(""));
    let mut broken = Vec::new();
    for target in targets(markdown) {
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (file, anchor) = target.split_once('#').unwrap_or((&target, ""));
        let path = if file.is_empty() {
            PathBuf::from(from)
        } else {
            dir.join(file)
        };
        let full = base.join(&path);
        let Ok(text) = std::fs::read_to_string(&full)
            .or_else(|_| std::fs::metadata(&full).map(|_| String::new()))
        else {
            broken.push(format!("{from}: {target} (no file {})", path.display()));
            continue;
        };
        if !anchor.is_empty() && !heading_ids(&text).contains(anchor) {
            broken.push(format!(
                "{from}: {target} (no heading #{anchor} in {})",
                path.display()
            ));
        }
    }
    broken
}

#[test]
fn every_link_of_the_book_and_of_the_repository_s_own_pages_lands() {
    let mut broken = Vec::new();
    for (name, text) in pages() {
        broken.extend(broken_links(&src(), &name, &text));
    }
    for file in [
        "README.md",
        "CONTRIBUTING.md",
        "SECURITY.md",
        "CHANGELOG.md",
        "ARCHITECTURE.md",
    ] {
        let text = std::fs::read_to_string(root().join(file)).unwrap();
        broken.extend(broken_links(root(), file, &text));
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn summary_lists_every_page_and_every_page_it_lists_exists() {
    let pages = pages();
    let summary = &pages["SUMMARY.md"];
    let listed: BTreeSet<String> = targets(summary).into_iter().collect();
    let missing: Vec<&String> = listed.iter().filter(|p| !pages.contains_key(*p)).collect();
    assert!(
        missing.is_empty(),
        "SUMMARY.md lists pages that do not exist: {missing:?}"
    );
    let unlisted: Vec<&String> = pages
        .keys()
        .filter(|p| *p != "SUMMARY.md" && !listed.contains(*p))
        .collect();
    assert!(
        unlisted.is_empty(),
        "pages SUMMARY.md does not list: {unlisted:?}"
    );
}

/// A page a person reads at once: about 250 lines of prose. The reference's generated
/// pages are looked up, not read through: each of their sections is one command, kind
/// or resource.
#[test]
fn every_page_but_the_reference_reads_at_once() {
    let long: Vec<String> = pages()
        .into_iter()
        .filter(|(name, _)| !name.starts_with("reference/"))
        .filter(|(_, text)| text.lines().count() > 250)
        .map(|(name, text)| format!("{name}: {} lines", text.lines().count()))
        .collect();
    assert!(
        long.is_empty(),
        "pages too long to read at once (split them): {long:?}"
    );
}

#[test]
fn readme_is_short_and_leads_into_the_book() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 200,
        "README.md has {lines} lines: it points into the book instead"
    );
    for page in [
        "getting-started/offline.md",
        "getting-started/your-cluster.md",
        "migrate/from-flux.md",
        "migrate/from-argo-cd.md",
    ] {
        assert!(
            readme.contains(&format!("docs/book/src/{page}")),
            "README links {page}"
        );
    }
}

/// The Rust version the README and the book ask for is the one Cargo.toml builds with.
#[test]
fn the_rust_version_stated_is_cargo_s() {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let wanted = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .unwrap();
    let mut texts: Vec<(String, String)> = pages().into_iter().collect();
    for file in ["README.md", "CONTRIBUTING.md"] {
        texts.push((
            file.to_string(),
            std::fs::read_to_string(root().join(file)).unwrap(),
        ));
    }
    let mut stated = 0;
    for (name, text) in texts {
        for (i, _) in text.match_indices("Rust 1.") {
            let version: String = text[i + 5..]
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            let version = version.trim_end_matches('.');
            assert_eq!(
                version, wanted,
                "{name} says Rust {version}; Cargo.toml's rust-version is {wanted}"
            );
            stated += 1;
        }
    }
    assert!(stated > 0, "the book says which Rust it needs");
}

/// The corpus counts the book states are the corpus's (README once said 42 invalid
/// repositories where there were 53).
#[test]
fn the_corpus_counts_stated_are_the_corpus_s() {
    let page = book::page(root(), "contributing/tests.md");
    let page = page.split_whitespace().collect::<Vec<_>>().join(" ");
    for (kind, word) in [("invalid", "invalid repositories"), ("valid", "valid ones")] {
        let count = std::fs::read_dir(root().join("tests/cases").join(kind))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().is_dir())
            .count();
        let stated = format!("{count} {word}");
        assert!(
            page.contains(&stated),
            "contributing/tests.md should say \"{stated}\" (tests/cases/{kind} holds {count})"
        );
    }
}

/// The offline page, followed as written from a clone's root: no cluster, no
/// kubeconfig (the page's `kubectl create --dry-run=client` needs none).
#[test]
fn the_offline_getting_started_page_runs_as_written() {
    let page = book::page(root(), "getting-started/offline.md");
    let script = book::script(&page, &["git clone", "cargo install"]);
    for dir in ["/tmp/tether-broken", "/tmp/tether-mine"] {
        let _ = std::fs::remove_dir_all(dir);
    }
    let path = tether_testkit::cluster::reader_path(Path::new(env!("CARGO_BIN_EXE_tether")));
    let home = tempfile::tempdir().unwrap();
    let out = Command::new("bash")
        .args(["-c", &script])
        .current_dir(root())
        .env("PATH", path)
        .env("HOME", home.path())
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{script}\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    // What the page says the reader sees.
    assert!(
        stdout.contains("examples/models: 35 models in 8 files: valid"),
        "{stdout}"
    );
    assert!(
        stdout.contains("slices.yaml:7:27: error: Slice \"web\""),
        "{stdout}"
    );
    assert!(
        stdout.contains("flowchart"),
        "graph draws Mermaid: {stdout}"
    );
    assert!(
        stdout.contains("/tmp/tether-mine: 1 model in 1 file: valid"),
        "{stdout}"
    );
}

/// `scripts/book build` renders the book (mdBook fails on a page SUMMARY.md lists
/// that is missing, and on a broken `{{#include}}`).
#[test]
fn the_book_builds() {
    let out = Command::new(root().join("scripts/book"))
        .arg("build")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "scripts/book build: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(root().join("target/book/index.html").exists());
}

/// The migration pages' examples (`docs/book/examples/migrate/*`, one repository per
/// page) validate and render, charts and overlays through the real Helm and Kustomize.
#[test]
fn the_migration_pages_examples_validate_and_render() {
    let tools = tether_testkit::tools::helm_tools();
    let examples = root().join("docs/book/examples/migrate");
    let mut checked = 0;
    for entry in std::fs::read_dir(&examples).unwrap() {
        let dir = entry.unwrap().path();
        for command in ["validate", "render"] {
            let out = Command::new(env!("CARGO_BIN_EXE_tether"))
                .arg(command)
                .arg(&dir)
                .envs(tools.env())
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "tether {command} {}: {}{}",
                dir.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        checked += 1;
    }
    assert_eq!(
        checked, 6,
        "Flux, Argo CD, XOS, Murano, kolla-kubernetes, StarlingX"
    );
}
