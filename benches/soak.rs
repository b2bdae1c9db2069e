//! The daemon (`tether run --sources`) left running, against a local control plane
//! and a `git daemon`: 50 Sources of 100 ConfigMaps each (a repository and a namespace
//! each) at a 100 ms interval, beside 5 Sources that stall (models that name a missing
//! TrustDomain; a ConfigMap the server refuses as too large). Once every Source has
//! settled (applied, or stalled), it samples every `--every` seconds for `--minutes`
//! minutes: the daemon's resident memory and open file descriptors (`/proc/<pid>`),
//! its runtime's alive tasks and its passes (`/metrics`), the length of its text log's
//! lines, and the API writes of the window by resource (the control plane's audit
//! log). It prints a row per sample, plots memory and log line length over time, and
//! says of each series whether it stayed flat after warm-up (the rule: [`verdict`]),
//! whether quiet passes wrote, and whether a stalled Source wrote after its first.
//! Run with `cargo bench --bench soak` (`-- --minutes 60 --every 30 --sources 50
//! --objects 100 --stalled 5 --interval-ms 100 --warmup 100`); `TETHER_SOAK_BIN` runs another
//! `tether` binary than the one cargo built. A smoke run (`cargo test --bench soak`):
//! 3 Sources of 5 ConfigMaps and 2 stalled, sampled every 2 s for 20 s, no warm-up.

// Shared by the benchmarks; each uses part of it.
#[allow(dead_code)]
#[path = "common/kube.rs"]
mod kube_helpers;

#[path = "common/mode.rs"]
mod mode;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::Value;
use tether_api::source_spec::{Source, SourceSpec};

use mode::arg;
use tether_testkit::cluster::LocalCluster;
use tether_testkit::git::git;
use tether_testkit::remote::{GitDaemon, free_port, http};

/// Where the Sources, their inventories and the daemon's Lease live.
const NS: &str = "tether-soak";

struct Config {
    sources: usize,
    objects: usize,
    stalled: usize,
    /// How long it samples: `--minutes`, else 3 minutes (20 s in a smoke run).
    seconds: usize,
    every: usize,
    interval_ms: usize,
    /// Seconds after settling that are warm-up. The first run showed the daemon's
    /// descriptors and tasks falling for about 100 s after the first apply (from 870
    /// and 1,090 to 140 and 380): the start-up's connections closing once idle.
    warmup: usize,
}

fn main() {
    let config = Config {
        sources: arg("--sources", 50, 3),
        objects: arg("--objects", 100, 5),
        stalled: arg("--stalled", 5, 2),
        seconds: mode::given("--minutes").map_or(mode::size(180, 20), |m| m.max(1) * 60),
        every: arg("--every", 10, 2).max(1),
        interval_ms: arg("--interval-ms", 100, 100),
        warmup: arg("--warmup", 100, 0),
    };
    // No simulated nodes: the benchmark measures tether, not pods starting.
    let cluster = LocalCluster::start(0);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(run(&cluster, &config));
}

/// What a Source's models are made to do.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// A TrustDomain and its ConfigMaps: applied once, then quiet passes.
    Healthy,
    /// A ConfigMap in a TrustDomain that no model declares: stalled on InvalidModels.
    InvalidModels,
    /// A ConfigMap of 1.1 MB, which tether accepts and the server refuses (at most
    /// 1 MiB): stalled on ObjectsRefused.
    Refused,
}

struct SourceDef {
    name: String,
    kind: Kind,
}

fn sources(config: &Config) -> Vec<SourceDef> {
    let healthy = (0..config.sources).map(|i| SourceDef {
        name: format!("soak-{i:03}"),
        kind: Kind::Healthy,
    });
    let stalled = (0..config.stalled).map(|i| SourceDef {
        name: format!("stall-{i}"),
        kind: if i % 2 == 0 {
            Kind::InvalidModels
        } else {
            Kind::Refused
        },
    });
    healthy.chain(stalled).collect()
}

