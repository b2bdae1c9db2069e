//! The web page and its API at scale (issue 33, "Performance"): one `tether run
//! --sources` serving 1,000 Sources of one `git daemon` repository (10 ConfigMaps
//! each: 10,000 objects) on a local control plane, the Sources in a namespace per
//! 100, each Source's objects in a namespace of its own (a TrustDomain declared by
//! several Sources would be owned by one inventory and refused to the others).
//! Measures, with 100 Sources and then with all: the Sources page's first contentful
//! paint, bytes transferred and requests in headless Chromium (median of fresh
//! loads, each in a new browser so nothing is cached); the list API and a Source's
//! page over plain HTTP; a `kubectl patch`-like edit of one ConfigMap to its `event:
//! source` on the live stream and to its row changing in the open page; the daemon's
//! resident memory idle and with 20 clients.
//! Run with `cargo bench --bench web` (`-- --sources 1000 --first 100 --configmaps 10
//! --loads 5 --samples 5 --clients 20`). A smoke run (`cargo test --bench web`): 2 and
//! then 4 Sources of 2 ConfigMaps, one load and one sample of each, 2 clients.

// Shared by the benchmarks; each uses part of it.
#[allow(dead_code)]
#[path = "common/kube.rs"]
mod kube_helpers;

#[path = "common/mode.rs"]
mod mode;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tether_api::source_spec::Source;

use mode::arg;
use tether_testkit::browser::Browser;
use tether_testkit::cluster::LocalCluster;
use tether_testkit::remote::{Remote, free_port};

/// Sources per namespace.
const PER_NAMESPACE: usize = 100;
/// Who edits a ConfigMap by hand (another field manager than tether's).
const EDITOR: &str = "kubectl-patch";
/// How long a wait for the cluster or the daemon may take before the bench gives up.
const PATIENCE: Duration = Duration::from_secs(1200);

struct Config {
    sources: usize,
    first: usize,
    config_maps: usize,
    loads: usize,
    samples: usize,
    clients: usize,
}

fn main() {
    let sources = arg("--sources", 1000, 4).max(1);
    let config = Config {
        sources,
        first: arg("--first", 100, 2).clamp(1, sources),
        config_maps: arg("--configmaps", 10, 2).max(1),
        loads: arg("--loads", 5, 1).max(1),
        samples: arg("--samples", 5, 1).max(1),
        clients: arg("--clients", 20, 2),
    };
    // No simulated nodes: the benchmark measures tether, not pods starting.
    let cluster = LocalCluster::start(0);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(run(cluster.kubeconfig(), &config));
}

fn team(source: usize) -> String {
    format!("team-{:02}", source / PER_NAMESPACE)
}

/// The namespace of a Source's objects.
fn trust_domain(source: usize) -> String {
    format!("web-{}", source_name(source))
}

fn source_name(source: usize) -> String {
    format!("s{source:04}")
}

/// The repository: `sNNNN/models.yaml` per Source, a KubernetesService, its
/// TrustDomain and its ConfigMaps.
fn models(config: &Config) -> Vec<(String, String)> {
    (0..config.sources)
        .map(|s| {
            let domain = trust_domain(s);
            let mut text =
                format!("kind: KubernetesService\nname: kubernetes\n---\nkind: TrustDomain\nname: {domain}\n");
            for c in 0..config.config_maps {
                text.push_str(&format!(
                    "---\nkind: KubernetesConfigMap\nname: {}-{c}\ntrust_domain: {domain}\ndata:\n  key: \"v1\"\n",
                    source_name(s)
                ));
            }
            (format!("{}/models.yaml", source_name(s)), text)
        })
        .collect()
}

