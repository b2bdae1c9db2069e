//! The architecture's rules that the compiler cannot check by itself, checked on the
//! workspace's own files:
//! - what the pure core, the sops crate and the web views may depend on; that the node
//!   simulator does not link tether; that the administration crate and the daemon do
//!   not depend on each other; that the API types crate is types only;
//! - that no crate has an import circle between its modules, not even one hidden behind
//!   a root file (`lib.rs`, `main.rs`, a `mod.rs`);
//! - that the CLI names only the daemon's face (`CLI_USES_OF_THE_DAEMON`);
//! - that nothing below the CLI names a flag;
//! - that only the engine's `driver` paces a retry or a wait;
//! - that the supported Kubernetes range is one fact;
//! - that a product file's module name is in one crate only, but for the roots and the
//!   feature words (`FEATURE_WORDS`); that ARCHITECTURE.md's feature map names paths
//!   that exist, named by their feature's word;
//! - that a product file keeps to the line budget, or is in `LONG_FILES` with a reason.
//!
//! (The core's other rule, no clock, environment or filesystem, is
//! `crates/tether-core/clippy.toml`, which `.ci/run`'s clippy enforces.) Each rule has a
//! test on made-up input beside it that shows it catches a break.

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

/// The normal dependencies of a crate of the workspace that a rule is about: a crate
/// that is not there fails the rule, rather than passing it unseen.
fn dependencies_of_workspace_crate(package: &str) -> BTreeSet<String> {
    assert!(
        root()
            .join("crates")
            .join(package)
            .join("Cargo.toml")
            .is_file(),
        "crates/{package} does not exist: this rule is about the crate {package}; create it \
         (or, if it was renamed, rename it in this rule)"
    );
    normal_dependencies(package)
}

/// The workspace's packages (`tether`, `tether-*`) among `dependencies`, but `package`.
fn tether_packages_in(dependencies: &BTreeSet<String>, package: &str) -> Vec<String> {
    dependencies
        .iter()
        .filter(|name| name.starts_with("tether") && *name != package)
        .cloned()
        .collect()
}

/// Which of two crates depends on the other: `a depends on b` and the other way round.
fn dependencies_between(a: &str, b: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (one, other) in [(a, b), (b, a)] {
        if dependencies_of_workspace_crate(one).contains(other) {
            found.push(format!("{one} depends on {other}"));
        }
    }
    found
}

/// The administration crate (`tether-admin`) and the daemon (`tether-daemon`) stand
/// side by side: neither links the other, and what both need is in a crate below them.
#[test]
fn the_administration_crate_and_the_daemon_do_not_depend_on_each_other() {
    let found = dependencies_between("tether-daemon", "tether-admin");
    assert!(
        found.is_empty(),
        "{}: move what both need into a crate below both (tether-engine, tether-core, \
         tether-api)",
        found.join("; ")
    );
}

/// The API types crate (`tether-api`) is types only: what the daemon's API and its
/// clients share, with no client and no runtime behind it, and of tether's crates only
/// the pure core (whose types its resources carry: a Git host, a fleet report).
#[test]
fn the_api_types_crate_is_types_only() {
    let dependencies = dependencies_of_workspace_crate("tether-api");
    let mut found = tether_packages_in(&dependencies, "tether-api");
    found.retain(|name| name != "tether-core");
    found.extend(forbidden_in(&dependencies, &[]));
    assert!(
        found.is_empty(),
        "tether-api depends on {found:?}: it holds the API's types only; keep what needs \
         these in the crates that use the types"
    );
}

