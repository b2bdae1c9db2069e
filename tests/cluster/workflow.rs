//! Workflows against the control plane, as Kolla deploys a service: waves applied in
//! order (told from the objects' own timestamps), a failing Job that stops the apply,
//! a dependency that never gets ready, a missing object in the cluster, a Job
//! replaced when its spec changes, and `--only`.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use kube::Api;

use crate::reconcile::{Repo, all_output, base, setup, stdout, tether};

const IMAGES: &str = "---\nkind: Image\nname: mariadb\ntag: \"10.11\"\n---\nkind: Image\nname: keystone\ntag: \"25.0\"\n";

/// A slice of `kind` in `ns` that waits for `depends_on` (YAML list entries).
fn slice(ns: &str, name: &str, kind: &str, image: &str, depends_on: &[&str]) -> String {
    let mut text = format!(
        "---\nkind: Slice\nname: {name}\ntrust_domain: {ns}\ncontroller_kind: {kind}\ndefault_image: {image}\n"
    );
    if !depends_on.is_empty() {
        text.push_str("depends_on:\n");
        for dependency in depends_on {
            text.push_str(&format!("  - {dependency}\n"));
        }
    }
    text
}

/// The keystone workflow: MariaDB, the database Job, the users Job, Keystone.
fn keystone(ns: &str) -> String {
    [
        base(ns),
        IMAGES.to_string(),
        slice(ns, "mariadb", "StatefulSet", "mariadb:10.11", &[]),
        slice(
            ns,
            "keystone-db-init",
            "Job",
            "keystone:25.0",
            &["Slice/mariadb"],
        ),
        slice(
            ns,
            "keystone-users",
            "Job",
            "keystone:25.0",
            &["Slice/keystone-db-init"],
        ),
        slice(
            ns,
            "keystone",
            "Deployment",
            "keystone:25.0",
            &["Slice/keystone-users"],
        ),
    ]
    .concat()
}

fn created(object: &serde_json::Value) -> String {
    object["metadata"]["creationTimestamp"]
        .as_str()
        .unwrap()
        .to_string()
}

/// When the condition of `kind` became True.
fn condition_since(object: &serde_json::Value, kind: &str) -> String {
    object["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == kind && c["status"] == "True")
        .and_then(|c| c["lastTransitionTime"].as_str())
        .unwrap_or_else(|| panic!("no {kind} condition: {object:#}"))
        .to_string()
}

async fn get<K>(api: &Api<K>, name: &str) -> serde_json::Value
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    serde_json::to_value(api.get(name).await.unwrap()).unwrap()
}

#[tokio::test]
async fn a_workflow_applies_wave_by_wave_in_one_run() {
    let (client, ns, inventory) = setup("workflow-waves").await;
    let repo = Repo::new(&[("models.yaml", &keystone(&ns))]);
    let path = repo.path().to_str().unwrap();

    let diff = tether(&inventory, &["diff", path]);
    let report = stdout(&diff);
    let order: Vec<usize> = [
        "== wave 1 of 4",
        "== wave 2 of 4",
        "== wave 3 of 4",
        "== wave 4 of 4",
    ]
    .iter()
    .map(|heading| {
        report
            .find(heading)
            .unwrap_or_else(|| panic!("{heading}: {report}"))
    })
    .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{report}");
    assert!(
        report.contains(&format!(
            "== wave 2 of 4, once these are ready: StatefulSet {ns}/mariadb"
        )),
        "{report}"
    );
    let markdown = stdout(&tether(&inventory, &["diff", path, "-o", "markdown"]));
    assert!(
        markdown.contains("```mermaid\nflowchart BT\n"),
        "{markdown}"
    );
    assert!(
        markdown.contains("#### wave 3 of 4, once these are ready: Job"),
        "{markdown}"
    );

    let applied = tether(&inventory, &["apply", path]);
    assert!(applied.status.success(), "{}", all_output(&applied));
    assert_eq!(
        stdout(&applied),
        "4 created, 1 configured, 0 unchanged, 0 pruned, 0 failed\n"
    );

    // Each wave was applied after what it waits for was ready.
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let sets: Api<k8s_openapi::api::apps::v1::StatefulSet> = Api::namespaced(client.clone(), &ns);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &ns);
    let mariadb_pod = get(&pods, "mariadb-0").await;
    let db_init = get(&jobs, "keystone-db-init").await;
    let users = get(&jobs, "keystone-users").await;
    let keystone = get(&deployments, "keystone").await;
    assert!(created(&get(&sets, "mariadb").await) <= created(&db_init));
    assert!(condition_since(&mariadb_pod, "Ready") <= created(&db_init));
    assert!(condition_since(&db_init, "Complete") <= created(&users));
    assert!(condition_since(&users, "Complete") <= created(&keystone));
    // The timestamps have seconds: the waits make the order strict overall.
    assert!(
        created(&db_init) < created(&keystone),
        "{db_init:#}\n{keystone:#}"
    );

    // A second run waits for nothing and changes nothing; the diff is clean.
    let again = tether(&inventory, &["apply", path]);
    assert_eq!(
        stdout(&again),
        "0 created, 0 configured, 5 unchanged, 0 pruned, 0 failed\n",
        "{}",
        all_output(&again)
    );
    let diff = tether(&inventory, &["diff", path]);
    assert_eq!(diff.status.code(), Some(0), "{}", all_output(&diff));
    // The completed Jobs were not run again.
    assert_eq!(
        get(&jobs, "keystone-db-init").await["metadata"]["uid"],
        db_init["metadata"]["uid"]
    );
}