/// The daemon under test, from a copy of the binary: the target directory is shared
/// with other checkouts, whose builds may replace `tether` while the bench runs.
struct Daemon {
    child: Child,
    port: u16,
    _binary: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    fn start(kubeconfig: &Path, cache: &Path) -> Daemon {
        let copy = tempfile::tempdir().expect("a directory for the binary");
        let binary = copy.path().join("tether");
        std::fs::copy(env!("CARGO_BIN_EXE_tether"), &binary).expect("copy tether");
        let port = free_port();
        let child = Command::new(&binary)
            .args(["run", "--sources"])
            .arg(format!("--listen=127.0.0.1:{port}"))
            .arg("--cache-dir")
            .arg(cache)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .stdout(Stdio::null())
            .spawn()
            .expect("tether run");
        let daemon = Daemon {
            child,
            port,
            _binary: copy,
        };
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(started.elapsed() < PATIENCE, "the daemon never listened");
            std::thread::sleep(Duration::from_millis(100));
        }
        daemon
    }

    /// A field of /proc/PID/status in MiB (VmRSS:, VmHWM:).
    fn memory(&self, field: &str) -> f64 {
        kube_helpers::process_memory(self.child.id(), field)
    }

    fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// The static token of the control plane's admin (`scripts/local-cluster` writes it
/// into the kubeconfig; a TokenReview accepts it).
fn admin_token(kubeconfig: &Path) -> String {
    std::fs::read_to_string(kubeconfig)
        .expect("the kubeconfig")
        .lines()
        .find_map(|l| l.trim().strip_prefix("token:"))
        .map(|t| t.trim().to_string())
        .expect("a token in the kubeconfig")
}

/// Creates the Sources `range` (16 requests at once).
async fn create_sources(client: &kube::Client, url: &str, range: std::ops::Range<usize>) {
    stream::iter(range)
        .for_each_concurrent(16, |s| {
            let client = client.clone();
            async move {
                let source: Source = serde_json::from_value(json!({
                    "apiVersion": "tether.dev/v1alpha1",
                    "kind": "Source",
                    "metadata": {"name": source_name(s), "namespace": team(s)},
                    "spec": {"url": url, "ref": "main", "path": format!("models/{}", source_name(s))},
                }))
                .expect("a Source");
                Api::<Source>::namespaced(client, &team(s))
                    .create(&PostParams::default(), &source)
                    .await
                    .expect("create the Source");
            }
        })
        .await;
}

