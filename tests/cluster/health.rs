//! Health checks as data against the control plane: a custom resource a wave waits
//! for, judged by the CEL expressions of the repository's `.tether.yaml` (Flux's
//! `healthCheckExprs` spelling), its status driven by the test as its controller
//! would; the apply goes on once the check says current, and stops at once when it
//! says failed. A Source's `spec.healthCheckExprs` holds its passes' waves the same
//! way.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::daemon::{
    Daemon, condition, condition_message, install_crd, kubectl_apply_text, source_yaml, status,
};
use crate::harness::eventually;
use crate::reconcile::{Repo, all_output, base, live_config_map, setup, tether, tether_command};
use tether_testkit::remote::Remote;

/// Flux's spelling, as a Flux user's Kustomization carries it.
pub fn settings(group: &str) -> String {
    format!(
        "healthCheckExprs:\n  - apiVersion: {group}/v1\n    kind: Gadget\n    current: status.?conditions.orValue([]).exists(c, c.type == 'Ready' && c.status == 'True')\n    failed: status.?conditions.orValue([]).exists(c, c.type == 'Ready' && c.status == 'False' && c.?reason.orValue('') == 'Broken')\n"
    )
}

/// The definition (with a status subresource) and a Gadget of `size`, and a
/// ConfigMap of `value` in a later wave, waiting for the Gadget.
fn models(ns: &str, group: &str, size: u32, value: &str) -> String {
    let gadgets = format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: gadgets.{group}\nspec:\n  group: {group}\n  scope: Namespaced\n  names: {{plural: gadgets, singular: gadget, kind: Gadget}}\n  versions:\n    - name: v1\n      served: true\n      storage: true\n      subresources: {{status: {{}}}}\n      schema:\n        openAPIV3Schema:\n          type: object\n          x-kubernetes-preserve-unknown-fields: true\n---\napiVersion: {group}/v1\nkind: Gadget\nmetadata:\n  name: flux-capacitor\n  namespace: {ns}\nspec:\n  size: {size}\n"
    );
    let indented: String = gadgets.lines().map(|l| format!("  {l}\n")).collect();
    format!(
        "{}---\nkind: KubernetesResourceInstance\nname: gadgets\nresource_definition: |\n{indented}---\nkind: KubernetesResourceInstance\nname: after\ndepends_on: [KubernetesResourceInstance/gadgets]\nresource_definition: |\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: after\n    namespace: {ns}\n  data:\n    value: \"{value}\"\n",
        base(ns)
    )
}

/// Sets the Gadget's status as its controller would, through the status subresource.
pub fn set_status(group: &str, ns: &str, condition: &str) {
    crate::discover::kubectl(&[
        "patch",
        &format!("gadgets.{group}"),
        "flux-capacitor",
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        &format!("{{\"status\":{{\"conditions\":[{condition}]}}}}"),
    ]);
}

/// `tether apply` started, once it made the Gadget (its wave's later ones wait).
pub async fn apply_until_gadget_made(
    inventory: &str,
    path: &str,
    group: &str,
    ns: &str,
) -> std::process::Child {
    let apply = tether_command(inventory, &["apply", "--timeout", "90s", path])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !gadget_exists(group, ns) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no Gadget made"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    apply
}

fn gadget_exists(group: &str, ns: &str) -> bool {
    crate::discover::kubectl_command()
        .args([
            "get",
            &format!("gadgets.{group}"),
            "flux-capacitor",
            "-n",
            ns,
        ])
        .output()
        .unwrap()
        .status
        .success()
}

