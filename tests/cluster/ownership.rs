//! Prune deletes only what its inventory made: two inventories declaring the same
//! objects, an adopted namespace holding other people's workloads, a resource instance
//! naming an inventory's record, and an object made again by someone else under a
//! name tether once used.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Client;
use kube::api::{Api, PostParams};
use tether_core::ownership::{Inventory, PART_OF_LABEL, ownership_labels};

use crate::reconcile::{
    Repo, all_output, base, config_map, live_config_map, setup, stdout, tether,
};

fn applyset_of(inventory: &str) -> String {
    Inventory {
        name: inventory.into(),
        namespace: "default".into(),
    }
    .applyset_id()
}

/// The ConfigMap holding the record's head of the inventory `inventory` in `default`.
fn record_name(inventory: &str) -> String {
    Inventory {
        name: inventory.into(),
        namespace: "default".into(),
    }
    .record_name()
}

/// A Deployment "theirs" that someone else makes in `namespace`.
async fn someone_elses_deployment(client: &Client, namespace: &str) -> Api<Deployment> {
    let deployment: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "theirs", "namespace": namespace},
        "spec": {"selector": {"matchLabels": {"app": "theirs"}},
            "template": {"metadata": {"labels": {"app": "theirs"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}
    }))
    .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    deployments
}

/// `inventory`'s JSON diff of `models` reports `name` as a conflict owned by `owner`.
fn assert_owned_by(inventory: &str, models: &str, name: &str, owner: &str) {
    let diff = tether(inventory, &["diff", "-o", "json", models]);
    let report: serde_json::Value = serde_json::from_str(&stdout(&diff)).unwrap();
    let change = report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("{name} in {report}"));
    assert_eq!(change["action"], "conflict", "{change}");
    assert_eq!(change["ownedBy"], owner, "{change}");
}

/// What a diff says a namespace holds that no inventory created (kubectl's).
fn not_created_here(diff: &str) -> &str {
    diff.split("of no inventory: ")
        .nth(1)
        .unwrap_or_else(|| panic!("the diff shows what the namespace holds: {diff}"))
}

async fn part_of(client: &Client, namespace: &str, name: &str) -> Option<String> {
    let config_map = live_config_map(client, namespace, name).await?;
    config_map.metadata.labels?.remove(PART_OF_LABEL)
}

#[tokio::test]
async fn two_inventories_never_take_or_prune_each_others_objects() {
    let (client, ns, inventory) = setup("two-inventories").await;
    let (a, b) = (format!("{inventory}-a"), format!("{inventory}-b"));
    let models = |extra: &str| {
        Repo::new(&[
            ("base.yaml", &base(&ns)),
            ("shared.yaml", &config_map("shared", &ns, "same")),
            ("own.yaml", &config_map(extra, &ns, "own")),
        ])
    };
    let repo_b = models("only-b");
    let repo_a = models("only-a");
    let (path_a, path_b) = (
        repo_a.path().to_str().unwrap(),
        repo_b.path().to_str().unwrap(),
    );
    let applied = tether(&b, &["apply", path_b]);
    assert_eq!(applied.status.code(), Some(0), "{}", all_output(&applied));

    // A declares what B applied: a conflict naming B, in every format.
    assert_owned_by(&a, path_a, "shared", &format!("default/{b}"));
    let text = stdout(&tether(&a, &["diff", path_a]));
    assert!(
        text.contains(&format!("is owned by the tether inventory default/{b}")),
        "{text}"
    );

    // Refused, even with --force-conflicts: B keeps its objects.
    for args in [vec!["apply"], vec!["apply", "--force-conflicts"]] {
        let refused = tether(&a, &[args.as_slice(), &[path_a]].concat());
        assert_eq!(refused.status.code(), Some(2), "{}", all_output(&refused));
        assert!(
            stdout(&refused).contains("--dangerous-override-ownership"),
            "{}",
            all_output(&refused)
        );
        assert_eq!(part_of(&client, &ns, "shared").await, Some(applyset_of(&b)));
    }

    // Taken only with the dangerous flag.
    let taken = tether(&a, &["apply", "--dangerous-override-ownership", path_a]);
    assert_eq!(taken.status.code(), Some(0), "{}", all_output(&taken));
    assert_eq!(part_of(&client, &ns, "shared").await, Some(applyset_of(&a)));

    // A drops the shared models and prunes: it adopted them, so it releases them; B's
    // objects and the namespace stay.
    repo_a.remove("shared.yaml");
    let pruned = tether(&a, &["apply", "--prune", path_a]);
    assert_eq!(pruned.status.code(), Some(0), "{}", all_output(&pruned));
    let shared = live_config_map(&client, &ns, "shared").await;
    let shared = shared.expect("B's object is not deleted");
    let labels = shared.metadata.labels.unwrap_or_default();
    assert!(!labels.contains_key(PART_OF_LABEL), "released: {labels:?}");
    assert!(live_config_map(&client, &ns, "only-b").await.is_some());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    assert!(namespaces.get_opt(&ns).await.unwrap().is_some());
}