/// Waits until `count` Sources are Ready; how long since `started`.
async fn wait_ready(client: &kube::Client, count: usize, started: Instant) -> Duration {
    let api: Api<Source> = Api::all(client.clone());
    loop {
        let ready = api
            .list(&ListParams::default())
            .await
            .map(|l| {
                l.items
                    .iter()
                    .filter(|s| {
                        s.status.as_ref().is_some_and(|status| {
                            status
                                .conditions
                                .iter()
                                .any(|c| c.type_ == "Ready" && c.status == "True")
                        })
                    })
                    .count()
            })
            .unwrap_or(0);
        if ready >= count {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < PATIENCE,
            "only {ready} of {count} Sources Ready"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// What the Performance API says of one load of the Sources page.
#[derive(Clone, Copy, Default)]
struct Load {
    paint_ms: f64,
    bytes: f64,
    decoded: f64,
    requests: f64,
    rows: f64,
}

const PERFORMANCE: &str = "
const nav = performance.getEntriesByType('navigation')[0];
const paint = performance.getEntriesByType('paint').find(e => e.name === 'first-contentful-paint');
const resources = performance.getEntriesByType('resource');
const live = document.getElementById('live');
const stream = live && live.getAttribute('data-state') === 'up'
  && !resources.some(e => e.name.endsWith('/api/v1/stream')) ? 1 : 0;
return {
  paint: paint ? paint.startTime : -1,
  bytes: nav.transferSize + resources.reduce((s, e) => s + e.transferSize, 0),
  decoded: nav.decodedBodySize + resources.reduce((s, e) => s + e.decodedBodySize, 0),
  requests: 1 + resources.length + stream,
  rows: document.querySelectorAll('#sources tbody tr').length,
};";

/// A new browser (nothing cached) signed in as `token`, the Sources page loaded
/// and following the live stream.
async fn signed_in(base: &str, token: &str) -> Browser {
    let browser = Browser::start().await;
    // A page of the site without assets (a JSON error), for the cookie's domain.
    browser.goto(&format!("{base}/api/v1/session")).await;
    browser.set_cookie("tether_session", token).await;
    browser.goto(&format!("{base}/")).await;
    browser
        .wait_for_text("#live", "live", Duration::from_secs(10))
        .await;
    browser
}

/// Loads the Sources page in a new browser as `token`.
async fn load_page(base: &str, token: &str) -> Load {
    let browser = signed_in(base, token).await;
    let seen = browser
        .client()
        .execute(PERFORMANCE, Vec::new())
        .await
        .expect("the Performance API");
    browser.close().await;
    let number = |name: &str| seen[name].as_f64().unwrap_or(-1.0);
    Load {
        paint_ms: number("paint"),
        bytes: number("bytes"),
        decoded: number("decoded"),
        requests: number("requests"),
        rows: number("rows"),
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The median of `loads` fresh loads, each figure on its own.
async fn page_loads(base: &str, token: &str, loads: usize) -> Load {
    let mut all = Vec::new();
    for _ in 0..loads {
        all.push(load_page(base, token).await);
    }
    let of = |figure: fn(&Load) -> f64| median(all.iter().map(figure).collect());
    Load {
        paint_ms: of(|l| l.paint_ms),
        bytes: of(|l| l.bytes),
        decoded: of(|l| l.decoded),
        requests: of(|l| l.requests),
        rows: of(|l| l.rows),
    }
}

/// One GET as `token` on a connection of its own: the status, the body's bytes as
/// sent (compressed when `gzip`, without the chunks' framing) and how long it took.
fn get(port: u16, path: &str, token: &str, gzip: bool) -> (u16, usize, Duration) {
    let started = Instant::now();
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to the daemon");
    let encoding = if gzip {
        "Accept-Encoding: gzip\r\n"
    } else {
        ""
    };
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: Bearer {token}\r\n{encoding}\r\n"
    );
    stream.write_all(request.as_bytes()).expect("send");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).expect("read");
    let took = started.elapsed();
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(response.len());
    let head = String::from_utf8_lossy(&response[..split]).to_lowercase();
    let body = response.get(split + 4..).unwrap_or_default();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let size = match head.contains("transfer-encoding: chunked") {
        true => unchunked_length(body),
        false => body.len(),
    };
    (status, size, took)
}

/// The length of a chunked body without its framing.
fn unchunked_length(mut body: &[u8]) -> usize {
    let mut total = 0;
    while let Some(end) = body.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&body[..end])
            .ok()
            .and_then(|s| usize::from_str_radix(s.trim(), 16).ok())
            .unwrap_or(0);
        if size == 0 {
            break;
        }
        total += size;
        body = body.get(end + 2 + size + 2..).unwrap_or_default();
    }
    total
}

/// Median time and size of `samples` GETs.
fn timed_get(port: u16, path: &str, token: &str, gzip: bool, samples: usize) -> (f64, usize) {
    let mut times = Vec::new();
    let mut size = 0;
    for _ in 0..samples {
        let (status, bytes, took) = get(port, path, token, gzip);
        assert_eq!(status, 200, "GET {path}");
        times.push(took.as_secs_f64() * 1000.0);
        size = bytes;
    }
    (median(times), size)
}

/// Follows the live stream as `token` on a thread: each `event: source`'s summary
/// and when it arrived, sent to `seen` while someone listens.
fn follow_stream(port: u16, token: &str, seen: Option<mpsc::Sender<(Value, Instant)>>) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to the daemon");
    let request = format!(
        "GET /api/v1/stream HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\nAuthorization: Bearer {token}\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).expect("send");
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
            let arrived = Instant::now();
            if let (Some(seen), Some(data)) = (&seen, line.trim().strip_prefix("data:")) {
                let summary = serde_json::from_str(data.trim()).unwrap_or_default();
                if seen.send((summary, arrived)).is_err() {
                    return;
                }
            }
            line.clear();
        }
    });
}

/// `namespace/name` of a Source's summary.
fn key_of(summary: &Value) -> String {
    format!(
        "{}/{}",
        summary["namespace"].as_str().unwrap_or_default(),
        summary["name"].as_str().unwrap_or_default()
    )
}

fn epoch_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
        * 1000.0
}

/// Records in the open Sources page when each Source's row is put in place (the
/// script replaces a row with a new one for each event).
const WATCH_ROWS: &str = "
window.benchRows = {};
new MutationObserver(changes => {
  for (const change of changes) for (const node of change.addedNodes) {
    if (node.nodeType === 1 && node.hasAttribute('data-source'))
      window.benchRows[node.getAttribute('data-source')] = Date.now();
  }
}).observe(document.querySelector('#sources tbody'), {childList: true});";

