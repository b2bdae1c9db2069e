//! Argo CD's sync read as Argo CD reads it, against the local control plane (its
//! Jobs run by the node simulator): the objects of one plain file in the order of
//! their `argocd.argoproj.io/sync-wave`, each wave ready (by the repository's health
//! checks) before the next starts; and its hooks (`argocd.argoproj.io/hook`), made
//! anew by each apply that changes something, in their phase, with `generateName`,
//! deleted by their policy, never recorded or pruned.

use std::time::Duration;

use crate::discover::kubectl_command;
use crate::health::{apply_until_gadget_made, set_status, settings};
use crate::reconcile::{Repo, all_output, base, live_config_map, setup, tether, tether_command};

/// One file as an Argo CD repository has it: the definition in sync-wave -1, a
/// Gadget in 0 (no annotation), and a ConfigMap in 1 that must wait for it.
fn app(ns: &str, group: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: after\n  namespace: {ns}\n  annotations:\n    argocd.argoproj.io/sync-wave: \"1\"\ndata:\n  value: one\n---\n\
         apiVersion: {group}/v1\nkind: Gadget\nmetadata:\n  name: flux-capacitor\n  namespace: {ns}\nspec:\n  size: 1\n---\n\
         apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: gadgets.{group}\n  annotations:\n    argocd.argoproj.io/sync-wave: \"-1\"\n\
         spec:\n  group: {group}\n  scope: Namespaced\n  names: {{plural: gadgets, singular: gadget, kind: Gadget}}\n  versions:\n    - name: v1\n      served: true\n      storage: true\n      subresources: {{status: {{}}}}\n      schema:\n        openAPIV3Schema:\n          type: object\n          x-kubernetes-preserve-unknown-fields: true\n"
    )
}

#[tokio::test]
async fn a_later_sync_wave_of_one_file_waits_until_the_earlier_one_is_healthy() {
    let (client, ns, inventory) = setup("sync-waves").await;
    let group = format!("{ns}.tether.dev");
    let repo = Repo::new(&[
        (".tether.yaml", &settings(&group)),
        ("models.yaml", &base(&ns)),
        ("app.yaml", &app(&ns, &group)),
    ]);
    let path = repo.path().to_str().unwrap();

    // The plan shows the three sync-waves of the one file as three waves.
    let plan = tether_command(&inventory, &["diff", path])
        .output()
        .unwrap();
    let out = all_output(&plan);
    let order: Vec<usize> = ["CustomResourceDefinition gadgets", "Gadget ", "ConfigMap "]
        .iter()
        .map(|what| {
            out.find(what)
                .unwrap_or_else(|| panic!("{what} in:\n{out}"))
        })
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{out}");
    assert!(out.contains("wave 3"), "{out}");

    let apply = apply_until_gadget_made(&inventory, path, &group, &ns).await;
    // Sync-wave 1 waits while the Gadget of sync-wave 0 is not healthy.
    tokio::time::sleep(Duration::from_secs(2)).await;
    set_status(
        &group,
        &ns,
        r#"{"type":"Ready","status":"False","reason":"Charging"}"#,
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        live_config_map(&client, &ns, "after").await.is_none(),
        "sync-wave 1 started before sync-wave 0 was healthy"
    );
    set_status(
        &group,
        &ns,
        r#"{"type":"Ready","status":"True","reason":"Charged"}"#,
    );
    let applied = apply.wait_with_output().unwrap();
    let out = all_output(&applied);
    assert_eq!(applied.status.code(), Some(0), "{out}");
    let after = live_config_map(&client, &ns, "after").await.unwrap();
    assert_eq!(after.data.unwrap()["value"], "one");
}

