//! `tether events --watch` against the control plane: pods made with kubectl, run by
//! the node simulator, and their events read back from the sinks.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ListParams};
use serde_json::Value;
use tether_testkit::broker::Broker;

use crate::discover::kubectl;
use crate::harness::{Running, cluster};
use crate::reconcile::setup;

/// `tether events --watch` for one namespace, its sinks (JSON lines at `jsonl`,
/// Kubernetes Events) and outbox chosen in a settings file.
fn events(ns: &str, jsonl: &Path, outbox: &Path) -> Running {
    let config = outbox.with_extension("yaml");
    std::fs::write(
        &config,
        format!(
            "events:\n  jsonl: {}\n  kube_events: true\n  outbox: {}\n",
            jsonl.display(),
            outbox.display()
        ),
    )
    .unwrap();
    Running(
        Command::new(env!("CARGO_BIN_EXE_tether"))
            .args(["events", "--watch", "-n", ns, "--config"])
            .arg(&config)
            .arg("--kubeconfig")
            .arg(cluster().kubeconfig())
            .spawn()
            .unwrap(),
    )
}

fn stop(running: Running) {
    drop(running);
}

pub(crate) fn lines(jsonl: &Path) -> Vec<Value> {
    std::fs::read_to_string(jsonl)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Waits until the JSON-lines file holds `count` events of `pod`; returns them.
pub(crate) async fn events_of(jsonl: &Path, pod: &str, count: usize) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let found: Vec<Value> = lines(jsonl)
            .into_iter()
            .filter(|e| e["name"] == pod)
            .collect();
        if found.len() >= count {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{pod}: {} events of {count}: {found:?}",
            found.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until `count` Events tether recorded on `pod` are listed; returns their
/// reasons, oldest first (their names end in the outbox's sequence).
async fn recorded_reasons(
    client: &kube::Client,
    ns: &str,
    pod: &str,
    count: usize,
) -> Vec<(String, String)> {
    let recorded: Api<Event> = Api::namespaced(client.clone(), ns);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut reasons: Vec<(String, String)> = recorded
            .list(&ListParams::default().fields(&format!("involvedObject.name={pod}")))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reporting_component.as_deref() == Some("tether"))
            .map(|e| (e.metadata.name.unwrap(), e.reason.unwrap()))
            .collect();
        reasons.sort_by_key(|(name, _)| name.rsplit('-').next().unwrap().parse::<u64>().unwrap());
        if reasons.len() >= count {
            return reasons;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{pod}: {} Events of {count}: {reasons:?}",
            reasons.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn statuses(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["status"].as_str().unwrap())
        .collect()
}

async fn running_pod(api: &Api<Pod>, name: &str) -> Pod {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(pod) = api.get_opt(name).await.unwrap()
            && pod
                .status
                .as_ref()
                .and_then(|s| s.pod_ip.as_ref())
                .is_some()
        {
            return pod;
        }
        assert!(tokio::time::Instant::now() < deadline, "{name} never ran");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn gone(api: &Api<Pod>, name: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while api.get_opt(name).await.unwrap().is_some() {
        assert!(tokio::time::Instant::now() < deadline, "{name} never went");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Starts the watch and waits until it sees pods: a first pod's `created` arrives.
async fn started(ns: &str, jsonl: &Path, outbox: &Path) -> Running {
    let child = events(ns, jsonl, outbox);
    kubectl(&["-n", ns, "run", "sentinel", "--image=busybox:1.36"]);
    events_of(jsonl, "sentinel", 1).await;
    child
}

fn temp_paths() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let jsonl = dir.path().join("events.jsonl");
    let outbox = dir.path().join("outbox");
    (dir, jsonl, outbox)
}

#[tokio::test]
async fn a_pods_life_is_four_events_in_order_in_every_sink() {
    let (client, ns, _) = setup("events-life").await;
    let (_dir, jsonl, outbox) = temp_paths();
    let watch = started(&ns, &jsonl, &outbox).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

    kubectl(&[
        "-n",
        &ns,
        "run",
        "web",
        "--image=nginx:1.25",
        "--labels=app=web",
    ]);
    let pod = running_pod(&pods, "web").await;
    let restarts = crate::harness::pod_action(&client, "restart", &ns, "web", "web").await;
    events_of(&jsonl, "web", 3).await;
    kubectl(&["-n", &ns, "delete", "pod", "web", "--wait=false"]);
    gone(&pods, "web").await;
    let events = events_of(&jsonl, "web", 4).await;
    // Each sink drains the outbox on its own: the Events may come a little later.
    let reasons = recorded_reasons(&client, &ns, "web", 4).await;
    stop(watch);

    assert_eq!(
        statuses(&events),
        ["created", "updated", "restarted", "deleted"]
    );
    let uid = pod.metadata.uid.clone().unwrap();
    let ip = pod.status.unwrap().pod_ip.unwrap();
    for event in &events {
        assert_eq!(event["producer"], "k8s-sync");
        assert_eq!(event["namespace"], ns.as_str());
        assert_eq!(event["uid"], uid.as_str());
        assert_eq!(event["labels"]["app"], "web");
        assert_eq!(event["netinterfaces"][0]["name"], "primary");
    }
    assert_eq!(
        events[0]["netinterfaces"][0]["addresses"],
        serde_json::json!([])
    );
    assert_eq!(
        events[1]["netinterfaces"][0]["addresses"],
        serde_json::json!([ip])
    );
    assert_eq!(events[1]["restart_counts"]["web"], 0);
    assert_eq!(events[2]["restart_counts"]["web"], restarts);
    let sequences: Vec<u64> = events
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect();
    assert!(sequences.windows(2).all(|w| w[0] < w[1]), "{sequences:?}");

    // The same four on the pod, for `kubectl describe pod` (beside the scheduler's).
    let reasons: Vec<&str> = reasons.iter().map(|(_, r)| r.as_str()).collect();
    assert_eq!(
        reasons,
        [
            "PodCreated",
            "PodIPChanged",
            "ContainerRestarted",
            "PodDeleted"
        ]
    );
}

#[tokio::test]
async fn events_a_sink_could_not_take_are_delivered_after_tether_is_killed_and_restarted() {
    let (client, ns, _) = setup("events-restart").await;
    let (_dir, jsonl, outbox) = temp_paths();
    let watch = started(&ns, &jsonl, &outbox).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

    // The sink breaks: its file's place is taken by a directory. The sentinel's later
    // events may still be written (and the file made again) between the removal and
    // the directory's creation: then the removal is done again.
    let before = std::fs::read_to_string(&jsonl).unwrap();
    for _ in 0..100 {
        let _ = std::fs::remove_file(&jsonl);
        if std::fs::create_dir(&jsonl).is_ok() {
            break;
        }
    }
    assert!(jsonl.is_dir(), "the sink's file could not be replaced");
    kubectl(&["-n", &ns, "run", "web", "--image=nginx:1.25"]);
    running_pod(&pods, "web").await;
    // Recorded in the outbox, not delivered.
    let log = outbox.join("log.jsonl");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let recorded_update = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .any(|l| l.contains("\"status\":\"updated\"") && l.contains("\"name\":\"web\""))
    };
    while !recorded_update() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "events not recorded"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop(watch);

    // While tether is down, the pod goes away; then the sink is mended.
    kubectl(&["-n", &ns, "delete", "pod", "web", "--wait=false"]);
    gone(&pods, "web").await;
    std::fs::remove_dir(&jsonl).unwrap();
    std::fs::write(&jsonl, before).unwrap();
    let watch = events(&ns, &jsonl, &outbox);
    let events = events_of(&jsonl, "web", 3).await;
    stop(watch);
    assert_eq!(statuses(&events), ["created", "updated", "deleted"]);
}

/// `tether events --watch` publishing to Kafka only.
fn kafka_events(ns: &str, broker: &Broker, topic: &str, outbox: &Path) -> Running {
    Running(
        Command::new(env!("CARGO_BIN_EXE_tether"))
            .args(["events", "--watch", "-n", ns])
            .args(["--kafka-brokers", &broker.address(), "--kafka-topic", topic])
            .arg("--outbox")
            .arg(outbox)
            .arg("--kubeconfig")
            .arg(cluster().kubeconfig())
            .spawn()
            .unwrap(),
    )
}

/// The messages of one pod, read from the start of the topic with kafka-python.
fn messages_of(broker: &Broker, topic: &str, pod: &str, count: usize) -> Vec<Value> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let all = broker.consume(topic, usize::MAX >> 1, Duration::from_secs(3));
        let found: Vec<Value> = all.into_iter().filter(|m| m["key"] == pod).collect();
        if found.len() >= count || std::time::Instant::now() > deadline {
            return found;
        }
    }
}

fn message_statuses(messages: &[Value]) -> Vec<&str> {
    messages
        .iter()
        .map(|m| m["value"]["status"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn kafka_gets_the_four_events_keyed_by_pod_and_those_of_an_outage_after_it() {
    let (client, ns, _) = setup("events-kafka").await;
    let (_dir, _, outbox) = temp_paths();
    let mut broker = Broker::start();
    let topic = format!("pods-{ns}");
    let watch = kafka_events(&ns, &broker, &topic, &outbox);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    // The watch has started once a first pod's `created` arrives; a pod made before
    // would be seen first with its IP already, as one `created` and no `updated`.
    kubectl(&["-n", &ns, "run", "sentinel", "--image=busybox:1.36"]);
    let sentinel = messages_of(&broker, &topic, "sentinel", 1);
    assert_eq!(
        message_statuses(&sentinel).first(),
        Some(&"created"),
        "the watch started"
    );

    kubectl(&["-n", &ns, "run", "web", "--image=nginx:1.25"]);
    let pod = running_pod(&pods, "web").await;
    let restarts = crate::harness::pod_action(&client, "restart", &ns, "web", "web").await;
    kubectl(&["-n", &ns, "delete", "pod", "web", "--wait=false"]);
    gone(&pods, "web").await;
    let messages = messages_of(&broker, &topic, "web", 4);
    assert_eq!(
        message_statuses(&messages),
        ["created", "updated", "restarted", "deleted"]
    );
    let ip = pod.status.unwrap().pod_ip.unwrap();
    let uid = pod.metadata.uid.unwrap();
    for message in &messages {
        let value = &message["value"];
        assert_eq!(value["name"], "web");
        assert_eq!(value["producer"], "k8s-sync");
        assert_eq!(value["namespace"], ns.as_str());
        assert_eq!(value["uid"], uid.as_str());
        assert_eq!(value["labels"]["run"], "web");
    }
    assert_eq!(
        messages[1]["value"]["netinterfaces"],
        serde_json::json!([{"name": "primary", "addresses": [ip]}])
    );
    assert_eq!(messages[2]["value"]["restart_counts"]["web"], restarts);

    // The broker goes away while a pod comes and goes; tether keeps watching, and
    // delivers what happened once the broker is back.
    broker.stop();
    kubectl(&["-n", &ns, "run", "during", "--image=nginx:1.25"]);
    running_pod(&pods, "during").await;
    kubectl(&["-n", &ns, "delete", "pod", "during", "--wait=false"]);
    gone(&pods, "during").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    broker.resume();
    let during = messages_of(&broker, &topic, "during", 3);
    drop(watch);
    // At least once: a batch cut by the outage may come twice; each event counts
    // once (by its sequence number), in order.
    let mut seen = std::collections::BTreeSet::new();
    let statuses: Vec<&str> = during
        .iter()
        .filter(|m| seen.insert(m["value"]["sequence"].as_u64().unwrap()))
        .map(|m| m["value"]["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["created", "updated", "deleted"]);
}