#[test]
fn a_dependency_between_crates_is_found() {
    assert_eq!(
        dependencies_between("tether-engine", "tether-daemon"),
        ["tether-daemon depends on tether-engine"]
    );
    assert_eq!(
        dependencies_between("tether-core", "tether-web"),
        ["tether-web depends on tether-core"]
    );
    let synthetic =
        BTreeSet::from(["serde", "tether-api", "tether-core", "tokio"].map(String::from));
    assert_eq!(
        tether_packages_in(&synthetic, "tether-api"),
        ["tether-core"]
    );
    assert_eq!(forbidden_in(&synthetic, &[]), ["tokio"]);
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

/// What a root file's own items are called in the import graph: `crate::web::<root>`
/// for what `web/mod.rs` defines itself, `crate::<root>` for the crate root's (`lib.rs`,
/// `main.rs`). A root file is one with module files below it.
const ROOT_ITEMS: &str = "<root>";

/// A path that code names, and where: `use` trees give one for each leaf (a glob ends
/// in `*`), and so do expressions, types, patterns, and `a::b` in macros' and
/// attributes' tokens. Doc comments name nothing.
#[derive(Clone, Debug)]
struct Named {
    path: Vec<String>,
    line: usize,
    /// The inline modules (`mod limits { … }`) it is written in, outermost first.
    within: Vec<String>,
}

/// One leaf of a `use` tree: the path it imports, the name it is known by in the
/// module (its alias, or its last segment; `*` for a glob), and its line.
struct UseLeaf {
    path: Vec<String>,
    name: String,
    line: usize,
}

/// The leaves of a `use` tree: `use a::{b, c::{self, D as E}, f::*}` gives `a::b` as
/// `b`, `a::c` as `c`, `a::c::D` as `E` and `a::f::*`.
fn use_leaves(tree: &syn::UseTree) -> Vec<UseLeaf> {
    fn leaf(prefix: &[String], ident: &syn::Ident, alias: Option<&syn::Ident>) -> UseLeaf {
        let mut path = prefix.to_vec();
        if ident != "self" {
            path.push(ident.to_string());
        }
        let name = alias.map_or_else(
            || path.last().cloned().unwrap_or_default(),
            ToString::to_string,
        );
        UseLeaf {
            path,
            name,
            line: ident.span().start().line,
        }
    }
    fn walk(tree: &syn::UseTree, prefix: &mut Vec<String>, found: &mut Vec<UseLeaf>) {
        match tree {
            syn::UseTree::Path(path) => {
                prefix.push(path.ident.to_string());
                walk(&path.tree, prefix, found);
                prefix.pop();
            }
            syn::UseTree::Name(name) => found.push(leaf(prefix, &name.ident, None)),
            syn::UseTree::Rename(rename) => {
                found.push(leaf(prefix, &rename.ident, Some(&rename.rename)));
            }
            syn::UseTree::Glob(glob) => {
                let mut path = prefix.clone();
                path.push("*".into());
                let line = glob.star_token.spans[0].start().line;
                found.push(UseLeaf {
                    path,
                    name: "*".into(),
                    line,
                });
            }
            syn::UseTree::Group(group) => {
                for tree in &group.items {
                    walk(tree, prefix, found);
                }
            }
        }
    }
    let mut found = Vec::new();
    walk(tree, &mut Vec::new(), &mut found);
    found
}

/// An item's attributes (none for the kinds syn does not name).
fn item_attributes(item: &syn::Item) -> &[syn::Attribute] {
    use syn::Item;
    match item {
        Item::Const(item) => &item.attrs,
        Item::Enum(item) => &item.attrs,
        Item::ExternCrate(item) => &item.attrs,
        Item::Fn(item) => &item.attrs,
        Item::ForeignMod(item) => &item.attrs,
        Item::Impl(item) => &item.attrs,
        Item::Macro(item) => &item.attrs,
        Item::Mod(item) => &item.attrs,
        Item::Static(item) => &item.attrs,
        Item::Struct(item) => &item.attrs,
        Item::Trait(item) => &item.attrs,
        Item::TraitAlias(item) => &item.attrs,
        Item::Type(item) => &item.attrs,
        Item::Union(item) => &item.attrs,
        Item::Use(item) => &item.attrs,
        _ => &[],
    }
}

/// Collects the paths code names (see [`Named`]), leaving test code out when told to.
#[derive(Default)]
struct PathsNamed {
    skip_tests: bool,
    within: Vec<String>,
    found: Vec<Named>,
}

impl PathsNamed {
    fn push(&mut self, path: Vec<String>, line: usize) {
        let within = self.within.clone();
        self.found.push(Named { path, line, within });
    }

    /// Every `a::b…` in a token stream: a macro's input, an attribute's arguments.
    fn scan(&mut self, tokens: proc_macro2::TokenStream) {
        use proc_macro2::{Spacing, TokenTree};
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        let colon = |at: usize, joint: bool| {
            tokens.get(at).is_some_and(|token| {
                matches!(token, TokenTree::Punct(p)
                    if p.as_char() == ':' && (!joint || p.spacing() == Spacing::Joint))
            })
        };
        let colons = |at: usize| colon(at, true) && colon(at + 1, false);
        let mut at = 0;
        while at < tokens.len() {
            match &tokens[at] {
                TokenTree::Group(group) => self.scan(group.stream()),
                TokenTree::Ident(first) => {
                    let mut path = vec![first.to_string()];
                    while colons(at + 1)
                        && let Some(TokenTree::Ident(next)) = tokens.get(at + 3)
                    {
                        path.push(next.to_string());
                        at += 3;
                    }
                    if path.len() > 1 {
                        self.push(path, first.span().start().line);
                    }
                }
                _ => {}
            }
            at += 1;
        }
    }
}

impl<'ast> syn::visit::Visit<'ast> for PathsNamed {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if !(self.skip_tests && is_test_code(item_attributes(item))) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        if !(self.skip_tests && is_test_code(&item.attrs)) {
            syn::visit::visit_impl_item_fn(self, item);
        }
    }

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        self.within.push(item.ident.to_string());
        syn::visit::visit_item_mod(self, item);
        self.within.pop();
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        for leaf in use_leaves(&item.tree) {
            self.push(leaf.path, leaf.line);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if let Some(first) = path.segments.first() {
            let segments = path.segments.iter().map(|s| s.ident.to_string());
            self.push(segments.collect(), first.ident.span().start().line);
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        syn::visit::Visit::visit_path(self, &mac.path);
        self.scan(mac.tokens.clone());
    }

    fn visit_attribute(&mut self, attribute: &'ast syn::Attribute) {
        if !attribute.path().is_ident("doc") {
            self.scan(quote::ToTokens::to_token_stream(&attribute.meta));
        }
    }
}

/// A module file's code, as the import graph reads it.
#[derive(Default)]
struct ModuleCode {
    /// What its top-level `use` items bring in, by the name each is known by there.
    imports: BTreeMap<String, Vec<String>>,
    /// The paths of its top-level `use` items.
    uses: Vec<Named>,
    /// The paths of the rest of its code but its tests: what its own items name (`mod x;`
    /// declarations and the file's inner attributes are not items of its own).
    items: Vec<Named>,
}

fn module_code(text: &str) -> ModuleCode {
    let file = syn::parse_file(text).expect("the workspace's code parses");
    let mut code = ModuleCode::default();
    let mut items = PathsNamed {
        skip_tests: true,
        ..PathsNamed::default()
    };
    for item in &file.items {
        match item {
            _ if is_test_code(item_attributes(item)) => {}
            syn::Item::Use(item) => {
                for leaf in use_leaves(&item.tree) {
                    if leaf.name != "*" {
                        code.imports.insert(leaf.name, leaf.path.clone());
                    }
                    code.uses.push(Named {
                        path: leaf.path,
                        line: leaf.line,
                        within: Vec::new(),
                    });
                }
            }
            syn::Item::Mod(item) if item.content.is_none() => {}
            _ => syn::visit::Visit::visit_item(&mut items, item),
        }
    }
    code.items = items.found;
    code
}

/// A crate's module files, read.
type Crate = BTreeMap<ModulePath, ModuleCode>;

fn read_crate(src: &Path) -> Crate {
    modules(src)
        .into_iter()
        .map(|(module, text)| (module, module_code(&text)))
        .collect()
}

/// Whether a module's file is a root file: one with module files below it (`lib.rs`,
/// `main.rs`, a `mod.rs`, or `x.rs` beside a folder `x/`).
fn is_root(modules: &Crate, module: &ModulePath) -> bool {
    modules
        .keys()
        .any(|m| m.len() == module.len() + 1 && m.starts_with(module))
}

/// Where a path named in module `at` leads: to the module file it names, or to a root
/// file's own items (`…::<root>`) where it goes on from a root file with a name that is
/// no child module of it (`crate::Shared`, `super::Trigger`). A name that the root
/// imports (`pub use data::Data`) leads on to where it comes from when the path is
/// named inside the root's folder; from outside, the folder stands for what it holds.
/// A name that `at` imports leads where its import does, and a path of another crate
/// (or a local name) leads nowhere.
fn resolve(modules: &Crate, at: &ModulePath, named: &Named) -> Option<ModulePath> {
    let mut scope = at.clone();
    scope.extend(named.within.iter().cloned());
    lead(modules, at, &scope, &named.path, 0)
}

/// [`resolve`]'s steps: `path` as named in `scope` (`at` or an inline module of it).
fn lead(
    modules: &Crate,
    at: &ModulePath,
    scope: &[String],
    path: &[String],
    depth: usize,
) -> Option<ModulePath> {
    let (first, rest) = path.split_first()?;
    // Imports that name each other (`use a::b as a;`) end here.
    if depth > 8 {
        return None;
    }
    let mut child = scope.to_vec();
    child.push(first.clone());
    let (mut absolute, rest) = match first.as_str() {
        "crate" => (Vec::new(), rest),
        "self" => (scope.to_vec(), rest),
        "super" => (scope[..scope.len().saturating_sub(1)].to_vec(), rest),
        _ if !rest.is_empty() && modules.contains_key(&child) => (scope.to_vec(), path),
        _ => {
            let import = modules.get(scope)?.imports.get(first)?;
            let whole = [import.as_slice(), rest].concat();
            return lead(modules, at, scope, &whole, depth + 1);
        }
    };
    let mut rest = rest.iter().peekable();
    while rest.next_if(|part| *part == "super").is_some() {
        absolute.pop();
    }
    absolute.extend(rest.cloned());
    let known = (0..=absolute.len())
        .rev()
        .find(|&n| modules.contains_key(&absolute[..n]))?;
    let module = absolute[..known].to_vec();
    let Some(item) = absolute.get(known) else {
        return Some(module);
    };
    if !is_root(modules, &module) {
        return Some(module);
    }
    if at.starts_with(&module)
        && let Some(import) = modules[&module].imports.get(item)
    {
        let whole = [import.as_slice(), &absolute[known + 1..]].concat();
        return lead(modules, at, &module, &whole, depth + 1);
    }
    let mut items = module;
    items.push(ROOT_ITEMS.into());
    Some(items)
}

/// A module as the messages show it: `crate::web::auth`, `crate::<root>`.
fn shown(module: &[String]) -> String {
    std::iter::once("crate")
        .chain(module.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join("::")
}

/// What module `at`'s code refers to (see [`resolve`]), each with the first place it
/// does. A root file's `use` items that lead inside its own folder are not its code:
/// they are how it re-exports what it holds, or imports it for its own items (whose
/// paths count).
fn references(modules: &Crate, at: &ModulePath) -> BTreeMap<ModulePath, String> {
    let code = &modules[at];
    let root = is_root(modules, at);
    let uses = code.uses.iter().map(|named| (named, true));
    let items = code.items.iter().map(|named| (named, false));
    let mut found = BTreeMap::new();
    for (named, is_use) in uses.chain(items) {
        let Some(target) = resolve(modules, at, named) else {
            continue;
        };
        if is_use && root && target.starts_with(at) {
            continue;
        }
        found.entry(target).or_insert_with(|| {
            format!(
                "{}:{} names {}",
                shown(at),
                named.line,
                named.path.join("::")
            )
        });
    }
    found
}

/// Which module depends on which, each edge with a place that makes it.
type Graph = BTreeMap<ModulePath, BTreeMap<ModulePath, String>>;

/// A circle in the graph, if there is one: the modules along it.
fn find_circle(graph: &Graph) -> Option<Vec<ModulePath>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &ModulePath,
        graph: &Graph,
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
        for next in graph.get(node).into_iter().flat_map(BTreeMap::keys) {
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

/// Every knot of the graph (a set of modules that all reach each other), each with a
/// circle through it.
fn knots(graph: &Graph) -> Vec<(BTreeSet<ModulePath>, Vec<ModulePath>)> {
    let reach = |from: &ModulePath| {
        let mut reached = BTreeSet::new();
        let mut pending = vec![from.clone()];
        while let Some(node) = pending.pop() {
            for next in graph.get(&node).into_iter().flat_map(BTreeMap::keys) {
                if reached.insert(next.clone()) {
                    pending.push(next.clone());
                }
            }
        }
        reached
    };
    let reaches: BTreeMap<&ModulePath, BTreeSet<ModulePath>> =
        graph.keys().map(|node| (node, reach(node))).collect();
    let mut seen = BTreeSet::new();
    let mut found = Vec::new();
    for (node, reached) in &reaches {
        if seen.contains(*node) || !reached.contains(*node) {
            continue;
        }
        let knot: BTreeSet<ModulePath> = reached
            .iter()
            .filter(|other| reaches.get(other).is_some_and(|r| r.contains(*node)))
            .cloned()
            .collect();
        let within: Graph = graph
            .iter()
            .filter(|(from, _)| knot.contains(*from))
            .map(|(from, to)| {
                let to = to.iter().filter(|(t, _)| knot.contains(*t));
                (
                    from.clone(),
                    to.map(|(t, p)| (t.clone(), p.clone())).collect(),
                )
            })
            .collect();
        if let Some(circle) = find_circle(&within) {
            seen.extend(knot.iter().cloned());
            found.push((knot, circle));
        }
    }
    found
}

/// Which module depends on which, for every module of a crate, between the children
/// of the nearest folder the two share: `model::read` using `model::data` is an edge
/// between those two, `resolve::names` using `model` is one between `resolve` and
/// `model` (a folder stands for what it holds, as seen from outside it). A root file's
/// own items are a node of their own (`<root>`, see [`resolve`]): `web::auth` using
/// `crate::Shared` (defined in `lib.rs`) is an edge from `web` to `<root>`, and `lib.rs`'s
/// items using `web::Web` one from `<root>` to `web`, so that no circle hides behind a
/// root. A module using its own ancestors as a whole, or its own folder's modules from
/// a root's `use` items (re-exports), is no edge.
fn import_graph(src: &Path) -> Graph {
    let modules = read_crate(src);
    let mut graph = Graph::new();
    for module in modules.keys() {
        let mut node = module.clone();
        if is_root(&modules, module) {
            node.push(ROOT_ITEMS.into());
        }
        for (target, place) in references(&modules, module) {
            let shared = node.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if shared == node.len() || shared == target.len() {
                continue;
            }
            graph
                .entry(node[..=shared].to_vec())
                .or_default()
                .entry(target[..=shared].to_vec())
                .or_insert(place);
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

/// The circles of a crate's import graph, each with the places that make its edges.
fn circles_shown(src: &Path) -> Vec<String> {
    let graph = import_graph(src);
    let folder = src
        .strip_prefix(root())
        .unwrap_or(src)
        .display()
        .to_string();
    knots(&graph)
        .into_iter()
        .map(|(knot, circle)| {
            let names: Vec<String> = circle.iter().map(|m| shown(m)).collect();
            let mut text = format!("{folder}: {}", names.join(" → "));
            for pair in circle.windows(2) {
                let place = &graph[&pair[0]][&pair[1]];
                text.push_str(&format!(
                    "\n    {} → {}: {place}",
                    shown(&pair[0]),
                    shown(&pair[1])
                ));
            }
            if knot.len() + 1 > circle.len() {
                let all: Vec<String> = knot.iter().map(|m| shown(m)).collect();
                text.push_str(&format!(
                    "\n    (all of these reach each other: {})",
                    all.join(", ")
                ));
            }
            text
        })
        .collect()
}

/// No crate has an import circle between its modules, not even through a root file:
/// a `lib.rs`, `main.rs` or `mod.rs` whose own items (`<root>`) use a module below it
/// that uses them back is a circle too.
#[test]
fn no_crate_has_an_import_circle_between_its_modules() {
    let circles: Vec<String> = crates().iter().flat_map(|src| circles_shown(src)).collect();
    assert!(
        circles.is_empty(),
        "import circles (`<root>` is what a root file, lib.rs, main.rs or a mod.rs, defines \
         itself: move those items into a module of their own, so that the root only declares \
         modules and re-exports, or turn one of the edges around):\n{}",
        circles.join("\n")
    );
}

#[test]
fn a_circle_is_found_where_there_is_one() {
    let edge = |from: &str, to: &str| {
        (
            vec![from.to_string()],
            BTreeMap::from([(vec![to.to_string()], String::new())]),
        )
    };
    let graph = Graph::from([
        edge("a", "b"),
        edge("b", "c"),
        edge("c", "a"),
        edge("d", "a"),
    ]);
    let circle = find_circle(&graph).expect("a circle");
    assert_eq!(circle.first(), circle.last());
    assert_eq!(circle.len(), 4);
    let knots: Vec<Vec<String>> = knots(&graph)
        .into_iter()
        .map(|(knot, _)| knot.into_iter().map(|m| m.join("::")).collect())
        .collect();
    assert_eq!(
        knots,
        [["a", "b", "c"]],
        "one knot, whichever node it is seen from"
    );
    let texts = [
        (vec!["model"], "pub use data::Data;\npub struct Kind;\n"),
        (vec!["model", "read"], "pub struct Field;\n"),
        (
            vec!["model", "data"],
            "use super::read::Field;\nuse crate::model::Kind;\npub struct Data(Field, Kind);\n",
        ),
        (
            vec!["resolve"],
            "pub fn f(_: &crate::model::Data, _: &crate::model::read::Field) {}\n",
        ),
    ];
    let modules: Crate = texts
        .iter()
        .map(|(module, text)| {
            (
                module.iter().map(|m| m.to_string()).collect(),
                module_code(text),
            )
        })
        .collect();
    let targets = |at: &[&str]| -> BTreeSet<String> {
        let at: ModulePath = at.iter().map(|m| m.to_string()).collect();
        references(&modules, &at)
            .keys()
            .map(|m| m.join("::"))
            .collect()
    };
    assert_eq!(
        targets(&["model", "data"]),
        BTreeSet::from(["model::<root>", "model::read"].map(String::from))
    );
    assert_eq!(
        targets(&["resolve"]),
        BTreeSet::from(["model::<root>", "model::read"].map(String::from))
    );
    assert_eq!(
        targets(&["model"]),
        BTreeSet::<String>::new(),
        "a root's re-export is no edge"
    );
}

/// A crate in a temporary folder, from its files' paths under `src/` and their code.
fn synthetic_crate(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, code) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, code).unwrap();
    }
    dir
}

#[test]
fn a_circle_through_a_root_is_found() {
    let lib = "//! A crate.\nmod web;\n\npub struct Shared {\n    web: web::Web,\n}\n";
    let web = "pub struct Web;\n\npub fn serve(shared: &crate::Shared) {}\n";
    let dir = synthetic_crate(&[("lib.rs", lib), ("web.rs", web)]);
    let found = circles_shown(dir.path());
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("crate::web → crate::<root>: crate::web:3 names crate::Shared"),
        "{found:?}"
    );
    let folder = "mod a;\nmod b;\n\npub enum Trigger {\n    Changed(b::Pass),\n}\n";
    let dir = synthetic_crate(&[
        ("lib.rs", "mod x;\n"),
        ("x/mod.rs", folder),
        ("x/a.rs", "pub struct A;\n"),
        (
            "x/b.rs",
            "use super::Trigger;\npub struct Pass(Option<Box<Trigger>>);\n",
        ),
    ]);
    let found = circles_shown(dir.path());
    assert!(
        found.len() == 1 && found[0].contains("crate::x::<root> → crate::x::b"),
        "{found:?}"
    );
}

#[test]
fn a_root_that_declares_and_re_exports_makes_no_circle() {
    let lib = "//! A crate.\n#![warn(clippy::all)]\n\nmod data;\nmod web;\n\n\
               pub use self::data::Data;\npub use web::Web;\n";
    let web = "use crate::Data;\n\npub struct Web(Data);\n";
    let data = "pub struct Data;\n\n#[cfg(test)]\nmod tests {\n    use crate::Web;\n}\n";
    let dir = synthetic_crate(&[("lib.rs", lib), ("web.rs", web), ("data.rs", data)]);
    assert_eq!(circles_shown(dir.path()), Vec::<String>::new());
    let graph = import_graph(dir.path());
    let web: ModulePath = vec!["web".into()];
    let web_to: Vec<String> = graph[&web].keys().map(|m| shown(m)).collect();
    assert_eq!(
        web_to,
        ["crate::data"],
        "a re-export leads to where it comes from"
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
        "tether-api",
        "tether-admin",
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

/// What the `tether` binary may name of `tether_daemon`: an item, or anything under it
/// (`tether_daemon::PassOutcome::Done`).
const CLI_USES_OF_THE_DAEMON: &[&str] = &[
    "tether_daemon::Config",
    "tether_daemon::Error",
    "tether_daemon::Fleet",
    "tether_daemon::OneSource",
    "tether_daemon::PassError",
    "tether_daemon::PassOutcome",
    "tether_daemon::Replicas",
    "tether_daemon::Sources",
    "tether_daemon::metrics_sample",
    "tether_daemon::run",
    "tether_daemon::run_one",
    "tether_daemon::web::auth::Access",
];

/// The paths beginning with `tether_daemon` that `code` names, test code included,
/// each with its line: `use` trees expanded to their leaves (an alias is left out),
/// and the paths of expressions, types, macros and attributes.
fn daemon_paths(code: &str) -> BTreeSet<(usize, String)> {
    let file = syn::parse_file(code).expect("the workspace's code parses");
    let mut paths = PathsNamed::default();
    syn::visit::Visit::visit_file(&mut paths, &file);
    paths
        .found
        .into_iter()
        .filter(|named| named.path.first().is_some_and(|p| p == "tether_daemon"))
        .map(|named| (named.line, named.path.join("::")))
        .collect()
}

/// Which of `named` (place, path) the list does not hold (an entry holds itself and
/// what is under it), and which entries of the list nothing names.
fn outside_the_list(named: &[(String, String)], list: &[&str]) -> (Vec<String>, Vec<String>) {
    let holds = |entry: &str, path: &str| {
        path.strip_prefix(entry)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
    };
    let outside = named
        .iter()
        .filter(|(_, path)| !list.iter().any(|entry| holds(entry, path)))
        .map(|(place, path)| format!("{place}: {path}"))
        .collect();
    let stale = list
        .iter()
        .filter(|entry| !named.iter().any(|(_, path)| holds(entry, path)))
        .map(ToString::to_string)
        .collect();
    (outside, stale)
}

/// The daemon's face is small: the `tether` binary names only
/// [`CLI_USES_OF_THE_DAEMON`] of it (a configuration, running it, one pass and its
/// outcome, the web page's access, the replicas, the webhook secret's check);
/// everything else in `tether_daemon` is `pub(crate)`.
#[test]
fn the_cli_uses_only_the_daemons_face() {
    let src = root().join("src");
    let mut named = Vec::new();
    for entry in walkdir::WalkDir::new(&src) {
        let path = entry.unwrap().into_path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let shown = path.strip_prefix(root()).unwrap().display().to_string();
        for (line, daemon_path) in daemon_paths(&std::fs::read_to_string(&path).unwrap()) {
            named.push((format!("{shown}:{line}"), daemon_path));
        }
    }
    named.sort();
    let (outside, stale) = outside_the_list(&named, CLI_USES_OF_THE_DAEMON);
    assert!(
        outside.is_empty() && stale.is_empty(),
        "the CLI names of tether_daemon what CLI_USES_OF_THE_DAEMON does not hold (use the \
         daemon's face, or widen it on purpose: add the item to the daemon's root and the \
         list):\n{}\nentries of CLI_USES_OF_THE_DAEMON that nothing names any more (remove \
         them):\n{}",
        outside.join("\n"),
        stale.join("\n")
    );
}

#[test]
fn a_path_outside_the_daemons_face_is_found() {
    let code = r#"
use tether_daemon::{Config, runner::{self, PassOutcome as Outcome}};
use tether_daemon::run as run_daemon;

#[derive(clap::Args)]
struct Flags {
    #[arg(long, default_value = tether_daemon::fleet::NAMESPACE)]
    namespace: String,
}

async fn go(config: tether_daemon::Config) {
    let _ = tether_daemon::run_one(config).await;
    println!("{:?}", tether_daemon::PassOutcome::Done);
}
"#;
    let named: Vec<(String, String)> = daemon_paths(code)
        .into_iter()
        .map(|(line, path)| (format!("cli.rs:{line}"), path))
        .collect();
    let shown: Vec<&str> = named.iter().map(|(_, path)| path.as_str()).collect();
    assert_eq!(
        shown,
        [
            "tether_daemon::Config",
            "tether_daemon::runner",
            "tether_daemon::runner::PassOutcome",
            "tether_daemon::run",
            "tether_daemon::fleet::NAMESPACE",
            "tether_daemon::Config",
            "tether_daemon::run_one",
            "tether_daemon::PassOutcome::Done",
        ]
    );
    let list = [
        "tether_daemon::Config",
        "tether_daemon::run",
        "tether_daemon::run_one",
        "tether_daemon::PassOutcome",
        "tether_daemon::judge_secret",
    ];
    let (outside, stale) = outside_the_list(&named, &list);
    assert_eq!(
        outside,
        [
            "cli.rs:2: tether_daemon::runner",
            "cli.rs:2: tether_daemon::runner::PassOutcome",
            "cli.rs:7: tether_daemon::fleet::NAMESPACE",
        ]
    );
    assert_eq!(stale, ["tether_daemon::judge_secret"]);
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
/// types are the oldest's (k8s-openapi's feature), and README and the book say the same range.
#[test]
fn the_supported_kubernetes_range_is_one_fact() {
    use tether_admin::install::{NEWEST_SUPPORTED, OLDEST_SUPPORTED};
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
    let ends = |v: &tether_admin::install::ServerVersion| (v.major, v.minor);
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
    // The book's page and README's section say the same range.
    for (file, heading) in [
        (
            "docs/book/src/operations/supported-versions.md",
            "# Supported versions\n",
        ),
        ("README.md", "## Supported versions\n"),
    ] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        let section = text
            .split(heading)
            .nth(1)
            .unwrap_or_else(|| panic!("{file} has a heading {heading:?}"));
        assert!(
            section.trim_start().starts_with(&format!(
                "Kubernetes {OLDEST_SUPPORTED} to {NEWEST_SUPPORTED}:"
            )),
            "{file}'s range: {}",
            section.trim_start().lines().next().unwrap_or_default()
        );
    }
}

/// The test tooling's crates: no product, so neither their names nor their sizes count.
const TEST_TOOLING: &[&str] = &["crates/tether-testkit", "crates/tether-nodesim"];

/// The product's `.rs` files (the `tether` binary's `src/` and each crate's but the
/// test tooling's), each as its crate and its path from the repository root.
fn product_files() -> Vec<(String, String)> {
    let mut found = Vec::new();
    for src in crates() {
        let folder = src
            .parent()
            .unwrap()
            .strip_prefix(root())
            .unwrap()
            .to_path_buf();
        if TEST_TOOLING
            .iter()
            .any(|tooling| folder == Path::new(tooling))
        {
            continue;
        }
        let name = folder
            .file_name()
            .map_or("tether".to_string(), |n| n.to_string_lossy().into_owned());
        for entry in walkdir::WalkDir::new(&src).sort_by_file_name() {
            let path = entry.unwrap().into_path();
            if path.extension().is_some_and(|e| e == "rs") {
                let path = path.strip_prefix(root()).unwrap().display().to_string();
                found.push((name.clone(), path));
            }
        }
    }
    found
}

/// A file's module name: its stem, or its folder's name for a `mod.rs` (and a folder's
/// own name, with or without a trailing `/`).
fn module_name(path: &str) -> String {
    let path = Path::new(path.trim_end_matches('/'));
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    if stem == "mod" && path.extension().is_some() {
        let folder = path.parent().and_then(Path::file_name).unwrap_or_default();
        return folder.to_string_lossy().into_owned();
    }
    stem.into_owned()
}

/// Words that name one feature in each crate it spans (ARCHITECTURE.md's feature map),
/// with why they may be file names in several crates.
const FEATURE_WORDS: &[(&str, &str)] = &[
    ("attestation", ONE_FEATURE_ONE_WORD),
    ("image_automation", ONE_FEATURE_ONE_WORD),
    ("discovery", ONE_FEATURE_ONE_WORD),
    ("feedback", ONE_FEATURE_ONE_WORD),
    ("fleet", ONE_FEATURE_ONE_WORD),
    ("events", ONE_FEATURE_ONE_WORD),
    ("clusters", ONE_FEATURE_ONE_WORD),
    ("check", ONE_FEATURE_ONE_WORD),
    ("generate", ONE_FEATURE_ONE_WORD),
    ("install", ONE_FEATURE_ONE_WORD),
    ("reconcile", ONE_FEATURE_ONE_WORD),
    ("verify", ONE_FEATURE_ONE_WORD),
    ("contents", ONE_FEATURE_ONE_WORD),
    ("hook", ONE_FEATURE_ONE_WORD),
    ("revert", ONE_FEATURE_ONE_WORD),
];

const ONE_FEATURE_ONE_WORD: &str =
    "one feature, one word in each crate it spans (ARCHITECTURE.md's feature map)";

/// The module names that files of more than one crate have, each with those files;
/// the roots (`lib`, `main`) and the [`FEATURE_WORDS`] may be in every crate.
fn names_in_several_crates(files: &[(String, String)]) -> BTreeMap<String, Vec<String>> {
    let mut by_name: BTreeMap<String, (BTreeSet<&str>, Vec<String>)> = BTreeMap::new();
    for (krate, path) in files {
        let name = module_name(path);
        let (crates, paths) = by_name.entry(name).or_default();
        crates.insert(krate);
        paths.push(path.clone());
    }
    by_name
        .into_iter()
        .filter(|(name, (crates, _))| {
            crates.len() > 1
                && !["lib", "main"].contains(&name.as_str())
                && !FEATURE_WORDS.iter().any(|(word, _)| word == name)
        })
        .map(|(name, (_, paths))| (name, paths))
        .collect()
}

/// A product file's name says what it is in the whole product: a module name is in one
/// crate only (twice in one crate is fine), but for the roots and the feature words,
/// whose files are the feature's part in each crate.
#[test]
fn product_file_names_are_unique_across_crates() {
    let shared = names_in_several_crates(&product_files());
    let shown: Vec<String> = shared
        .iter()
        .map(|(name, paths)| format!("{name}: {}", paths.join(", ")))
        .collect();
    assert!(
        shared.is_empty(),
        "module names in several crates (rename them after what each is in its crate, or, \
         for one feature spanning crates, use its one word and add it to FEATURE_WORDS and \
         ARCHITECTURE.md's feature map):\n{}",
        shown.join("\n")
    );
}

#[test]
fn a_name_in_two_crates_is_found() {
    let files = [
        ("tether-core", "crates/tether-core/src/lib.rs"),
        ("tether-core", "crates/tether-core/src/model/read.rs"),
        ("tether-core", "crates/tether-core/src/fleet.rs"),
        ("tether-core", "crates/tether-core/src/status/mod.rs"),
        ("tether-core", "crates/tether-core/src/feedback/status.rs"),
        ("tether-daemon", "crates/tether-daemon/src/lib.rs"),
        ("tether-daemon", "crates/tether-daemon/src/web/read.rs"),
        ("tether-daemon", "crates/tether-daemon/src/fleet/mod.rs"),
        ("tether", "src/main.rs"),
        ("tether", "src/cli/read.rs"),
    ]
    .map(|(krate, path)| (krate.to_string(), path.to_string()));
    let shared = names_in_several_crates(&files);
    assert_eq!(
        shared,
        BTreeMap::from([(
            "read".to_string(),
            vec![
                "crates/tether-core/src/model/read.rs".to_string(),
                "crates/tether-daemon/src/web/read.rs".to_string(),
                "src/cli/read.rs".to_string(),
            ]
        )])
    );
}

/// The rows of the table in the Markdown section `## Feature map` (up to the next
/// `## `): each feature's word (its first cell) and the backticked paths of its other
/// cells. `None` without such a section.
fn feature_map(markdown: &str) -> Option<Vec<(String, Vec<String>)>> {
    let mut lines = markdown.lines();
    lines.find(|line| line.trim_end() == "## Feature map")?;
    let mut rows = Vec::new();
    let mut past_header = false;
    for line in lines.take_while(|line| !line.starts_with("## ")) {
        let line = line.trim();
        if !line.starts_with('|') {
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let separator = |cell: &&str| !cell.is_empty() && cell.chars().all(|c| "-: ".contains(c));
        if cells.iter().all(separator) {
            past_header = true;
            continue;
        }
        if !past_header {
            continue;
        }
        let word = cells[0]
            .trim_matches(|c: char| c == '`' || c == '*')
            .to_string();
        let paths = cells[1..]
            .iter()
            .flat_map(|cell| cell.split('`').skip(1).step_by(2))
            .map(str::to_string)
            .collect();
        rows.push((word, paths));
    }
    Some(rows)
}

/// What is wrong with the feature map's rows, with `root` the repository's: a path that
/// does not exist, and a path in the row of one of `words` that is not named by it.
fn feature_map_problems(
    rows: &[(String, Vec<String>)],
    root: &Path,
    words: &[&str],
) -> Vec<String> {
    let mut problems = Vec::new();
    for (word, paths) in rows {
        for path in paths {
            if !root.join(path).exists() {
                problems.push(format!("{word}: `{path}` does not exist"));
            }
            let name = module_name(path);
            if words.contains(&word.as_str()) && name != *word {
                problems.push(format!(
                    "{word}: `{path}` is named {name}, not after the feature's word"
                ));
            }
        }
    }
    problems
}

/// ARCHITECTURE.md's feature map (`## Feature map`: one row per feature, its word, then
/// its files and folders in each crate) names paths that exist, and the files and
/// folders of a feature in [`FEATURE_WORDS`] are named by its one word.
#[test]
fn the_feature_maps_paths_exist() {
    let architecture = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let rows = feature_map(&architecture).expect(
        "ARCHITECTURE.md has no section `## Feature map`: add it, a table with one row per \
         feature (its word, then a column per crate with its backticked paths, or —)",
    );
    assert!(
        rows.len() >= 5,
        "ARCHITECTURE.md's feature map has {} rows: one row per feature, at least 5",
        rows.len()
    );
    let words: Vec<&str> = FEATURE_WORDS.iter().map(|(word, _)| *word).collect();
    let problems = feature_map_problems(&rows, &root(), &words);
    assert!(
        problems.is_empty(),
        "ARCHITECTURE.md's feature map (fix the map, or the files it names):\n{}",
        problems.join("\n")
    );
}

#[test]
fn a_wrong_path_in_the_feature_map_is_found() {
    let markdown = "# Architecture\n\n## Feature map\n\nOne word per feature.\n\n\
        | feature | tether-engine | tether |\n\
        | --- | --- | --- |\n\
        | `fleet` | `crates/e/src/fleet/` | `src/cli/fleet.rs` |\n\
        | check | — | `src/cli/checks.rs` |\n\
        | web | `crates/e/src/web.rs`, `crates/e/src/gone.rs` | — |\n\
        \n## Invariants\n\n| a | b |\n| - | - |\n| `x` | `y` |\n";
    let rows = feature_map(markdown).expect("a feature map");
    assert_eq!(rows.len(), 3);
    assert_eq!(
        rows[0],
        (
            "fleet".to_string(),
            vec![
                "crates/e/src/fleet/".to_string(),
                "src/cli/fleet.rs".to_string()
            ]
        )
    );
    let dir = tempfile::tempdir().unwrap();
    for path in [
        "crates/e/src/fleet/mod.rs",
        "src/cli/fleet.rs",
        "src/cli/checks.rs",
        "crates/e/src/web.rs",
    ] {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "").unwrap();
    }
    assert_eq!(
        feature_map_problems(&rows, dir.path(), &["fleet", "check"]),
        [
            "check: `src/cli/checks.rs` is named checks, not after the feature's word",
            "web: `crates/e/src/gone.rs` does not exist",
        ]
    );
    assert_eq!(feature_map("# Architecture\n\n## Codemap\n"), None);
}

/// How many lines a product file may have unless [`LONG_FILES`] says why it is one.
const LINE_BUDGET: usize = 1_200;

/// The product files over [`LINE_BUDGET`] lines, by path from the repository root,
/// each with why it is one concept rather than several.
const LONG_FILES: &[(&str, &str)] = &[(
    "crates/tether-engine/src/reconcile/live.rs",
    "planning against the live cluster, one concept: the objects listed by the \
     inventory's label, a server-side dry run for each object not provably unchanged and \
     what its answer decides (update, replace, refusal, hand-over), and the prune steps; \
     its tests are the last seventh",
)];

/// What breaks the budget, from each file's path and line count: a file over it that
/// `listed` does not hold, and a listed file at or under it (or gone).
fn budget_problems(sizes: &[(String, usize)], listed: &[(&str, &str)]) -> Vec<String> {
    let mut problems = Vec::new();
    for (path, lines) in sizes {
        if *lines > LINE_BUDGET && !listed.iter().any(|(long, _)| long == path) {
            problems.push(format!(
                "{path}: {lines} lines, over the budget of {LINE_BUDGET}: split it along its \
                 concepts (or list it in LONG_FILES with why it is one)"
            ));
        }
    }
    for (long, _) in listed {
        let lines = sizes.iter().find(|(path, _)| path == long).map(|(_, n)| *n);
        match lines {
            None => problems.push(format!("{long} is in LONG_FILES but is gone: remove it")),
            Some(lines) if lines <= LINE_BUDGET => problems.push(format!(
                "{long} is in LONG_FILES but has {lines} lines, within the budget of \
                 {LINE_BUDGET}: remove it from the list"
            )),
            Some(_) => {}
        }
    }
    problems
}

/// A product file (tests in it included) has at most [`LINE_BUDGET`] lines, or is in
/// [`LONG_FILES`] with the reason it is one concept; a listed file back under the
/// budget leaves the list.
#[test]
fn product_files_keep_to_the_line_budget() {
    let sizes: Vec<(String, usize)> = product_files()
        .into_iter()
        .map(|(_, path)| {
            let text = std::fs::read_to_string(root().join(&path)).unwrap();
            (path, text.lines().count())
        })
        .collect();
    let problems = budget_problems(&sizes, LONG_FILES);
    assert!(
        problems.is_empty(),
        "the line budget:\n{}",
        problems.join("\n")
    );
}

#[test]
fn a_file_over_the_budget_is_found() {
    let sizes = [
        ("a.rs", 1_201_usize),
        ("b.rs", 1_200),
        ("c.rs", 2_000),
        ("d.rs", 900),
    ]
    .map(|(path, lines)| (path.to_string(), lines));
    let problems = budget_problems(
        &sizes,
        &[
            ("c.rs", "one concept"),
            ("d.rs", "was long"),
            ("e.rs", "split"),
        ],
    );
    assert_eq!(problems.len(), 3, "{problems:?}");
    assert!(problems[0].starts_with("a.rs: 1201 lines, over the budget"));
    assert!(problems[1].starts_with("d.rs is in LONG_FILES but has 900 lines"));
    assert!(problems[2].starts_with("e.rs is in LONG_FILES but is gone"));
}
