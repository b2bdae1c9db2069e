//! Shapes a user brings to a current cluster, which an old server could not take: a
//! chart that requires Kubernetes 1.25 or later with an `autoscaling/v2`
//! HorizontalPodAutoscaler, a `policy/v1` PodDisruptionBudget and a `batch/v1`
//! CronJob, rendered by Helm 3 and by Helm 4 with the server's real capabilities; a
//! CustomResourceDefinition too large for client-side apply's annotation (as
//! kube-prometheus-stack's are); a Kustomize overlay of HorizontalPodAutoscalers. Each
//! applied, its next diff clean, pruned.

use std::path::Path;
use std::process::Output;

use serde_json::Value;
use tether_testkit::tools::helm_tools;

use crate::generate::{assert_exit, live};
use crate::harness::cluster;
use crate::reconcile::{Repo, all_output, base, setup, stdout, tether_command};

/// tether with the pinned Kustomize and the given `helm`.
fn tether_with(helm: &Path, inventory: &str, args: &[&str]) -> Output {
    tether_command(inventory, args)
        .envs(helm_tools().env())
        .env("TETHER_HELM", helm)
        .output()
        .unwrap()
}

/// A chart for current Kubernetes only: its templates take their apiVersions from the
/// server's capabilities, as published charts do, and a ConfigMap records what Helm
/// was told of the server.
fn current_chart() -> Vec<(&'static str, &'static str)> {
    vec![
        (
            "current/Chart.yaml",
            "apiVersion: v2\nname: current\nversion: 1.0.0\nkubeVersion: \">=1.25.0-0\"\n",
        ),
        ("current/values.yaml", "replicas: 2\nmaxReplicas: 5\n"),
        (
            "current/templates/deployment.yaml",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  \
             replicas: {{ .Values.replicas }}\n  selector:\n    matchLabels: {app: web}\n  template:\n    \
             metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - name: web\n        \
             image: nginx:1.27\n        resources:\n          requests: {cpu: 10m}\n",
        ),
        (
            "current/templates/hpa.yaml",
            "{{- if .Capabilities.APIVersions.Has \"autoscaling/v2\" }}\napiVersion: autoscaling/v2\n\
             {{- else }}\napiVersion: autoscaling/v2beta2\n{{- end }}\nkind: HorizontalPodAutoscaler\n\
             metadata:\n  name: web\nspec:\n  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}\n  \
             minReplicas: {{ .Values.replicas }}\n  maxReplicas: {{ .Values.maxReplicas }}\n  metrics:\n  \
             - type: Resource\n    resource:\n      name: cpu\n      target: {type: Utilization, averageUtilization: 80}\n",
        ),
        (
            "current/templates/pdb.yaml",
            "{{- if .Capabilities.APIVersions.Has \"policy/v1/PodDisruptionBudget\" }}\napiVersion: policy/v1\n\
             {{- else }}\napiVersion: policy/v1beta1\n{{- end }}\nkind: PodDisruptionBudget\nmetadata:\n  name: web\n\
             spec:\n  minAvailable: 1\n  selector:\n    matchLabels: {app: web}\n",
        ),
        (
            "current/templates/cronjob.yaml",
            "apiVersion: batch/v1\nkind: CronJob\nmetadata:\n  name: report\nspec:\n  schedule: \"0 3 * * *\"\n  \
             timeZone: Etc/UTC\n  jobTemplate:\n    spec:\n      podReplacementPolicy: Failed\n      template:\n        \
             spec:\n          restartPolicy: OnFailure\n          containers:\n          - name: report\n            \
             image: busybox:1.36\n            command: [\"true\"]\n",
        ),
        (
            "current/templates/server.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: server\ndata:\n  \
             kubeVersion: {{ .Capabilities.KubeVersion.Version | quote }}\n  \
             hasHpaV2: {{ .Capabilities.APIVersions.Has \"autoscaling/v2\" | quote }}\n",
        ),
    ]
}

fn current_model(namespace: &str) -> String {
    format!("kind: HelmChart\nname: current\nchart: current\ntrust_domain: {namespace}\n")
}