/// A Job as a KubernetesResourceInstance whose pod exits with `exit_code`.
fn failing_job(ns: &str, exit_code: u8) -> String {
    format!(
        "---\nkind: KubernetesResourceInstance\nname: keystone-db-init\nresource_definition: |\n  \
         apiVersion: batch/v1\n  kind: Job\n  metadata:\n    name: keystone-db-init\n    namespace: {ns}\n  \
         spec:\n    backoffLimit: 0\n    template:\n      metadata:\n        annotations:\n          \
         sim.tether.dev/exit-code: \"{exit_code}\"\n      spec:\n        restartPolicy: Never\n        \
         containers:\n        - name: db-init\n          image: keystone:25.0\n"
    )
}

#[tokio::test]
async fn a_failing_job_stops_the_apply_with_its_reason() {
    let (client, ns, inventory) = setup("workflow-failing-job").await;
    let models = [
        base(&ns),
        IMAGES.to_string(),
        failing_job(&ns, 3),
        slice(
            ns.as_str(),
            "keystone",
            "Deployment",
            "keystone:25.0",
            &["KubernetesResourceInstance/keystone-db-init"],
        ),
    ]
    .concat();
    let repo = Repo::new(&[("models.yaml", &models)]);
    let applied = tether(&inventory, &["apply", repo.path().to_str().unwrap()]);
    let out = all_output(&applied);
    assert_eq!(applied.status.code(), Some(2), "{out}");
    assert!(
        out.contains("wave 2 of 2 did not start: what it depends on failed"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "Job {ns}/keystone-db-init: the Job failed: Failed is True (BackoffLimitExceeded)"
        )),
        "{out}"
    );
    assert!(out.contains("(needed by Slice/keystone)"), "{out}");
    assert!(
        out.contains("1 objects of this wave and the later ones were not applied"),
        "{out}"
    );
    let deployments: Api<Deployment> = Api::namespaced(client, &ns);
    assert!(deployments.get_opt("keystone").await.unwrap().is_none());
}

#[tokio::test]
async fn a_dependency_not_ready_in_time_is_named_and_the_next_apply_resumes() {
    let (client, ns, inventory) = setup("workflow-timeout").await;
    // A pod that starts unready, and a missing object in the cluster.
    let unready = format!(
        "---\nkind: KubernetesResourceInstance\nname: mariadb\nresource_definition: |\n  \
         apiVersion: v1\n  kind: Pod\n  metadata:\n    name: mariadb\n    namespace: {ns}\n    \
         annotations:\n      sim.tether.dev/ready: \"false\"\n  spec:\n    containers:\n    \
         - name: mariadb\n      image: mariadb:10.11\n"
    );
    let external = format!(
        "kind: Service\n    namespace: {ns}\n    name: memcached\n    ready_when: {{endpoints: true}}"
    );
    let models = [
        base(&ns),
        IMAGES.to_string(),
        unready,
        slice(
            &ns,
            "keystone",
            "Deployment",
            "keystone:25.0",
            &["KubernetesResourceInstance/mariadb", &external],
        ),
    ]
    .concat();
    let repo = Repo::new(&[("models.yaml", &models)]);
    let path = repo.path().to_str().unwrap();
    let applied = tether(&inventory, &["apply", "--timeout", "3s", path]);
    let out = all_output(&applied);
    assert_eq!(applied.status.code(), Some(2), "{out}");
    assert!(out.contains("not ready in time (--timeout)"), "{out}");
    assert!(
        out.contains(&format!(
            "  Pod {ns}/mariadb: phase Running, not Ready (needed by Slice/keystone)"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("  Service {ns}/memcached: does not exist (needed by Slice/keystone, in the cluster, not applied by this repo)")),
        "{out}"
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    assert!(deployments.get_opt("keystone").await.unwrap().is_none());

    // The pod gets ready, the Service exists with an endpoint: the next apply goes on.
    crate::harness::pod_action(&client, "ready", &ns, "mariadb", "mariadb").await;
    let service = serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "memcached", "namespace": ns},
        "spec": {"ports": [{"port": 11211}]},
    });
    let endpoints = serde_json::json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": "memcached", "namespace": ns},
        "subsets": [{"addresses": [{"ip": "10.244.9.9"}], "ports": [{"port": 11211}]}],
    });
    let params = kube::api::PostParams::default();
    Api::<k8s_openapi::api::core::v1::Service>::namespaced(client.clone(), &ns)
        .create(&params, &serde_json::from_value(service).unwrap())
        .await
        .unwrap();
    Api::<k8s_openapi::api::core::v1::Endpoints>::namespaced(client.clone(), &ns)
        .create(&params, &serde_json::from_value(endpoints).unwrap())
        .await
        .unwrap();
    let resumed = tether(&inventory, &["apply", "--timeout", "30s", path]);
    assert!(resumed.status.success(), "{}", all_output(&resumed));
    assert_eq!(
        stdout(&resumed),
        "1 created, 0 configured, 2 unchanged, 0 pruned, 0 failed\n"
    );
    assert!(deployments.get_opt("keystone").await.unwrap().is_some());
}

