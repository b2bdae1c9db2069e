//! Image automation, against a real registry (Debian's docker-registry on loopback,
//! images pushed by skopeo, its access log read for the requests tether made):
//!
//! 1. Registry webhook → commit pushed: the daemon (`tether run --sources`) against a
//!    local control plane and a `git daemon` remote, the registry announcing each push
//!    at `/hook/registry`. N new matching tags pushed one after another, each timed
//!    from skopeo's return to the remote's branch moving (median, p99, worst).
//! 2. Tag lists per repository per run: several policies over one image repository
//!    beside others, `tether images` on a checkout (and with `--commit`): each
//!    repository's `/v2/<repo>/tags/list` requests in the access log.
//! 3. Memory: 1,000 image repositories holding 200,000 tags in all, 1,000 Image models
//!    and 1,000 ImagePolicies in a checkout; `tether images` under GNU time (`-v`):
//!    its peak resident set and wall time, with the tags spread evenly and with one
//!    repository of half of them.
//!
//! Run with `cargo bench --bench images` (`-- --pushes 20 --repositories 1000 --tags
//! 200000`, `--part N` for one part only). A smoke run (`cargo test --bench images`):
//! 2 pushes, 3 repositories of 30 tags in all.

#[allow(dead_code)]
#[path = "common/kube.rs"]
mod kube_helpers;

#[path = "common/mode.rs"]
mod mode;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use chrono::Utc;
use kube::api::{Api, PostParams};
use tether_api::source_spec::{Source, SourceSpec};

use kube_helpers::Killed;
use mode::arg;
use tether_testkit::cluster::LocalCluster;
use tether_testkit::git::git;
use tether_testkit::registry::Registry;
use tether_testkit::remote::{Remote, free_port};

const SECRET: &str = "a-webhook-secret-for-the-images-bench";
const NAMESPACE: &str = "tether-images-bench";
/// A pushed tag must be committed within this (the goal's p99).
const WEBHOOK_GOAL: Duration = Duration::from_secs(10);
/// `tether images` over 1,000 repositories and 200,000 tags stays within this.
const MEMORY_GOAL_MIB: f64 = 64.0;
/// Past this estimate for one skopeo push per repository, the repositories are
/// copied in the registry's storage instead.
const PUSH_BUDGET: Duration = Duration::from_secs(120);

/// One line of the report: what was measured, its value, and the goal's verdict.
struct Figure {
    name: String,
    value: String,
    goal: Option<(&'static str, bool)>,
}

impl Figure {
    fn new(name: impl Into<String>, value: impl Into<String>) -> Figure {
        Figure {
            name: name.into(),
            value: value.into(),
            goal: None,
        }
    }

    fn goal(mut self, goal: &'static str, met: bool) -> Figure {
        self.goal = Some((goal, met));
        self
    }
}

fn main() {
    let part = arg("--part", 0, 0);
    let pushes = arg("--pushes", 20, 2);
    let repositories = arg("--repositories", 1000, 3).max(2);
    let tags = arg("--tags", 200_000, 30).max(repositories);
    let mut figures = Vec::new();
    if part == 0 || part == 1 {
        figures.extend(webhook_to_commit(pushes));
    }
    if part == 0 || part == 2 {
        figures.extend(list_calls());
    }
    if part == 0 || part == 3 {
        figures.extend(memory(repositories, tags));
    }
    println!("\nimages: the figures");
    let width = figures.iter().map(|f| f.name.chars().count()).max();
    for figure in &figures {
        let mut line = format!(
            "  {:<width$}: {}",
            figure.name,
            figure.value,
            width = width.unwrap_or(0)
        );
        if let Some((goal, met)) = figure.goal {
            let verdict = if met { "met" } else { "MISSED" };
            let _ = write!(line, "   (goal {goal}: {verdict})");
        }
        println!("{line}");
    }
}

/// The `q` quantile of sorted `values` (nearest rank).
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let rank = (sorted.len() as f64 * q).ceil() as usize;
    sorted
        .get(rank.saturating_sub(1))
        .copied()
        .unwrap_or_default()
}