#[tokio::test]
async fn a_chart_for_current_kubernetes_applies_with_helm_3_and_helm_4_diffs_clean_and_prunes() {
    for (name, helm) in [
        ("helm4", &helm_tools().helm),
        ("helm3", &helm_tools().helm3),
    ] {
        let (_, ns, inventory) = setup(&format!("current-{name}")).await;
        let repo = Repo::new(&current_chart());
        repo.write("models.yaml", &base(&ns));
        repo.write("current.yaml", &current_model(&ns));
        let path = repo.path().to_str().unwrap();

        let applied = tether_with(helm, &inventory, &["apply", path]);
        assert_exit(&applied, 0, &format!("{name}: apply"));
        assert_eq!(
            stdout(&applied),
            "5 created, 1 configured, 0 unchanged, 0 pruned, 0 failed\n",
            "{name}: {}",
            all_output(&applied)
        );
        // Helm was told of this server, not of a default one.
        let server = live("configmap", "server", &ns).expect("the chart's ConfigMap");
        assert_eq!(server["data"]["kubeVersion"], cluster().release(), "{name}");
        assert_eq!(server["data"]["hasHpaV2"], "true", "{name}");
        let hpa = live("horizontalpodautoscalers.v2.autoscaling", "web", &ns).expect("the HPA");
        assert_eq!(hpa["apiVersion"], "autoscaling/v2", "{name}");
        assert_eq!(hpa["spec"]["maxReplicas"], 5, "{name}");
        let pdb = live("poddisruptionbudget", "web", &ns).expect("the PDB");
        assert_eq!(pdb["spec"]["minAvailable"], 1, "{name}");
        let cronjob = live("cronjob", "report", &ns).expect("the CronJob");
        assert_eq!(cronjob["spec"]["timeZone"], "Etc/UTC", "{name}");
        assert_eq!(
            cronjob["spec"]["jobTemplate"]["spec"]["podReplacementPolicy"], "Failed",
            "{name}"
        );

        // Clean, with the Deployment's replicas left to the chart's autoscaler.
        let diff = tether_with(helm, &inventory, &["diff", path]);
        assert_exit(&diff, 0, &format!("{name}: diff after apply"));
        assert!(
            stdout(&diff).ends_with(
                "0 to create, 0 to update, 0 to delete, 0 in conflict, 6 unchanged, ignored: 1 field\n"
            ) && stdout(&diff).contains("ignored: 1 field (/spec/replicas)"),
            "{name}: {}",
            all_output(&diff)
        );

        // A changed value updates the HPA alone.
        repo.write(
            "current.yaml",
            &format!("{}values:\n  maxReplicas: 7\n", current_model(&ns)),
        );
        let changed = tether_with(helm, &inventory, &["apply", path]);
        assert_eq!(
            stdout(&changed),
            "0 created, 1 configured, 5 unchanged, 0 pruned, 0 failed\n",
            "{name}: {}",
            all_output(&changed)
        );
        let hpa = live("horizontalpodautoscalers.v2.autoscaling", "web", &ns).unwrap();
        assert_eq!(hpa["spec"]["maxReplicas"], 7, "{name}");

        // The chart's model removed: its objects are pruned, the namespace stays.
        repo.remove("current.yaml");
        let pruned = tether_with(helm, &inventory, &["apply", "--prune", path]);
        assert_eq!(
            stdout(&pruned),
            "0 created, 0 configured, 1 unchanged, 5 pruned, 0 failed\n",
            "{name}: {}",
            all_output(&pruned)
        );
        for (kind, name) in [
            ("deployment", "web"),
            ("horizontalpodautoscalers.v2.autoscaling", "web"),
            ("poddisruptionbudget", "web"),
            ("cronjob", "report"),
            ("configmap", "server"),
        ] {
            crate::harness::eventually(std::time::Duration::from_secs(30), || async {
                live(kind, name, &ns).is_none()
            })
            .await;
        }
    }
}