#[tokio::test]
async fn a_changed_job_is_replaced_and_an_unchanged_one_is_left_alone() {
    let (client, ns, inventory) = setup("workflow-job-replace").await;
    let models = |tag: &str| {
        [
            base(&ns),
            format!("---\nkind: Image\nname: keystone\ntag: \"{tag}\"\n"),
            slice(
                &ns,
                "keystone-db-init",
                "Job",
                &format!("keystone:{tag}"),
                &[],
            ),
        ]
        .concat()
    };
    let repo = Repo::new(&[("models.yaml", &models("25.0"))]);
    let path = repo.path().to_str().unwrap();
    let applied = tether(&inventory, &["apply", "--wait", path]);
    assert!(applied.status.success(), "{}", all_output(&applied));
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let first = get(&jobs, "keystone-db-init").await;

    // Unchanged and complete: not run again.
    let again = tether(&inventory, &["apply", path]);
    assert_eq!(
        stdout(&again),
        "0 created, 0 configured, 2 unchanged, 0 pruned, 0 failed\n"
    );
    assert_eq!(
        get(&jobs, "keystone-db-init").await["metadata"]["uid"],
        first["metadata"]["uid"]
    );

    // A new image changes the pod template, which a Job cannot change: replaced.
    repo.write("models.yaml", &models("26.0"));
    let diff = tether(&inventory, &["diff", path]);
    let report = stdout(&diff);
    assert!(
        report.contains(&format!("replace Job {ns}/keystone-db-init")),
        "{report}"
    );
    assert!(
        report.contains("  -      - image: keystone:25.0\n  +      - image: keystone:26.0\n"),
        "{report}"
    );
    assert!(
        !report.contains("backoffLimit"),
        "only what tether sets is compared: {report}"
    );
    let replaced = tether(&inventory, &["apply", "--wait", path]);
    assert!(replaced.status.success(), "{}", all_output(&replaced));
    assert!(
        stdout(&replaced).starts_with("0 created, 0 configured, 1 replaced, 1 unchanged"),
        "{}",
        all_output(&replaced)
    );
    let second = get(&jobs, "keystone-db-init").await;
    assert_ne!(second["metadata"]["uid"], first["metadata"]["uid"]);
    assert_eq!(
        second["spec"]["template"]["spec"]["containers"][0]["image"],
        "keystone:26.0"
    );
    assert_eq!(second["status"]["succeeded"], 1);
    let diff = tether(&inventory, &["diff", path]);
    assert_eq!(diff.status.code(), Some(0), "{}", all_output(&diff));
}