#[tokio::test]
async fn a_wave_waits_for_a_custom_resource_until_its_health_check_says_current_and_stops_when_it_says_failed()
 {
    let (client, ns, inventory) = setup("health-cel").await;
    let group = format!("{ns}.tether.dev");
    let repo = Repo::new(&[
        (".tether.yaml", &settings(&group)),
        ("models.yaml", &models(&ns, &group, 1, "one")),
    ]);
    let path = repo.path().to_str().unwrap();

    // The apply makes the Gadget in wave 1 and waits for it before wave 2.
    let apply = apply_until_gadget_made(&inventory, path, &group, &ns).await;
    // Without status, and then with a Ready condition that is not True: still waiting.
    tokio::time::sleep(Duration::from_secs(2)).await;
    set_status(
        &group,
        &ns,
        r#"{"type":"Ready","status":"False","reason":"Charging","message":"1.21 gigawatts needed"}"#,
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        live_config_map(&client, &ns, "after").await.is_none(),
        "wave 2 started before the Gadget was healthy"
    );
    set_status(
        &group,
        &ns,
        r#"{"type":"Ready","status":"True","reason":"Charged"}"#,
    );
    let applied = apply.wait_with_output().unwrap();
    assert_eq!(applied.status.code(), Some(0), "{}", all_output(&applied));
    let after = live_config_map(&client, &ns, "after").await.unwrap();
    assert_eq!(after.data.unwrap()["value"], "one");

    // The Gadget breaks; the next commit changes it and the ConfigMap after it. The
    // wave stops at once with the check's words and what the controller says, and
    // the ConfigMap keeps its value.
    set_status(
        &group,
        &ns,
        r#"{"type":"Ready","status":"False","reason":"Broken","message":"the capacitor is cracked"}"#,
    );
    repo.write("models.yaml", &models(&ns, &group, 2, "two"));
    let stopped = tether(&inventory, &["apply", "--timeout", "90s", path]);
    let out = all_output(&stopped);
    assert_eq!(stopped.status.code(), Some(2), "{out}");
    assert!(
        out.contains(&format!(
            "Gadget {ns}/flux-capacitor: health check failed: status.?conditions.orValue([]).exists(c, c.type == 'Ready' && c.status == 'False' && c.?reason.orValue('') == 'Broken'); Ready is False (Broken): the capacitor is cracked"
        )),
        "{out}"
    );
    assert!(
        out.contains("(needed by KubernetesResourceInstance/after)"),
        "{out}"
    );
    let after = live_config_map(&client, &ns, "after").await.unwrap();
    assert_eq!(after.data.unwrap()["value"], "one");
}

/// `spec.healthCheckExprs` of a Source, in Flux's spelling (a Kustomization's).
fn source_checks(group: &str, current: &str) -> String {
    format!(
        "  healthCheckExprs:\n    - apiVersion: {group}/v1\n      kind: Gadget\n      current: \"{current}\"\n"
    )
}

#[tokio::test]
async fn a_sources_health_checks_hold_its_wave_until_the_custom_resource_is_current() {
    install_crd();
    let (client, ns, _) = setup("health-source").await;
    let group = format!("{ns}.tether.dev");
    let remote = Remote::new(&[("models.yaml", &models(&ns, &group, 1, "one"))]);
    let daemon = Daemon::start(&["--sources", "--sources-namespace", &ns]);

    // A check that does not compile stalls the Source, naming the field.
    kubectl_apply_text(&source_yaml(
        "broken",
        &ns,
        &remote.url,
        &source_checks(&group, "status.phase =="),
    ));
    eventually(Duration::from_secs(30), || async {
        condition(&status(&ns, "broken"), "Ready") == Some(("False".into(), "InvalidSpec".into()))
    })
    .await;
    let said = condition_message(&status(&ns, "broken"), "Ready");
    assert!(
        said.starts_with(
            "spec.healthCheckExprs[0].current: the current expression of Gadget does not compile"
        ),
        "{said}"
    );
    assert!(!gadget_exists(&group, &ns), "nothing applied");

    // The Source's check: the ConfigMap's wave waits for the Gadget to be Ready.
    kubectl_apply_text(&source_yaml(
        "web",
        &ns,
        &remote.url,
        &format!(
            "  interval: 2s\n  timeout: 60s\n{}",
            source_checks(
                &group,
                "status.?conditions.orValue([]).exists(c, c.type == 'Ready' && c.status == 'True')"
            )
        ),
    ));
    eventually(Duration::from_secs(30), || async {
        gadget_exists(&group, &ns)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        live_config_map(&client, &ns, "after").await.is_none(),
        "the wave after the Gadget started before the Source's check said current"
    );
    set_status(
        &group,
        &ns,
        r#"{"type":"Ready","status":"True","reason":"Charged"}"#,
    );
    eventually(Duration::from_secs(60), || async {
        live_config_map(&client, &ns, "after").await.is_some()
            && condition(&status(&ns, "web"), "Ready")
                == Some(("True".into(), "ReconciliationSucceeded".into()))
    })
    .await;
    drop(daemon);
}
