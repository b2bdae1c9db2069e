//! The architecture's rules that the compiler cannot check by itself, checked on the
//! workspace's own files: what the pure core may depend on, that no crate has an
//! import circle between its modules, that nothing below the CLI names a flag, and
//! that only the engine's `driver` paces a retry or a wait. (The core's other rule, no clock, environment
//! or filesystem, is `crates/tether-core/clippy.toml`, which `.ci/run`'s clippy
//! enforces.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Crates that would let the core do I/O, wait or spawn: a client, a runtime, Git,
/// file walks and watches, a server, a broker.
const FORBIDDEN_IN_CORE: &[&str] = &[
    "kube",
    "kube-client",
    "kube-runtime",
    "tokio",
    "tokio-util",
    "futures",
    "futures-util",
    "git2",
    "walkdir",
    "notify",
    "axum",
    "hyper",
    "rskafka",
    "tower",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The packages a crate depends on (normal dependencies, all the way down).
fn normal_dependencies(package: &str) -> BTreeSet<String> {
    let output = Command::new(env!("CARGO"))
        .current_dir(root())
        .args(["tree", "--offline", "-p", package, "-e", "normal"])
        .args(["--prefix", "none", "--format", "{p}"])
        .output()
        .expect("run cargo tree");
    assert!(
        output.status.success(),
        "cargo tree: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Which of [`FORBIDDEN_IN_CORE`] are among `dependencies`, but for `allowed`.
fn forbidden_in(dependencies: &BTreeSet<String>, allowed: &[&str]) -> Vec<String> {
    FORBIDDEN_IN_CORE
        .iter()
        .filter(|name| !allowed.contains(name))
        .filter(|name| dependencies.contains(**name))
        .map(|name| name.to_string())
        .collect()
}

#[test]
fn the_core_depends_on_no_client_runtime_git_or_file_walker() {
    let dependencies = normal_dependencies("tether-core");
    assert!(
        dependencies.contains("serde_json") && dependencies.contains("k8s-openapi"),
        "cargo tree listed {dependencies:?}"
    );
    let found = forbidden_in(&dependencies, &[]);
    assert!(
        found.is_empty(),
        "tether-core depends on {found:?}: the core is pure; move the I/O to tether-engine"
    );
}

/// The sops crate uses age, whose localization brings `futures` (through
/// cookie-factory) and `walkdir` (through rust-embed) along, neither of which tether's
/// sops code uses; everything else the core may not have, it may not have either.
#[test]
fn the_sops_crate_depends_on_no_client_runtime_or_git() {
    let dependencies = normal_dependencies("tether-sops");
    let found = forbidden_in(&dependencies, &["futures", "futures-util", "walkdir"]);
    assert!(found.is_empty(), "tether-sops depends on {found:?}");
}

/// The web page's views and HTML are data in, text out: the daemon's HTTP server and
/// its reads of the cluster stay in tether-daemon.
#[test]
fn the_web_views_depend_on_no_client_runtime_or_server() {
    let dependencies = normal_dependencies("tether-web");
    assert!(
        dependencies.contains("maud"),
        "cargo tree listed {dependencies:?}"
    );
    let found = forbidden_in(&dependencies, &[]);
    assert!(found.is_empty(), "tether-web depends on {found:?}");
}

#[test]
fn the_node_simulator_does_not_link_tether() {
    let dependencies = normal_dependencies("tether-nodesim");
    let tether: Vec<&String> = dependencies
        .iter()
        .filter(|name| name.starts_with("tether") && *name != "tether-nodesim")
        .collect();
    assert!(tether.is_empty(), "tether-nodesim depends on {tether:?}");
}

/// One module of a crate: `model::read` for `src/model/read.rs`.
type ModulePath = Vec<String>;

/// Every module file of a crate's `src/`, by its module path.
fn modules(src: &Path) -> BTreeMap<ModulePath, String> {
    let mut found = BTreeMap::new();
    let mut pending = vec![src.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let relative = path.strip_prefix(src).unwrap().with_extension("");
            let mut module: ModulePath = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                module.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                module.pop();
            }
            let text = std::fs::read_to_string(&path).unwrap();
            found.insert(module, text);
        }
    }
    found
}

/// The code before the first `#[cfg(test)]`, without comments: what the module
/// itself uses (a doc link is no dependency).
fn non_test_code(text: &str) -> String {
    let code = text.split("#[cfg(test)]").next().unwrap_or(text);
    code.lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The modules `text` (the module `at`) refers to through `crate::`, `super::` and
/// `self::` paths, each resolved to the longest module path that is a file, leaving
/// out `at` itself and its ancestors (a folder's `mod.rs` re-exports what it holds).
fn references(at: &ModulePath, text: &str, known: &BTreeSet<ModulePath>) -> BTreeSet<ModulePath> {
    let mut found = BTreeSet::new();
    let text = non_test_code(text);
    let tokens: Vec<&str> = text
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .filter(|t| t.contains("::"))
        .collect();
    for token in tokens {
        let parts: Vec<&str> = token.split("::").filter(|p| !p.is_empty()).collect();
        let Some((&first, rest)) = parts.split_first() else {
            continue;
        };
        let mut path: ModulePath = match first {
            "crate" => Vec::new(),
            "super" => at[..at.len().saturating_sub(1)].to_vec(),
            "self" => at.clone(),
            _ => continue,
        };
        let mut rest = rest.iter().peekable();
        while rest.peek() == Some(&&"super") {
            rest.next();
            path.pop();
        }
        let mut longest = None;
        for part in rest {
            path.push((*part).to_string());
            if known.contains(&path) {
                longest = Some(path.clone());
            }
        }
        if let Some(module) = longest
            && !at.starts_with(&module)
        {
            found.insert(module);
        }
    }
    found
}

/// A circle in the graph, if there is one: the modules along it.
fn find_circle(graph: &BTreeMap<ModulePath, BTreeSet<ModulePath>>) -> Option<Vec<ModulePath>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &ModulePath,
        graph: &BTreeMap<ModulePath, BTreeSet<ModulePath>>,
        marks: &mut BTreeMap<ModulePath, Mark>,
        stack: &mut Vec<ModulePath>,
    ) -> Option<Vec<ModulePath>> {
        match marks.get(node) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let start = stack.iter().position(|n| n == node).unwrap_or(0);
                let mut circle = stack[start..].to_vec();
                circle.push(node.clone());
                return Some(circle);
            }
            None => {}
        }
        marks.insert(node.clone(), Mark::Open);
        stack.push(node.clone());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(circle) = visit(next, graph, marks, stack) {
                return Some(circle);
            }
        }
        stack.pop();
        marks.insert(node.clone(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in graph.keys() {
        if let Some(circle) = visit(node, graph, &mut marks, &mut Vec::new()) {
            return Some(circle);
        }
    }
    None
}

/// Which module depends on which, for every module of a crate, between the children
/// of the nearest folder the two share: `model::read` using `model::data` is an edge
/// between those two, `resolve::names` using `model` is one between `resolve` and
/// `model` (a folder stands for what it holds, as seen from outside it). A module
/// using its own ancestors or children (a folder's `mod.rs` re-exports) is no edge.
fn import_graph(src: &Path) -> BTreeMap<ModulePath, BTreeSet<ModulePath>> {
    let modules = modules(src);
    let known: BTreeSet<ModulePath> = modules.keys().cloned().collect();
    let mut graph: BTreeMap<ModulePath, BTreeSet<ModulePath>> = BTreeMap::new();
    for (module, text) in &modules {
        for target in references(module, text, &known) {
            let shared = module
                .iter()
                .zip(&target)
                .take_while(|(a, b)| a == b)
                .count();
            if shared == module.len() || shared == target.len() {
                continue;
            }
            graph
                .entry(module[..=shared].to_vec())
                .or_default()
                .insert(target[..=shared].to_vec());
        }
    }
    graph
}

fn crates() -> Vec<PathBuf> {
    let mut sources = vec![root().join("src")];
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        let src = entry.unwrap().path().join("src");
        if src.is_dir() {
            sources.push(src);
        }
    }
    sources.sort();
    sources
}