#[tokio::test]
async fn only_applies_the_selected_models_and_what_they_depend_on() {
    let (client, ns, inventory) = setup("workflow-only").await;
    let models = [
        base(&ns),
        IMAGES.to_string(),
        slice(&ns, "keystone-db-init", "Job", "keystone:25.0", &[]),
        slice(
            &ns,
            "keystone",
            "Deployment",
            "keystone:25.0",
            &["Slice/keystone-db-init"],
        ),
        slice(&ns, "horizon", "Deployment", "keystone:25.0", &[]),
    ]
    .concat();
    let repo = Repo::new(&[("models.yaml", &models)]);
    let path = repo.path().to_str().unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);

    // The layer below was not done: --skip-dependencies takes the user at their word,
    // but what keystone waits for must exist.
    let skipped = tether(
        &inventory,
        &[
            "apply",
            "--only",
            "Slice/keystone",
            "--skip-dependencies",
            "--timeout",
            "2s",
            path,
        ],
    );
    let out = all_output(&skipped);
    assert_eq!(skipped.status.code(), Some(2), "{out}");
    assert!(
        out.contains(&format!("Job {ns}/keystone-db-init: does not exist")),
        "{out}"
    );
    assert!(jobs.get_opt("keystone-db-init").await.unwrap().is_none());

    let diff = tether(&inventory, &["diff", "--only", "keystone", path]);
    let report = stdout(&diff);
    assert!(
        report.contains(&format!("create Deployment {ns}/keystone")),
        "{report}"
    );
    assert!(!report.contains("horizon"), "{report}");

    let only = tether(&inventory, &["apply", "--only", "Slice/keystone", path]);
    assert!(only.status.success(), "{}", all_output(&only));
    // The namespace (the test's, adopted), the Job it waits for and keystone; not
    // horizon.
    assert_eq!(
        stdout(&only),
        "2 created, 1 configured, 0 unchanged, 0 pruned, 0 failed\n"
    );
    assert!(deployments.get_opt("keystone").await.unwrap().is_some());
    assert!(deployments.get_opt("horizon").await.unwrap().is_none());

    let refused = tether(
        &inventory,
        &["apply", "--only", "Slice/keystone", "--prune", path],
    );
    assert_eq!(refused.status.code(), Some(2), "{}", all_output(&refused));
    let unknown = tether(&inventory, &["apply", "--only", "Slice/keystnoe", path]);
    let out = all_output(&unknown);
    assert_eq!(unknown.status.code(), Some(2), "{out}");
    assert!(
        out.contains(
            "no model \"Slice/keystnoe\" makes an object (did you mean \"Slice/keystone\"?)"
        ),
        "{out}"
    );
}

/// `examples/openstack` copied into a directory of its own, in namespace `ns`.
fn openstack_example(ns: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let example = crate::harness::repo_root().join("examples/openstack");
    std::fs::create_dir(dir.path().join("keystone")).unwrap();
    for file in ["openstack.yaml", "mariadb.yaml", "keystone.yaml"] {
        let text = std::fs::read_to_string(example.join(file)).unwrap();
        let text = text
            .replace("name: openstack\n", &format!("name: {ns}\n"))
            .replace(
                "trust_domain: openstack\n",
                &format!("trust_domain: {ns}\n"),
            );
        std::fs::write(dir.path().join(file), text).unwrap();
    }
    for file in ["keystone.conf", "policy.yaml", "fernet-0"] {
        std::fs::copy(
            example.join("keystone").join(file),
            dir.path().join("keystone").join(file),
        )
        .unwrap();
    }
    dir
}

#[tokio::test]
async fn the_openstack_example_applies_and_a_config_edit_rolls_only_keystone() {
    let (client, ns, inventory) = setup("workflow-openstack").await;
    let repo = openstack_example(&ns);
    let path = repo.path().to_str().unwrap();
    let applied = tether(&inventory, &["apply", "--wait", path]);
    assert!(applied.status.success(), "{}", all_output(&applied));
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let configs: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), &ns);
    let config = get(&configs, "keystone-config").await;
    assert!(
        config["data"]["keystone.conf"]
            .as_str()
            .unwrap()
            .contains("provider = fernet")
    );
    assert!(config["data"]["policy.yaml"].is_string());
    assert!(config["binaryData"]["fernet-0"].is_string());
    let before = get(&deployments, "keystone").await;
    let job_uids = (
        get(&jobs, "keystone-db-init").await["metadata"]["uid"].clone(),
        get(&jobs, "keystone-users").await["metadata"]["uid"].clone(),
    );
    let clean = tether(&inventory, &["diff", path]);
    assert_eq!(clean.status.code(), Some(0), "{}", all_output(&clean));

    // Edit a configuration file: the ConfigMap and the Deployment's pod template change.
    let conf = repo.path().join("keystone/keystone.conf");
    let text = std::fs::read_to_string(&conf)
        .unwrap()
        .replace("debug = False", "debug = True");
    std::fs::write(&conf, text).unwrap();
    let diff = stdout(&tether(&inventory, &["diff", path]));
    assert!(
        diff.contains(&format!("update ConfigMap {ns}/keystone-config")),
        "{diff}"
    );
    assert!(
        diff.contains(&format!("update Deployment {ns}/keystone")),
        "{diff}"
    );
    assert!(diff.contains("tether.dev/config-hash"), "{diff}");
    for other in ["update Job", "replace Job", "update StatefulSet"] {
        assert!(
            !diff.contains(other),
            "only keystone mounts the files: {diff}"
        );
    }
    let rolled = tether(&inventory, &["apply", path]);
    assert!(rolled.status.success(), "{}", all_output(&rolled));
    assert!(
        stdout(&rolled).starts_with("0 created, 2 configured, "),
        "{}",
        all_output(&rolled)
    );
    let after = get(&deployments, "keystone").await;
    assert_eq!(
        after["metadata"]["generation"].as_i64().unwrap(),
        before["metadata"]["generation"].as_i64().unwrap() + 1
    );
    assert_ne!(
        after["spec"]["template"]["metadata"]["annotations"]["tether.dev/config-hash"],
        before["spec"]["template"]["metadata"]["annotations"]["tether.dev/config-hash"]
    );
    assert_eq!(
        get(&jobs, "keystone-db-init").await["metadata"]["uid"],
        job_uids.0
    );
    assert_eq!(
        get(&jobs, "keystone-users").await["metadata"]["uid"],
        job_uids.1
    );
}