#[tokio::test]
async fn an_adopted_namespace_with_someone_elses_workloads_is_released_not_deleted() {
    let client = crate::harness::cluster().client().await;
    let (_, ns, inventory) = setup("adopted-namespace").await;
    // Someone else's namespace and Deployment.
    let team = format!("team-{ns}").chars().take(63).collect::<String>();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut namespace = Namespace::default();
    namespace.metadata.name = Some(team.clone());
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    let deployments = someone_elses_deployment(&client, &team).await;

    let repo = Repo::new(&[
        ("base.yaml", &base(&ns)),
        ("team.yaml", &format!("kind: TrustDomain\nname: {team}\n")),
    ]);
    let path = repo.path().to_str().unwrap();
    let adopted = tether(&inventory, &["apply", path]);
    assert_eq!(adopted.status.code(), Some(0), "{}", all_output(&adopted));
    assert!(
        stdout(&adopted).contains("configured"),
        "{}",
        all_output(&adopted)
    );

    repo.remove("team.yaml");
    let diff = stdout(&tether(&inventory, &["diff", path]));
    assert!(
        diff.contains(&format!("release (with --prune) Namespace {team}")),
        "{diff}"
    );
    let foreign = not_created_here(&diff);
    assert!(
        foreign.contains(&format!("Deployment {team}/theirs")),
        "{diff}"
    );
    let pruned = tether(&inventory, &["apply", "--prune", path]);
    assert_eq!(pruned.status.code(), Some(0), "{}", all_output(&pruned));
    let kept = namespaces.get_opt(&team).await.unwrap().expect("kept");
    assert!(
        kept.metadata.deletion_timestamp.is_none(),
        "not being deleted"
    );
    assert!(deployments.get_opt("theirs").await.unwrap().is_some());
}

