//! Sources shared among replicas (`tether run --sources --shard`), against the
//! control plane: every Source has exactly one owner, shown in `kubectl get
//! sources`; a replica that joins takes about its share and only from the others, one
//! killed hands its Sources over within 20 s, one stopped at once; a webhook sent to
//! any replica reaches every Source; and the API server's audit log (each replica's
//! requests carry its name in their User-Agent) shows no Source written by two
//! replicas at once.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use crate::daemon::{
    Remote, SECRET, audit_entries_since, audit_offset, install_crd, kubectl_apply_text, kubectl_ok,
    push_hook, sharded_replica, signal,
};
use crate::harness::eventually;
use crate::reconcile::{base, config_map, setup};
use tether_daemon::shard;
use tether_testkit::remote::borrowed;

/// Sources shared by the replicas.
const SOURCES: usize = 150;

/// The namespace of Source `i`'s objects.
fn domain(ns: &str, i: usize) -> String {
    format!("{ns}-s{i}")
}

/// Each Source's models: its namespace and the ConfigMap `c` at `value`.
fn models_at(ns: &str, value: &str) -> Vec<(String, String)> {
    (0..SOURCES)
        .map(|i| {
            let domain = domain(ns, i);
            (
                format!("s{i}/m.yaml"),
                format!("{}---\n{}", base(&domain), config_map("c", &domain, value)),
            )
        })
        .collect()
}

/// Each Source's owner, by name, as `status.owner` says (none: not claimed).
fn owners(ns: &str) -> BTreeMap<String, Option<String>> {
    let text = kubectl_ok(&["get", "sources", "-n", ns, "-o", "json"]);
    let list: serde_json::Value = serde_json::from_str(&text).unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["metadata"]["name"].as_str().unwrap().to_string(),
                s["status"]["owner"].as_str().map(str::to_string),
            )
        })
        .collect()
}

/// Waits until each Source is claimed by the replica that rendezvous hashing over
/// `live` gives it (each replica must agree on that); returns the owners.
async fn settled(ns: &str, live: &[&str], within: Duration) -> BTreeMap<String, String> {
    let members: BTreeSet<String> = live.iter().map(|m| m.to_string()).collect();
    let expected: BTreeMap<String, String> = (0..SOURCES)
        .map(|i| {
            let name = format!("s{i}");
            let owner = shard::owner(&members, &format!("{ns}/{name}")).unwrap();
            (name, owner.to_string())
        })
        .collect();
    let mut last = BTreeMap::new();
    let started = Instant::now();
    while last != expected {
        assert!(
            started.elapsed() < within,
            "not settled on {live:?} within {within:?}: {:?}",
            expected
                .iter()
                .filter(|(name, owner)| last.get(*name) != Some(*owner))
                .map(|(name, owner)| (name, owner, last.get(name)))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        last = owners(ns)
            .into_iter()
            .filter_map(|(name, owner)| Some((name, owner?)))
            .collect();
    }
    expected
}

async fn all_at(client: &kube::Client, ns: &str, value: &str) -> bool {
    for i in 0..SOURCES {
        let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &domain(ns, i));
        let live = config_maps.get_opt("c").await.ok().flatten();
        let at = live
            .and_then(|c| c.data)
            .and_then(|d| d.get("key").cloned());
        if at.as_deref() != Some(value) {
            return false;
        }
    }
    true
}

fn count(owners: &BTreeMap<String, String>, member: &str) -> usize {
    owners.values().filter(|o| *o == member).count()
}

/// Each Source's writers in the order the API server logged them: the replica named
/// in the User-Agent of each successful write to its objects, its inventory or its
/// status.
fn writers_by_source(ns: &str, since: u64) -> BTreeMap<String, Vec<String>> {
    let mut writers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let log = crate::harness::cluster().state_dir().join("logs/audit.log");
    let mut entries = tether_testkit::audit::entries_since(&log, since);
    entries.sort_by(|a, b| {
        a.0["stageTimestamp"]
            .as_str()
            .cmp(&b.0["stageTimestamp"].as_str())
    });
    for entry in entries {
        if entry.verb() == "list" || !entry.succeeded() {
            continue;
        }
        let Some(replica) = entry.replica().map(str::to_string) else {
            continue;
        };
        let (resource, namespace, name, subresource) = entry.object();
        let source = match resource {
            // Its status (a Source's annotation is written by whichever replica a
            // webhook reached: not the Source's own write).
            "sources" if subresource == "status" && namespace == ns => Some(name.to_string()),
            // Its inventory record.
            "configmaps" if namespace == ns => name
                .strip_prefix(tether_core::ownership::RECORD_PREFIX)
                .map(str::to_string),
            // Its objects, in the namespace of its own.
            _ => namespace
                .strip_prefix(&format!("{ns}-"))
                .or_else(|| {
                    (resource == "namespaces")
                        .then(|| name.strip_prefix(&format!("{ns}-")))
                        .flatten()
                })
                .map(str::to_string),
        };
        if let Some(source) = source
            && source.starts_with('s')
        {
            writers.entry(source).or_default().push(replica);
        }
    }
    writers
}