/// Edit → `event: source` and edit → the row changed in the page, median of
/// `samples` (ms), each an edit of one ConfigMap of another Source by another field
/// manager, which the daemon sees as drift and corrects.
async fn update_latency(
    client: &kube::Client,
    daemon: &Daemon,
    token: &str,
    config: &Config,
) -> Latency {
    let (sender, events) = mpsc::channel();
    follow_stream(daemon.port, token, Some(sender));
    let browser = signed_in(&daemon.base(), token).await;
    browser
        .client()
        .execute(WATCH_ROWS, Vec::new())
        .await
        .expect("watch the rows");
    let (mut to_event, mut to_row, mut states) = (Vec::new(), Vec::new(), Vec::new());
    for sample in 0..config.samples {
        let s = (sample * 7919 + 13) % config.sources;
        let key = format!("{}/{}", team(s), source_name(s));
        tokio::time::sleep(Duration::from_secs(3)).await;
        while events.try_recv().is_ok() {}
        let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &trust_domain(s));
        let edit = json!({"data": {"key": format!("by-hand-{sample}")}});
        let params = PatchParams {
            field_manager: Some(EDITOR.into()),
            ..PatchParams::default()
        };
        let (edited, edited_ms) = (Instant::now(), epoch_ms());
        config_maps
            .patch(
                &format!("{}-0", source_name(s)),
                &params,
                &Patch::Merge(&edit),
            )
            .await
            .expect("edit the ConfigMap");
        let arrived = loop {
            let left = PATIENCE.saturating_sub(edited.elapsed());
            match events.recv_timeout(left) {
                Ok((summary, at)) if key_of(&summary) == key => {
                    states.push(summary["state"].as_str().unwrap_or_default().to_string());
                    break at;
                }
                Ok(_) => continue,
                Err(e) => panic!("no event for {key}: {e}"),
            }
        };
        to_event.push((arrived - edited).as_secs_f64() * 1000.0);
        to_row.push(row_changed(&browser, &key, edited_ms).await);
    }
    browser.close().await;
    Latency {
        to_event: median(to_event),
        to_row: median(to_row),
        states,
    }
}

/// Edit → event and edit → row (median, ms), and the state each first event said.
struct Latency {
    to_event: f64,
    to_row: f64,
    states: Vec<String>,
}