fn models(source: &SourceDef, objects: usize) -> String {
    let name = &source.name;
    let mut text = "kind: KubernetesService\nname: kubernetes\n".to_string();
    match source.kind {
        Kind::Healthy => {
            text.push_str(&format!("---\nkind: TrustDomain\nname: {name}\n"));
            for i in 0..objects {
                text.push_str(&format!(
                    "---\nkind: KubernetesConfigMap\nname: c-{i}\ntrust_domain: {name}\ndata:\n  key: \"v1\"\n"
                ));
            }
        }
        Kind::InvalidModels => text.push_str(
            "---\nkind: KubernetesConfigMap\nname: c-0\ntrust_domain: missing\ndata:\n  key: \"v1\"\n",
        ),
        Kind::Refused => {
            text.push_str(&format!("---\nkind: TrustDomain\nname: {name}\n"));
            text.push_str(&format!(
                "---\nkind: KubernetesConfigMap\nname: big\ntrust_domain: {name}\ndata:\n  big: \"{}\"\n",
                "x".repeat(1_100_000)
            ));
        }
    }
    text
}

/// A bare repository per Source (`<name>.git`), all served by one `git daemon`.
struct Repos {
    _dir: tempfile::TempDir,
    daemon: GitDaemon,
}

impl Repos {
    fn new(sources: &[SourceDef], objects: usize) -> Repos {
        let dir = tempfile::tempdir().expect("repositories");
        for source in sources {
            let work = dir.path().join("work").join(&source.name);
            std::fs::create_dir_all(work.join("models")).expect("work tree");
            git(&work, &["init", "-q"]);
            std::fs::write(work.join("models/models.yaml"), models(source, objects))
                .expect("models");
            git(&work, &["add", "-A"]);
            git(&work, &["commit", "-qm", "models"]);
            let from = format!("work/{}", source.name);
            let to = format!("{}.git", source.name);
            git(dir.path(), &["clone", "-q", "--bare", &from, &to]);
        }
        let daemon = GitDaemon::serve(dir.path(), &dir.path().join("git-daemon.log"));
        Repos { _dir: dir, daemon }
    }

    fn url(&self, name: &str) -> String {
        format!("git://127.0.0.1:{}/{name}.git", self.daemon.port)
    }
}

async fn create_sources(client: &Client, repos: &Repos, defs: &[SourceDef], interval_ms: usize) {
    let api: Api<Source> = Api::namespaced(client.clone(), NS);
    for def in defs {
        let mut source = Source::new(
            &def.name,
            SourceSpec {
                url: repos.url(&def.name),
                reference: Some("main".into()),
                insecure: false,
                path: Some("models".into()),
                interval: Some(format!("{interval_ms}ms")),
                prune: false,
                allow_empty: false,
                deletion_budget: None,
                health_check_exprs: Vec::new(),
                drift: Default::default(),
                rewrites: Default::default(),
                suspend: false,
                inventory: None,
                secret_ref: None,
                verify: None,
                signing_key: None,
                attestation: None,
                verify_charts: None,
                decryption: None,
                discovery: None,
                image_automation: None,
                service_account_name: None,
                confine: None,
                propose_actions: false,
                timeout: None,
                revert: false,
                feedback: None,
            },
        );
        source.metadata.namespace = Some(NS.into());
        api.create(&PostParams::default(), &source)
            .await
            .expect("Source");
    }
}

/// The text log, read from the daemon's standard error as it comes (nothing on disk):
/// lines and bytes since the last sample.
#[derive(Default)]
struct LogWindow {
    lines: u64,
    bytes: u64,
    longest: usize,
    warnings: u64,
    /// The longest line of the window, cut to 400 bytes: what grows, when one does.
    example: String,
}

fn read_log(stderr: impl Read + Send + 'static) -> Arc<Mutex<LogWindow>> {
    let window = Arc::new(Mutex::new(LogWindow::default()));
    let shared = window.clone();
    std::thread::spawn(move || {
        let mut reader = BufReader::with_capacity(1 << 20, stderr);
        let mut line = Vec::new();
        while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
            let length = line.len() - usize::from(line.last() == Some(&b'\n'));
            let mut w = shared.lock().expect("log window");
            w.lines += 1;
            w.bytes += length as u64;
            let text = String::from_utf8_lossy(&line[..length.min(400)]);
            if text.contains(" WARN ") || text.contains(" ERROR ") {
                w.warnings += 1;
            }
            if length > w.longest {
                w.longest = length;
                w.example = text.into_owned();
            }
            line.clear();
        }
    });
    window
}