/// How many times the writer changed in `writers` (runs of one writer, minus one).
fn switches(writers: &[String]) -> usize {
    writers.windows(2).filter(|w| w[0] != w[1]).count()
}

#[tokio::test]
async fn replicas_share_the_sources_and_hand_them_over_without_writing_one_at_once() {
    install_crd();
    let (client, ns, _) = setup("shard").await;
    let since = audit_offset();
    let remote = Remote::new(&borrowed(&models_at(&ns, "v1")));
    let r0 = sharded_replica(&ns, "r0");
    let r1 = sharded_replica(&ns, "r1");
    let r2 = sharded_replica(&ns, "r2");
    let sources: String = (0..SOURCES)
        .map(|i| {
            format!(
                "---\napiVersion: tether.dev/v1alpha1\nkind: Source\nmetadata:\n  name: s{i}\n  namespace: {ns}\nspec:\n  url: {}\n  ref: main\n  path: models/s{i}\n  interval: 1h\n",
                remote.url
            )
        })
        .collect();
    kubectl_apply_text(&sources);

    // Each Source has one owner among the three, each about a third, and is applied.
    let three = settled(&ns, &["r0", "r1", "r2"], Duration::from_secs(120)).await;
    for member in ["r0", "r1", "r2"] {
        let owned = count(&three, member);
        assert!(
            (SOURCES / 6..=SOURCES / 2).contains(&owned),
            "{member} owns {owned} of {SOURCES}: {three:?}"
        );
    }
    eventually(Duration::from_secs(120), || all_at(&client, &ns, "v1")).await;
    // The Sources of a replica share its watches: one per kind (a Namespace and a
    // ConfigMap each), not one per kind and Source.
    for (member, daemon) in [("r0", &r0), ("r1", &r1), ("r2", &r2)] {
        let watches = daemon.metric("tether_watches ").unwrap_or(f64::NAN);
        assert_eq!(
            watches,
            2.0,
            "{member}'s watches for {} Sources",
            count(&three, member)
        );
    }
    let table = kubectl_ok(&["get", "sources", "-n", &ns]);
    assert!(table.lines().next().unwrap().contains("OWNER"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("s0 ") && l.contains(&three["s0"])),
        "{table}"
    );
    // Only the owner reconciles: each Source's series is on one replica alone.
    for (name, owner) in three.iter().take(10) {
        let series =
            format!("tether_reconciles_total{{source=\"{ns}/{name}\",result=\"success\"}}");
        for (member, daemon) in [("r0", &r0), ("r1", &r1), ("r2", &r2)] {
            assert_eq!(
                daemon.metric(&series).is_some(),
                member == owner,
                "{name} (owned by {owner}) on {member}"
            );
        }
    }

    // SIGKILL: the killed replica's Sources, and only those, have a new owner
    // within 20 s: its Lease expires at most 10 s after its last renewal, and its
    // claims are taken half a Lease (5 s) later, the time a write a starved replica
    // checked against its fence may take to arrive (`shard::may_take_from`).
    signal(&r1.process, "KILL");
    let killed = Instant::now();
    let after_kill = settled(&ns, &["r0", "r2"], Duration::from_secs(20)).await;
    eprintln!(
        "a killed replica's Sources owned again after {:?}",
        killed.elapsed()
    );
    for (name, owner) in &three {
        if owner != "r1" {
            assert_eq!(
                &after_kill[name], owner,
                "{name} moved, though its owner lives"
            );
        }
    }
    drop(r1.process);

    // A replica that joins takes about a third, and only from the others.
    let mut r3 = sharded_replica(&ns, "r3");
    let joined = Instant::now();
    let with_r3 = settled(&ns, &["r0", "r2", "r3"], Duration::from_secs(60)).await;
    eprintln!(
        "a joining replica's share owned after {:?}",
        joined.elapsed()
    );
    let moved: Vec<&String> = after_kill
        .keys()
        .filter(|s| after_kill[*s] != with_r3[*s])
        .collect();
    assert!(
        moved.iter().all(|s| with_r3[*s] == "r3"),
        "moved between the old replicas: {after_kill:?} → {with_r3:?}"
    );
    assert!(
        (SOURCES / 5..=SOURCES / 2).contains(&moved.len()),
        "{} of {SOURCES} moved to the new replica",
        moved.len()
    );

    // SIGTERM: a replica that stops hands its Sources over at once.
    let (code, stopping) = r3.terminate();
    assert_eq!(code, Some(0));
    let stopped = Instant::now();
    let after_stop = settled(&ns, &["r0", "r2"], Duration::from_secs(10)).await;
    eprintln!(
        "a stopped replica's Sources owned again {:?} after its exit ({stopping:?} to stop)",
        stopped.elapsed()
    );

    // A push, announced to one replica: every Source applies it.
    remote.push("main", &borrowed(&models_at(&ns, "v2")));
    let (headers, body) = push_hook(&remote.url, "refs/heads/main", SECRET);
    let (code, answer) = r2.post("/hook/generic", &headers, &body);
    assert_eq!(code, 202, "{answer}");
    eventually(Duration::from_secs(120), || all_at(&client, &ns, "v2")).await;

    // Never two writers at once: each Source's writes change hands no more often
    // than its owner did (each handover: the old owner's last write, then the new
    // one's first).
    let handovers = |name: &str| {
        [&three, &after_kill, &with_r3, &after_stop]
            .windows(2)
            .filter(|w| w[0][name] != w[1][name])
            .count()
    };
    let writers = writers_by_source(&ns, since);
    assert_eq!(writers.len(), SOURCES, "{:?}", writers.keys());
    for (name, writers) in &writers {
        assert!(
            switches(writers) <= handovers(name),
            "{name} was written by {writers:?}, its owners {:?}",
            [&three, &after_kill, &with_r3, &after_stop].map(|o| o[name].clone())
        );
    }
    drop((r0, r2));
}