/// When the page put `key`'s row in place after `since` (epoch ms): ms after it.
async fn row_changed(browser: &Browser, key: &str, since: f64) -> f64 {
    let started = Instant::now();
    loop {
        let at = browser
            .client()
            .execute(
                "return window.benchRows[arguments[0]] || 0;",
                vec![json!(key)],
            )
            .await
            .expect("read the rows' times")
            .as_f64()
            .unwrap_or(0.0);
        if at >= since {
            return at - since;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the row of {key} never changed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What one stage (a number of Sources) measured.
struct Stage {
    sources: usize,
    ready: Duration,
    page: Load,
    api_ms: f64,
    api_gzip: usize,
    api_plain: usize,
    source_ms: f64,
    source_gzip: usize,
}

async fn stage(
    daemon: &Daemon,
    token: &str,
    config: &Config,
    count: usize,
    ready: Duration,
) -> Stage {
    let page = page_loads(&daemon.base(), token, config.loads).await;
    let (api_ms, api_gzip) = timed_get(daemon.port, "/api/v1/sources", token, true, config.loads);
    let (_, api_plain) = timed_get(daemon.port, "/api/v1/sources", token, false, 1);
    let one = format!("/sources/{}/{}", team(0), source_name(0));
    let (source_ms, source_gzip) = timed_get(daemon.port, &one, token, true, config.loads);
    Stage {
        sources: count,
        ready,
        page,
        api_ms,
        api_gzip,
        api_plain,
        source_ms,
        source_gzip,
    }
}

/// Resident memory (MiB) idle, then with `clients` streams open and as many page
/// loads made one after another in one browser (its page's own stream open too).
async fn memory(daemon: &Daemon, token: &str, clients: usize) -> (f64, f64, f64) {
    let idle = daemon.memory("VmRSS:");
    for _ in 0..clients {
        follow_stream(daemon.port, token, None);
    }
    let browser = signed_in(&daemon.base(), token).await;
    let mut peak = daemon.memory("VmRSS:");
    for _ in 1..clients {
        browser.goto(&format!("{}/", daemon.base())).await;
        peak = peak.max(daemon.memory("VmRSS:"));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let open = daemon.memory("VmRSS:");
    browser.close().await;
    (idle, open, peak.max(open))
}

async fn run(kubeconfig: &Path, config: &Config) {
    let client = tether_testkit::cluster::client(kubeconfig)
        .await
        .expect("client");
    kube_helpers::install_source_crd(&client).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for n in 0..config.sources.div_ceil(PER_NAMESPACE) {
        let namespace: Namespace =
            serde_json::from_value(json!({"metadata": {"name": team(n * PER_NAMESPACE)}}))
                .expect("a namespace");
        namespaces
            .create(&PostParams::default(), &namespace)
            .await
            .expect("create the namespace");
    }
    let files = models(config);
    let borrowed: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    let remote = Remote::new(&borrowed);
    let token = admin_token(kubeconfig);
    let cache = tempfile::tempdir().expect("cache");
    let daemon = Daemon::start(kubeconfig, cache.path());

    let started = Instant::now();
    create_sources(&client, &remote.url, 0..config.first).await;
    let ready = wait_ready(&client, config.first, started).await;
    let mut stages = vec![stage(&daemon, &token, config, config.first, ready).await];
    if config.sources > config.first {
        let added = Instant::now();
        create_sources(&client, &remote.url, config.first..config.sources).await;
        let ready = wait_ready(&client, config.sources, added).await;
        stages.push(stage(&daemon, &token, config, config.sources, ready).await);
    }
    tokio::time::sleep(Duration::from_secs(mode::size(10, 2))).await;
    let (idle, open, peak) = memory(&daemon, &token, config.clients).await;
    let latency = update_latency(&client, &daemon, &token, config).await;
    report(config, &stages, (idle, open, peak), &latency);
}

fn report(config: &Config, stages: &[Stage], memory: (f64, f64, f64), latency: &Latency) {
    println!(
        "tether run --sources: {} Sources of one git daemon repository, {} per namespace, each a namespace of {} ConfigMaps",
        config.sources, PER_NAMESPACE, config.config_maps
    );
    for stage in stages {
        let page = &stage.page;
        println!(
            "  {} Sources (Ready {:.1} s after the stage's Sources were created)",
            stage.sources,
            stage.ready.as_secs_f64()
        );
        println!(
            "    page /: first contentful paint, median of {}   {:>8.0} ms   (target ≤ 1000)",
            config.loads, page.paint_ms
        );
        println!(
            "    page /: bytes transferred (all requests)         {:>8.1} KB   (target ≤ 200; {:.1} KB uncompressed)",
            page.bytes / 1000.0,
            page.decoded / 1000.0
        );
        println!(
            "    page /: requests (navigation, assets, stream)    {:>8.0}      ({:.0} rows)",
            page.requests, page.rows
        );
        println!(
            "    GET /api/v1/sources, gzip, median                {:>8.1} ms   ({:.1} KB gzip, {:.1} KB plain)",
            stage.api_ms,
            stage.api_gzip as f64 / 1000.0,
            stage.api_plain as f64 / 1000.0
        );
        println!(
            "    GET a Source's page, gzip, median                {:>8.1} ms   ({:.1} KB gzip)",
            stage.source_ms,
            stage.source_gzip as f64 / 1000.0
        );
    }
    println!(
        "  edit of a ConfigMap → its Source's event: source, median of {}  {:>8.0} ms   (target ≤ 1000)",
        config.samples, latency.to_event
    );
    println!(
        "  edit of a ConfigMap → its row changed in the open page         {:>8.0} ms   (target ≤ 1000)",
        latency.to_row
    );
    println!(
        "  the Source's state in each first event: {}",
        latency.states.join(", ")
    );
    println!(
        "  RSS idle {:.1} MiB; {} streams open and {} page loads made (the last page open): {:.1} MiB (peak {:.1} MiB)",
        memory.0, config.clients, config.clients, memory.1, memory.2
    );
}