#[test]
fn no_crate_has_an_import_circle_between_its_modules() {
    let mut circles = Vec::new();
    for src in crates() {
        let graph = import_graph(&src);
        if let Some(circle) = find_circle(&graph) {
            let shown: Vec<String> = circle.iter().map(|m| m.join("::")).collect();
            circles.push(format!("{}: {}", src.display(), shown.join(" → ")));
        }
    }
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

#[test]
fn a_circle_is_found_where_there_is_one() {
    let graph = BTreeMap::from([
        (
            vec!["a".to_string()],
            BTreeSet::from([vec!["b".to_string()]]),
        ),
        (
            vec!["b".to_string()],
            BTreeSet::from([vec!["c".to_string()]]),
        ),
        (
            vec!["c".to_string()],
            BTreeSet::from([vec!["a".to_string()]]),
        ),
    ]);
    let circle = find_circle(&graph).expect("a circle");
    assert_eq!(circle.first(), circle.last());
    assert_eq!(circle.len(), 4);
    let known: BTreeSet<ModulePath> = [
        vec!["model".to_string()],
        vec!["model".into(), "read".into()],
        vec!["model".into(), "data".into()],
    ]
    .into();
    let at = vec!["model".to_string(), "data".to_string()];
    assert_eq!(
        references(
            &at,
            "use super::read::Field;\nuse crate::model::Kind;\n",
            &known
        ),
        BTreeSet::from([vec!["model".to_string(), "read".to_string()]])
    );
}

/// Every long flag of the `tether` binary, from its help, command by command.
fn tether_flags() -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    let mut pending: Vec<Vec<String>> = vec![Vec::new()];
    while let Some(command) = pending.pop() {
        let output = Command::new(env!("CARGO_BIN_EXE_tether"))
            .args(&command)
            .arg("--help")
            .output()
            .expect("run tether --help");
        assert!(output.status.success(), "tether {command:?} --help");
        let help = String::from_utf8_lossy(&output.stdout).into_owned();
        let mut in_commands = false;
        for line in help.lines() {
            if line.ends_with(':') && !line.starts_with(' ') {
                in_commands = line == "Commands:";
                continue;
            }
            let trimmed = line.trim_start();
            if in_commands && line.starts_with("  ") && !line.starts_with("   ") {
                let name = trimmed.split_whitespace().next().unwrap_or("");
                if !name.is_empty() && name != "help" {
                    let mut sub = command.clone();
                    sub.push(name.to_string());
                    pending.push(sub);
                }
            }
            if trimmed.starts_with('-') {
                for word in trimmed.split(|c: char| c.is_whitespace() || c == ',') {
                    if let Some(flag) = word.strip_prefix("--") {
                        let flag: String = flag
                            .chars()
                            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                            .collect();
                        if !flag.is_empty() && flag != "help" && flag != "version" {
                            flags.insert(flag);
                        }
                    }
                }
            }
        }
    }
    flags
}

