//! The sharded daemon under the faults a cluster really has, checked as Jepsen-style
//! suites check databases: three replicas of `tether run --shard` on a control plane
//! of the run's own, a hundred Sources (a third of them applied on a far cluster
//! through a Cluster resource), pushes throughout, and faults drawn from a seed
//! (`schedule`): CPU starvation, pauses, kills, a replica cut from the API server or
//! from the others' webhooks, the API server stopped, etcd slowed, the far cluster
//! stopped or cut off. The
//! checker (`checker`) reads the API server's audit log and samples of the Sources
//! and prints the timeline of whatever broke an invariant.
//!
//! `TETHER_FAULTS_SEED` replays a run; `TETHER_FAULTS_EPISODES` (default 9, one of
//! each kind first) and `TETHER_FAULTS_SOURCES` (default 100) make a longer one.

mod checker;
mod schedule;
mod world;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use kube::Api;
use tether_api::source_spec::Source;
use tether_testkit::cluster::LocalCluster;
use tether_testkit::proxy::CutProxy;
use tether_testkit::remote::{Remote, borrowed};
use tokio::task::spawn_blocking;

use checker::{
    Bounds, ClaimChange, EpisodeSpan, FaultSpan, Ms, Push, Sample, SourceState, Timeline, Write,
};
use schedule::{Episode, Kind};
use world::{Faulted, INTERVAL, LEASE, NAMESPACE, Quota, Replica};

const REPLICAS: usize = 3;

/// The stated bound past a Lease and an interval (invariants 2, 3 and 5).
const BOUND: Duration = Duration::from_secs(20);

/// How long a run must stay healed before an episode is judged: longer than a
/// returning replica takes to take its share back (about 4 s here).
const HEALED_FOR: Ms = 5_000;

fn now() -> Ms {
    ms(SystemTime::now())
}

fn ms(time: SystemTime) -> Ms {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as Ms)
        .unwrap_or(0)
}

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Each Source's models: its namespace and a ConfigMap at `value`, on the replicas'
/// own cluster, or for one Source in three on the far one (through the Cluster
/// resource `far`; its models name both KubernetesServices, as a Source whose models
/// name one is applied to the daemon's own cluster).
fn models(sources: usize, value: &str) -> Vec<(String, String)> {
    (0..sources)
        .map(|i| {
            let domain = format!("{NAMESPACE}-s{i}");
            let services = match on_far(i) {
                true => "kind: KubernetesService\nname: far\n---\nkind: KubernetesService\nname: kubernetes\n",
                false => "kind: KubernetesService\nname: kubernetes\n",
            };
            let owner = if on_far(i) { "far" } else { "kubernetes" };
            (
                format!("s{i}/m.yaml"),
                format!(
                    "{services}---\nkind: TrustDomain\nname: {domain}\nowner: {owner}\n---\nkind: KubernetesConfigMap\nname: c\ntrust_domain: {domain}\ndata:\n  key: \"{value}\"\n"
                ),
            )
        })
        .collect()
}

/// Whether Source `i` applies on the far cluster.
fn on_far(i: usize) -> bool {
    i.is_multiple_of(3)
}

/// The far cluster, reached by every replica through a proxy (a fault silences it)
/// and the Cluster resource `far`, whose Secret holds a kubeconfig through the proxy.
struct Far {
    cluster: Arc<LocalCluster>,
    proxy: CutProxy,
}

impl Far {
    fn start(home: &LocalCluster) -> Far {
        let cluster = Arc::new(LocalCluster::start(0));
        let proxy = CutProxy::start(cluster.api_server_address());
        // The inventory's namespace on every cluster a Source applies to.
        cluster.kubectl(&["create", "namespace", NAMESPACE]);
        let kubeconfig = cluster.kubeconfig_through(proxy.port());
        home.kubectl(&[
            "create",
            "secret",
            "generic",
            "far-kubeconfig",
            "-n",
            NAMESPACE,
            &format!("--from-file=value={}", kubeconfig.path().display()),
        ]);
        let resource = format!(
            "apiVersion: tether.dev/v1alpha1\nkind: Cluster\nmetadata:\n  name: far\n  namespace: {NAMESPACE}\nspec:\n  kubeConfig:\n    secretRef:\n      name: far-kubeconfig\n"
        );
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), resource).unwrap();
        home.kubectl(&["apply", "-f", file.path().to_str().unwrap()]);
        Far { cluster, proxy }
    }
}