#[tokio::test]
async fn a_resource_instance_naming_an_inventory_record_is_refused() {
    let (client, ns, inventory) = setup("inventory-record").await;
    let victim = format!("{inventory}-victim");
    let repo_b = Repo::new(&[
        ("base.yaml", &base(&ns)),
        ("cm.yaml", &config_map("b-data", &ns, "b")),
    ]);
    let path_b = repo_b.path().to_str().unwrap();
    assert_eq!(tether(&victim, &["apply", path_b]).status.code(), Some(0));

    for (name, why) in [
        (
            record_name(&victim),
            "reserved for tether's inventory records",
        ),
        // A name of the reserved kind no inventory uses yet is refused all the same.
        (
            "tether-inventory-someday".to_string(),
            "reserved for tether's inventory records",
        ),
    ] {
        let overwrite = format!(
            "kind: KubernetesResourceInstance\nname: overwrite\nresource_definition: |\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: {name}\n    namespace: default\n  data:\n    objects: \"\"\n"
        );
        let repo_a = Repo::new(&[
            ("base.yaml", "kind: KubernetesService\nname: kubernetes\n"),
            ("overwrite.yaml", &overwrite),
        ]);
        let refused = tether(&inventory, &["apply", repo_a.path().to_str().unwrap()]);
        assert_eq!(refused.status.code(), Some(2), "{}", all_output(&refused));
        assert!(stdout(&refused).contains(why), "{}", all_output(&refused));
    }
    // B's inventory is intact: its diff still works and shows no change.
    let diff = tether(&victim, &["diff", path_b]);
    assert_eq!(diff.status.code(), Some(0), "{}", all_output(&diff));
    let record: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let data = record
        .get(&record_name(&victim))
        .await
        .unwrap()
        .data
        .unwrap_or_default();
    assert!(data["objects"].contains("b-data"), "{data:?}");
    assert!(
        record
            .get_opt("tether-inventory-someday")
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn a_config_map_named_like_its_inventory_is_a_model_like_any_other() {
    // A Source `web` in namespace `web` once kept its record in ConfigMap `web/web`,
    // and refused a model's own ConfigMap `web`.
    let (client, ns, inventory) = setup("named-like-inventory").await;
    let repo = Repo::new(&[
        ("base.yaml", &base(&ns)),
        ("cm.yaml", &config_map(&inventory, &ns, "the user's")),
    ]);
    let path = repo.path().to_str().unwrap();
    let applied = tether(&inventory, &["apply", path, "--inventory-namespace", &ns]);
    assert_eq!(applied.status.code(), Some(0), "{}", all_output(&applied));
    let theirs = live_config_map(&client, &ns, &inventory).await.unwrap();
    assert_eq!(theirs.data.unwrap_or_default()["key"], "the user's");
    let heads: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let head = heads
        .get(&format!("tether-inventory-{inventory}"))
        .await
        .unwrap();
    assert!(
        head.data.unwrap_or_default()["objects"]
            .contains(&format!("v1 ConfigMap {ns} {inventory} ")),
        "the inventory records the user's ConfigMap"
    );
    // Pruned like any other object the inventory made.
    repo.remove("cm.yaml");
    let pruned = tether(
        &inventory,
        &["apply", "--prune", path, "--inventory-namespace", &ns],
    );
    assert_eq!(pruned.status.code(), Some(0), "{}", all_output(&pruned));
    assert!(live_config_map(&client, &ns, &inventory).await.is_none());
    assert!(
        heads
            .get_opt(&format!("tether-inventory-{inventory}"))
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn a_record_kept_under_the_inventorys_own_name_moves_to_the_reserved_name_without_a_gap() {
    let (client, ns, inventory) = setup("moved-record").await;
    let repo = Repo::new(&[
        ("base.yaml", &base(&ns)),
        ("keep.yaml", &config_map("keep", &ns, "k")),
        ("gone.yaml", &config_map("gone", &ns, "g")),
    ]);
    let path = repo.path().to_str().unwrap();
    assert_eq!(tether(&inventory, &["apply", path]).status.code(), Some(0));
    // Make the record what a tether before reserved names left: ConfigMap `<inventory>`
    // with the same labels and lines, and no head.
    let records: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let head = records.get(&record_name(&inventory)).await.unwrap();
    let mut old = ConfigMap::default();
    old.metadata.name = Some(inventory.clone());
    old.metadata.labels = head.metadata.labels.clone();
    old.data = head.data.clone();
    records.create(&PostParams::default(), &old).await.unwrap();
    records
        .delete(&record_name(&inventory), &Default::default())
        .await
        .unwrap();

    // Read before any write: the plan knows what the old record holds.
    repo.remove("gone.yaml");
    let diff = tether(&inventory, &["diff", path]);
    assert!(
        stdout(&diff).contains("gone") && !stdout(&diff).contains("does not exist, but"),
        "{}",
        all_output(&diff)
    );
    // The first apply moves the record and prunes what only the old record held.
    let applied = tether(&inventory, &["apply", "--prune", path]);
    assert_eq!(applied.status.code(), Some(0), "{}", all_output(&applied));
    assert!(
        live_config_map(&client, &ns, "gone").await.is_none(),
        "pruned"
    );
    assert!(live_config_map(&client, &ns, "keep").await.is_some());
    assert!(
        records.get_opt(&inventory).await.unwrap().is_none(),
        "the old record is gone"
    );
    let head = records.get(&record_name(&inventory)).await.unwrap();
    let objects = head.data.unwrap_or_default()["objects"].clone();
    assert!(objects.contains(&format!(" {ns} keep ")), "{objects}");
    assert!(!objects.contains(&format!(" {ns} gone ")), "{objects}");

    // A ConfigMap of the inventory's name that is not tether's is neither read as the
    // record nor removed.
    let mut theirs = ConfigMap::default();
    theirs.metadata.name = Some(inventory.clone());
    theirs.data = Some([("objects".to_string(), format!("v1 ConfigMap {ns} keep\n"))].into());
    records
        .create(&PostParams::default(), &theirs)
        .await
        .unwrap();
    let again = tether(&inventory, &["apply", "--prune", path]);
    assert_eq!(again.status.code(), Some(0), "{}", all_output(&again));
    assert!(records.get_opt(&inventory).await.unwrap().is_some());
    assert!(live_config_map(&client, &ns, "keep").await.is_some());
}

#[tokio::test]
async fn a_same_name_object_made_after_a_killed_prune_survives_the_next_prune() {
    let (client, ns, inventory) = setup("replaced-object").await;
    let repo = Repo::new(&[
        ("base.yaml", &base(&ns)),
        ("keep.yaml", &config_map("keep", &ns, "k")),
        ("reused.yaml", &config_map("reused", &ns, "tether's")),
    ]);
    let path = repo.path().to_str().unwrap();
    assert_eq!(tether(&inventory, &["apply", path]).status.code(), Some(0));

    // A prune deleted it and was killed before writing the inventory; then someone
    // else made an object of that name and copied tether's labels onto it.
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    api.delete("reused", &Default::default()).await.unwrap();
    crate::harness::eventually(std::time::Duration::from_secs(10), || async {
        api.get_opt("reused").await.unwrap().is_none()
    })
    .await;
    let mut theirs = ConfigMap::default();
    theirs.metadata.name = Some("reused".into());
    theirs.metadata.labels = Some(ownership_labels(&applyset_of(&inventory)));
    theirs.data = Some([("key".to_string(), "someone else's".to_string())].into());
    api.create(&PostParams::default(), &theirs).await.unwrap();

    repo.remove("reused.yaml");
    let pruned = tether(&inventory, &["apply", "--prune", path]);
    assert_eq!(pruned.status.code(), Some(0), "{}", all_output(&pruned));
    assert!(
        stdout(&pruned).contains("0 pruned"),
        "{}",
        all_output(&pruned)
    );
    let survivor = api.get("reused").await.unwrap();
    assert_eq!(
        survivor.data.unwrap_or_default()["key"],
        "someone else's",
        "not deleted"
    );
    let record: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let data = record
        .get(&record_name(&inventory))
        .await
        .unwrap()
        .data
        .unwrap_or_default();
    assert!(
        !data["objects"].contains(" reused "),
        "the stale entry is dropped: {}",
        data["objects"]
    );
}

#[tokio::test]
async fn concurrent_applies_of_one_inventory_never_lose_an_entry() {
    let (client, ns, inventory) = setup("concurrent-applies").await;
    // The rounds share the test's namespace, which none of their inventories manages.
    let base = format!(
        "kind: KubernetesService\nname: kubernetes\n---\nkind: TrustDomain\nname: {ns}\nxos_managed: false\n"
    );
    // An older and a newer commit of one repository: some objects in both, some in one.
    let commit = |round: usize, only: &str| {
        let repo = Repo::new(&[("base.yaml", &base)]);
        for i in 0..5 {
            let name = format!("r{round}-shared-{i}");
            repo.write(&format!("{name}.yaml"), &config_map(&name, &ns, "same"));
        }
        for i in 0..10 {
            let name = format!("r{round}-{only}-{i}");
            repo.write(&format!("{name}.yaml"), &config_map(&name, &ns, only));
        }
        repo
    };
    let labelled: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let records: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let seed = Repo::new(&[
        ("base.yaml", &base),
        ("seed.yaml", &config_map("seed", &ns, "seed")),
    ]);
    for round in 0..20 {
        // Each round its own inventory, which exists before the two applies start.
        let inventory = format!("{inventory}-r{round}");
        let seed_name = format!("r{round}-seed");
        seed.write("seed.yaml", &config_map(&seed_name, &ns, "seed"));
        let first = tether(&inventory, &["apply", seed.path().to_str().unwrap()]);
        assert_eq!(first.status.code(), Some(0), "{}", all_output(&first));
        let (older, newer) = (commit(round, "older"), commit(round, "newer"));
        let runs: Vec<_> = [&older, &newer]
            .into_iter()
            .map(|repo| {
                let path = repo.path().to_str().unwrap().to_string();
                let inventory = inventory.clone();
                std::thread::spawn(move || tether(&inventory, &["apply", &path]))
            })
            .collect();
        for run in runs {
            let output = run.join().unwrap();
            assert_eq!(
                output.status.code(),
                Some(0),
                "round {round}: {}",
                all_output(&output)
            );
        }
        let applyset = applyset_of(&inventory);
        let selector =
            kube::api::ListParams::default().labels(&format!("{PART_OF_LABEL}={applyset}"));
        let names: Vec<String> = labelled
            .list_metadata(&selector)
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|m| m.metadata.name)
            .collect();
        assert_eq!(names.len(), 26, "round {round}: {names:?}");
        let recorded = records
            .get(&record_name(&inventory))
            .await
            .unwrap()
            .data
            .unwrap_or_default();
        let missing: Vec<&String> = names
            .iter()
            .filter(|name| !recorded["objects"].contains(&format!(" {ns} {name} ")))
            .collect();
        assert!(
            missing.is_empty(),
            "round {round}: labelled but not in the inventory: {missing:?}"
        );
    }
}

#[tokio::test]
async fn sources_that_should_stop_a_run_stop_it_and_change_nothing() {
    let (client, ns, inventory) = setup("loud-sources").await;
    let repo = Repo::new(&[]);
    let work = repo.path().join("work");
    std::fs::create_dir_all(work.join("models")).unwrap();
    crate::reconcile::git(repo.path(), &["init", "-q", "-b", "main", "work"]);
    std::fs::write(work.join("models/base.yaml"), base(&ns)).unwrap();
    std::fs::write(
        work.join("models/cm.yaml"),
        config_map("settings", &ns, "v1"),
    )
    .unwrap();
    crate::reconcile::git(&work, &["add", "-A"]);
    crate::reconcile::git(&work, &["commit", "-q", "-m", "v1"]);
    std::fs::write(
        work.join("models/cm.yaml"),
        config_map("settings", &ns, "v2"),
    )
    .unwrap();
    crate::reconcile::git(&work, &["commit", "-q", "-am", "v2"]);
    crate::reconcile::git(&work, &["branch", "feature"]);
    crate::reconcile::git(
        repo.path(),
        &["clone", "-q", "--bare", "work", "remote.git"],
    );
    let url = format!("file://{}", repo.path().join("remote.git").display());
    let cache = repo.path().join("cache");
    let from_git = |reference: &str| {
        tether(
            &inventory,
            &[
                "apply",
                "--repo",
                &url,
                "--ref",
                reference,
                "--cache-dir",
                cache.to_str().unwrap(),
                "models",
            ],
        )
    };
    let applied = from_git("feature");
    assert_eq!(applied.status.code(), Some(0), "{}", all_output(&applied));

    // Someone changes the value by hand; no refused run may put it back.
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let hand = serde_json::json!({"data": {"key": "by hand"}});
    api.patch(
        "settings",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&hand),
    )
    .await
    .unwrap();
    let by_hand = || async {
        live_config_map(&client, &ns, "settings")
            .await
            .and_then(|c| c.data)
            .unwrap_or_default()["key"]
            .clone()
    };

    // A branch deleted at the remote is an error, not the commit the cache holds.
    crate::reconcile::git(
        &repo.path().join("remote.git"),
        &["branch", "-D", "feature"],
    );
    let deleted = from_git("feature");
    assert_eq!(deleted.status.code(), Some(2), "{}", all_output(&deleted));
    assert!(
        all_output(&deleted).contains("has no branch, tag or commit \"feature\""),
        "{}",
        all_output(&deleted)
    );
    assert_eq!(by_hand().await, "by hand");

    // A revision expression is not a reference.
    let expression = from_git("main~1");
    assert_eq!(
        expression.status.code(),
        Some(2),
        "{}",
        all_output(&expression)
    );
    assert!(
        all_output(&expression).contains("is not a branch, a tag or a full commit id"),
        "{}",
        all_output(&expression)
    );
    assert_eq!(by_hand().await, "by hand");

    // A prune of a source that renders nothing (a wrong path) is refused.
    let empty = Repo::new(&[("base.yaml", "kind: KubernetesService\nname: kubernetes\n")]);
    let refused = tether(
        &inventory,
        &["apply", "--prune", empty.path().to_str().unwrap()],
    );
    assert_eq!(refused.status.code(), Some(2), "{}", all_output(&refused));
    assert!(
        all_output(&refused).contains("--allow-empty"),
        "{}",
        all_output(&refused)
    );
    assert!(live_config_map(&client, &ns, "settings").await.is_some());

    // A deleted inventory is reported when objects still carry its labels.
    let records: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    records
        .delete(&record_name(&inventory), &Default::default())
        .await
        .unwrap();
    let models = Repo::new(&[
        ("base.yaml", &base(&ns)),
        ("cm.yaml", &config_map("settings", &ns, "v2")),
    ]);
    let diff = tether(&inventory, &["diff", models.path().to_str().unwrap()]);
    assert!(
        stdout(&diff).contains(&format!(
            "warning: the inventory default/{inventory} does not exist, but"
        )),
        "{}",
        all_output(&diff)
    );
}

#[tokio::test]
async fn permanent_errors_say_what_to_fix_in_words() {
    let (_, ns, inventory) = setup("permanent-errors").await;
    let repo = Repo::new(&[
        ("base.yaml", &base(&ns)),
        ("cm.yaml", &config_map("settings", &ns, "v1")),
    ]);
    let path = repo.path().to_str().unwrap();
    let missing_namespace = crate::reconcile::tether(
        &inventory,
        &["apply", "--inventory-namespace", "no-such-namespace", path],
    );
    let text = all_output(&missing_namespace);
    assert_eq!(missing_namespace.status.code(), Some(2), "{text}");
    assert!(text.contains("create it, or pass"), "{text}");
    assert_eq!(text.matches("not found").count(), 1, "said once: {text}");
    assert!(!text.contains("run it again"), "{text}");
    assert!(!text.contains("Status {"), "no raw structures: {text}");

    let bad_name = crate::reconcile::tether("Not_A_Name", &["apply", path]);
    let text = all_output(&bad_name);
    assert_eq!(bad_name.status.code(), Some(2), "{text}");
    assert!(!text.contains("run it again"), "{text}");
    assert!(!text.contains("Status {"), "no raw structures: {text}");
}

#[tokio::test]
async fn a_namespace_tether_made_is_kept_while_it_holds_someone_elses_objects() {
    let client = crate::harness::cluster().client().await;
    let (_, ns, inventory) = setup("namespace-contents").await;
    let team = format!("made-{ns}").chars().take(63).collect::<String>();
    let repo = Repo::new(&[
        ("base.yaml", &base(&ns)),
        ("team.yaml", &format!("kind: TrustDomain\nname: {team}\n")),
        ("cm.yaml", &config_map("settings", &team, "ours")),
    ]);
    let path = repo.path().to_str().unwrap();
    let created = tether(&inventory, &["apply", path]);
    assert_eq!(created.status.code(), Some(0), "{}", all_output(&created));
    // Someone else puts a Deployment in it.
    let deployments = someone_elses_deployment(&client, &team).await;

    repo.remove("team.yaml");
    repo.remove("cm.yaml");
    let diff = stdout(&tether(&inventory, &["diff", path]));
    assert!(
        diff.contains(&format!("delete (with --prune) Namespace {team}")),
        "{diff}"
    );
    let foreign = not_created_here(&diff);
    assert!(
        foreign.contains(&format!("Deployment {team}/theirs")),
        "{diff}"
    );
    assert!(
        !foreign.contains("ConfigMap"),
        "the ConfigMap is tether's: {diff}"
    );
    let markdown = stdout(&tether(&inventory, &["diff", "-o", "markdown", path]));
    assert!(markdown.contains("1 Deployment"), "{markdown}");

    let kept = tether(&inventory, &["apply", "--prune", path]);
    assert_eq!(kept.status.code(), Some(2), "{}", all_output(&kept));
    assert!(
        stdout(&kept).contains("--dangerous-delete-with-foreign-objects"),
        "{}",
        all_output(&kept)
    );
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let live = namespaces.get(&team).await.unwrap();
    assert!(live.metadata.deletion_timestamp.is_none(), "not deleted");
    assert!(deployments.get_opt("theirs").await.unwrap().is_some());

    // The flag's earlier name still works.
    let forced = tether(
        &inventory,
        &[
            "apply",
            "--prune",
            "--dangerous-delete-namespaces-with-foreign-objects",
            path,
        ],
    );
    assert_eq!(forced.status.code(), Some(0), "{}", all_output(&forced));
    let gone = namespaces.get_opt(&team).await.unwrap();
    assert!(
        gone.is_none_or(|n| n.metadata.deletion_timestamp.is_some()),
        "deleted when told"
    );
}

#[tokio::test]
async fn a_definition_tether_made_is_kept_while_someone_else_has_custom_resources_of_it() {
    let (_, ns, inventory) = setup("definition-contents").await;
    let group = format!("{ns}.tether.dev");
    let gadget = |name: &str| {
        format!(
            "apiVersion: {group}/v1\nkind: Gadget\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  size: 1\n"
        )
    };
    let definition = format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: gadgets.{group}\nspec:\n  group: {group}\n  scope: Namespaced\n  names: {{plural: gadgets, singular: gadget, kind: Gadget}}\n  versions:\n    - name: v1\n      served: true\n      storage: true\n      schema:\n        openAPIV3Schema:\n          type: object\n          x-kubernetes-preserve-unknown-fields: true\n---\n{}",
        gadget("ours")
    );
    let indented: String = definition.lines().map(|l| format!("  {l}\n")).collect();
    let repo = Repo::new(&[
        ("base.yaml", &base(&ns)),
        (
            "gadgets.yaml",
            &format!(
                "kind: KubernetesResourceInstance\nname: gadgets\nresource_definition: |\n{indented}"
            ),
        ),
    ]);
    let path = repo.path().to_str().unwrap();
    let applied = tether(&inventory, &["apply", path]);
    assert_eq!(applied.status.code(), Some(0), "{}", all_output(&applied));
    // Someone else makes a Gadget with kubectl.
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), gadget("theirs")).unwrap();
    crate::discover::kubectl(&["apply", "-f", file.path().to_str().unwrap()]);

    // The definition's file is removed from Git: the diff names what its deletion
    // would take, and whose.
    repo.remove("gadgets.yaml");
    let diff = stdout(&tether(&inventory, &["diff", path]));
    assert!(
        diff.contains(&format!(
            "delete (with --prune) CustomResourceDefinition gadgets.{group}"
        )),
        "{diff}"
    );
    let foreign = not_created_here(&diff);
    assert!(foreign.contains(&format!("Gadget {ns}/theirs")), "{diff}");
    assert!(!foreign.contains("ours"), "that Gadget is tether's: {diff}");

    // Prune keeps the definition, and with it their Gadget.
    let kept = tether(&inventory, &["apply", "--prune", path]);
    assert_eq!(kept.status.code(), Some(2), "{}", all_output(&kept));
    assert!(
        stdout(&kept).contains("--dangerous-delete-with-foreign-objects"),
        "{}",
        all_output(&kept)
    );
    let get = |name: &str| {
        crate::discover::kubectl_command()
            .args(["get", &format!("gadgets.{group}"), name, "-n", &ns])
            .output()
            .unwrap()
    };
    assert!(get("theirs").status.success(), "their Gadget stays");
    assert!(
        !get("ours").status.success(),
        "tether's own Gadget is pruned"
    );

    // Once its owner deleted their Gadget, the definition goes.
    crate::discover::kubectl(&["delete", &format!("gadgets.{group}"), "theirs", "-n", &ns]);
    let pruned = tether(&inventory, &["apply", "--prune", path]);
    assert_eq!(pruned.status.code(), Some(0), "{}", all_output(&pruned));
    let definition = crate::discover::kubectl_command()
        .args([
            "get",
            "customresourcedefinition",
            &format!("gadgets.{group}"),
        ])
        .args(["-o", "jsonpath={.metadata.deletionTimestamp}"])
        .output()
        .unwrap();
    assert!(
        !definition.status.success() || !definition.stdout.is_empty(),
        "the definition is deleted: {}",
        all_output(&definition)
    );
}