fn seconds(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// Each repository's `GET /v2/<repository>/tags/list` requests in the access log.
fn tag_lists(registry: &Registry) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for line in registry.requests() {
        let Some(start) = line.find("\"GET /v2/") else {
            continue;
        };
        let path = &line[start + "\"GET /v2/".len()..];
        let path = path.split(' ').next().unwrap_or_default();
        if let Some((repository, _)) = path.split_once("/tags/list") {
            *counts.entry(repository.to_string()).or_insert(0) += 1;
        }
    }
    counts
}

/// How many lists each repository had between `before` and `after`.
fn lists_between(
    before: &BTreeMap<String, usize>,
    after: &BTreeMap<String, usize>,
) -> BTreeMap<String, usize> {
    after
        .iter()
        .map(|(repository, n)| {
            (
                repository.clone(),
                n - before.get(repository).copied().unwrap_or(0),
            )
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

// ---------------------------------------------------------------------------------
// 1. Registry webhook → commit pushed, through the daemon.

fn webhook_to_commit(pushes: usize) -> Vec<Figure> {
    let cluster = LocalCluster::start(0);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(webhook_run(cluster.kubeconfig(), pushes))
}

/// An Image of `host/shop/app` at 1.0.0, a Deployment Slice running it, and the
/// policy: 1.x, listed hourly (only the webhook brings a scan within the benchmark).
fn daemon_models(host: &str) -> Vec<(&'static str, String)> {
    vec![
        (
            "base.yaml",
            "kind: KubernetesService\nname: kubernetes\n---\nkind: TrustDomain\nname: images-bench\n"
                .into(),
        ),
        (
            "app.yaml",
            format!(
                "kind: Image\nname: {host}/shop/app\ntag: 1.0.0\n---\nkind: Slice\nname: app\ntrust_domain: images-bench\ncontroller_kind: Deployment\ncontroller_replica_count: 1\ndefault_image: {host}/shop/app:1.0.0\n"
            ),
        ),
        (
            "policy.yaml",
            format!(
                "kind: ImagePolicy\nname: app\nimage: {host}/shop/app\nsemver: \">=1.0.0 <2.0.0\"\ninterval: 1h\ninsecure: true\n"
            ),
        ),
    ]
}

/// The `app` policy's entry in the Source's status: its result and last scan.
async fn policy_status(sources: &Api<Source>) -> Option<(String, String)> {
    let source = sources.get_status("bench").await.ok()?;
    source
        .status?
        .images
        .into_iter()
        .find(|i| i.policy == "app")
        .map(|i| (i.result, i.last_scan_time))
}

async fn webhook_run(kubeconfig: &Path, pushes: usize) -> Vec<Figure> {
    let client = tether_testkit::cluster::client(kubeconfig)
        .await
        .expect("client");
    kube_helpers::install_source_crd(&client).await;
    kube_helpers::namespace(&client, NAMESPACE).await;

    let port = free_port();
    let dir = tempfile::tempdir().expect("dir");
    let secret_file = dir.path().join("webhook-secret");
    std::fs::write(&secret_file, SECRET).expect("secret");
    let log = dir.path().join("daemon.log");
    let daemon = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args([
            "run",
            "--sources",
            "--sources-namespace",
            NAMESPACE,
            "--cluster-name",
            "bench",
        ])
        .arg(format!("--listen=127.0.0.1:{port}"))
        .arg("--webhook-secret-file")
        .arg(&secret_file)
        .arg("--cache-dir")
        .arg(dir.path().join("cache"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("daemon log"))
        .spawn()
        .expect("tether run");
    let daemon = Killed(daemon);
    let registry = Registry::start_with_notifications(
        &format!("http://127.0.0.1:{port}/hook/registry"),
        &[("Authorization", &format!("Bearer {SECRET}"))],
    );
    let host = registry.host();
    let a_day_ago = Utc::now() - chrono::Duration::days(1);
    registry.push_image("shop/app", "1.0.0", a_day_ago);
    let files = daemon_models(&host);
    let files: Vec<(&str, &str)> = files.iter().map(|(n, t)| (*n, t.as_str())).collect();
    let remote = Remote::new(&files);

    let spec: SourceSpec = serde_json::from_value(serde_json::json!({
        "url": remote.url, "ref": "main", "path": "models", "interval": "1h",
        "imageAutomation": {},
    }))
    .expect("spec");
    let mut source = Source::new("bench", spec);
    source.metadata.namespace = Some(NAMESPACE.into());
    let sources = Api::<Source>::namespaced(client.clone(), NAMESPACE);
    sources
        .create(&PostParams::default(), &source)
        .await
        .expect("Source");
    // The first scan (the Source's start) keeps 1.0.0; from then on the daemon takes
    // the registry's webhooks for shop/app.
    let started = Instant::now();
    while policy_status(&sources)
        .await
        .is_none_or(|(r, _)| r != "Kept")
    {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no first image scan within 120 s; the daemon's log: {}",
            log.display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "images 1: the Source's first image scan after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // The webhook's repositories are registered just after the status is written.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let lists_before = tag_lists(&registry);
    let mut latencies = Vec::new();
    let mut push_times = Vec::new();
    for push in 1..=pushes {
        let tag = format!("1.0.{push}");
        let before = remote.head_of_bare("main");
        let pushing = Instant::now();
        registry.push_image("shop/app", &tag, a_day_ago);
        let pushed = Instant::now();
        push_times.push(pushed - pushing);
        let head = loop {
            let head = remote.head_of_bare("main");
            if head != before {
                break head;
            }
            assert!(
                pushed.elapsed() < Duration::from_secs(120),
                "{tag} was not committed within 120 s; the daemon's log: {}",
                log.display()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let latency = pushed.elapsed();
        latencies.push(latency);
        let message = git(&remote.bare(), &["log", "-1", "--format=%s", &head]);
        assert!(message.contains(&format!("→ {tag}")), "{message}");
        println!(
            "images 1: push {push}/{pushes} ({tag}): skopeo {:.2} s, then committed after {:.2} s",
            (pushed - pushing).as_secs_f64(),
            latency.as_secs_f64()
        );
    }
    // Any scan still under way is counted too.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let lists = lists_between(&lists_before, &tag_lists(&registry));
    let peak = kube_helpers::process_memory(daemon.0.id(), "VmHWM:");
    drop(daemon);

    latencies.sort();
    push_times.sort();
    let p99 = quantile(&latencies, 0.99);
    let app_lists = lists.get("shop/app").copied().unwrap_or(0);
    vec![
        Figure::new(
            "1. webhook → commit pushed, pushes",
            format!(
                "{pushes} (skopeo push median {})",
                seconds(quantile(&push_times, 0.5))
            ),
        ),
        Figure::new(
            "1. webhook → commit pushed, median",
            seconds(quantile(&latencies, 0.5)),
        ),
        Figure::new("1. webhook → commit pushed, p99", seconds(p99))
            .goal("≤ 10 s", p99 <= WEBHOOK_GOAL),
        Figure::new(
            "1. webhook → commit pushed, worst",
            seconds(latencies.last().copied().unwrap_or_default()),
        ),
        Figure::new(
            "1. daemon's tag lists of shop/app per push",
            format!(
                "{:.2} ({app_lists} for {pushes} pushes)",
                app_lists as f64 / pushes.max(1) as f64
            ),
        ),
        Figure::new("1. daemon's peak resident set", format!("{peak:.1} MiB")),
    ]
}

// ---------------------------------------------------------------------------------
// 2. Tag lists per repository per run.

/// A checkout whose `models/` holds `files`, committed on its branch.
fn checkout(files: &[(String, String)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("checkout");
    for (name, text) in files {
        let path = dir.path().join("models").join(name);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("models dir");
        std::fs::write(path, text).expect("model");
    }
    git(dir.path(), &["init", "-q", "-b", "main"]);
    git(dir.path(), &["add", "-A"]);
    git(dir.path(), &["commit", "-qm", "models"]);
    dir
}

/// `tether images` on `checkout`'s models (with `extra`); its stdout.
fn tether_images(checkout: &Path, extra: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_tether"))
        .arg("images")
        .arg("-C")
        .arg(checkout.join("models"))
        .args(extra)
        .output()
        .expect("tether images");
    assert!(
        output.status.success(),
        "tether images: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8")
}

fn list_calls() -> Vec<Figure> {
    let registry = Registry::start();
    let host = registry.host();
    let a_day_ago = Utc::now() - chrono::Duration::days(1);
    for repository in ["shop/app", "shop/web", "shop/db"] {
        registry.push_image(repository, "1.0.0", a_day_ago);
    }
    let mut app_tags: Vec<String> = (1..50).map(|i| format!("1.0.{i}")).collect();
    app_tags.extend(["1.1.0", "2.0.0", "2.1.0-rc.1"].map(String::from));
    app_tags.extend((1..=30).map(|i| format!("build-{i}")));
    registry.add_tags_in_storage("shop/app", "1.0.0", app_tags);
    for repository in ["shop/web", "shop/db"] {
        registry.add_tags_in_storage(repository, "1.0.0", (1..20).map(|i| format!("1.0.{i}")));
    }
    // Five policies over shop/app (each marking one container of a Deployment), one
    // over shop/web (its Image model), one over shop/db (a marker).
    let policy = |name: &str, image: &str, rule: &str| {
        format!(
            "kind: ImagePolicy\nname: {name}\nimage: {host}/{image}\n{rule}interval: 1h\ninsecure: true\n---\n"
        )
    };
    let policies = [
        policy("app-stable", "shop/app", "semver: \">=1.0.0 <2.0.0\"\n"),
        policy("app-latest", "shop/app", "semver: \">=1.0.0\"\n"),
        policy(
            "app-aged",
            "shop/app",
            "semver: \">=1.0.0 <2.0.0\"\nmin_age: 1h\n",
        ),
        policy(
            "app-build",
            "shop/app",
            "numerical: asc\ntag_pattern: '^build-(?P<n>[0-9]+)$'\nextract: '$n'\n",
        ),
        policy(
            "app-alpha",
            "shop/app",
            "alphabetical: asc\ntag_pattern: '^1\\.0\\.'\n",
        ),
        policy("web", "shop/web", "semver: \">=1.0.0 <2.0.0\"\n"),
        policy("db", "shop/db", "semver: \"^1\"\n"),
    ]
    .concat();
    let containers: String = [
        ("stable", "1.0.0", "app-stable"),
        ("latest", "1.0.0", "app-latest"),
        ("aged", "1.0.0", "app-aged"),
        ("build", "build-1", "app-build"),
        ("alpha", "1.0.0", "app-alpha"),
        ("db", "1.0.0", "db"),
    ]
    .iter()
    .map(|(name, tag, policy)| {
        let image = if *policy == "db" { "shop/db" } else { "shop/app" };
        format!("        - name: {name}\n          image: {host}/{image}:{tag} # tether:image-policy {policy}\n")
    })
    .collect();
    let files = vec![
        ("policies.yaml".to_string(), policies),
        (
            "web.yaml".to_string(),
            format!("kind: Image\nname: {host}/shop/web\ntag: 1.0.0\n"),
        ),
        (
            "plain/app.yaml".to_string(),
            format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app\n  namespace: shop\nspec:\n  selector:\n    matchLabels:\n      app: app\n  template:\n    metadata:\n      labels:\n        app: app\n    spec:\n      containers:\n{containers}"
            ),
        ),
    ];
    let checkout = checkout(&files);

    let mut figures = Vec::new();
    for (run, extra) in [("a run", &[][..]), ("a --commit run", &["--commit"][..])] {
        let before = tag_lists(&registry);
        let said = tether_images(checkout.path(), extra);
        let lists = lists_between(&before, &tag_lists(&registry));
        println!("images 2: tether images {}:\n{said}", extra.join(" "));
        for repository in ["shop/app", "shop/web", "shop/db"] {
            let calls = lists.get(repository).copied().unwrap_or(0);
            let policies = match repository {
                "shop/app" => "5 policies",
                _ => "1 policy",
            };
            figures.push(
                Figure::new(
                    format!("2. tag lists of {repository} ({policies}), {run}"),
                    calls.to_string(),
                )
                .goal("= 1", calls == 1),
            );
        }
    }
    let commits = git(checkout.path(), &["rev-list", "--count", "main"]);
    println!(
        "images 2: {} commit(s) made by the --commit run",
        commits.trim().parse::<usize>().unwrap_or(1) - 1
    );
    figures
}

// ---------------------------------------------------------------------------------
// 3. Memory with 1,000 images and 200,000 tags.

/// How the tags are spread over the repositories.
#[derive(Clone, Copy)]
enum Spread {
    Even,
    /// The first repository holds half of them, the others share the rest.
    OneHalf,
}

fn memory(repositories: usize, tags: usize) -> Vec<Figure> {
    let mut figures = Vec::new();
    for spread in [Spread::Even, Spread::OneHalf] {
        figures.extend(memory_of(repositories, tags, spread));
    }
    figures
}

fn repository_name(i: usize) -> String {
    format!("bench/app-{i:04}")
}

/// How many tags each repository holds (the pushed 1.0.0 among them).
fn tags_per_repository(repositories: usize, tags: usize, spread: Spread) -> Vec<usize> {
    match spread {
        Spread::Even => (0..repositories)
            .map(|i| tags / repositories + usize::from(i < tags % repositories))
            .collect(),
        Spread::OneHalf => {
            let rest = (tags / 2) / (repositories - 1);
            let first = tags - rest * (repositories - 1);
            std::iter::once(first)
                .chain(std::iter::repeat_n(rest, repositories - 1))
                .collect()
        }
    }
}

fn memory_of(repositories: usize, tags: usize, spread: Spread) -> Vec<Figure> {
    let label = match spread {
        Spread::Even => "evenly",
        Spread::OneHalf => "one repository with half",
    };
    let counts = tags_per_repository(repositories, tags, spread);
    let registry = Registry::start();
    let host = registry.host();
    let a_day_ago = Utc::now() - chrono::Duration::days(1);

    // A few pushes by skopeo, timed; the other repositories pushed too when that
    // takes little, else copied in the registry's storage.
    let prepared = Instant::now();
    let mut push_times = Vec::new();
    for i in 0..3.min(repositories) {
        let pushing = Instant::now();
        registry.push_image(&repository_name(i), "1.0.0", a_day_ago);
        push_times.push(pushing.elapsed());
    }
    push_times.sort();
    let one_push = quantile(&push_times, 0.5);
    let estimate = one_push * repositories as u32;
    let copied = estimate > PUSH_BUDGET;
    for i in push_times.len()..repositories {
        match copied {
            true => registry.copy_repository_in_storage(&repository_name(0), &repository_name(i)),
            false => {
                registry.push_image(&repository_name(i), "1.0.0", a_day_ago);
            }
        }
    }
    for (i, count) in counts.iter().enumerate() {
        registry.add_tags_in_storage(
            &repository_name(i),
            "1.0.0",
            (1..*count).map(|n| format!("1.0.{n}")),
        );
    }
    println!(
        "images 3 ({label}): one skopeo push {:.2} s ({:.0} s for {repositories}: {}); {repositories} repositories and {} tags ready in {:.1} s",
        one_push.as_secs_f64(),
        estimate.as_secs_f64(),
        if copied {
            "the others copied in the registry's storage"
        } else {
            "all pushed"
        },
        counts.iter().sum::<usize>(),
        prepared.elapsed().as_secs_f64()
    );

    // One file per image: its Image model at 1.0.0 and its policy (a repository past
    // the default max_tags is allowed its size, so that its whole list is read).
    let files: Vec<(String, String)> = counts
        .iter()
        .enumerate()
        .map(|(i, count)| {
            let name = format!("app-{i:04}");
            let max_tags = if *count > 5000 {
                format!("max_tags: {}\n", count + 1)
            } else {
                String::new()
            };
            (
                format!("images/{name}.yaml"),
                format!(
                    "kind: Image\nname: {host}/bench/{name}\ntag: 1.0.0\n---\nkind: ImagePolicy\nname: {name}\nimage: {host}/bench/{name}\nsemver: \">=1.0.0 <2.0.0\"\ninterval: 1h\ninsecure: true\n{max_tags}"
                ),
            )
        })
        .collect();
    let checkout = checkout(&files);
    let times = checkout.path().join("time.txt");
    let before = tag_lists(&registry);
    let started = Instant::now();
    let output = Command::new("/usr/bin/time")
        .arg("-v")
        .arg("-o")
        .arg(&times)
        .arg(env!("CARGO_BIN_EXE_tether"))
        .arg("images")
        .arg("-C")
        .arg(checkout.path().join("models"))
        .arg("--json")
        .output()
        .expect("GNU time runs tether images");
    let wall = started.elapsed();
    assert!(
        output.status.success(),
        "tether images: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report = std::fs::read_to_string(&times).expect("GNU time's report");
    let field = |name: &str| -> f64 {
        report
            .lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(f64::NAN)
    };
    let peak_mib = field("Maximum resident set size (kbytes):") / 1024.0;
    let cpu = field("User time (seconds):") + field("System time (seconds):");

    // Every policy decided: 1.0.0 → its repository's highest tag.
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let policies = json["policies"].as_array().cloned().unwrap_or_default();
    let updated = policies.iter().filter(|p| p["result"] == "updated").count();
    for (i, count) in counts.iter().enumerate() {
        let name = format!("app-{i:04}");
        let policy = policies
            .iter()
            .find(|p| p["policy"] == name.as_str())
            .expect("each policy reported");
        assert_eq!(
            policy["candidate"],
            format!("1.0.{}", count - 1).as_str(),
            "{policy}"
        );
    }
    let lists = lists_between(&before, &tag_lists(&registry));
    let list_range = (
        lists.values().min().copied().unwrap_or(0),
        lists.values().max().copied().unwrap_or(0),
    );
    let shape = match spread {
        Spread::Even => format!("{repositories} × {}", counts[0]),
        Spread::OneHalf => format!("1 × {} + {} × {}", counts[0], repositories - 1, counts[1]),
    };
    vec![
        Figure::new(
            format!("3. tether images, {label}: repositories × tags"),
            format!(
                "{shape} = {} tags, {} policies ({updated} would update)",
                counts.iter().sum::<usize>(),
                policies.len()
            ),
        ),
        Figure::new(
            format!("3. tether images, {label}: peak RSS"),
            format!("{peak_mib:.1} MiB"),
        )
        .goal("≤ 64 MiB", peak_mib <= MEMORY_GOAL_MIB),
        Figure::new(
            format!("3. tether images, {label}: wall (CPU)"),
            format!("{:.2} s ({cpu:.2} s)", wall.as_secs_f64()),
        ),
        Figure::new(
            format!("3. tether images, {label}: tag lists per repository"),
            format!(
                "{}..{} over {} repositories",
                list_range.0,
                list_range.1,
                lists.len()
            ),
        )
        .goal("= 1", list_range == (1, 1) && lists.len() == repositories),
    ]
}