/// The commit of a revision `main@sha1:<commit>`.
fn commit_of(revision: &str) -> Option<String> {
    revision.rsplit_once("sha1:").map(|(_, c)| c.to_string())
}

/// The Sources as the API server has them now (`None` while it does not answer).
async fn sources_now(api: &Api<Source>) -> Option<BTreeMap<String, SourceState>> {
    let list = tokio::time::timeout(Duration::from_secs(3), api.list(&Default::default()))
        .await
        .ok()?
        .ok()?;
    Some(
        list.items
            .into_iter()
            .map(|source| {
                let status = source.status.unwrap_or_default();
                let ready = status
                    .conditions
                    .iter()
                    .find(|c| c.type_ == "Ready")
                    .map(|c| (c.status.clone(), c.message.clone()));
                (
                    source.metadata.name.unwrap_or_default(),
                    SourceState {
                        owner: status.owner,
                        applied: status.last_applied_revision.as_deref().and_then(commit_of),
                        ready,
                    },
                )
            })
            .collect(),
    )
}

/// The run's shared state: the replicas, who is faulted, the samples.
struct Run {
    cluster: Arc<LocalCluster>,
    far: Far,
    replicas: Vec<Arc<Mutex<Replica>>>,
    faulted: Faulted,
    samples: Arc<Mutex<Vec<Sample>>>,
}

impl Run {
    /// One sample: the Sources, and what each live replica runs.
    async fn sample(&self, api: &Api<Source>) -> Option<Sample> {
        let at = now();
        let sources = sources_now(api).await?;
        let faulted = self.faulted.get();
        let mut live = BTreeSet::new();
        let mut running = BTreeMap::new();
        for replica in &self.replicas {
            let replica = replica.clone();
            let seen = spawn_blocking(move || {
                let mut replica = replica.lock().unwrap();
                let alive = replica.is_running();
                (replica.name.clone(), alive, replica.port)
            })
            .await
            .unwrap();
            let (name, alive, port) = seen;
            if !alive || faulted.contains(&name) {
                continue;
            }
            let runs = spawn_blocking(move || world::running(port)).await.unwrap();
            if let Some(runs) = runs {
                live.insert(name.clone());
                running.insert(name, runs);
            }
        }
        Some(Sample {
            at,
            sources,
            live,
            running,
        })
    }

    /// The timeline so far: the audit log's Lease writes and Source writes, and the
    /// episodes, pushes and samples recorded.
    fn timeline(&self, episodes: &[EpisodeSpan], pushes: &[Push]) -> Timeline {
        let (renewals, mut writes, claims) = audit(&self.cluster);
        // The far cluster's log has the far Sources' writes (no Lease nor claim).
        writes.extend(audit(&self.far.cluster).1);
        Timeline {
            lease_duration: LEASE.as_millis() as Ms,
            renewals,
            writes,
            claims,
            episodes: episodes.to_vec(),
            pushes: pushes.to_vec(),
            samples: self.samples.lock().unwrap().clone(),
        }
    }
}

/// The replicas' Lease writes, their writes to the Sources' objects and the Sources'
/// claims, from an API server's audit log (each replica names itself in its
/// User-Agent; a status write's body is logged, the claim is in it).
fn audit(cluster: &LocalCluster) -> (BTreeMap<String, Vec<Ms>>, Vec<Write>, Vec<ClaimChange>) {
    let log = cluster.state_dir().join("logs/audit.log");
    let mut renewals: BTreeMap<String, Vec<Ms>> = BTreeMap::new();
    let mut writes = Vec::new();
    let mut claims = Vec::new();
    for entry in tether_testkit::audit::entries_since(&log, 0) {
        let (Some(replica), Some(at)) = (entry.replica(), entry.received_ms()) else {
            continue;
        };
        if !entry.is_write() {
            continue;
        }
        let replica = replica.to_string();
        let (resource, namespace, name, subresource) = entry.object();
        if resource == "leases" && namespace == NAMESPACE && name.ends_with(&format!("-{replica}"))
        {
            renewals.entry(replica).or_default().push(at);
            continue;
        }
        if resource == "sources" && subresource == "status" {
            if let Some(owner) = entry.0["requestObject"]["status"].get("owner") {
                claims.push(ClaimChange {
                    at,
                    source: name.to_string(),
                    by: replica,
                    owner: owner.as_str().map(str::to_string),
                });
            }
            continue;
        }
        let prefix = format!("{NAMESPACE}-");
        let source = match resource {
            "events" => None,
            "configmaps" if namespace == NAMESPACE => name
                .strip_prefix(tether_core::ownership::RECORD_PREFIX)
                .map(str::to_string),
            "namespaces" => name.strip_prefix(&prefix).map(str::to_string),
            _ => namespace.strip_prefix(&prefix).map(str::to_string),
        };
        if let Some(source) = source {
            writes.push(Write {
                at,
                what: format!("{} {resource} {namespace}/{name}", entry.verb()),
                replica,
                source,
            });
        }
    }
    for times in renewals.values_mut() {
        times.sort_unstable();
    }
    (renewals, writes, claims)
}