#[tokio::test]
async fn acting_as_a_service_account_without_rights_is_refused_by_the_api_server() {
    let (client, ns, inventory) = setup("impersonation").await;
    let repo = Repo::new(&[
        ("base.yaml", &base(&ns)),
        ("cm.yaml", &config_map("settings", &ns, "v1")),
    ]);
    let path = repo.path().to_str().unwrap();
    let nobody = format!("system:serviceaccount:{ns}:nobody");
    let refused = tether(&inventory, &["apply", "--as", &nobody, path]);
    let text = all_output(&refused);
    assert_eq!(refused.status.code(), Some(2), "{text}");
    assert!(
        text.contains("forbidden"),
        "the API server's refusal: {text}"
    );
    assert!(text.contains(&nobody), "{text}");
    assert!(live_config_map(&client, &ns, "settings").await.is_none());
}

#[tokio::test]
async fn an_object_recorded_by_another_inventory_is_its_own_even_without_labels() {
    let (client, ns, inventory) = setup("recorded-elsewhere").await;
    let (a, b) = (format!("{inventory}-a"), format!("{inventory}-b"));
    let models = Repo::new(&[
        (
            "base.yaml",
            &format!(
                "kind: KubernetesService\nname: kubernetes\n---\nkind: TrustDomain\nname: {ns}\nxos_managed: false\n"
            ),
        ),
        ("shared.yaml", &config_map("shared", &ns, "same")),
    ]);
    let path = models.path().to_str().unwrap();
    let applied = tether(&b, &["apply", path]);
    assert_eq!(applied.status.code(), Some(0), "{}", all_output(&applied));
    // Someone strips tether's labels by hand; B still records the object.
    crate::discover::kubectl(&[
        "-n",
        &ns,
        "label",
        "configmap",
        "shared",
        &format!("{PART_OF_LABEL}-"),
        "app.kubernetes.io/managed-by-",
    ]);
    assert_owned_by(&a, path, "shared", &format!("default/{b}"));
    let refused = tether(&a, &["apply", path]);
    assert_eq!(refused.status.code(), Some(2), "{}", all_output(&refused));
    assert!(part_of(&client, &ns, "shared").await.is_none(), "untouched");
}

