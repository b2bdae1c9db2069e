//! The daemon over time, and what users do to a running Source: a Source deleted or
//! suspended in the middle of a pass stops applying at once (the API server's audit
//! log says so), a stalled Source does not write its status on each retry, a
//! force-push backwards is applied and recorded (or refused), the log of a source
//! does not grow with the number of its passes, and an API server out of reach for a
//! while leaves the watch caches in use.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::ListParams;
use tether_core::ownership::Inventory;

use crate::daemon::{
    Daemon, Fixture, audit_entries_since, audit_offset, condition, helm_takes_the_value,
    install_crd, kubectl_apply_text, kubectl_ok, source_yaml, status, value_of, web_source_at_v1,
};
use crate::harness::eventually;
use crate::reconcile::{base, config_map, setup};
use tether_testkit::remote::Remote;

/// How many ConfigMaps the big Source applies: enough for its first pass to take
/// seconds.
const BIG: usize = 2_000;

/// A remote whose models make [`BIG`] ConfigMaps in `ns`, 100 to a file.
fn big_remote(ns: &str) -> Remote {
    let files: Vec<(String, String)> = (0..BIG / 100)
        .map(|file| {
            let text = (0..100)
                .map(|i| config_map(&format!("cm-{file}-{i}"), ns, "v1"))
                .collect::<Vec<_>>()
                .join("---\n");
            (format!("cms-{file}.yaml"), text)
        })
        .chain([("base.yaml".to_string(), base(ns))])
        .collect();
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    Remote::new(&files)
}

/// The live ConfigMaps the models made (by name), with their uids.
async fn made(client: &kube::Client, ns: &str) -> BTreeMap<String, String> {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| {
            let name = c.metadata.name?;
            name.starts_with("cm-")
                .then(|| (name, c.metadata.uid.unwrap_or_default()))
        })
        .collect()
}