/// Does one fault: injects it after its start, heals it after its time; its span.
async fn inject(
    run: Arc<Run>,
    fault: schedule::Fault,
    etcd: Arc<Quota>,
    quotas: Arc<Vec<Quota>>,
) -> FaultSpan {
    tokio::time::sleep(fault.after).await;
    let replica = fault.replica.map(|i| run.replicas[i].clone());
    let name = replica.as_ref().map(|r| r.lock().unwrap().name.clone());
    let label = world::label(fault.kind, name.as_deref(), fault.lasts);
    eprintln!("[faults] {label}");
    if let Some(name) = &name {
        run.faulted.set(name, true);
    }
    let from = now();
    let cluster = run.cluster.clone();
    let index = fault.replica.unwrap_or(0);
    let act = |start: bool| {
        let (replica, cluster, etcd, quotas, run) = (
            replica.clone(),
            cluster.clone(),
            etcd.clone(),
            quotas.clone(),
            run.clone(),
        );
        spawn_blocking(move || {
            let far = &run.far;
            let with = |f: &dyn Fn(&mut Replica)| f(&mut replica.as_ref().unwrap().lock().unwrap());
            match (fault.kind, start) {
                (Kind::Starve, true) => with(&|r| {
                    if let Some(pid) = r.pid() {
                        quotas[index].starve(pid);
                    }
                }),
                (Kind::Starve, false) => quotas[index].feed(),
                (Kind::Pause, true) => with(&|r| r.signal("STOP")),
                (Kind::Pause, false) => with(&|r| r.signal("CONT")),
                (Kind::Kill, true) => with(&|r| r.kill()),
                (Kind::Kill, false) => with(&|r| r.start()),
                (Kind::CutFromApi, true) => with(&|r| r.to_api.silence()),
                (Kind::CutFromApi, false) => with(&|r| r.to_api.up()),
                (Kind::CutFromPeers, true) => with(&|r| r.from_peers.silence()),
                (Kind::CutFromPeers, false) => with(&|r| r.from_peers.up()),
                (Kind::ApiServerDown, true) => cluster.stop_api_server(),
                (Kind::ApiServerDown, false) => cluster.start_api_server(),
                (Kind::EtcdSlow, true) => etcd.starve(world::etcd_pid(&cluster)),
                (Kind::EtcdSlow, false) => etcd.feed(),
                (Kind::FarDown, true) => far.cluster.stop_api_server(),
                (Kind::FarDown, false) => far.cluster.start_api_server(),
                (Kind::FarCut, true) => far.proxy.silence(),
                (Kind::FarCut, false) => far.proxy.up(),
            }
        })
    };
    act(true).await.unwrap();
    tokio::time::sleep(fault.lasts).await;
    act(false).await.unwrap();
    if let Some(name) = &name {
        run.faulted.set(name, false);
    }
    eprintln!("[faults] healed: {label}");
    FaultSpan {
        from,
        to: now(),
        label,
    }
}

/// Whether the latest sample shows the run healed: every Source run by one live
/// owner, at `commit`, Ready.
fn healed(samples: &Mutex<Vec<Sample>>, commit: &str) -> bool {
    let samples = samples.lock().unwrap();
    let Some(last) = samples.last() else {
        return false;
    };
    last.live.len() == REPLICAS
        && checker::all_owned(last).is_ok()
        && last.sources.values().all(|s| {
            s.applied.as_deref() == Some(commit)
                && s.ready.as_ref().is_some_and(|(status, _)| status == "True")
        })
}