#[tokio::test]
async fn a_prune_killed_midway_leaves_no_entry_that_could_delete_a_newcomer() {
    let (client, ns, inventory) = setup("killed-prune").await;
    let repo = Repo::new(&[
        ("base.yaml", &base(&ns)),
        ("keep.yaml", &config_map("keep", &ns, "k")),
    ]);
    for i in 0..300 {
        repo.write(
            &format!("cm-{i}.yaml"),
            &config_map(&format!("cm-{i}"), &ns, "v"),
        );
    }
    let path = repo.path().to_str().unwrap().to_string();
    let applied = tether(&inventory, &["apply", &path]);
    assert_eq!(applied.status.code(), Some(0), "{}", all_output(&applied));
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let count = || async {
        api.list_metadata(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|m| {
                m.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("cm-"))
            })
            .count()
    };

    // The prune is killed once it has deleted some, not all.
    for i in 0..300 {
        repo.remove(&format!("cm-{i}.yaml"));
    }
    // 300 of 302 is beyond the deletion budget: this prune is meant.
    let mut prune = std::process::Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["apply", "--prune", "--deletion-budget", "off", &path])
        .args(["--inventory-name", &inventory])
        .arg("--kubeconfig")
        .arg(crate::harness::cluster().kubeconfig())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while count().await > 280 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    prune.kill().unwrap();
    prune.wait().unwrap();
    let left = count().await;
    assert!(
        left > 0 && left < 300,
        "killed midway through the prune ({left} left)"
    );
    let records: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let recorded = records
        .get(&record_name(&inventory))
        .await
        .unwrap()
        .data
        .unwrap_or_default();
    assert!(
        recorded["objects"].contains(&format!(" {ns} cm-0 ")),
        "the kill left the record as it was before the prune"
    );

    // Someone makes an object under a name the prune deleted, with tether's labels.
    let mut gone = None;
    for i in 0..300 {
        let name = format!("cm-{i}");
        if api.get_opt(&name).await.unwrap().is_none() {
            gone = Some(name);
            break;
        }
    }
    let gone = gone.expect("a deleted name");
    let mut theirs = ConfigMap::default();
    theirs.metadata.name = Some(gone.clone());
    theirs.metadata.labels = Some(ownership_labels(&applyset_of(&inventory)));
    api.create(&PostParams::default(), &theirs).await.unwrap();

    let finished = tether(
        &inventory,
        &["apply", "--prune", "--deletion-budget", "off", &path],
    );
    assert_eq!(finished.status.code(), Some(0), "{}", all_output(&finished));
    assert!(
        api.get_opt(&gone).await.unwrap().is_some(),
        "the newcomer survives"
    );
    assert_eq!(count().await, 1, "only the newcomer is left of cm-*");
    let recorded = records
        .get(&record_name(&inventory))
        .await
        .unwrap()
        .data
        .unwrap_or_default();
    assert!(
        !recorded["objects"].contains(" cm-"),
        "no stale entry is left: {}",
        recorded["objects"]
    );
}

