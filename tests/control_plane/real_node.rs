//! The real node (`scripts/local-cluster up --nodes real`: a kubelet and kube-proxy of
//! the control plane's release, containerd, runc and a CNI bridge): containers run
//! from images made here and pulled from the node's registry, answer through their
//! Services, roll out, restart; and tether's daemon runs in a pod from its own image
//! (`scripts/image`), as `tether install` makes it. One real node per machine: each
//! test holds it ([`real_node`]) for its own control plane.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tether_testkit::broker::Broker;
use tether_testkit::cluster::{LocalCluster, binaries, real_node};
use tether_testkit::remote::Remote;

use crate::cli::{Cli, text};

/// The node's address (its bridge's), where pods reach the host.
const NODE_IP: &str = "10.245.0.1";
const WORKLOAD: &str = "registry.tether.test/workload";

/// What `url` answers (curl: a client other than tether), `None` when nothing does.
fn get(url: &str) -> Option<String> {
    let out = Command::new("curl")
        .args(["-fsS", "--max-time", "3", url])
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| text(&out.stdout).trim().to_string())
}

/// `examples/real-node/web.yaml` (a Deployment of two replicas of the node's
/// workload image, ready once its process answers `/ready`, and a Service in front of
/// it) at `version` of the image.
fn workload(version: &str) -> String {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/real-node/web.yaml");
    let text = std::fs::read_to_string(example).unwrap();
    assert!(text.contains(&format!("{WORKLOAD}:1.0.0")), "{text}");
    text.replace(
        &format!("{WORKLOAD}:1.0.0"),
        &format!("{WORKLOAD}:{version}"),
    )
}

/// The pods of `selector` that are not terminating (after a rollout, the old ones may
/// still be).
fn pods(cli: &Cli, namespace: &str, selector: &str) -> Vec<Value> {
    let list = cli.json(&["get", "pods", "-n", namespace, "-l", selector]);
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|pod| pod["metadata"]["deletionTimestamp"].is_null())
        .cloned()
        .collect()
}

fn restarts(pod: &Value) -> i64 {
    pod["status"]["containerStatuses"][0]["restartCount"]
        .as_i64()
        .unwrap_or(-1)
}

fn ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// The host's processes whose command line is `command` and whose cgroup is the pod
/// `uid`'s: what the node runs for that pod.
fn processes_of_pod(uid: &str, command: &str) -> Vec<u32> {
    let cgroup_uid = uid.replace('-', "_");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = text(&cmdline).replace('\0', " ");
            let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
            cmdline.trim() == command
                && (cgroup.contains(&format!("pod{uid}"))
                    || cgroup.contains(&format!("pod{cgroup_uid}")))
        })
        .collect()
}