fn percentile(values: &mut [Ms], p: f64) -> Ms {
    values.sort_unstable();
    let index = ((values.len() as f64 - 1.0) * p).round() as usize;
    values.get(index).copied().unwrap_or(0)
}

/// One run at a time: each has a control plane and three replicas of its own, and
/// starves, pauses and cuts them on a machine of two cores.
static ONE_RUN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The reproduction of the loss the issue saw, on a fixed schedule: the API server
/// away past every replica's Lease, a replica restarted meanwhile. Before the fix, each replica's Lease manager read
/// its own expired Lease back and said it held it, the fence opened for 9 s from then,
/// and two replicas wrote one Source (invariant 1); then each replica's watch of the
/// Leases, reconnecting with a backoff of up to 30 s, kept it fenced though its Lease
/// was renewed: the others counted it live and left its Sources to it, and nobody
/// ran them (invariant 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_api_server_away_past_the_leases_leaves_no_source_behind_and_no_two_writers() {
    let _one = ONE_RUN.lock().await;
    // And one replica killed and started again while the API server is away: it
    // waits for it (it exited, and a pod would have gone into a crash loop).
    let episodes = vec![Episode {
        faults: vec![
            schedule::Fault {
                kind: Kind::ApiServerDown,
                replica: None,
                after: Duration::ZERO,
                lasts: Duration::from_secs(20),
            },
            schedule::Fault {
                kind: Kind::Kill,
                replica: Some(1),
                after: Duration::from_secs(2),
                lasts: Duration::from_secs(5),
            },
        ],
        push_during: true,
    }];
    run_schedule("the API server away for 20 s", episodes, 60, false).await;
}

/// The randomized schedule: every kind of fault, then at random from the seed; SIGTERM
/// with the API server stopped at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_source_is_left_behind_under_faults_drawn_from_a_seed() {
    let _one = ONE_RUN.lock().await;
    let seed = setting("TETHER_FAULTS_SEED", fastrand::u64(..1_000_000));
    let count = setting("TETHER_FAULTS_EPISODES", Kind::ALL.len() as u64) as usize;
    let sources = setting("TETHER_FAULTS_SOURCES", 100) as usize;
    let episodes = schedule::episodes(seed, count, REPLICAS);
    let name = format!("seed {seed} (TETHER_FAULTS_SEED={seed} replays it)");
    run_schedule(&name, episodes, sources, true).await;
}