/// Enough models of one kind that the plan lists their names rather than reading each
/// object (`reconcile::unlabelled`), in two namespaces, so the list is across the
/// cluster: what kubectl made first and what another inventory owns are still seen
/// among the new ones, never taken for new.
#[tokio::test]
async fn among_many_new_objects_those_others_made_are_still_theirs() {
    let (client, ns, inventory) = setup("many-new").await;
    let (a, b) = (format!("{inventory}-a"), format!("{inventory}-b"));
    let second = format!("{ns}-2");
    let repo_b = Repo::new(&[
        ("base.yaml", &base(&ns)),
        ("shared.yaml", &config_map("shared", &ns, "same")),
    ]);
    let applied = tether(&b, &["apply", repo_b.path().to_str().unwrap()]);
    assert_eq!(applied.status.code(), Some(0), "{}", all_output(&applied));
    for (name, value) in [("kubectl-other", "theirs"), ("kubectl-same", "same")] {
        crate::discover::kubectl(&[
            "-n",
            &ns,
            "create",
            "configmap",
            name,
            &format!("--from-literal=key={value}"),
        ]);
    }

    let mut files = vec![
        ("base.yaml".to_string(), base(&ns)),
        (
            "second.yaml".to_string(),
            format!("kind: TrustDomain\nname: {second}\n"),
        ),
    ];
    for name in ["shared", "kubectl-other", "kubectl-same"] {
        files.push((format!("{name}.yaml"), config_map(name, &ns, "same")));
    }
    for i in 0..20 {
        for namespace in [&ns, &second] {
            let name = format!("new-{i}");
            files.push((
                format!("{namespace}-{name}.yaml"),
                config_map(&name, namespace, "new"),
            ));
        }
    }
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(f, t)| (f.as_str(), t.as_str()))
        .collect();
    let repo_a = Repo::new(&files);
    let path = repo_a.path().to_str().unwrap();
    let diff = tether(&a, &["diff", "-o", "json", path]);
    assert_eq!(diff.status.code(), Some(1), "{}", all_output(&diff));
    let report: serde_json::Value = serde_json::from_str(&stdout(&diff)).unwrap();
    let action = |name: &str, namespace: &str| {
        let change = report["changes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name && c["namespace"] == namespace)
            .unwrap_or_else(|| panic!("{namespace}/{name} in {report}"));
        (
            change["action"].as_str().unwrap().to_string(),
            change.clone(),
        )
    };
    let (shared, change) = action("shared", &ns);
    assert_eq!(shared, "conflict", "{change}");
    assert_eq!(change["ownedBy"], format!("default/{b}"), "{change}");
    let (other, change) = action("kubectl-other", &ns);
    assert_eq!(other, "conflict", "kubectl's value differs: {change}");
    let (same, change) = action("kubectl-same", &ns);
    assert_eq!(
        same, "update",
        "adopted, only tether's marks added: {change}"
    );
    for i in 0..20 {
        for namespace in [&ns, &second] {
            assert_eq!(action(&format!("new-{i}"), namespace).0, "create");
        }
    }
    // The diff wrote nothing: kubectl's object keeps its value and has no owner.
    let kubectls = live_config_map(&client, &ns, "kubectl-other")
        .await
        .unwrap();
    assert_eq!(kubectls.data.unwrap()["key"], "theirs");
    assert_eq!(part_of(&client, &ns, "kubectl-other").await, None);
    assert!(live_config_map(&client, &ns, "new-0").await.is_none());
}

