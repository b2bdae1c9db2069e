//! Fields other controllers own, left alone, against the control plane: a real
//! HorizontalPodAutoscaler (the controller-manager's) scales a Deployment tether
//! applied, and neither the diff nor the apply fights it; a repository's own rule
//! (Argo CD's `ignoreDifferences` spelling) leaves a field someone else sets.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;

use crate::reconcile::{Repo, all_output, base, live_config_map, setup, stdout, tether};

/// A Deployment of one replica in Git, an autoscaler that wants at least three, and a
/// ConfigMap whose counter someone else keeps.
fn models(ns: &str, image: &str, counter: &str) -> String {
    format!(
        "{}---\nkind: KubernetesResourceInstance\nname: web\nresource_definition: |\n  apiVersion: apps/v1\n  kind: Deployment\n  metadata:\n    name: web\n    namespace: {ns}\n  spec:\n    replicas: 1\n    selector:\n      matchLabels: {{app: web}}\n    template:\n      metadata:\n        labels: {{app: web}}\n      spec:\n        containers:\n          - name: web\n            image: {image}\n            resources:\n              requests: {{cpu: 10m}}\n  ---\n  apiVersion: autoscaling/v2\n  kind: HorizontalPodAutoscaler\n  metadata:\n    name: web\n    namespace: {ns}\n  spec:\n    scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: web}}\n    minReplicas: 3\n    maxReplicas: 5\n    metrics:\n      - type: Resource\n        resource:\n          name: cpu\n          target: {{type: Utilization, averageUtilization: 80}}\n---\nkind: KubernetesResourceInstance\nname: seed\nresource_definition: |\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: seed\n    namespace: {ns}\n  data:\n    counter: \"{counter}\"\n    greeting: hello\n",
        base(ns)
    )
}

const RULES: &str =
    "ignoreDifferences:\n  - kind: ConfigMap\n    name: seed\n    jsonPointers: [/data/counter]\n";

async fn replicas(deployments: &Api<Deployment>) -> i32 {
    let web = deployments.get("web").await.unwrap();
    web.spec.unwrap().replicas.unwrap()
}

#[tokio::test]
async fn a_deployment_an_autoscaler_scales_is_neither_corrected_nor_in_conflict_and_the_diff_says_ignored()
 {
    let (client, ns, inventory) = setup("ignore-hpa").await;
    let repo = Repo::new(&[
        (".tether.yaml", RULES),
        ("models.yaml", &models(&ns, "nginx:1.27", "0")),
    ]);
    let path = repo.path().to_str().unwrap();
    let applied = tether(&inventory, &["apply", path]);
    assert!(applied.status.success(), "{}", all_output(&applied));

    // The controller-manager's autoscaler takes the Deployment to its minimum.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let started = Instant::now();
    while replicas(&deployments).await != 3 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the autoscaler did not scale the Deployment"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Someone else keeps the seed's counter.
    crate::discover::kubectl(&[
        "patch",
        "configmap",
        "seed",
        "-n",
        &ns,
        "--type",
        "merge",
        "-p",
        r#"{"data":{"counter":"41"}}"#,
    ]);

    // The diff changes nothing, and says what it left alone.
    let diff = tether(&inventory, &["diff", path]);
    let said = stdout(&diff);
    assert_eq!(diff.status.code(), Some(0), "{}", all_output(&diff));
    assert!(
        said.contains("0 to update, 0 to delete, 0 in conflict"),
        "{said}"
    );
    assert!(said.contains("ignored: 2 fields"), "{said}");
    assert!(
        said.contains(&format!(
            "unchanged Deployment {ns}/web (KubernetesResourceInstance/web, models.yaml)\n  ignored: 1 field (/spec/replicas), left to the managers that own them"
        )),
        "{said}"
    );
    assert!(said.contains("ignored: 1 field (/data/counter)"), "{said}");
    let json = tether(&inventory, &["diff", "--output", "json", path]);
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let web = report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "Deployment")
        .unwrap();
    assert_eq!(web["ignored"], serde_json::json!(["/spec/replicas"]));

    // A commit that changes the Deployment's image and the seed's greeting: applied,
    // with the autoscaler's replicas and the other party's counter left as they are.
    repo.write(
        "models.yaml",
        &models(&ns, "nginx:1.28", "0").replace("greeting: hello", "greeting: hi"),
    );
    let changed = tether(&inventory, &["apply", path]);
    let out = all_output(&changed);
    assert!(changed.status.success(), "{out}");
    assert!(
        stdout(&changed).contains("0 created, 2 configured"),
        "{out}"
    );
    assert_eq!(replicas(&deployments).await, 3);
    let web = deployments.get("web").await.unwrap();
    let image = web.spec.unwrap().template.spec.unwrap().containers[0]
        .image
        .clone();
    assert_eq!(image.as_deref(), Some("nginx:1.28"));
    let seed = live_config_map(&client, &ns, "seed")
        .await
        .unwrap()
        .data
        .unwrap();
    assert_eq!(
        (seed["counter"].as_str(), seed["greeting"].as_str()),
        ("41", "hi")
    );

    // No correction: the next diff is as quiet as the first, and the replicas are the
    // autoscaler's field alone.
    let again = tether(&inventory, &["diff", path]);
    assert_eq!(again.status.code(), Some(0), "{}", all_output(&again));
    let web = deployments.get("web").await.unwrap();
    let owners: Vec<String> = web
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0["f:spec"].get("f:replicas").is_some())
        })
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(owners, ["kube-controller-manager"], "{owners:?}");
}

#[test]
fn a_rule_whose_pointer_is_not_one_is_an_error_at_its_place_and_nothing_is_applied() {
    let repo = Repo::new(&[
        (
            ".tether.yaml",
            "ignoreDifferences:\n  - kind: ConfigMap\n    jsonPointers: [data.counter]\n",
        ),
        ("models.yaml", "kind: KubernetesService\nname: kubernetes\n"),
    ]);
    let out = tether("inv-ignore-bad", &["apply", repo.path().to_str().unwrap()]);
    let all = all_output(&out);
    assert_ne!(out.status.code(), Some(0), "{all}");
    let flat = all
        .replace('│', " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        flat.contains(".tether.yaml:3:20: ignoreDifferences: \"data.counter\" is not a JSON pointer to a field of a ConfigMap"),
        "{all}"
    );
}