/// A CustomResourceDefinition of about 450 KiB of JSON, as kube-prometheus-stack's largest
/// are: many properties, each with a description.
fn large_definition(group: &str) -> String {
    let description = "A setting of the monitoring stack, described at the length upstream \
                       definitions describe theirs, so that the definition grows past what \
                       an annotation may hold. ";
    let mut properties = String::new();
    for i in 0..2000 {
        properties.push_str(&format!(
            "                setting{i}:\n                  type: string\n                  description: \"{description}{i}\"\n"
        ));
    }
    format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: monitors.{group}\n\
         spec:\n  group: {group}\n  scope: Namespaced\n  names: {{plural: monitors, singular: monitor, kind: Monitor}}\n  \
         versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        \
         type: object\n        properties:\n          spec:\n            type: object\n            properties:\n\
         {properties}"
    )
}

#[tokio::test]
async fn a_definition_larger_than_an_annotation_applies_server_side_diffs_clean_and_prunes() {
    let (_, ns, inventory) = setup("large-crd").await;
    let group = format!("{ns}.tether.dev");
    let definition = large_definition(&group);
    assert!(definition.len() > 300 * 1024, "{} bytes", definition.len());
    let repo = Repo::new(&[
        ("models.yaml", &base(&ns)),
        ("crds/monitors.yaml", &definition),
    ]);
    let path = repo.path().to_str().unwrap();

    // Client-side apply cannot take it: its last-applied annotation would be too long.
    let file = repo.path().join("crds/monitors.yaml");
    let client_side = crate::discover::kubectl_command()
        .args(["apply", "-f", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!client_side.status.success());
    assert!(
        String::from_utf8_lossy(&client_side.stderr).contains("Too long"),
        "{}",
        all_output(&client_side)
    );

    let applied = tether_with(&helm_tools().helm, &inventory, &["apply", path]);
    assert_exit(&applied, 0, "apply");
    assert_eq!(
        stdout(&applied),
        "1 created, 1 configured, 0 unchanged, 0 pruned, 0 failed\n",
        "{}",
        all_output(&applied)
    );
    let name = format!("monitors.{group}");
    let live_definition = crate::daemon::kubectl_ok(&["get", "crd", &name, "-o", "json"]);
    let live_definition: Value = serde_json::from_str(&live_definition).unwrap();
    let annotations = &live_definition["metadata"]["annotations"];
    assert!(
        annotations
            .get("kubectl.kubernetes.io/last-applied-configuration")
            .is_none(),
        "{annotations}"
    );
    let properties = &live_definition["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
        ["spec"]["properties"];
    assert_eq!(properties.as_object().map(serde_json::Map::len), Some(2000));

    let diff = tether_with(&helm_tools().helm, &inventory, &["diff", path]);
    assert_exit(&diff, 0, "diff after apply");
    assert!(
        stdout(&diff)
            .ends_with("0 to create, 0 to update, 0 to delete, 0 in conflict, 2 unchanged\n"),
        "{}",
        all_output(&diff)
    );

    repo.remove("crds/monitors.yaml");
    let pruned = tether_with(&helm_tools().helm, &inventory, &["apply", "--prune", path]);
    assert_eq!(
        stdout(&pruned),
        "0 created, 0 configured, 1 unchanged, 1 pruned, 0 failed\n",
        "{}",
        all_output(&pruned)
    );
    crate::harness::eventually(std::time::Duration::from_secs(30), || async {
        !crate::discover::kubectl_command()
            .args(["get", "crd", &name])
            .output()
            .unwrap()
            .status
            .success()
    })
    .await;
}

/// A base of a Deployment and an `autoscaling/v2` HPA; an overlay that renames and
/// widens them, as Flux's and podinfo's repositories keep them.
fn hpa_overlay(namespace: &str, max: u32) -> Vec<(String, String)> {
    vec![
        (
            "base/kustomization.yaml".into(),
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- deployment.yaml\n- hpa.yaml\n".into(),
        ),
        (
            "base/deployment.yaml".into(),
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: podinfo\nspec:\n  selector:\n    \
             matchLabels: {app: podinfo}\n  template:\n    metadata:\n      labels: {app: podinfo}\n    spec:\n      \
             containers:\n      - name: podinfod\n        image: ghcr.io/stefanprodan/podinfo:6.7.1\n        \
             resources:\n          requests: {cpu: 1m, memory: 16Mi}\n"
                .into(),
        ),
        (
            "base/hpa.yaml".into(),
            "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata:\n  name: podinfo\nspec:\n  \
             scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: podinfo}\n  minReplicas: 2\n  \
             maxReplicas: 4\n  metrics:\n  - type: Resource\n    resource:\n      name: cpu\n      \
             target: {type: Utilization, averageUtilization: 99}\n"
                .into(),
        ),
        (
            "overlays/production/kustomization.yaml".into(),
            format!(
                "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: {namespace}\n\
                 namePrefix: prod-\nresources:\n- ../../base\npatches:\n- target: {{kind: HorizontalPodAutoscaler, name: podinfo}}\n  \
                 patch: |\n    - op: replace\n      path: /spec/maxReplicas\n      value: {max}\n"
            ),
        ),
    ]
}

#[tokio::test]
async fn a_kustomize_overlay_of_autoscaling_v2_applies_diffs_clean_and_prunes() {
    let (_, ns, inventory) = setup("kustomize-hpa").await;
    let files = hpa_overlay(&ns, 10);
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    let repo = Repo::new(&files);
    repo.write("models.yaml", &base(&ns));
    let path = repo.path().to_str().unwrap();
    let helm = &helm_tools().helm;

    let applied = tether_with(helm, &inventory, &["apply", path]);
    assert_exit(&applied, 0, "apply");
    assert_eq!(
        stdout(&applied),
        "2 created, 1 configured, 0 unchanged, 0 pruned, 0 failed\n",
        "{}",
        all_output(&applied)
    );
    let hpa = live(
        "horizontalpodautoscalers.v2.autoscaling",
        "prod-podinfo",
        &ns,
    )
    .expect("the HPA");
    assert_eq!(hpa["spec"]["maxReplicas"], 10);
    assert_eq!(hpa["spec"]["scaleTargetRef"]["name"], "prod-podinfo");

    let diff = tether_with(helm, &inventory, &["diff", path]);
    assert_exit(&diff, 0, "diff after apply");
    assert!(
        stdout(&diff)
            .ends_with("0 to create, 0 to update, 0 to delete, 0 in conflict, 3 unchanged\n"),
        "{}",
        all_output(&diff)
    );

    let (overlay, text) = &hpa_overlay(&ns, 12)[3];
    repo.write(overlay, text);
    let changed = tether_with(helm, &inventory, &["apply", path]);
    assert_eq!(
        stdout(&changed),
        "0 created, 1 configured, 2 unchanged, 0 pruned, 0 failed\n",
        "{}",
        all_output(&changed)
    );

    repo.remove("overlays");
    repo.remove("base");
    let pruned = tether_with(helm, &inventory, &["apply", "--prune", path]);
    assert_eq!(
        stdout(&pruned),
        "0 created, 0 configured, 1 unchanged, 2 pruned, 0 failed\n",
        "{}",
        all_output(&pruned)
    );
    crate::harness::eventually(std::time::Duration::from_secs(30), || async {
        live(
            "horizontalpodautoscalers.v2.autoscaling",
            "prod-podinfo",
            &ns,
        )
        .is_none()
            && live("deployment", "prod-podinfo", &ns).is_none()
    })
    .await;
}

/// A misspelt field of a custom resource is refused with the field named (server-side
/// apply checks the definition's schema; the apply asks for strict field validation,
/// as kubectl does), never dropped without a word by the structural schema.
#[tokio::test]
async fn a_misspelt_field_of_a_custom_resource_is_refused_not_dropped() {
    let (_, ns, inventory) = setup("strict-fields").await;
    let group = format!("{ns}.tether.dev");
    let definition = format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: gizmos.{group}\n\
         spec:\n  group: {group}\n  scope: Namespaced\n  names: {{plural: gizmos, singular: gizmo, kind: Gizmo}}\n  \
         versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        \
         type: object\n        properties:\n          spec:\n            type: object\n            properties:\n              \
         size: {{type: integer}}\n"
    );
    let gizmo = |field: &str| {
        format!(
            "apiVersion: {group}/v1\nkind: Gizmo\nmetadata:\n  name: small\n  namespace: {ns}\nspec:\n  {field}: 3\n"
        )
    };
    let repo = Repo::new(&[
        ("models.yaml", &base(&ns)),
        ("crds.yaml", &definition),
        ("gizmo.yaml", &gizmo("sise")),
    ]);
    let path = repo.path().to_str().unwrap();
    let helm = &helm_tools().helm;
    let refused = tether_with(helm, &inventory, &["apply", path]);
    assert_exit(&refused, 2, "apply of a misspelt field");
    let said = all_output(&refused);
    assert!(said.contains(&format!("Gizmo {ns}/small")), "{said}");
    assert!(
        said.contains(".spec.sise: field not declared in schema"),
        "{said}"
    );
    assert!(
        crate::discover::kubectl_command()
            .args(["get", &format!("gizmos.{group}"), "small", "-n", &ns])
            .output()
            .unwrap()
            .stderr
            .starts_with(b"Error from server (NotFound)"),
        "nothing was made of the misspelt object"
    );
    repo.write("gizmo.yaml", &gizmo("size"));
    let applied = tether_with(helm, &inventory, &["apply", path]);
    assert_exit(&applied, 0, "apply of the corrected field");
}

/// A ValidatingAdmissionPolicy's denial reads as a refusal, as RBAC's does, in the
/// server's words: the policy, its binding and its message.
#[tokio::test]
async fn a_validating_admission_policy_refusal_is_worded_as_a_refusal() {
    let (_, ns, inventory) = setup("admission-policy").await;
    let policy = format!(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata:\n  name: {ns}\n\
         spec:\n  failurePolicy: Fail\n  matchConstraints:\n    resourceRules:\n    - apiGroups: [apps]\n      \
         apiVersions: [v1]\n      operations: [CREATE, UPDATE]\n      resources: [deployments]\n  validations:\n  \
         - expression: object.spec.replicas <= 5\n    message: at most 5 replicas\n---\n\
         apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata:\n  name: {ns}\n\
         spec:\n  policyName: {ns}\n  validationActions: [Deny]\n  matchResources:\n    namespaceSelector:\n      \
         matchLabels:\n        kubernetes.io/metadata.name: {ns}\n"
    );
    crate::daemon::kubectl_apply_text(&policy);
    let deployment = |replicas: u32| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  \
             replicas: {replicas}\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      \
             labels: {{app: web}}\n    spec:\n      containers:\n      - name: web\n        image: nginx:1.27\n"
        )
    };
    let repo = Repo::new(&[("models.yaml", &base(&ns)), ("web.yaml", &deployment(9))]);
    let path = repo.path().to_str().unwrap();
    // The server loads a new policy within moments.
    let file = repo.path().join("web.yaml");
    crate::harness::eventually(std::time::Duration::from_secs(30), || async {
        !crate::discover::kubectl_command()
            .args(["create", "--dry-run=server", "-f", file.to_str().unwrap()])
            .output()
            .unwrap()
            .status
            .success()
    })
    .await;

    let refused = tether_with(&helm_tools().helm, &inventory, &["apply", path]);
    assert_exit(&refused, 2, "apply against the policy");
    let said = stdout(&refused);
    assert!(
        said.contains(&format!(
            "failed: Deployment {ns}/web: apply refused: deployments.apps \"web\" is forbidden: \
             ValidatingAdmissionPolicy '{ns}' with binding '{ns}' denied request: at most 5 replicas"
        )),
        "{said}"
    );
    repo.write("web.yaml", &deployment(3));
    let applied = tether_with(&helm_tools().helm, &inventory, &["apply", path]);
    assert_exit(&applied, 0, "apply within the policy");
    crate::discover::kubectl(&[
        "delete",
        "validatingadmissionpolicybinding,validatingadmissionpolicy",
        &ns,
    ]);
}
