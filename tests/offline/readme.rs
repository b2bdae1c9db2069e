//! README.md as a newcomer reads it on GitHub: a table of contents that lists every
//! section, in order, and links that land.

use std::collections::BTreeSet;

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap()
}

/// The headings outside code blocks, with their level (2 for `##`).
fn headings(text: &str) -> Vec<(usize, String)> {
    let mut fenced = false;
    let mut found = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        let level = line.chars().take_while(|c| *c == '#').count();
        if !fenced && level > 0 && line[level..].starts_with(' ') {
            found.push((level, line[level + 1..].to_string()));
        }
    }
    found
}

/// The anchor GitHub gives a heading: lower case, punctuation but `-` and `_` gone,
/// spaces as hyphens.
fn anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The `[text](#anchor)` links of `text`.
fn links(text: &str) -> Vec<(String, String)> {
    text.split("](#")
        .skip(1)
        .zip(text.split("](#"))
        .map(|(after, before)| {
            let label = before.rsplit('[').next().unwrap_or_default().to_string();
            let target = after.split(')').next().unwrap_or_default().to_string();
            (label, target)
        })
        .collect()
}

#[test]
fn the_table_of_contents_lists_every_section_in_order() {
    let readme = readme();
    let sections: Vec<String> = headings(&readme)
        .into_iter()
        .filter(|(level, _)| *level == 2)
        .map(|(_, heading)| heading)
        .collect();
    let first_section = readme.find("\n## ").unwrap();
    let contents: Vec<(String, String)> = readme[..first_section]
        .lines()
        .filter(|line| line.starts_with("- ["))
        .flat_map(links)
        .collect();
    let expected: Vec<(String, String)> = sections
        .iter()
        .map(|heading| (heading.clone(), anchor(heading)))
        .collect();
    assert_eq!(contents, expected);
    assert_eq!(sections[0], "Install");
    assert_eq!(sections.last().map(String::as_str), Some("Development"));
}

#[test]
fn every_link_inside_the_readme_lands_on_a_heading() {
    let readme = readme();
    let anchors: BTreeSet<String> = headings(&readme)
        .into_iter()
        .map(|(_, heading)| anchor(&heading))
        .collect();
    let links = links(&readme);
    assert!(links.len() > 20, "{links:?}");
    for (label, target) in links {
        assert!(
            anchors.contains(&target),
            "[{label}](#{target}) lands on no heading"
        );
    }
}
