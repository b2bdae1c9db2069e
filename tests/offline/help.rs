//! `--help` as a newcomer reads it: global options apart from a command's own, and
//! connection and decryption flags only on the commands that use them.

use std::collections::BTreeMap;
use std::process::Command;

/// The commands that never reach a cluster: their help has no connection flags.
const OFFLINE: [&str; 16] = [
    "push artifact",
    // A fleet hub, through its own --hub-kubeconfig, never a cluster.
    "fleet join",
    "fleet revoke",
    "fleet status",
    // A registry and Git, never a cluster.
    "images",
    "validate",
    "render",
    "graph",
    "crd",
    "schema",
    "completions",
    "man",
    "secret encrypt",
    "secret decrypt",
    "secret edit",
    "secret keygen",
];

/// The commands that read no models: their help has no --age-key-file.
const NO_MODELS: [&str; 25] = [
    "push artifact",
    // It reads an attestation and the live objects it names, never models.
    "verify",
    "fleet join",
    "fleet revoke",
    "fleet status",
    // It reads the models' policies and writes plain values: a sealed (sops) file is
    // never rewritten, so it decrypts nothing.
    "images",
    "install",
    "uninstall",
    "check",
    "version",
    "suspend",
    "resume",
    "tree",
    "handover",
    "discover",
    "crd",
    "schema",
    "completions",
    "man",
    "secret encrypt",
    "secret keygen",
    "reconcile",
    "approve",
    "restart-containers",
    "events",
];

const CONNECTION: [&str; 6] = [
    "--kubeconfig",
    "--context",
    "--request-timeout",
    "--as",
    "--as-group",
    "--cluster",
];

const GLOBAL: [&str; 3] = ["--log-level", "--log-format", "--color"];

fn help(command: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(command)
        .arg("--help")
        .env("TERM", "dumb")
        .output()
        .unwrap();
    assert!(output.status.success(), "tether {command:?} --help");
    String::from_utf8(output.stdout).unwrap()
}

/// The help's sections by heading ("Options", "Connection", ...): each section's lines.
fn sections(help: &str) -> BTreeMap<String, String> {
    let mut sections = BTreeMap::new();
    let mut current = String::from("(top)");
    for line in help.lines() {
        let heading = line
            .strip_suffix(':')
            .filter(|h| !h.starts_with(' ') && !h.is_empty() && !h.contains("  "));
        match heading {
            Some(heading) => current = heading.to_string(),
            None => {
                let text: &mut String = sections.entry(current.clone()).or_default();
                text.push_str(line);
                text.push('\n');
            }
        }
    }
    sections
}

/// The long flags a section defines, from its flag lines ("  -o, --output <FORMAT>" or
/// "      --kubeconfig <KUBECONFIG>"; descriptions are indented further).
fn flags(section: &str) -> Vec<String> {
    section
        .lines()
        .filter_map(|line| {
            let flag = match line.strip_prefix("  -") {
                Some(short) if short.as_bytes().get(1) == Some(&b',') => short[2..].trim_start(),
                _ => line.strip_prefix("      --").map(|_| line.trim_start())?,
            };
            flag.split_whitespace().next().map(str::to_string)
        })
        .collect()
}

/// Every command with subcommands' leaves too, as the words that name it.
fn commands() -> Vec<Vec<String>> {
    fn walk(path: Vec<String>, found: &mut Vec<Vec<String>>) {
        let words: Vec<&str> = path.iter().map(String::as_str).collect();
        let Some(listed) = sections(&help(&words)).remove("Commands") else {
            found.push(path);
            return;
        };
        // A command's line is indented by two; its description's next lines by more.
        let names = listed.lines().filter_map(|line| {
            let name = line.strip_prefix("  ").filter(|l| !l.starts_with(' '))?;
            name.split_whitespace().next()
        });
        for name in names {
            if name != "help" {
                let mut sub = path.clone();
                sub.push(name.to_string());
                walk(sub, found);
            }
        }
    }
    let mut found = Vec::new();
    walk(Vec::new(), &mut found);
    found
}