struct Daemon {
    child: Child,
    port: u16,
    log: Arc<Mutex<LogWindow>>,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    fn start(kubeconfig: &Path, cache: &Path) -> Daemon {
        let port = free_port();
        // The target directory may be shared with other checkouts, which can build
        // their own `tether` there: TETHER_SOAK_BIN names a copy to run instead.
        let binary = std::env::var_os("TETHER_SOAK_BIN").map_or_else(
            || PathBuf::from(env!("CARGO_BIN_EXE_tether")),
            PathBuf::from,
        );
        let mut child = Command::new(binary)
            .args(["run", "--sources", "--sources-namespace", NS])
            .args(["--leader-elect", "--lease-namespace", NS])
            .args(["--log-format", "text", "--log-level", "info"])
            .arg(format!("--listen=127.0.0.1:{port}"))
            .arg("--cache-dir")
            .arg(cache)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tether run");
        let log = read_log(child.stderr.take().expect("stderr"));
        Daemon { child, port, log }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn rss_mib(&self) -> f64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|l| l.split_whitespace().next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1024.0
    }

    fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// The alive tasks and the passes so far, by result.
    fn metrics(&self) -> (f64, BTreeMap<String, f64>) {
        let (_, text) = http(self.port, "GET", "/metrics", &[], b"");
        let tasks = text
            .lines()
            .find_map(|l| l.strip_prefix("tether_runtime_alive_tasks ")?.parse().ok())
            .unwrap_or(f64::NAN);
        let mut passes = BTreeMap::new();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("tether_reconciles_total{") else {
                continue;
            };
            let result = rest
                .split("result=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or("?");
            let value: f64 = rest
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
            *passes.entry(result.to_string()).or_default() += value;
        }
        (tasks, passes)
    }

    fn take_log(&self) -> LogWindow {
        std::mem::take(&mut *self.log.lock().expect("log window"))
    }
}

/// The control plane's audit log (one JSON line per write or LIST), read on from
/// where the last read stopped; the API server rotates it at 200 MB, and the reader
/// then finishes the old file and goes on with the new one.
struct Audit {
    path: PathBuf,
    file: File,
    partial: Vec<u8>,
}

impl Audit {
    /// From the end of what the log holds now.
    fn open(path: &Path) -> Audit {
        let mut audit = Audit {
            path: path.to_path_buf(),
            file: File::open(path).expect("audit log"),
            partial: Vec::new(),
        };
        audit.read();
        audit
    }

    fn read(&mut self) -> Vec<Value> {
        let mut bytes = std::mem::take(&mut self.partial);
        self.file.read_to_end(&mut bytes).expect("audit log");
        let rotated = std::fs::metadata(&self.path)
            .is_ok_and(|m| m.ino() != self.file.metadata().map(|o| o.ino()).unwrap_or(0));
        if rotated && let Ok(mut file) = File::open(&self.path) {
            let _ = file.read_to_end(&mut bytes);
            self.file = file;
        }
        let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        self.partial = bytes.split_off(complete);
        bytes
            .split(|b| *b == b'\n')
            .filter_map(|l| serde_json::from_slice(l).ok())
            .collect()
    }
}

/// Requests in a window, from the audit log.
#[derive(Default)]
struct Writes {
    /// Writes (create, update, patch, delete) by the daemon, by column.
    by_column: BTreeMap<&'static str, u64>,
    lists: u64,
    /// Requests of the control plane itself (controller manager, API server).
    control_plane: u64,
    /// Status writes and Events of each stalled Source.
    stalled: BTreeMap<String, u64>,
    /// Status, inventory and object writes of the healthy Sources: what their quiet
    /// passes should not make.
    healthy: u64,
}