/// How many of the big Source's ConfigMaps (`c0`, `c1`, …) are made (0 while the
/// API server does not answer).
async fn made(config_maps: &Api<ConfigMap>) -> usize {
    config_maps
        .list_metadata(&Default::default())
        .await
        .map(|list| {
            list.items
                .iter()
                .filter(|c| {
                    c.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with('c'))
                })
                .count()
        })
        .unwrap_or(0)
}

/// The replica's name in a request's User-Agent (`tether/VERSION (NAME)`).
fn replica_of(entry: &serde_json::Value) -> Option<&str> {
    entry["userAgent"]
        .as_str()?
        .strip_prefix("tether/")?
        .split_once(" (")
        .map(|(_, r)| r.trim_end_matches(')'))
}

#[tokio::test]
async fn a_replica_paused_past_its_lease_stops_the_pass_it_was_in_when_it_wakes() {
    install_crd();
    let (client, ns, _) = setup("fence").await;
    // One Source of 400 objects, which the hash over both members gives r0.
    let members = BTreeSet::from(["r0".to_string(), "r1".to_string()]);
    let name = (0..)
        .map(|i| format!("big{i}"))
        .find(|n| shard::owner(&members, &format!("{ns}/{n}")) == Some("r0"))
        .unwrap();
    let domain = format!("{ns}-big");
    let mut models = base(&domain);
    for i in 0..400 {
        models.push_str("---\n");
        models.push_str(&config_map(&format!("c{i}"), &domain, "v1"));
    }
    let remote = Remote::new(&[(&format!("{name}/m.yaml"), &models)]);
    let r0 = sharded_replica(&ns, "r0");
    let _r1 = sharded_replica(&ns, "r1");
    eventually(Duration::from_secs(30), || async {
        kubectl_ok(&[
            "get",
            "leases",
            "-n",
            &ns,
            "-l",
            "tether.dev/member-of",
            "-o",
            "name",
        ])
        .lines()
        .count()
            == 2
    })
    .await;
    kubectl_apply_text(&format!(
        "apiVersion: tether.dev/v1alpha1\nkind: Source\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  url: {}\n  ref: main\n  path: models/{name}\n  interval: 1h\n",
        remote.url
    ));
    // Paused (SIGSTOP) in the middle of its first pass.
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &domain);
    let count = || made(&config_maps);
    eventually(Duration::from_secs(60), || async { count().await >= 20 }).await;
    signal(&r0.process, "STOP");
    let at_pause = count().await;
    assert!(
        at_pause < 400,
        "paused in the middle of the pass ({at_pause} of 400 made)"
    );
    // r1 takes the Source once r0's Lease expired, and applies all of it.
    eventually(Duration::from_secs(90), || async {
        let status = crate::daemon::status(&ns, &name);
        status["owner"] == "r1" && status["lastAppliedRevision"].is_string()
    })
    .await;
    assert_eq!(count().await, 400);
    let woke = audit_offset();
    signal(&r0.process, "CONT");
    tokio::time::sleep(Duration::from_secs(8)).await;
    // From the audit log: r0 wrote none of the Source's objects, nor its record,
    // before it claimed the Source again (a new pass, after r1 let it go).
    let mut entries: Vec<serde_json::Value> = audit_entries_since(woke)
        .into_iter()
        .filter(|e| replica_of(e) == Some("r0"))
        .filter(|e| !matches!(e["verb"].as_str(), Some("get" | "list" | "watch")))
        .collect();
    entries.sort_by(|a, b| {
        a["requestReceivedTimestamp"]
            .as_str()
            .cmp(&b["requestReceivedTimestamp"].as_str())
    });
    let claimed = entries.iter().position(|e| {
        e["objectRef"]["resource"] == "sources" && e["objectRef"]["subresource"] == "status"
    });
    let before_claim = &entries[..claimed.unwrap_or(entries.len())];
    let written = |e: &&serde_json::Value, namespace: &str| {
        e["objectRef"]["resource"] == "configmaps" && e["objectRef"]["namespace"] == namespace
    };
    let objects: Vec<String> = before_claim
        .iter()
        .filter(|e| written(e, &domain))
        .map(|e| format!("{} {}", e["verb"], e["objectRef"]["name"]))
        .collect();
    // Its pass stops at the fence: no object starts after it, and its client sends no
    // write past it. What no client can take back is a request on its way at the very
    // moment of the pause (at most the 16 a daemon's apply has in flight); without the fence the
    // pass would go on through the 200 and more objects it had left.
    assert!(
        objects.len() <= 16,
        "r0 went on with its old pass: {objects:?}"
    );
    let record: Vec<String> = before_claim
        .iter()
        .filter(|e| written(e, &ns))
        .map(|e| format!("{} {}", e["verb"], e["objectRef"]["name"]))
        .collect();
    assert_eq!(
        record,
        Vec::<String>::new(),
        "r0 wrote the inventory's record"
    );
    eprintln!(
        "writes of r0's paused pass after it woke: {}",
        objects.len()
    );
}