/// Runs `episodes` on `sources` Sources and checks every invariant after each; with
/// `terminate`, stops the API server and sends each replica SIGTERM at the end.
async fn run_schedule(name: &str, episodes: Vec<Episode>, sources: usize, terminate: bool) {
    let count = episodes.len();
    eprintln!("[faults] {name}: {count} episodes, {sources} Sources, {REPLICAS} replicas");
    let cluster = Arc::new(spawn_blocking(|| LocalCluster::start(0)).await.unwrap());
    let crd = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/base/crd.yaml");
    cluster.kubectl(&["apply", "--server-side", "-f", crd]);
    cluster.kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/sources.tether.dev",
    ]);
    cluster.kubectl(&["create", "namespace", NAMESPACE]);
    let far = spawn_blocking({
        let cluster = cluster.clone();
        move || Far::start(&cluster)
    })
    .await
    .unwrap();
    let remote = Arc::new(Remote::new(&borrowed(&models(sources, "v0"))));
    let mut commit = remote.head_of_bare("main");
    let logs = tempfile::tempdir().unwrap().keep();
    eprintln!("[faults] the replicas' logs: {}", logs.display());
    let replicas: Vec<Arc<Mutex<Replica>>> = (0..REPLICAS)
        .map(|i| Arc::new(Mutex::new(Replica::new(&cluster, &format!("r{i}"), &logs))))
        .collect();
    let declared: String = (0..sources)
        .map(|i| {
            format!(
                "---\napiVersion: tether.dev/v1alpha1\nkind: Source\nmetadata:\n  name: s{i}\n  namespace: {NAMESPACE}\nspec:\n  url: {}\n  ref: main\n  path: models/s{i}\n  interval: {}s\n",
                remote.url,
                INTERVAL.as_secs()
            )
        })
        .collect();
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), declared).unwrap();
    cluster.kubectl(&["apply", "-f", file.path().to_str().unwrap()]);

    let run = Arc::new(Run {
        cluster: cluster.clone(),
        far,
        replicas,
        faulted: Faulted::default(),
        samples: Arc::default(),
    });
    let api: Api<Source> = Api::namespaced(cluster.client().await, NAMESPACE);
    let sampling = {
        let (run, api) = (run.clone(), api.clone());
        tokio::spawn(async move {
            loop {
                if let Some(sample) = run.sample(&api).await {
                    run.samples.lock().unwrap().push(sample);
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    let started = now();
    while !healed(&run.samples, &commit) {
        assert!(
            now() - started < 300_000,
            "the Sources never settled before the faults"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!("[faults] settled in {} s", (now() - started) / 1000);

    let etcd = Arc::new(Quota::new("etcd"));
    let quotas = Arc::new(
        (0..REPLICAS)
            .map(|i| Quota::new(&format!("r{i}")))
            .collect::<Vec<_>>(),
    );
    let bounds = Bounds {
        owned: (LEASE + INTERVAL + BOUND).as_millis() as Ms,
        applied: (LEASE + INTERVAL + BOUND).as_millis() as Ms,
        ready: (LEASE + INTERVAL + BOUND).as_millis() as Ms,
    };
    let mut spans: Vec<EpisodeSpan> = Vec::new();
    let mut pushes: Vec<Push> = Vec::new();
    let mut kinds: Vec<Vec<Kind>> = Vec::new();
    for (index, episode) in episodes.iter().enumerate() {
        eprintln!("[faults] episode {index}: {episode:?}");
        let Episode {
            faults,
            push_during,
        } = episode.clone();
        kinds.push(faults.iter().map(|f| f.kind).collect());
        let injected: Vec<_> = faults
            .into_iter()
            .map(|f| tokio::spawn(inject(run.clone(), f, etcd.clone(), quotas.clone())))
            .collect();
        let push = |value: String| {
            let (remote, run) = (remote.clone(), run.clone());
            async move {
                let files = models(sources, &value);
                let url = remote.url.clone();
                let commit = spawn_blocking(move || remote.push("main", &borrowed(&files)))
                    .await
                    .unwrap();
                let at = now();
                // Announced to one replica the faults spare, which passes it on.
                let faulted = run.faulted.get();
                for replica in &run.replicas {
                    if faulted.contains(&replica.lock().unwrap().name) {
                        continue;
                    }
                    let (replica, url) = (replica.clone(), url.clone());
                    let announced = spawn_blocking(move || replica.lock().unwrap().announce(&url))
                        .await
                        .unwrap();
                    if announced == Some(202) {
                        break;
                    }
                }
                Push { at, commit }
            }
        };
        if push_during {
            tokio::time::sleep(episode.heals_after() / 2).await;
            let pushed = push(format!("v{}-during", index + 1)).await;
            commit = pushed.commit.clone();
            pushes.push(pushed);
        }
        let mut faults = Vec::new();
        for fault in injected {
            faults.push(fault.await.unwrap());
        }
        let heal = faults.iter().map(|f| f.to).max().unwrap_or_else(now);
        if !push_during {
            let pushed = push(format!("v{}-after", index + 1)).await;
            commit = pushed.commit.clone();
            pushes.push(pushed);
        }
        // Healed, and so for a while: a replica back from its fault takes its share
        // back a moment after the heal (the Sources it owns are released, claimed and
        // run again), so a heal seen before that handover is not yet the end. Judged
        // on the samples until then (or the deadline), so that "holds from then on"
        // is seen to hold.
        let deadline = heal + bounds.owned + 30_000;
        let mut healed_since = None;
        while now() < deadline {
            match healed(&run.samples, &commit) {
                true => {
                    let since = *healed_since.get_or_insert_with(now);
                    if now() - since >= HEALED_FOR {
                        break;
                    }
                }
                false => healed_since = None,
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        // A replica exits only when killed.
        for replica in &run.replicas {
            let mut replica = replica.lock().unwrap();
            assert!(
                replica.is_running(),
                "{} exited by itself (seed's episode {index}); its log: {}",
                replica.name,
                replica.log.display()
            );
        }
        spans.push(EpisodeSpan {
            faults,
            heal,
            until: now(),
        });
        let verdict = checker::check(&run.timeline(&spans, &pushes), bounds);
        let recovered = verdict.recovered.last().and_then(|(_, r)| *r);
        eprintln!(
            "[faults] episode {index} healed; every Source run again {} s after",
            recovered.map_or("never".to_string(), |r| format!("{:.1}", r as f64 / 1000.0))
        );
        if !verdict.violations.is_empty() {
            // The control plane's own logs too (the API server's, etcd's): its state
            // directory goes with the test.
            let kept = logs.join("control-plane");
            let _ = std::fs::create_dir_all(&kept);
            for entry in std::fs::read_dir(cluster.state_dir().join("logs"))
                .into_iter()
                .flatten()
                .flatten()
            {
                let _ = std::fs::copy(entry.path(), kept.join(entry.file_name()));
            }
            let _ = std::fs::copy(
                cluster.state_dir().join("logs/audit.log"),
                logs.join("audit.log"),
            );
            for violation in &verdict.violations {
                eprintln!(
                    "[faults] invariant {} broken: {}\n{}",
                    violation.invariant, violation.what, violation.timeline
                );
            }
            panic!(
                "{} invariant violations ({name}; the replicas' logs in {})",
                verdict.violations.len(),
                logs.display()
            );
        }
    }
    sampling.abort();

    // The figures: faults by kind, and how long after each heal every Source was run
    // again (p50/p99 by kind), and each push applied.
    let verdict = checker::check(&run.timeline(&spans, &pushes), bounds);
    let mut by_kind: BTreeMap<Kind, Vec<Ms>> = BTreeMap::new();
    for (index, recovered) in &verdict.recovered {
        for kind in &kinds[*index] {
            by_kind
                .entry(*kind)
                .or_default()
                .push(recovered.unwrap_or(Ms::MAX));
        }
    }
    for (kind, times) in &mut by_kind {
        eprintln!(
            "[faults] {kind:?}: {} injected, run again after p50 {:.1} s, p99 {:.1} s",
            times.len(),
            percentile(times, 0.5) as f64 / 1000.0,
            percentile(times, 0.99) as f64 / 1000.0
        );
    }
    let mut applied: Vec<Ms> = verdict.applied_after.iter().flatten().copied().collect();
    eprintln!(
        "[faults] {} pushes applied everywhere after p50 {:.1} s, p99 {:.1} s; {} writes and {} Lease writes checked; 0 violations",
        applied.len(),
        percentile(&mut applied, 0.5) as f64 / 1000.0,
        percentile(&mut applied, 0.99) as f64 / 1000.0,
        run.timeline(&spans, &pushes).writes.len(),
        run.timeline(&spans, &pushes)
            .renewals
            .values()
            .map(Vec::len)
            .sum::<usize>()
    );

    if !terminate {
        return;
    }
    // Shutdown: a replica cut from the API server (its requests hang), then the others
    // with the API server stopped (refused), each still exits within its grace period
    // (30 s in deploy/: the shutdown timeout, 20 s, and 5 s to release), leaving what
    // it could not release to expire.
    let terminate = |replica: Arc<Mutex<Replica>>| {
        spawn_blocking(move || replica.lock().unwrap().terminate(Duration::from_secs(30)))
    };
    run.replicas[0].lock().unwrap().to_api.silence();
    let cut = terminate(run.replicas[0].clone()).await.unwrap();
    spawn_blocking({
        let cluster = cluster.clone();
        move || cluster.stop_api_server()
    })
    .await
    .unwrap();
    let mut refused = Vec::new();
    for replica in &run.replicas[1..] {
        refused.push(terminate(replica.clone()).await.unwrap());
    }
    eprintln!(
        "[faults] SIGTERM: exit after {cut:?} cut from the API server, {refused:?} with it stopped"
    );
    assert!(
        cut.is_some() && refused.iter().all(Option::is_some),
        "a replica did not exit within its grace period on SIGTERM: {cut:?}, {refused:?}"
    );
}