impl Writes {
    fn count(events: &[Value], stalled: &[&str]) -> Writes {
        let mut writes = Writes::default();
        for event in events {
            if event["stage"] != "ResponseComplete" {
                continue;
            }
            let agent = event["userAgent"].as_str().unwrap_or("");
            if agent.starts_with("kube-controller-manager") || agent.starts_with("kube-apiserver") {
                writes.control_plane += 1;
                continue;
            }
            let verb = event["verb"].as_str().unwrap_or("");
            if verb == "list" {
                writes.lists += 1;
                continue;
            }
            if !matches!(verb, "create" | "update" | "patch" | "delete") {
                continue;
            }
            let object = &event["objectRef"];
            let resource = object["resource"].as_str().unwrap_or("");
            let subresource = object["subresource"].as_str().unwrap_or("");
            let namespace = object["namespace"].as_str().unwrap_or("");
            let name = object["name"].as_str().unwrap_or("");
            let column = match (resource, subresource) {
                ("sources", "status") => "status",
                ("configmaps", _) if namespace == NS => "inventory",
                ("configmaps" | "namespaces", _) => "objects",
                ("events", _) => "events",
                ("leases", _) => "leases",
                _ => "other",
            };
            *writes.by_column.entry(column).or_default() += 1;
            // Whose write it is: a Source's status and inventory are named after it,
            // its objects are in its namespace, kube's recorder names its Events
            // `<source>.<suffix>`.
            let owner = match column {
                "status" | "inventory" => name,
                "objects" if resource == "namespaces" => name,
                "objects" => namespace,
                "events" => name.split_once('.').map_or(name, |(source, _)| source),
                _ => "",
            };
            if let Some(source) = stalled.iter().find(|s| **s == owner) {
                *writes.stalled.entry(source.to_string()).or_default() += 1;
            } else if matches!(column, "status" | "objects" | "inventory") {
                writes.healthy += 1;
            }
        }
        writes
    }

    fn total(&self) -> u64 {
        self.by_column.values().sum()
    }

    fn column(&self, column: &str) -> u64 {
        self.by_column.get(column).copied().unwrap_or(0)
    }

    fn stalled_total(&self) -> u64 {
        self.stalled.values().sum()
    }

    fn add(&mut self, other: &Writes) {
        for (k, v) in &other.by_column {
            *self.by_column.entry(k).or_default() += v;
        }
        for (k, v) in &other.stalled {
            *self.stalled.entry(k.clone()).or_default() += v;
        }
        self.healthy += other.healthy;
        self.lists += other.lists;
        self.control_plane += other.control_plane;
    }
}

/// One row: the state at `t` and what happened since the row before.
struct Sample {
    t: f64,
    rss: f64,
    fds: f64,
    tasks: f64,
    passes_per_s: f64,
    failed_per_s: f64,
    log_lines: u64,
    log_mean: f64,
    log_max: f64,
    warnings: u64,
    writes: Writes,
}