/// Shapes of argocd-example-apps' `hooks/`: a migration Job before the sync (a
/// `generateName`, Argo CD's default policy), a smoke test after it (a name, deleted
/// once it succeeded), and a Pod that tells of a failed sync.
fn hooked_app(ns: &str, version: &str, migration_exit: &str) -> String {
    format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  generateName: db-migrate-\n  namespace: {ns}\n  annotations:\n    argocd.argoproj.io/hook: PreSync\n\
         spec:\n  backoffLimit: 0\n  template:\n    metadata:\n      annotations: {{sim.tether.dev/exit-code: \"{migration_exit}\"}}\n    spec:\n      restartPolicy: Never\n      containers: [{{name: migrate, image: busybox:1.36}}]\n---\n\
         apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n  namespace: {ns}\ndata:\n  version: \"{version}\"\n---\n\
         apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: smoke\n  namespace: {ns}\n  annotations:\n    argocd.argoproj.io/hook: PostSync\n    argocd.argoproj.io/hook-delete-policy: HookSucceeded\n\
         spec:\n  backoffLimit: 0\n  template:\n    spec:\n      restartPolicy: Never\n      containers: [{{name: smoke, image: busybox:1.36}}]\n---\n\
         apiVersion: v1\nkind: ConfigMap\nmetadata:\n  generateName: sync-failed-\n  namespace: {ns}\n  annotations:\n    argocd.argoproj.io/hook: SyncFail\ndata:\n  version: \"{version}\"\n"
    )
}

/// The names of the objects of `kind` in `ns`.
fn names(ns: &str, kind: &str) -> Vec<String> {
    let out = kubectl_command()
        .args([
            "get",
            kind,
            "-n",
            ns,
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn hooks_run_in_argo_cds_order_anew_on_each_change_and_a_failed_pre_sync_applies_nothing() {
    let (client, ns, inventory) = setup("argo-hooks").await;
    let repo = Repo::new(&[
        ("models.yaml", &base(&ns)),
        ("app.yaml", &hooked_app(&ns, "1", "0")),
    ]);
    let path = repo.path().to_str().unwrap();

    // Valid as written: a hook may have only a generateName.
    let validated = tether_command(&inventory, &["diff", path])
        .output()
        .unwrap();
    let out = all_output(&validated);
    assert!(out.contains(&format!("create ConfigMap {ns}/web")), "{out}");
    assert!(
        !out.contains("create Job"),
        "a hook is not one of the plan's objects: {out}"
    );
    assert!(
        out.contains("== hooks, made anew by the apply in their phase"),
        "{out}"
    );
    for hook in [
        format!("PreSync Job {ns}/db-migrate-*"),
        format!("PostSync Job {ns}/smoke"),
        format!("SyncFail ConfigMap {ns}/sync-failed-*"),
    ] {
        assert!(out.contains(&hook), "{hook} in:\n{out}");
    }

    let applied = tether(&inventory, &["apply", "--timeout", "60s", path]);
    let out = all_output(&applied);
    assert_eq!(applied.status.code(), Some(0), "{out}");
    let migrations: Vec<String> = names(&ns, "jobs")
        .into_iter()
        .filter(|n| n.starts_with("db-migrate-"))
        .collect();
    assert_eq!(migrations.len(), 1, "{out}");
    assert!(
        out.contains(&format!(
            "hook PreSync Job {ns}/{}: succeeded",
            migrations[0]
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("hook PostSync Job {ns}/smoke: succeeded, deleted")),
        "{out}"
    );
    assert!(!out.contains("SyncFail"), "{out}");
    let web = live_config_map(&client, &ns, "web").await.unwrap();
    assert_eq!(web.data.unwrap()["version"], "1");
    // The smoke test went by its policy; no SyncFail hook was made.
    assert!(!names(&ns, "jobs").contains(&"smoke".to_string()));
    assert!(
        !names(&ns, "configmaps")
            .iter()
            .any(|n| n.starts_with("sync-failed-")),
        "{out}"
    );

    // Nothing changed: no hook runs, and the migration Job is neither the plan's
    // nor pruned.
    let again = tether(&inventory, &["apply", "--prune", "--timeout", "60s", path]);
    let out = all_output(&again);
    assert_eq!(again.status.code(), Some(0), "{out}");
    assert!(!out.contains("hook "), "{out}");
    assert!(!out.contains("db-migrate"), "{out}");
    assert!(names(&ns, "jobs").contains(&migrations[0]), "{out}");

    // A change whose migration fails: the PreSync hook fails, nothing is applied, and
    // the SyncFail hook is made.
    repo.write("app.yaml", &hooked_app(&ns, "2", "3"));
    let failed = tether(&inventory, &["apply", "--timeout", "60s", path]);
    let out = all_output(&failed);
    assert_eq!(failed.status.code(), Some(2), "{out}");
    assert!(out.contains("hook PreSync Job "), "{out}");
    assert!(out.contains(": failed: "), "{out}");
    assert!(
        out.contains(&format!("hook SyncFail ConfigMap {ns}/sync-failed-")),
        "{out}"
    );
    let web = live_config_map(&client, &ns, "web").await.unwrap();
    assert_eq!(
        web.data.unwrap()["version"],
        "1",
        "applied after a failed PreSync hook"
    );
    let made = names(&ns, "jobs");
    assert_eq!(
        made.iter().filter(|n| n.starts_with("db-migrate-")).count(),
        2,
        "each apply makes its migration anew: {made:?}"
    );
    assert!(
        !made.contains(&"smoke".to_string()),
        "no PostSync after a failure"
    );
    let failed_marks: Vec<String> = names(&ns, "configmaps")
        .into_iter()
        .filter(|n| n.starts_with("sync-failed-"))
        .collect();
    assert_eq!(failed_marks.len(), 1);
}