/// The digest a held prune names (`--approve-deletions sha256:…`).
fn held_digest(output: &str) -> String {
    let at = output
        .find("--approve-deletions sha256:")
        .unwrap_or_else(|| panic!("no digest in:\n{output}"));
    output[at + "--approve-deletions ".len()..]
        .split(|c: char| c == ',' || c.is_whitespace())
        .next()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn a_commit_that_drops_most_of_the_repository_prunes_nothing_until_exactly_its_deletions_are_approved()
 {
    let (client, ns, inventory) = setup("deletion-budget").await;
    let names: Vec<String> = (0..14).map(|i| format!("cm-{i:02}")).collect();
    let mut files = vec![("base.yaml".to_string(), base(&ns))];
    files.extend(
        names
            .iter()
            .map(|n| (format!("{n}.yaml"), config_map(n, &ns, "v1"))),
    );
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let repo = Repo::new(&files);
    let path = repo.path().to_str().unwrap();
    let applied = tether(&inventory, &["apply", path]);
    assert_eq!(applied.status.code(), Some(0), "{}", all_output(&applied));
    let live = |name: String| {
        let client = client.clone();
        let ns = ns.clone();
        async move { live_config_map(&client, &ns, &name).await.is_some() }
    };
    let count_live = || async {
        let mut n = 0;
        for name in &names {
            n += usize::from(live(name.clone()).await);
        }
        n
    };

    // A bad commit drops 12 of the 14 ConfigMaps: the diff says the prune would be held.
    for name in &names[..12] {
        repo.remove(&format!("{name}.yaml"));
    }
    let diff = stdout(&tether(&inventory, &["diff", path]));
    assert!(
        diff.contains("held: prune held: 12 of 15 recorded objects would be deleted, beyond the deletion budget (10 objects and 25% of the inventory)"),
        "{diff}"
    );
    let digest = held_digest(&diff);

    // apply --prune deletes nothing, says so once, and exits 2.
    let held = tether(&inventory, &["apply", "--prune", path]);
    let text = all_output(&held);
    assert_eq!(held.status.code(), Some(2), "{text}");
    assert!(text.contains("prune held: 12 of 15"), "{text}");
    assert_eq!(held_digest(&text), digest, "the diff's digest: {text}");
    assert!(!text.contains("failed: ConfigMap"), "said once: {text}");
    assert!(text.contains("0 pruned, 12 held, 0 failed"), "{text}");
    assert_eq!(count_live().await, 14, "nothing deleted");

    // Another digest approves nothing.
    let other = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
    let wrong = tether(
        &inventory,
        &["apply", "--prune", "--approve-deletions", other, path],
    );
    assert_eq!(wrong.status.code(), Some(2), "{}", all_output(&wrong));
    assert_eq!(count_live().await, 14);

    // The plan changes after the approval (one more file goes): the approval was for
    // the twelve, so the thirteen are held.
    repo.remove(&format!("{}.yaml", names[12]));
    let changed = tether(
        &inventory,
        &["apply", "--prune", "--approve-deletions", &digest, path],
    );
    let changed_text = all_output(&changed);
    assert_eq!(changed.status.code(), Some(2), "{changed_text}");
    assert!(
        changed_text.contains("prune held: 13 of 15"),
        "{changed_text}"
    );
    assert_eq!(count_live().await, 14);

    // Put back, the twelve approved by their digest are deleted, and only they.
    repo.write(
        &format!("{}.yaml", names[12]),
        &config_map(&names[12], &ns, "v1"),
    );
    let approved = tether(
        &inventory,
        &["apply", "--prune", "--approve-deletions", &digest, path],
    );
    assert_eq!(approved.status.code(), Some(0), "{}", all_output(&approved));
    assert!(
        stdout(&approved).contains("12 pruned"),
        "{}",
        all_output(&approved)
    );
    assert!(live(names[12].clone()).await && live(names[13].clone()).await);
    assert_eq!(count_live().await, 2);

    // A bound of the user's own, or none, lets a large prune through.
    repo.remove(&format!("{}.yaml", names[12]));
    repo.remove(&format!("{}.yaml", names[13]));
    let within = tether(
        &inventory,
        &["apply", "--prune", "--deletion-budget", "2,50%", path],
    );
    assert_eq!(within.status.code(), Some(0), "{}", all_output(&within));
    assert_eq!(count_live().await, 0);
    let refused = tether(
        &inventory,
        &["apply", "--prune", "--deletion-budget", "ten", path],
    );
    assert_eq!(refused.status.code(), Some(2), "{}", all_output(&refused));
    assert!(
        all_output(&refused).contains("\"ten\" is not COUNT,PERCENT% (such as 10,25%) or off"),
        "{}",
        all_output(&refused)
    );
}