/// The engine's half of the test above, without the race of a real pause: an apply
/// under a tenure of the fence stops for good once the fence lapsed, though the
/// fence is moved on a moment later (a replica's Lease renewed as it wakes).
#[tokio::test]
async fn an_apply_begun_before_its_fence_lapsed_stops_though_the_fence_is_moved_on() {
    use tether_engine::cluster::{Fence, Target};
    use tether_engine::reconcile::{ApplyOptions, PlanOptions, Reconciler};
    use tether_engine::repo::Repo;

    let (client, ns, inventory) = setup("tenure").await;
    let domain = format!("{ns}-t");
    let mut models = base(&domain);
    for i in 0..400 {
        models.push_str("---\n");
        models.push_str(&config_map(&format!("c{i}"), &domain, "v1"));
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("m.yaml"), models).unwrap();
    let fence = Fence::default();
    let tenure = fence.until(std::time::SystemTime::now() + Duration::from_secs(60));
    let reconciler = Reconciler::new(
        Repo::Directory(dir.path().to_path_buf()),
        Target {
            kubeconfig: Some(crate::harness::cluster().kubeconfig().to_path_buf()),
            fence: Some(fence.clone()),
            ..Target::default()
        },
        tether_core::ownership::Inventory {
            name: inventory,
            namespace: ns.clone(),
        },
    );
    let mut plans = reconciler
        .plan_clusters(PlanOptions::default(), &BTreeMap::new())
        .await
        .unwrap();
    let planned = plans.clusters.remove(0).planned.unwrap();
    let options = ApplyOptions {
        fence: tenure.clone(),
        ..ApplyOptions::default()
    };
    let apply = async {
        let report = reconciler.apply(&planned, &options, &|_| {}).await;
        report.unwrap()
    };
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &domain);
    let count = || made(&config_maps);
    let lapse = async {
        while count().await < 20 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Lapsed, and moved on at once.
        fence.until(std::time::SystemTime::now() - Duration::from_millis(1));
        let next = fence.until(std::time::SystemTime::now() + Duration::from_secs(60));
        assert!(fence.holds() && next.holds() && !tenure.holds());
        count().await
    };
    let (report, at_lapse) = tokio::join!(apply, lapse);
    assert!(report.stopped, "the apply says it stopped");
    let made = count().await;
    // What was on its way at the lapse finishes (at most the 16 a daemon's apply has
    // in flight); nothing starts after it.
    assert!(
        made < 400 && made <= at_lapse + 16,
        "{made} made, {at_lapse} at the lapse"
    );
    assert!(
        tokio::time::timeout(Duration::from_secs(3), async {
            while count().await == made {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
        .is_err(),
        "nothing more is made"
    );
    // The process itself may write again: a new tenure's work goes on.
    let later = ApplyOptions {
        fence: fence.tenure(),
        ..ApplyOptions::default()
    };
    let again = reconciler.apply(&planned, &later, &|_| {}).await.unwrap();
    assert!(!again.stopped);
    assert_eq!(count().await, 400);
}
