//! The annotations teams already wrote for Flux and Argo CD, read by `tether apply` as
//! those tools read them, against the local control plane: kept from prune, created
//! only if absent, never applied, merged with kubectl's fields, made again when a
//! field cannot change in place; and a value tether does not know refused at its
//! place before anything is applied.

use crate::discover::{kubectl, kubectl_command};
use crate::reconcile::{Repo, all_output, base, live_config_map, setup, stdout, tether};
use tether_core::ownership::PART_OF_LABEL;

fn config_map(name: &str, ns: &str, annotations: &str, data: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {ns}\n  annotations: {{{annotations}}}\ndata: {{{data}}}\n"
    )
}

fn deployment(ns: &str, app: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: {ns}\n  annotations: {{kustomize.toolkit.fluxcd.io/force: enabled}}\n\
         spec:\n  replicas: 1\n  selector: {{matchLabels: {{app: {app}}}}}\n  template:\n    metadata: {{labels: {{app: {app}}}}}\n\
         \x20   spec: {{containers: [{{name: web, image: registry.example/web:1}}]}}\n"
    )
}

fn get(ns: &str, what: &[&str], path: &str) -> String {
    let output = kubectl_command()
        .args(["get", "-n", ns])
        .args(what)
        .args(["-o", &format!("jsonpath={path}")])
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test]
async fn flux_and_argo_cd_annotations_keep_skip_merge_and_replace_as_those_tools_do() {
    let (client, ns, inventory) = setup("annotations").await;
    // kubectl applies one ConfigMap client-side first, with a field Git does not have.
    let file = tempfile::NamedTempFile::new().unwrap();
    for name in ["merged", "overridden"] {
        std::fs::write(
            file.path(),
            config_map(name, &ns, "", "a: '1', extra: kubectl"),
        )
        .unwrap();
        kubectl(&["apply", "-f", file.path().to_str().unwrap()]);
    }
    let files = [
        (
            "kept.yaml",
            config_map(
                "kept",
                &ns,
                "kustomize.toolkit.fluxcd.io/prune: disabled",
                "a: '1'",
            ),
        ),
        (
            "argo-kept.yaml",
            config_map(
                "argo-kept",
                &ns,
                "argocd.argoproj.io/sync-options: 'ServerSideApply=true,Prune=false'",
                "a: '1'",
            ),
        ),
        ("plain.yaml", config_map("plain", &ns, "", "a: '1'")),
        (
            "seed.yaml",
            config_map(
                "seed",
                &ns,
                "kustomize.toolkit.fluxcd.io/ssa: IfNotPresent",
                "a: '1'",
            ),
        ),
        (
            "never.yaml",
            config_map(
                "never",
                &ns,
                "kustomize.toolkit.fluxcd.io/ssa: Ignore",
                "a: '1'",
            ),
        ),
        (
            "merged.yaml",
            config_map(
                "merged",
                &ns,
                "kustomize.toolkit.fluxcd.io/ssa: Merge",
                "a: '1'",
            ),
        ),
        (
            "overridden.yaml",
            config_map("overridden", &ns, "", "a: '1'"),
        ),
        ("web.yaml", deployment(&ns, "web")),
    ];
    let base = base(&ns);
    let mut all: Vec<(&str, &str)> = vec![("base.yaml", &base)];
    all.extend(files.iter().map(|(name, text)| (*name, text.as_str())));
    let repo = Repo::new(&all);
    let path = repo.path().to_str().unwrap();

    let applied = tether(&inventory, &["apply", path]);
    assert_eq!(applied.status.code(), Some(0), "{}", all_output(&applied));
    assert!(
        live_config_map(&client, &ns, "never").await.is_none(),
        "ssa: Ignore is never applied"
    );
    assert_eq!(get(&ns, &["configmap", "seed"], "{.data.a}"), "1");
    // A field only kubectl set stays either way: tether removes only what it applied.
    for name in ["merged", "overridden"] {
        assert_eq!(get(&ns, &["configmap", name], "{.data.extra}"), "kubectl");
    }
    let old_uid = get(&ns, &["deployment", "web"], "{.metadata.uid}");

    // Someone changes the seeded ConfigMap; Git changes it too, changes the
    // Deployment's selector (which cannot change in place), and drops three objects.
    kubectl(&[
        "patch",
        "configmap",
        "seed",
        "-n",
        &ns,
        "-p",
        r#"{"data":{"a":"theirs"}}"#,
    ]);
    repo.write(
        "seed.yaml",
        &config_map(
            "seed",
            &ns,
            "kustomize.toolkit.fluxcd.io/ssa: IfNotPresent",
            "a: '3'",
        ),
    );
    repo.write("web.yaml", &deployment(&ns, "web-v2"));
    // `a` leaves Git: tether took it over from kubectl on the ConfigMap without Merge
    // (so it goes), and shares it with kubectl on the one with Merge (so it stays).
    repo.write(
        "merged.yaml",
        &config_map(
            "merged",
            &ns,
            "kustomize.toolkit.fluxcd.io/ssa: Merge",
            "b: '2'",
        ),
    );
    repo.write(
        "overridden.yaml",
        &config_map("overridden", &ns, "", "b: '2'"),
    );
    for name in ["kept.yaml", "argo-kept.yaml", "plain.yaml"] {
        repo.remove(name);
    }
    let diff = stdout(&tether(&inventory, &["diff", path]));
    for expected in [
        format!("release (with --prune) ConfigMap {ns}/kept"),
        "kept: released from the inventory, never deleted (kustomize.toolkit.fluxcd.io/prune: disabled)".to_string(),
        "(argocd.argoproj.io/sync-options: ServerSideApply=true,Prune=false)".to_string(),
        format!("delete (with --prune) ConfigMap {ns}/plain"),
        format!("skip ConfigMap {ns}/seed"),
        "not applied (kustomize.toolkit.fluxcd.io/ssa: IfNotPresent)".to_string(),
        format!("skip ConfigMap {ns}/never"),
        format!("replace Deployment {ns}/web"),
        "(kustomize.toolkit.fluxcd.io/force: enabled)".to_string(),
    ] {
        assert!(diff.contains(&expected), "{expected:?} in:\n{diff}");
    }

    // --delete-adopted deletes what tether adopted, never what an annotation keeps.
    let pruned = tether(&inventory, &["apply", "--prune", "--delete-adopted", path]);
    assert_eq!(pruned.status.code(), Some(0), "{}", all_output(&pruned));
    assert!(live_config_map(&client, &ns, "plain").await.is_none());
    for kept in ["kept", "argo-kept"] {
        let live = live_config_map(&client, &ns, kept)
            .await
            .unwrap_or_else(|| panic!("{kept} is kept"));
        let labels = live.metadata.labels.unwrap_or_default();
        assert!(
            !labels.contains_key(PART_OF_LABEL),
            "{kept} is released: {labels:?}"
        );
    }
    assert_eq!(get(&ns, &["configmap", "seed"], "{.data.a}"), "theirs");
    assert_eq!(get(&ns, &["configmap", "merged"], "{.data.a}"), "1");
    assert_eq!(get(&ns, &["configmap", "overridden"], "{.data.a}"), "");
    for name in ["merged", "overridden"] {
        assert_eq!(get(&ns, &["configmap", name], "{.data.b}"), "2");
    }
    assert_eq!(
        get(
            &ns,
            &["deployment", "web"],
            "{.spec.selector.matchLabels.app}"
        ),
        "web-v2"
    );
    assert_ne!(
        get(&ns, &["deployment", "web"], "{.metadata.uid}"),
        old_uid,
        "made again"
    );
    // A released object is tether's no more: the next prune leaves it alone.
    let again = tether(&inventory, &["apply", "--prune", "--delete-adopted", path]);
    assert_eq!(again.status.code(), Some(0), "{}", all_output(&again));
    assert!(live_config_map(&client, &ns, "kept").await.is_some());
}

#[tokio::test]
async fn an_annotation_value_tether_does_not_know_is_refused_at_its_place_and_nothing_is_applied() {
    let (client, ns, inventory) = setup("annotation-typo").await;
    let repo = Repo::new(&[
        ("base.yaml", &base(&ns)),
        ("a.yaml", &config_map("fine", &ns, "", "a: '1'")),
        (
            "b.yaml",
            &config_map(
                "typo",
                &ns,
                "argocd.argoproj.io/sync-options: Prune=flase",
                "a: '1'",
            ),
        ),
    ]);
    let path = repo.path().to_str().unwrap();
    let refused = tether(&inventory, &["apply", "--prune", path]);
    let text = all_output(&refused).replace(['│', ' ', '\n'], "");
    assert_ne!(refused.status.code(), Some(0), "{text}");
    assert!(text.contains("b.yaml:6:"), "located: {text}");
    assert!(
        text.contains(r#"argocd.argoproj.io/sync-options:"Prune=flase"isnotanoption"#),
        "{text}"
    );
    assert!(text.contains("Prune=false|confirm|true"), "{text}");
    assert!(live_config_map(&client, &ns, "fine").await.is_none());
}