async fn run(cluster: &LocalCluster, config: &Config) {
    let client = tether_testkit::cluster::client(cluster.kubeconfig())
        .await
        .expect("client");
    kube_helpers::install_source_crd(&client).await;
    kube_helpers::namespace(&client, NS).await;
    let defs = sources(config);
    let stalled: Vec<&str> = defs
        .iter()
        .filter(|d| d.kind != Kind::Healthy)
        .map(|d| d.name.as_str())
        .collect();
    let repos = Repos::new(&defs, config.objects);
    create_sources(&client, &repos, &defs, config.interval_ms).await;

    let mut audit = Audit::open(&cluster.state_dir().join("logs/audit.log"));
    let cache = tempfile::tempdir().expect("cache");
    let started = Instant::now();
    let mut daemon = Daemon::start(cluster.kubeconfig(), cache.path());
    settle(&client, &defs, &daemon, started).await;
    let settled = started.elapsed();
    let mut since_start = Writes::count(&audit.read(), &stalled);
    let before = daemon.take_log();
    println!(
        "soak: one daemon, {} Sources of {} ConfigMaps and {} stalled, every {} ms; settled in {:.0} s \
         ({} writes, {} log lines, {:.0} bytes a line); sampling every {} s for {} s",
        config.sources,
        config.objects,
        stalled.len(),
        config.interval_ms,
        settled.as_secs_f64(),
        since_start.total(),
        before.lines,
        before.bytes as f64 / before.lines.max(1) as f64,
        config.every,
        config.seconds
    );
    print_header();

    let t0 = Instant::now();
    let (_, mut passes_before) = daemon.metrics();
    let mut samples = Vec::new();
    let mut last = t0;
    let mut longest = String::new();
    while t0.elapsed() < Duration::from_secs(config.seconds as u64) {
        tokio::time::sleep(Duration::from_secs(config.every as u64)).await;
        let window = last.elapsed().as_secs_f64();
        last = Instant::now();
        let (tasks, passes) = daemon.metrics();
        let delta = |result: Option<&str>| {
            passes
                .iter()
                .filter(|(r, _)| result.is_none_or(|want| r.as_str() == want))
                .map(|(r, v)| v - passes_before.get(r).copied().unwrap_or(0.0))
                .sum::<f64>()
                / window
        };
        let log = daemon.take_log();
        let writes = Writes::count(&audit.read(), &stalled);
        since_start.add(&writes);
        let sample = Sample {
            t: t0.elapsed().as_secs_f64(),
            rss: daemon.rss_mib(),
            fds: daemon.fds() as f64,
            tasks,
            passes_per_s: delta(None),
            failed_per_s: delta(Some("failure")),
            log_lines: log.lines,
            log_mean: log.bytes as f64 / log.lines.max(1) as f64,
            log_max: log.longest as f64,
            warnings: log.warnings,
            writes,
        };
        passes_before = passes;
        longest = log.example;
        print_row(&sample);
        samples.push(sample);
        if let Ok(Some(status)) = daemon.child.try_wait() {
            panic!("the daemon exited: {status}");
        }
    }
    // Warm-up: `--warmup` seconds, and at least the first quarter of the samples.
    let warm = samples
        .iter()
        .take_while(|s| s.t <= config.warmup as f64)
        .count()
        .max(samples.len().div_ceil(4));
    summary(&samples, warm, &since_start, &stalled, &longest);
}