/// The string literals of a module's code before its tests, with their line numbers.
fn string_literals(text: &str) -> Vec<(usize, String)> {
    let code = text.split("#[cfg(test)]").next().unwrap_or(text);
    let mut found = Vec::new();
    for (index, line) in code.lines().enumerate() {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        // A quote as a char literal starts no string.
        let line = line.replace("'\"'", "'_'").replace("'\\\"'", "'_'");
        let mut inside = false;
        let mut escaped = false;
        let mut current = String::new();
        let mut previous = ' ';
        for c in line.chars() {
            if !inside && previous == '/' && c == '/' {
                break;
            }
            previous = c;
            match (inside, c) {
                (true, '\\') if !escaped => escaped = true,
                (true, '"') if !escaped => {
                    inside = false;
                    found.push((index + 1, std::mem::take(&mut current)));
                }
                (true, c) => {
                    escaped = false;
                    current.push(c);
                }
                (false, '"') => inside = true,
                (false, _) => {}
            }
        }
        if inside {
            found.push((index + 1, current));
        }
    }
    found
}

/// The engine's modules that run another program, whose flags they name: Helm's
/// `--namespace` and `--repo` are Helm's, not tether's.
const OTHER_PROGRAMS: &[&str] = &["generate::helm", "generate::tools"];