/// The live objects of the big Source, once its record holds every one of them with
/// its uid (within 30 s).
async fn recorded_with_their_uids(client: &kube::Client, ns: &str) -> BTreeMap<String, String> {
    let inventory = Inventory {
        name: "big".into(),
        namespace: ns.to_string(),
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let live = made(client, ns).await;
        let record = tether_engine::record::read_inventory(client, &inventory)
            .await
            .unwrap();
        let recorded: BTreeMap<&str, Option<&str>> = record
            .entries
            .iter()
            .map(|(entry, provenance)| (entry.name.as_str(), provenance.uid.as_deref()))
            .collect();
        let unrecorded: Vec<String> = live
            .iter()
            .filter(|(name, uid)| recorded.get(name.as_str()) != Some(&Some(uid.as_str())))
            .map(|(name, _)| format!("{name}: {:?}", recorded.get(name.as_str())))
            .collect();
        if unrecorded.is_empty() {
            return live;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "objects exist that the inventory does not record with their uid: {unrecorded:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn received_at(entry: &serde_json::Value) -> Timestamp {
    entry["requestReceivedTimestamp"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// Starts the big Source, waits until its first pass has applied some of its
/// objects, then does `interrupt` to the Source (as its user would, with kubectl):
/// from a second after the request, no object is applied, and the inventory records
/// every object that exists, with its uid.
async fn interrupted_mid_pass(test: &str, interrupt: &[&str]) -> (kube::Client, String) {
    install_crd();
    let (client, ns, _) = setup(test).await;
    let remote = big_remote(&ns);
    // Another team's ConfigMap, made with kubectl beside the Source's objects.
    kubectl_ok(&[
        "create",
        "configmap",
        "theirs",
        "-n",
        &ns,
        "--from-literal=owner=another-team",
    ]);
    let _daemon = Daemon::start(&["--sources", "--sources-namespace", &ns]);
    kubectl_apply_text(&source_yaml("big", &ns, &remote.url, "  interval: 1h\n"));
    eventually(Duration::from_secs(60), || async {
        made(&client, &ns).await.len() >= 100
    })
    .await;
    let offset = audit_offset();
    let mut args = interrupt.to_vec();
    args.extend(["-n", &ns]);
    kubectl_ok(&args);
    let interrupted_at = std::time::Instant::now();
    // The stop is over once the record holds every object that exists, with its uid:
    // the applies sent before it finish and are recorded (under load, that takes a
    // while). Nothing is half-recorded meanwhile or after.
    let live = recorded_with_their_uids(&client, &ns).await;
    assert!(
        live.len() < BIG,
        "the pass ended before {interrupt:?}: the test proves nothing"
    );
    // A moment more, for an apply that would come late to show in the audit log.
    tokio::time::sleep(Duration::from_secs(3).saturating_sub(interrupted_at.elapsed())).await;
    let entries = audit_entries_since(offset);
    let interrupted = entries
        .iter()
        .filter(|e| e["objectRef"]["namespace"] == ns.as_str())
        .find(|e| e["objectRef"]["resource"] == "sources" && e["objectRef"]["name"] == "big")
        .map(received_at)
        .expect("the audit log has the request to the Source");
    let applies = |e: &&serde_json::Value| {
        e["objectRef"]["resource"] == "configmaps"
            && e["objectRef"]["namespace"] == ns.as_str()
            && e["verb"] == "patch"
            && e["objectRef"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("cm-"))
            && !e["requestURI"]
                .as_str()
                .unwrap_or_default()
                .contains("dryRun")
    };
    let late: Vec<String> = entries
        .iter()
        .filter(applies)
        .filter(|e| received_at(e) > interrupted + Duration::from_secs(1))
        .map(|e| e["objectRef"]["name"].to_string())
        .collect();
    assert_eq!(late, Vec::<String>::new(), "applied after {interrupt:?}");
    let touched: Vec<String> = entries
        .iter()
        // This test's: other tests make ConfigMaps named so in their namespaces.
        .filter(|e| e["objectRef"]["namespace"] == ns.as_str())
        .filter(|e| e["objectRef"]["name"] == "theirs" && e["verb"] != "list")
        .map(|e| e["verb"].to_string())
        .collect();
    assert_eq!(
        touched,
        Vec::<String>::new(),
        "another team's ConfigMap was written"
    );
    let theirs = Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .get("theirs")
        .await
        .unwrap();
    assert_eq!(
        theirs
            .data
            .unwrap_or_default()
            .get("owner")
            .map(String::as_str),
        Some("another-team")
    );
    (client, ns)
}

#[tokio::test]
async fn a_source_deleted_in_the_middle_of_a_pass_applies_nothing_more() {
    interrupted_mid_pass(
        "lifetime-delete",
        &["delete", "source", "big", "--wait=false"],
    )
    .await;
}

#[tokio::test]
async fn a_source_suspended_in_the_middle_of_a_pass_applies_nothing_more_and_says_so() {
    let (_client, ns) = interrupted_mid_pass(
        "lifetime-suspend",
        &[
            "patch",
            "source",
            "big",
            "--type=merge",
            "-p",
            r#"{"spec":{"suspend":true}}"#,
        ],
    )
    .await;
    eventually(Duration::from_secs(10), || async {
        condition(&status(&ns, "big"), "Ready").is_some_and(|c| c.1 == "Suspended")
    })
    .await;
}

#[tokio::test]
async fn a_stalled_source_writes_its_status_once_not_on_each_retry() {
    let Fixture {
        ns,
        daemon,
        remote: _remote,
        ..
    } = web_source_at_v1("lifetime-stalled", "  interval: 1s\n").await;
    // Another applier takes the field: the Source stalls on the conflict, and retries
    // at each interval.
    helm_takes_the_value(&ns).await;
    let failures = format!("tether_reconciles_total{{source=\"{ns}/web\",result=\"failure\"}}");
    let version = |ns: &str| {
        kubectl_ok(&[
            "get",
            "source",
            "web",
            "-n",
            ns,
            "-o",
            "jsonpath={.metadata.resourceVersion}",
        ])
    };
    let before = (version(&ns), daemon.metric(&failures).unwrap_or(0.0));
    let offset = audit_offset();
    eventually(Duration::from_secs(30), || async {
        daemon.metric(&failures).unwrap_or(0.0) >= before.1 + 10.0
    })
    .await;
    let status_writes: Vec<String> = audit_entries_since(offset)
        .iter()
        .filter(|e| {
            e["objectRef"]["resource"] == "sources"
                && e["objectRef"]["namespace"] == ns.as_str()
                && e["verb"] != "list"
        })
        .map(|e| format!("{} {}", e["verb"], e["objectRef"]["subresource"]))
        .collect();
    assert_eq!(status_writes, Vec::<String>::new(), "ten retries wrote");
    assert_eq!(version(&ns), before.0, "the resourceVersion moved");
}

/// The HistoryRewritten Events of the Source `web` (their notes).
fn rewrite_events(ns: &str) -> Vec<String> {
    let text = kubectl_ok(&["get", "events", "-n", ns, "-o", "json"]);
    let events: serde_json::Value = serde_json::from_str(&text).unwrap();
    events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reason"] == "HistoryRewritten" && e["involvedObject"]["name"] == "web")
        .map(|e| e["message"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn a_force_push_backwards_is_applied_and_recorded_once() {
    let Fixture {
        client,
        ns,
        remote,
        daemon,
    } = web_source_at_v1("lifetime-rewrite", "  interval: 1s\n").await;
    let first = remote.head_of_bare("main");
    let second = remote.push("main", &[("cm.yaml", &config_map("settings", &ns, "v2"))]);
    eventually(Duration::from_secs(15), || async {
        value_of(&client, &ns).await.as_deref() == Some("v2")
    })
    .await;
    remote.force_push("main", &first);
    // Applied as usual: the objects of the older commit.
    eventually(Duration::from_secs(15), || async {
        value_of(&client, &ns).await.as_deref() == Some("v1")
    })
    .await;
    // And recorded: the status, an Event, a metric.
    eventually(Duration::from_secs(10), || async {
        !status(&ns, "web")["lastHistoryRewrite"].is_null()
    })
    .await;
    let rewrite = &status(&ns, "web")["lastHistoryRewrite"];
    assert_eq!(rewrite["from"], format!("main@sha1:{second}"), "{rewrite}");
    assert_eq!(rewrite["to"], format!("main@sha1:{first}"), "{rewrite}");
    let events = rewrite_events(&ns);
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(
        events[0].contains(&second) && events[0].contains(&first),
        "{events:?}"
    );
    let series = format!("tether_history_rewrites_total{{source=\"{ns}/web\"}}");
    assert_eq!(daemon.metric(&series), Some(1.0));
    // Once: the passes after it are of a history that goes on from there.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(daemon.metric(&series), Some(1.0));
    let third = remote.push("main", &[("cm.yaml", &config_map("settings", &ns, "v3"))]);
    eventually(Duration::from_secs(15), || async {
        value_of(&client, &ns).await.as_deref() == Some("v3")
    })
    .await;
    assert_eq!(daemon.metric(&series), Some(1.0), "{third} descends");
}

#[tokio::test]
async fn a_source_that_refuses_rewrites_stalls_on_a_force_push_and_keeps_its_objects() {
    let Fixture {
        client,
        ns,
        remote,
        daemon: _daemon,
    } = web_source_at_v1("lifetime-refuse", "  interval: 1s\n  rewrites: Refuse\n").await;
    let first = remote.head_of_bare("main");
    remote.push("main", &[("cm.yaml", &config_map("settings", &ns, "v2"))]);
    eventually(Duration::from_secs(15), || async {
        value_of(&client, &ns).await.as_deref() == Some("v2")
    })
    .await;
    remote.force_push("main", &first);
    eventually(Duration::from_secs(15), || async {
        condition(&status(&ns, "web"), "Stalled").is_some_and(|c| c.1 == "HistoryRewritten")
    })
    .await;
    assert_eq!(value_of(&client, &ns).await.as_deref(), Some("v2"));
    assert_eq!(rewrite_events(&ns).len(), 1);
    // Its owner accepts the rewrite: the older commit is applied.
    kubectl_ok(&[
        "patch",
        "source",
        "web",
        "-n",
        &ns,
        "--type=merge",
        "-p",
        r#"{"spec":{"rewrites":"Apply"}}"#,
    ]);
    eventually(Duration::from_secs(15), || async {
        value_of(&client, &ns).await.as_deref() == Some("v1")
    })
    .await;
    assert_eq!(rewrite_events(&ns).len(), 1, "one rewrite, one Event");
}

#[tokio::test]
async fn the_log_lines_of_a_source_do_not_grow_with_its_passes() {
    install_crd();
    let (client, ns, _) = setup("lifetime-log").await;
    let remote = Remote::new(&[
        ("base.yaml", &base(&ns)),
        ("cm.yaml", &config_map("settings", &ns, "v1")),
    ]);
    let log = tempfile::NamedTempFile::new().unwrap();
    let daemon = Daemon::start_with_log(
        &["--sources", "--sources-namespace", &ns],
        "text",
        "debug",
        Stdio::from(log.reopen().unwrap()),
    );
    kubectl_apply_text(&source_yaml("web", &ns, &remote.url, "  interval: 1s\n"));
    eventually(Duration::from_secs(15), || async {
        value_of(&client, &ns).await.as_deref() == Some("v1")
    })
    .await;
    let passes = format!("tether_reconciles_total{{source=\"{ns}/web\",result=\"success\"}}");
    eventually(Duration::from_secs(40), || async {
        daemon.metric(&passes) >= Some(15.0)
    })
    .await;
    let text = std::fs::read_to_string(log.path()).unwrap();
    let of_the_source: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(&format!("{ns}/web")) && l.contains("pass done"))
        .collect();
    assert!(of_the_source.len() >= 10, "{text}");
    for line in &of_the_source {
        assert!(line.matches("revision=").count() <= 1, "{line}");
    }
    // The quiet passes' lines: the same words, so the same length but for the time.
    let quiet: Vec<usize> = of_the_source
        .iter()
        .filter(|l| l.contains("nothing changed"))
        .map(|l| l.len())
        .collect();
    let (shortest, longest) = (quiet.iter().min(), quiet.iter().max());
    assert!(quiet.len() >= 10, "{text}");
    assert!(
        longest.unwrap() - shortest.unwrap() <= 4,
        "quiet pass lines from {shortest:?} to {longest:?} bytes"
    );
}

#[tokio::test]
async fn a_leader_renews_its_lease_once_in_a_while_not_on_each_of_its_events() {
    install_crd();
    let (_client, ns, _) = setup("lifetime-lease").await;
    let daemon = Daemon::start(&[
        "--sources",
        "--sources-namespace",
        &ns,
        "--leader-elect",
        "--lease-namespace",
        &ns,
        "--lease-duration",
        "15s",
    ]);
    eventually(Duration::from_secs(20), || async {
        daemon.metric("tether_leader") == Some(1.0)
    })
    .await;
    let offset = audit_offset();
    tokio::time::sleep(Duration::from_secs(21)).await;
    let renewals: Vec<String> = audit_entries_since(offset)
        .iter()
        .filter(|e| {
            e["objectRef"]["resource"] == "leases"
                && e["objectRef"]["namespace"] == ns.as_str()
                && e["verb"] != "list"
                && e["verb"] != "watch"
        })
        .map(|e| format!("{} {}", e["verb"], e["requestReceivedTimestamp"]))
        .collect();
    // A 15 s Lease is renewed when a third of it is left: every 10 s.
    assert!(
        (1..=3).contains(&renewals.len()),
        "{} Lease writes in 21 s: {renewals:?}",
        renewals.len()
    );
}

/// The API server is out of a running daemon's reach for a few seconds (every
/// connection cut, new ones closed: a load balancer restarting): its watches fail to
/// resume for a while, then resume where they were, and their caches are kept
/// meanwhile, so its passes go on planning from them. A change made while it was out
/// of reach (an object deleted by another hand) still arrives through the resumed
/// watch and is corrected, a push is applied, and no pass lists the Source's objects
/// for itself: with a thousand Sources, each listing at once would swamp the API
/// server as it recovers.
#[tokio::test]
async fn connections_cut_under_a_running_daemon_resume_its_watches_and_no_pass_lists() {
    install_crd();
    let (client, ns, _) = setup("cut").await;
    let remote = Remote::new(&[
        ("base.yaml", &base(&ns)),
        ("cm.yaml", &config_map("settings", &ns, "v1")),
        ("other.yaml", &config_map("other", &ns, "v1")),
    ]);
    let cluster = crate::harness::cluster();
    let proxy = tether_testkit::proxy::CutProxy::start(cluster.api_server_address());
    let kubeconfig = cluster.kubeconfig_through(proxy.port());
    let daemon = Daemon::start_on(
        kubeconfig.path(),
        &["--sources", "--sources-namespace", &ns],
    );
    kubectl_apply_text(&source_yaml("web", &ns, &remote.url, "  interval: 1s\n"));
    eventually(Duration::from_secs(30), || async {
        value_of(&client, &ns).await.as_deref() == Some("v1")
    })
    .await;
    let passes = format!("tether_reconciles_total{{source=\"{ns}/web\",result=\"success\"}}");
    eventually(Duration::from_secs(10), || async {
        daemon.metric(&passes) >= Some(3.0)
    })
    .await;
    let offset = audit_offset();
    let cut = proxy.down();
    assert!(cut >= 2, "the daemon's connections were cut ({cut})");
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    config_maps
        .delete("other", &Default::default())
        .await
        .unwrap();
    remote.push("main", &[("cm.yaml", &config_map("settings", &ns, "v2"))]);
    // Long enough for the watches' attempts to resume to fail, and passes too.
    tokio::time::sleep(Duration::from_secs(4)).await;
    proxy.up();
    eventually(Duration::from_secs(30), || async {
        value_of(&client, &ns).await.as_deref() == Some("v2")
            && config_maps.get_opt("other").await.unwrap().is_some()
    })
    .await;
    // And a few quiet passes after.
    let now = daemon.metric(&passes).unwrap_or(0.0);
    eventually(Duration::from_secs(10), || async {
        daemon.metric(&passes) >= Some(now + 3.0)
    })
    .await;
    let inventory = Inventory {
        name: "web".into(),
        namespace: ns.clone(),
    };
    assert_eq!(
        crate::daemon::lists_since(offset, &inventory),
        Vec::<String>::new(),
        "passes listed for themselves after the connections were cut"
    );
}