/// Waits until every healthy Source applied its revision and every other one stalled.
async fn settle(client: &Client, defs: &[SourceDef], daemon: &Daemon, started: Instant) {
    let api: Api<Source> = Api::namespaced(client.clone(), NS);
    let mut last_report = Instant::now();
    loop {
        let mut waiting = Vec::new();
        for def in defs {
            let status = api.get_status(&def.name).await.ok().and_then(|s| s.status);
            let done = status.is_some_and(|s| match def.kind {
                Kind::Healthy => s.last_applied_revision.is_some(),
                Kind::InvalidModels | Kind::Refused => s
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "Stalled" && c.status == "True"),
            });
            if !done {
                waiting.push(def.name.as_str());
            }
        }
        if waiting.is_empty() {
            return;
        }
        if last_report.elapsed() > Duration::from_secs(30) {
            last_report = Instant::now();
            eprintln!(
                "  {:.0} s: {} Sources not settled yet ({}…), RSS {:.0} MiB",
                started.elapsed().as_secs_f64(),
                waiting.len(),
                waiting[0],
                daemon.rss_mib()
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(1200),
            "not settled in 20 min: {waiting:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn print_header() {
    println!(
        "{:>6} {:>7} {:>5} {:>6} {:>8} {:>7} {:>7} {:>8} {:>8} {:>5} | writes: {:>6} {:>7} {:>9} {:>6} {:>6} {:>5} {:>7} {:>5}",
        "t s",
        "RSS MiB",
        "fds",
        "tasks",
        "passes/s",
        "failed",
        "lines",
        "B/line",
        "max B",
        "warn",
        "status",
        "objects",
        "inventory",
        "events",
        "leases",
        "other",
        "stalled",
        "lists"
    );
}

fn print_row(s: &Sample) {
    let w = &s.writes;
    println!(
        "{:>6.0} {:>7.1} {:>5.0} {:>6.0} {:>8.1} {:>7.1} {:>7} {:>8.1} {:>8.0} {:>5} |         {:>6} {:>7} {:>9} {:>6} {:>6} {:>5} {:>7} {:>5}",
        s.t,
        s.rss,
        s.fds,
        s.tasks,
        s.passes_per_s,
        s.failed_per_s,
        s.log_lines,
        s.log_mean,
        s.log_max,
        s.warnings,
        w.column("status"),
        w.column("objects"),
        w.column("inventory"),
        w.column("events"),
        w.column("leases"),
        w.column("other"),
        w.stalled_total(),
        w.lists
    );
}

/// A series' verdict after warm-up, and the figures it rests on.
struct Verdict {
    flat: bool,
    reference: (f64, f64),
    tolerance: f64,
    second_half: (f64, f64),
    drift: f64,
}

/// The rule. Warm-up is the first `warm` samples; the rest is cut in two halves. The first half is the reference: its range, widened by a
/// tolerance of `relative` × its mean, or `absolute` when that is more (the noise of a
/// series that is near zero, or counted in units). The series is flat when every
/// sample of the second half lies in the widened range and the second half's
/// least-squares slope, times the second half's length, moves less than the
/// tolerance plus half the reference's range (a trend smaller than the noise already
/// seen is noise: on a few samples a fitted slope is mostly that): a leak shows
/// either as samples out of range or as a trend inside it.
fn verdict(points: &[(f64, f64)], warm: usize, relative: f64, absolute: f64) -> Option<Verdict> {
    let after = points.get(warm..)?;
    if after.len() < 4 {
        return None;
    }
    let (first, second) = after.split_at(after.len() / 2);
    let range = |p: &[(f64, f64)]| {
        p.iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), (_, v)| {
                (lo.min(*v), hi.max(*v))
            })
    };
    let reference = range(first);
    let mean = first.iter().map(|(_, v)| v).sum::<f64>() / first.len() as f64;
    let tolerance = (relative * mean.abs()).max(absolute);
    let second_half = range(second);
    let drift = slope(second) * (second[second.len() - 1].0 - second[0].0);
    let flat = second_half.0 >= reference.0 - tolerance
        && second_half.1 <= reference.1 + tolerance
        && drift.abs() <= tolerance + (reference.1 - reference.0) / 2.0;
    Some(Verdict {
        flat,
        reference,
        tolerance,
        second_half,
        drift,
    })
}

/// The least-squares slope of `points` (value per unit of time).
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let mean_t = points.iter().map(|(t, _)| t).sum::<f64>() / n;
    let mean_v = points.iter().map(|(_, v)| v).sum::<f64>() / n;
    let covariance: f64 = points
        .iter()
        .map(|(t, v)| (t - mean_t) * (v - mean_v))
        .sum();
    let variance: f64 = points.iter().map(|(t, _)| (t - mean_t).powi(2)).sum();
    if variance == 0.0 {
        0.0
    } else {
        covariance / variance
    }
}

/// An ASCII plot of `points` (time, value): 12 rows, a column per sample (or per group
/// of samples, at most 72 columns), the value axis from the minimum to the maximum.
fn plot(title: &str, unit: &str, points: &[(f64, f64)]) {
    const ROWS: usize = 12;
    const WIDTH: usize = 72;
    if points.is_empty() {
        return;
    }
    let per_column = points.len().div_ceil(WIDTH);
    let columns: Vec<f64> = points
        .chunks(per_column)
        .map(|c| c.iter().map(|(_, v)| v).sum::<f64>() / c.len() as f64)
        .collect();
    let lo = columns.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = columns.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let span = if hi > lo { hi - lo } else { 1.0 };
    // Few samples are drawn wider, so that the plot is not a sliver.
    let stretch = (WIDTH / columns.len()).clamp(1, 4);
    let line_width = columns.len() * stretch;
    let row_of = |v: f64| (((v - lo) / span) * (ROWS - 1) as f64).round() as usize;
    println!(
        "\n{title} ({unit}), {:.0} s to {:.0} s",
        points[0].0,
        points[points.len() - 1].0
    );
    for row in (0..ROWS).rev() {
        let label = lo + span * row as f64 / (ROWS - 1) as f64;
        let line: String = columns
            .iter()
            .map(|v| {
                if row_of(*v) == row {
                    '*'
                } else if row_of(*v) > row {
                    '|'
                } else {
                    ' '
                }
            })
            .collect();
        println!("{label:>10.1} |{line}");
    }
    println!("{:>10} +{}", "", "-".repeat(line_width));
    println!(
        "{:>10}  t = {:.0} s … {:.0} s, {} samples",
        "",
        points[0].0,
        points[points.len() - 1].0,
        points.len()
    );
}