/// Only the CLI names its flags: the libraries carry typed reasons and remedies
/// (`tether_core::report::Remedy`, a keyring's `given_by`) that the CLI words.
#[test]
fn nothing_below_the_cli_names_a_flag() {
    let flags = tether_flags();
    assert!(
        flags.contains("prune") && flags.contains("age-key-file") && flags.contains("kubeconfig"),
        "flags read from the help: {flags:?}"
    );
    let mut named = Vec::new();
    for library in [
        "tether-core",
        "tether-sops",
        "tether-engine",
        "tether-daemon",
    ] {
        let src = root().join("crates").join(library).join("src");
        for (module, text) in modules(&src) {
            if library == "tether-engine" && OTHER_PROGRAMS.contains(&module.join("::").as_str()) {
                continue;
            }
            for (line, literal) in string_literals(&text) {
                for word in literal.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
                    if let Some(flag) = word.strip_prefix("--")
                        && flags.contains(flag)
                    {
                        named.push(format!("{library} {}:{line}: --{flag}", module.join("::")));
                    }
                }
            }
        }
    }
    assert!(
        named.is_empty(),
        "flags named below the CLI:\n{}",
        named.join("\n")
    );
}

#[test]
fn a_flag_in_a_string_is_found() {
    let literals = string_literals("let a = \"delete (with --prune)\"; // \"--x\"\n");
    assert_eq!(literals, [(1, "delete (with --prune)".to_string())]);
}

/// Calls that sleep: a loop that makes one paces a retry or a wait by hand.
const SLEEPS: &[&str] = &["sleep", "sleep_until", "interval", "interval_at"];

/// The loops (`loop`, `while`, `for`) whose code calls a sleep, by line, outside test
/// code (`#[cfg(test)]`, `#[test]`).
#[derive(Default)]
struct HandPacedLoops {
    lines: Vec<usize>,
}

fn is_test_code(attributes: &[syn::Attribute]) -> bool {
    attributes.iter().any(|attribute| {
        let text = quote::ToTokens::to_token_stream(attribute).to_string();
        text.contains("cfg (test)")
            || attribute
                .path()
                .segments
                .last()
                .is_some_and(|s| s.ident == "test")
    })
}

fn calls_a_sleep(tokens: proc_macro2::TokenStream) -> bool {
    tokens.into_iter().any(|token| match token {
        proc_macro2::TokenTree::Ident(ident) => SLEEPS.iter().any(|sleep| ident == sleep),
        proc_macro2::TokenTree::Group(group) => calls_a_sleep(group.stream()),
        _ => false,
    })
}

impl HandPacedLoops {
    fn check(&mut self, line: usize, code: &impl quote::ToTokens) {
        if calls_a_sleep(code.to_token_stream()) {
            self.lines.push(line);
        }
    }
}

impl<'ast> syn::visit::Visit<'ast> for HandPacedLoops {
    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        if !is_test_code(&item.attrs) {
            syn::visit::visit_item_mod(self, item);
        }
    }

    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        if !is_test_code(&item.attrs) {
            syn::visit::visit_item_fn(self, item);
        }
    }

    fn visit_expr_loop(&mut self, expr: &'ast syn::ExprLoop) {
        self.check(expr.loop_token.span.start().line, &expr.body);
        syn::visit::visit_expr_loop(self, expr);
    }

    fn visit_expr_while(&mut self, expr: &'ast syn::ExprWhile) {
        self.check(expr.while_token.span.start().line, expr);
        syn::visit::visit_expr_while(self, expr);
    }

    fn visit_expr_for_loop(&mut self, expr: &'ast syn::ExprForLoop) {
        self.check(expr.for_token.span.start().line, &expr.body);
        syn::visit::visit_expr_for_loop(self, expr);
    }
}

fn hand_paced_loops(code: &str) -> Vec<usize> {
    let file = syn::parse_file(code).expect("the workspace's code parses");
    let mut found = HandPacedLoops::default();
    syn::visit::Visit::visit_file(&mut found, &file);
    found.lines
}