#[test]
fn an_offline_command_shows_no_connection_flags() {
    let validate = help(&["validate"]);
    assert!(!validate.contains("--kubeconfig"), "{validate}");
    assert!(!validate.contains("Connection:"), "{validate}");
    let refused = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args([
            "validate",
            "--kubeconfig",
            "/nonexistent",
            "examples/models",
        ])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
}

#[test]
fn apply_lists_its_connection_flags_under_their_own_heading() {
    let sections = sections(&help(&["apply"]));
    let connection = flags(&sections["Connection"]);
    assert_eq!(connection, CONNECTION, "{sections:#?}");
    assert_eq!(flags(&sections["Decryption"]), ["--age-key-file"]);
    assert!(!flags(&sections["Options"]).contains(&"--kubeconfig".to_string()));
}

#[test]
fn every_command_lists_global_options_apart_and_connection_flags_only_where_it_connects() {
    let commands = commands();
    assert!(commands.len() > 25, "{commands:?}");
    for command in commands {
        let name = command.join(" ");
        let words: Vec<&str> = command.iter().map(String::as_str).collect();
        let sections = sections(&help(&words));
        // The flags under `heading`: exactly `wanted`, or no such heading at all.
        let expect = |heading: &str, wanted: Option<&[&str]>| {
            let found = sections.get(heading).map(|s| flags(s));
            let wanted = wanted.map(|w| w.iter().map(|f| f.to_string()).collect::<Vec<_>>());
            assert_eq!(
                found, wanted,
                "tether {name} --help, {heading}: {sections:#?}"
            );
        };
        expect("Global options", Some(&GLOBAL));
        let connects = !OFFLINE.contains(&name.as_str());
        expect("Connection", connects.then_some(&CONNECTION[..]));
        let reads_models = !NO_MODELS.contains(&name.as_str());
        expect(
            "Decryption",
            reads_models.then_some(&["--age-key-file"][..]),
        );
        for (heading, text) in &sections {
            if heading != "Global options" {
                let own = flags(text);
                assert!(
                    GLOBAL.iter().all(|g| !own.contains(&g.to_string())),
                    "tether {name}: a global option under {heading}"
                );
            }
        }
    }
}

/// The manual pages `tether man --dir` writes, by file name.
fn manual_pages() -> BTreeMap<String, String> {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["man", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&path).unwrap())
        })
        .collect()
}

/// The exit codes a page's EXIT STATUS section lists.
fn exit_codes(page: &str) -> Option<Vec<u8>> {
    let (_, section) = page.split_once(".SH \"EXIT STATUS\"\n")?;
    let section = section.split("\n.SH").next().unwrap_or_default();
    let lines: Vec<&str> = section.lines().collect();
    Some(
        lines
            .windows(2)
            .filter(|pair| pair[0] == ".TP")
            .map(|pair| pair[1].parse().unwrap())
            .collect(),
    )
}

#[test]
fn every_command_has_a_manual_page_with_its_exit_status_and_references_only_pages_that_exist() {
    let pages = manual_pages();
    for command in commands() {
        let name = format!("tether-{}.1", command.join("-"));
        assert!(pages.contains_key(&name), "no {name} in {:?}", pages.keys());
    }
    let printed = Command::new(env!("CARGO_BIN_EXE_tether"))
        .arg("man")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8(printed.stdout).unwrap(),
        pages["tether.1"]
    );
    for (name, page) in &pages {
        let codes = exit_codes(page).unwrap_or_else(|| panic!("{name} has no EXIT STATUS"));
        assert!(
            codes.contains(&0) && codes.contains(&2),
            "{name}: {codes:?}"
        );
        let unescaped = page.replace("\\-", "-");
        for (at, _) in unescaped.match_indices("(1)") {
            let start = unescaped[..at]
                .rfind(|c: char| c.is_whitespace())
                .map_or(0, |i| i + 1);
            let reference = &unescaped[start..at];
            if reference.starts_with("tether") {
                let file = format!("{reference}.1");
                assert!(
                    pages.contains_key(&file),
                    "{name} refers to {reference}(1): no such page"
                );
            }
        }
    }
    assert!(
        pages["tether-node-label-assign.1"].contains(".SH \"SEE ALSO\"\ntether\\-node\\-label(1)")
    );
}