#[test]
fn a_workload_runs_answers_through_its_service_rolls_out_and_restarts_on_the_real_node() {
    let node = real_node();
    let cluster = LocalCluster::start_real(&node);
    let cli = Cli {
        kubeconfig: cluster.kubeconfig(),
    };
    let nodes = cli.json(&["get", "nodes"]);
    let node_names: Vec<&str> = nodes["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(node_names, ["tether-node"], "one node, the real one");
    let runtime = nodes["items"][0]["status"]["nodeInfo"]["containerRuntimeVersion"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(runtime.starts_with("containerd://"), "{runtime}");

    // Pod events from the start, to a real broker and to JSON lines.
    let broker = Broker::start();
    let events_dir = tempfile::tempdir().unwrap();
    let jsonl = events_dir.path().join("events.jsonl");
    let mut events = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["events", "--watch", "-n", "hello", "--kafka-topic", "pods"])
        .arg(format!("--kafka-brokers={}", broker.address()))
        .arg("--events-jsonl")
        .arg(&jsonl)
        .arg("--outbox")
        .arg(events_dir.path().join("outbox"))
        .env("KUBECONFIG", cluster.kubeconfig())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();

    // Applied and waited for: ready means the processes answered their probes.
    let models = tempfile::tempdir().unwrap();
    std::fs::write(models.path().join("web.yaml"), workload("1.0.0")).unwrap();
    let dir = models.path().to_str().unwrap();
    let started = Instant::now();
    cli.tether_ok(&["apply", dir, "--wait", "--timeout", "180s"]);
    eprintln!("[real-node] first apply --wait: {:?}", started.elapsed());
    let first = pods(&cli, "hello", "app=web");
    assert_eq!(first.len(), 2);
    for pod in &first {
        assert!(ready(pod), "{pod}");
        assert_eq!(pod["spec"]["nodeName"], "tether-node");
        let ip = pod["status"]["podIP"].as_str().unwrap();
        assert!(
            ip.starts_with("10.245.0."),
            "a pod IP of the node's bridge: {ip}"
        );
        // The pod answers on its own IP, from the host.
        assert_eq!(
            get(&format!("http://{ip}:8080/healthz")).as_deref(),
            Some("ok")
        );
    }
    let service_ip = cli.kubectl_ok(&[
        "get",
        "service",
        "web",
        "-n",
        "hello",
        "-o",
        "jsonpath={.spec.clusterIP}",
    ]);
    let version = format!("http://{service_ip}/version");
    // kube-proxy writes the Service's rules within its sync period of the pods being
    // ready: seconds, more on a loaded machine.
    cli.eventually(
        "the Service answers with 1.0.0",
        Duration::from_secs(45),
        || get(&version).as_deref() == Some("workload 1.0.0"),
    );

    // A rollout: the new version really starts, and the Service answers with it alone.
    std::fs::write(models.path().join("web.yaml"), workload("2.0.0")).unwrap();
    cli.tether_ok(&["apply", dir, "--wait", "--timeout", "180s"]);
    // --wait returned once no old pod runs (they may still be terminating); kube-proxy
    // drops them from the Service's rules within its sync period (1 s), more on a loaded
    // machine.
    let waited = Instant::now();
    cli.eventually(
        "only the new version answers",
        Duration::from_secs(45),
        || {
            let answers: BTreeSet<Option<String>> = (0..10).map(|_| get(&version)).collect();
            answers == BTreeSet::from([Some("workload 2.0.0".to_string())])
        },
    );
    eprintln!(
        "[real-node] the Service answered 2.0.0 alone {:?} after --wait",
        waited.elapsed()
    );
    let second = pods(&cli, "hello", "app=web");
    let before: BTreeSet<&str> = first
        .iter()
        .map(|p| p["metadata"]["uid"].as_str().unwrap())
        .collect();
    for pod in &second {
        assert!(
            !before.contains(pod["metadata"]["uid"].as_str().unwrap()),
            "new pods"
        );
        assert_eq!(
            pod["spec"]["containers"][0]["image"],
            format!("{WORKLOAD}:2.0.0")
        );
    }

    // restart-containers: through the exec API, the container's process is stopped and
    // the kubelet starts it again in the same pod.
    let pod = &second[0];
    let name = pod["metadata"]["name"].as_str().unwrap();
    let uid = pod["metadata"]["uid"].as_str().unwrap();
    let count = restarts(pod);
    cli.tether_ok(&[
        "restart-containers",
        name,
        "-n",
        "hello",
        "--timeout",
        "60s",
    ]);
    cli.eventually(
        "restart-containers counted by the kubelet",
        Duration::from_secs(60),
        || {
            let now = cli.json(&["get", "pod", name, "-n", "hello"]);
            restarts(&now) == count + 1 && ready(&now) && now["metadata"]["uid"] == uid
        },
    );

    // A container killed inside the node: the kubelet counts a restart, and the pod's
    // `restarted` event reaches the broker.
    let server = processes_of_pod(uid, "httpd -f -p 8080 -h /tmp/www");
    assert_eq!(
        server.len(),
        1,
        "the pod's server process on the host: {server:?}"
    );
    let killed = Command::new("kill")
        .args(["-KILL", &server[0].to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    cli.eventually(
        "the killed container restarted",
        Duration::from_secs(60),
        || {
            let now = cli.json(&["get", "pod", name, "-n", "hello"]);
            restarts(&now) == count + 2 && ready(&now)
        },
    );
    let restarted = |event: &Value| event["name"] == name && event["status"] == "restarted";
    cli.eventually(
        "the restarts in the events' JSON lines",
        Duration::from_secs(30),
        || {
            let lines = std::fs::read_to_string(&jsonl).unwrap_or_default();
            lines
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .filter(|e| restarted(e))
                .count()
                >= 2
        },
    );
    let from_kafka: Vec<Value> = broker
        .consume("pods", usize::MAX, Duration::from_secs(10))
        .into_iter()
        .map(|message| message["value"].clone())
        .collect();
    assert!(
        from_kafka.iter().filter(|e| restarted(e)).count() >= 2,
        "both restarts reached the broker: {from_kafka:#?}"
    );
    // The events carry the address the node gave the pod.
    let ip = pod["status"]["podIP"].as_str().unwrap();
    assert!(
        from_kafka.iter().any(|e| e["name"] == name
            && e["netinterfaces"][0]["addresses"]
                .as_array()
                .is_some_and(|a| a.iter().any(|a| a == ip))),
        "an event of {name} with its IP {ip}: {from_kafka:#?}"
    );

    // recreate: the pod is made again by its controller, and the new one starts.
    cli.tether_ok(&["recreate", name, "-n", "hello", "--timeout", "60s"]);
    cli.eventually("a new pod in its place", Duration::from_secs(60), || {
        let now = pods(&cli, "hello", "app=web");
        now.len() == 2 && now.iter().all(ready) && now.iter().all(|p| p["metadata"]["uid"] != uid)
    });
    assert_eq!(get(&version).as_deref(), Some("workload 2.0.0"));
    let _ = events.kill();
    let _ = events.wait();
}

/// `scripts/image push` of the release layout to the node's registry.
fn push_release_image(cluster: &LocalCluster, layout: &Path) {
    let status = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/image"))
        .arg("push")
        .arg(layout)
        .arg(format!("docker://{}/tether:test", cluster.registry()))
        .arg("--dest-tls-verify=false")
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "scripts/image push");
}

#[test]
fn the_daemon_runs_in_a_pod_from_its_own_image_and_applies_a_push() {
    let layout = crate::image::release_image();
    let node = real_node();
    let cluster = LocalCluster::start_real(&node);
    let cli = Cli {
        kubeconfig: cluster.kubeconfig(),
    };
    push_release_image(&cluster, layout);

    // The restricted Pod Security profile, enforced by the API server on the real pods.
    cli.kubectl_ok(&["create", "namespace", "tether-system"]);
    cli.kubectl_ok(&[
        "label",
        "namespace",
        "tether-system",
        "pod-security.kubernetes.io/enforce=restricted",
    ]);
    let started = Instant::now();
    cli.tether_ok(&["install", "--image", "registry.tether.test/tether:test"]);
    cli.kubectl_ok(&[
        "rollout",
        "status",
        "statefulset/tether",
        "-n",
        "tether-system",
        "--timeout=240s",
    ]);
    eprintln!(
        "[real-node] install to two ready replicas: {:?}",
        started.elapsed()
    );
    let daemon_pods = pods(&cli, "tether-system", "app.kubernetes.io/name=tether");
    assert_eq!(daemon_pods.len(), 2);
    for pod in &daemon_pods {
        assert!(ready(pod), "the readiness probe answers: {pod}");
        assert_eq!(pod["spec"]["nodeName"], "tether-node");
        assert_eq!(
            pod["status"]["containerStatuses"][0]["image"],
            "registry.tether.test/tether:test"
        );
        assert_eq!(restarts(pod), 0, "no crash: {pod}");
    }
    let checked = cli.tether_ok(&["check"]);
    assert!(checked.contains("✔"), "{checked}");
    // As the runtime runs it: the user 65532, the root filesystem read-only.
    let uid = daemon_pods[0]["metadata"]["uid"].as_str().unwrap();
    let daemon = processes_of_pod(uid, "/usr/local/bin/tether run");
    assert_eq!(
        daemon.len(),
        1,
        "the daemon's process on the host: {daemon:?}"
    );
    let status = std::fs::read_to_string(format!("/proc/{}/status", daemon[0])).unwrap();
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().skip(1).all(|u| u == "65532")),
        "{status}"
    );
    let mounts = std::fs::read_to_string(format!("/proc/{}/mountinfo", daemon[0])).unwrap();
    let root = mounts
        .lines()
        .find(|l| l.split_whitespace().nth(4) == Some("/"))
        .unwrap_or_else(|| panic!("{mounts}"));
    assert!(
        root.split_whitespace()
            .nth(5)
            .is_some_and(|options| options.split(',').any(|o| o == "ro")),
        "the root filesystem is mounted read-only: {root}"
    );

    // A Source whose remote the pods reach over the pod network.
    let remote = Remote::new_on(NODE_IP, &[("cm.yaml", &config_maps("v1", 1))]);
    let source = format!(
        "apiVersion: tether.dev/v1alpha1
kind: Source
metadata: {{name: team, namespace: tether-system}}
spec:
  url: {}
  ref: main
  path: models
  interval: 1h
  prune: true
",
        remote.url
    );
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), source).unwrap();
    cli.kubectl_ok(&["apply", "-f", file.path().to_str().unwrap()]);
    let value = |name: &str| {
        let out = Command::new(binaries().join("kubectl"))
            .arg("--kubeconfig")
            .arg(cluster.kubeconfig())
            .args([
                "get",
                "configmap",
                name,
                "-n",
                "team",
                "-o",
                "jsonpath={.data.value}",
            ])
            .output()
            .unwrap();
        text(&out.stdout)
    };
    cli.eventually(
        "the Source applied by the daemon's pod",
        Duration::from_secs(120),
        || value("c0") == "v1",
    );

    // A push, announced through the daemon's Service, applied within seconds.
    let secret = cli.kubectl_ok(&[
        "get",
        "secret",
        "tether-webhook",
        "-n",
        "tether-system",
        "-o",
        "jsonpath={.data.secret}",
    ]);
    let secret = text(
        &Command::new("base64")
            .arg("-d")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write as _;
                child.stdin.take().unwrap().write_all(secret.as_bytes())?;
                child.wait_with_output()
            })
            .unwrap()
            .stdout,
    );
    let service_ip = cli.kubectl_ok(&[
        "get",
        "service",
        "tether",
        "-n",
        "tether-system",
        "-o",
        "jsonpath={.spec.clusterIP}",
    ]);
    let hook = |remote: &Remote| {
        let body =
            serde_json::json!({"repository": remote.url, "ref": "refs/heads/main"}).to_string();
        let signature = tether_api::webhook::sign(body.as_bytes(), secret.trim().as_bytes());
        let out = Command::new("curl")
            .args([
                "-sS",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "5",
            ])
            .args(["-H", &format!("X-Signature-256: {signature}")])
            .args([
                "-H",
                "Content-Type: application/json",
                "--data-binary",
                &body,
            ])
            .arg(format!("http://{service_ip}:8080/hook/generic"))
            .output()
            .unwrap();
        text(&out.stdout)
    };
    remote.push("main", &[("cm.yaml", &config_maps("v2", 1))]);
    let pushed = Instant::now();
    assert_eq!(hook(&remote), "202");
    cli.eventually("the push applied", Duration::from_secs(30), || {
        value("c0") == "v2"
    });
    eprintln!(
        "[real-node] push to applied through the Service's webhook: {:?}",
        pushed.elapsed()
    );

    // The pod that runs the Source deleted mid-pass (SIGTERM, then a new pod): the
    // pass is finished by whoever runs the Source next, nothing is lost.
    let many = 2000;
    let owner = cli.kubectl_ok(&[
        "get",
        "source",
        "team",
        "-n",
        "tether-system",
        "-o",
        "jsonpath={.status.owner}",
    ]);
    assert!(
        owner.starts_with("tether-"),
        "the Source's owner is a pod: {owner:?}"
    );
    let last = format!("c{}", many - 1);
    remote.push("main", &[("cm.yaml", &config_maps("v3", many))]);
    assert_eq!(hook(&remote), "202");
    cli.eventually("the pass under way", Duration::from_secs(60), || {
        value("c0") == "v3"
    });
    assert_ne!(
        value(&last),
        "v3",
        "the pod is deleted while its pass is under way"
    );
    let deleted_at = Instant::now();
    cli.kubectl_ok(&[
        "delete",
        "pod",
        &owner,
        "-n",
        "tether-system",
        "--wait=false",
    ]);
    cli.eventually(
        "every object of the pass applied",
        Duration::from_secs(180),
        || value(&last) == "v3",
    );
    eprintln!(
        "[real-node] pass finished {:?} after its pod was deleted",
        deleted_at.elapsed()
    );
    let head = remote.head("main");
    cli.eventually(
        "the Source reports the push applied",
        Duration::from_secs(120),
        || {
            let source = cli.json(&["get", "source", "team", "-n", "tether-system"]);
            source["status"]["lastAppliedRevision"]
                .as_str()
                .is_some_and(|r| r.contains(&head))
        },
    );
    let applied = cli.json(&["get", "configmaps", "-n", "team"]);
    // kube-root-ca.crt, which the controller manager puts in every namespace, has no value.
    let values: BTreeSet<&str> = applied["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["data"]["value"].as_str())
        .collect();
    assert_eq!(
        values,
        BTreeSet::from(["v3"]),
        "every object at the pushed revision"
    );
    let tree = cli.tether_ok(&["tree", "team", "-n", "tether-system"]);
    assert_eq!(
        tree.matches("ConfigMap").count(),
        many,
        "the inventory holds exactly what was applied: {tree}"
    );
    cli.eventually(
        "the deleted pod's successor ready",
        Duration::from_secs(120),
        || {
            let now = pods(&cli, "tether-system", "app.kubernetes.io/name=tether");
            now.len() == 2 && now.iter().all(ready)
        },
    );
    // Minutes on, the liveness probes have answered all along: no replica restarted.
    for pod in pods(&cli, "tether-system", "app.kubernetes.io/name=tether") {
        assert_eq!(restarts(&pod), 0, "{pod}");
    }
}

/// `count` ConfigMaps c0… in the namespace `team`, each holding `value`.
fn config_maps(value: &str, count: usize) -> String {
    let mut text = "kind: Namespace\napiVersion: v1\nmetadata: {name: team}\n".to_string();
    for i in 0..count {
        text.push_str(&format!(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{i}, namespace: team}}\ndata: {{value: {value}}}\n"
        ));
    }
    text
}