fn summary(samples: &[Sample], warm: usize, since_start: &Writes, stalled: &[&str], longest: &str) {
    let series = |f: &dyn Fn(&Sample) -> f64| -> Vec<(f64, f64)> {
        samples.iter().map(|s| (s.t, f(s))).collect()
    };
    plot("RSS", "MiB", &series(&|s| s.rss));
    plot(
        "log bytes per line, mean of the window",
        "bytes",
        &series(&|s| s.log_mean),
    );

    println!(
        "\nverdicts (warm-up: the first {warm} samples, to t = {:.0} s; the rule: `verdict` in benches/soak.rs)",
        samples.get(warm.saturating_sub(1)).map_or(0.0, |s| s.t)
    );
    // (name, series, relative tolerance, absolute tolerance)
    type Check<'a> = (&'a str, Vec<(f64, f64)>, f64, f64);
    let checks: [Check; 8] = [
        ("RSS (MiB)", series(&|s| s.rss), 0.05, 2.0),
        ("open fds", series(&|s| s.fds), 0.05, 2.0),
        ("alive tasks", series(&|s| s.tasks), 0.05, 3.0),
        ("log bytes/line, mean", series(&|s| s.log_mean), 0.05, 4.0),
        ("log bytes/line, max", series(&|s| s.log_max), 0.05, 8.0),
        (
            "log lines/window",
            series(&|s| s.log_lines as f64),
            0.2,
            10.0,
        ),
        (
            "writes/window, no Leases",
            series(&|s| (s.writes.total() - s.writes.column("leases")) as f64),
            0.2,
            5.0,
        ),
        (
            "Lease writes/window",
            series(&|s| s.writes.column("leases") as f64),
            0.2,
            5.0,
        ),
    ];
    for (name, points, relative, absolute) in &checks {
        match verdict(points, warm, *relative, *absolute) {
            Some(v) => println!(
                "  {name:<24} {:<12} reference {:.1}..{:.1} ± {:.1}, second half {:.1}..{:.1}, trend over it {:+.1}",
                if v.flat { "FLAT" } else { "NOT FLAT" },
                v.reference.0,
                v.reference.1,
                v.tolerance,
                v.second_half.0,
                v.second_half.1,
                v.drift
            ),
            None => println!("  {name:<24} too few samples after warm-up (need 4)"),
        }
    }

    let mut after = Writes::default();
    for s in samples.iter().skip(warm) {
        after.add(&s.writes);
    }
    println!("\nwrites after warm-up, by column: {:?}", after.by_column);
    let quiet = after.healthy;
    println!(
        "  quiet passes: {quiet} writes of the healthy Sources' objects, inventories and status (want 0): {}",
        if quiet == 0 { "OK" } else { "WRITES" }
    );
    let stalled_after = after.stalled_total();
    let after_first: u64 = stalled
        .iter()
        .map(|s| {
            since_start
                .stalled
                .get(*s)
                .copied()
                .unwrap_or(0)
                .saturating_sub(1)
        })
        .sum();
    println!(
        "  stalled Sources ({}): {} writes (status, objects, Events) after their first since the daemon started, \
         {} after warm-up (want 0): {}",
        stalled.len(),
        after_first,
        stalled_after,
        if stalled_after == 0 { "OK" } else { "WRITES" }
    );
    for source in stalled {
        println!(
            "    {source}: {} since start",
            since_start.stalled.get(*source).copied().unwrap_or(0)
        );
    }
    println!(
        "  requests of the control plane itself (not counted above): {}; LISTs by the daemon: {}",
        since_start.control_plane, since_start.lists
    );
    println!("\nthe longest log line of the last window (first 400 bytes):\n  {longest}");
}