/// What a Job replace may delete: never another inventory's Job; a Job kubectl made
/// (adopted, as any object tether finds) is replaced like tether's own.
#[tokio::test]
async fn a_job_replace_never_deletes_another_inventorys_job() {
    let (client, ns, inventory) = setup("workflow-replace-owner").await;
    let models = |tag: &str| {
        [
            base(&ns),
            format!("---\nkind: Image\nname: keystone\ntag: \"{tag}\"\n"),
            slice(&ns, "migrate", "Job", &format!("keystone:{tag}"), &[]),
        ]
        .concat()
    };
    let theirs = Repo::new(&[("models.yaml", &models("25.0"))]);
    let other = format!("{inventory}-other");
    let applied = tether(&other, &["apply", theirs.path().to_str().unwrap()]);
    assert!(applied.status.success(), "{}", all_output(&applied));
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let uid = get(&jobs, "migrate").await["metadata"]["uid"].clone();

    let ours = Repo::new(&[("models.yaml", &models("26.0"))]);
    let refused = tether(&inventory, &["apply", ours.path().to_str().unwrap()]);
    let out = all_output(&refused);
    assert_eq!(refused.status.code(), Some(2), "{out}");
    assert!(
        out.contains(&format!(
            "failed: Job {ns}/migrate: owned by the tether inventory default/{other}"
        )),
        "{out}"
    );
    assert_eq!(get(&jobs, "migrate").await["metadata"]["uid"], uid);

    // A Job made with kubectl, with another image: adopted and replaced.
    let kubectl_made = serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "seed", "namespace": ns},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "seed", "image": "busybox:1.36"}]}}},
    });
    let made = jobs
        .create(
            &kube::api::PostParams {
                field_manager: Some("kubectl-create".into()),
                ..Default::default()
            },
            &serde_json::from_value(kubectl_made).unwrap(),
        )
        .await
        .unwrap();
    let seed = format!(
        "---\nkind: KubernetesResourceInstance\nname: seed\nresource_definition: |\n  \
         apiVersion: batch/v1\n  kind: Job\n  metadata:\n    name: seed\n    namespace: {ns}\n  \
         spec:\n    template:\n      spec:\n        restartPolicy: Never\n        containers:\n        \
         - name: seed\n          image: busybox:1.37\n"
    );
    // No TrustDomain: the other inventory applied the namespace.
    let root = "kind: KubernetesService\nname: kubernetes\n";
    let mine = Repo::new(&[("models.yaml", &[root, &seed].concat())]);
    let path = mine.path().to_str().unwrap();
    let diff = stdout(&tether(&inventory, &["diff", path]));
    assert!(diff.contains(&format!("replace Job {ns}/seed")), "{diff}");
    let replaced = tether(&inventory, &["apply", path]);
    assert!(replaced.status.success(), "{}", all_output(&replaced));
    let now = get(&jobs, "seed").await;
    assert_ne!(
        now["metadata"]["uid"].as_str(),
        made.metadata.uid.as_deref()
    );
    assert_eq!(
        now["spec"]["template"]["spec"]["containers"][0]["image"],
        "busybox:1.37"
    );
    assert_eq!(
        now["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "tether"
    );
}