/// Every retry and every wait is paced by `tether_engine::driver` (its `Backoff`'s
/// delays are readable nowhere else); a loop elsewhere that sleeps is a retry or a
/// poll written by hand. The node simulator is a program of its own, with no tether
/// dependency, and paces its simulated kubelet itself; the test kit is test code, whose
/// waits (`eventually`, a server starting) are the tests' own, like test functions'.
#[test]
fn only_the_driver_paces_retries_and_waits() {
    let driver = root().join("crates/tether-engine/src/driver");
    let mut found = Vec::new();
    for src in crates() {
        if src.starts_with(root().join("crates/tether-nodesim"))
            || src.starts_with(root().join("crates/tether-testkit"))
        {
            continue;
        }
        for entry in walkdir::WalkDir::new(&src) {
            let path = entry.unwrap().into_path();
            if path.starts_with(&driver) || path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let code = std::fs::read_to_string(&path).unwrap();
            for line in hand_paced_loops(&code) {
                let shown = path
                    .strip_prefix(root())
                    .unwrap_or(&path)
                    .display()
                    .to_string();
                found.push(format!("{shown}:{line}"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "loops that sleep outside tether_engine::driver (use its Retries or Poll):\n{}",
        found.join("\n")
    );
}

#[test]
fn a_loop_that_sleeps_is_found() {
    let code = r#"
async fn hand_written() {
    loop {
        if ready().await {
            return;
        }
        tokio::time::sleep(EVERY).await;
    }
}

fn blocking() {
    for attempt in 1..3 {
        std::thread::sleep(delay(attempt));
    }
}

async fn in_a_select(stop: &CancellationToken) {
    while busy() {
        tokio::select! {
            () = tokio::time::sleep(EVERY) => {}
            () = stop.cancelled() => return,
        }
    }
}

async fn paced(mut poll: Poll) {
    while !ready().await {
        if !poll.next().await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    async fn a_test_may_wait() {
        loop {
            tokio::time::sleep(EVERY).await;
        }
    }
}
"#;
    assert_eq!(hand_paced_loops(code), [3, 12, 18]);
}

/// The supported Kubernetes range is one fact: the two ends `tether check --pre` names
/// (`install::{OLDEST_SUPPORTED, NEWEST_SUPPORTED}`) are the oldest and the newest
/// release `tools/go` builds (the compatibility run's and every test's), the API
/// types are the oldest's (k8s-openapi's feature), and README says the same range.
#[test]
fn the_supported_kubernetes_range_is_one_fact() {
    use tether_daemon::install::{NEWEST_SUPPORTED, OLDEST_SUPPORTED};
    let root = root();
    let mut built: Vec<(u32, u32)> = std::fs::read_dir(root.join("tools/go"))
        .unwrap()
        .filter_map(|entry| {
            let name = entry.unwrap().file_name().into_string().unwrap();
            let (major, minor) = name.strip_prefix("kubernetes-")?.split_once('.')?;
            Some((major.parse().unwrap(), minor.parse().unwrap()))
        })
        .collect();
    built.sort();
    let ends = |v: &tether_daemon::install::ServerVersion| (v.major, v.minor);
    assert_eq!(
        (built.first(), built.last()),
        (
            Some(&ends(&OLDEST_SUPPORTED)),
            Some(&ends(&NEWEST_SUPPORTED))
        ),
        "tools/go/kubernetes-* builds {built:?}"
    );
    for (major, minor) in &built {
        let go_mod = std::fs::read_to_string(
            root.join(format!("tools/go/kubernetes-{major}.{minor}/go.mod")),
        )
        .unwrap();
        assert!(
            go_mod.contains(&format!("require k8s.io/kubernetes v{major}.{minor}.")),
            "tools/go/kubernetes-{major}.{minor} builds another release"
        );
    }
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let feature = format!(
        "features = [\"v{}_{}\"]",
        OLDEST_SUPPORTED.major, OLDEST_SUPPORTED.minor
    );
    assert!(
        manifest
            .lines()
            .any(|l| l.starts_with("k8s-openapi =") && l.contains(&feature)),
        "k8s-openapi's feature is not {feature}"
    );
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let section = readme
        .split("## Supported Kubernetes versions\n")
        .nth(1)
        .expect("README has a section Supported Kubernetes versions");
    assert!(
        section.trim_start().starts_with(&format!(
            "Kubernetes {OLDEST_SUPPORTED} to {NEWEST_SUPPORTED}:"
        )),
        "README's range: {}",
        section.lines().next().unwrap_or_default()
    );
}
