//! Deletions that take more than the object, against the local control plane: a
//! Namespace holding objects of another inventory and of kubectl, named by owner in
//! the diff and kept by prune until the Namespace itself opts in
//! (`tether.dev/prune: with-contents`); a PersistentVolumeClaim, kept until it opts in.

use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim};
use kube::api::Api;
use serde_json::Value;
use tether_core::ownership::Inventory;

use crate::discover::kubectl;
use crate::reconcile::{Repo, all_output, base, config_map, setup, stdout, tether};

fn applyset_of(inventory: &str) -> String {
    Inventory {
        name: inventory.into(),
        namespace: "default".into(),
    }
    .applyset_id()
}

fn claim(ns: &str, annotations: &str) -> String {
    format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: data\n  namespace: {ns}\n  annotations: {{{annotations}}}\n\
         spec:\n  accessModes: [ReadWriteOnce]\n  resources: {{requests: {{storage: 1Gi}}}}\n"
    )
}

/// Deleted, or being deleted.
fn going<T>(live: Option<T>, deleting: impl Fn(&T) -> bool) -> bool {
    live.as_ref().is_none_or(deleting)
}

#[tokio::test]
async fn a_namespace_names_whose_objects_its_deletion_takes_and_goes_only_once_it_opts_in() {
    let client = crate::harness::cluster().client().await;
    let (_, ns, inventory) = setup("contents-by-owner").await;
    let team = format!("owners-{ns}").chars().take(63).collect::<String>();
    let repo = Repo::new(&[
        ("base.yaml", &base(&ns)),
        ("team.yaml", &format!("kind: TrustDomain\nname: {team}\n")),
        ("cm.yaml", &config_map("ours", &team, "1")),
    ]);
    let path = repo.path().to_str().unwrap();
    let created = tether(&inventory, &["apply", path]);
    assert_eq!(created.status.code(), Some(0), "{}", all_output(&created));
    // Another inventory puts a ConfigMap in it; kubectl another.
    let other = format!("{inventory}-b");
    let theirs = Repo::new(&[(
        "cm.yaml",
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: team-b\n  namespace: {team}\ndata: {{a: '1'}}\n"
        ),
    )]);
    let applied = tether(&other, &["apply", theirs.path().to_str().unwrap()]);
    assert_eq!(applied.status.code(), Some(0), "{}", all_output(&applied));
    kubectl(&["create", "configmap", "by-hand", "-n", &team]);

    repo.remove("team.yaml");
    repo.remove("cm.yaml");
    let diff = stdout(&tether(&inventory, &["diff", path]));
    assert!(
        diff.contains(&format!(
            "it holds 3 ConfigMap; 1 created by this inventory; of the inventory {}: ConfigMap {team}/team-b; of no inventory: ConfigMap {team}/by-hand. It is kept unless it carries the annotation tether.dev/prune: with-contents",
            applyset_of(&other)
        )),
        "{diff}"
    );
    let json: Value =
        serde_json::from_str(&stdout(&tether(&inventory, &["diff", "-o", "json", path]))).unwrap();
    let namespace = json["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "Namespace" && c["name"] == team.as_str())
        .unwrap();
    let contents = &namespace["namespaceContents"];
    assert_eq!(contents["thisInventory"], 1, "{contents}");
    assert_eq!(
        contents["otherInventories"][0]["inventory"],
        applyset_of(&other).as_str(),
        "{contents}"
    );
    assert_eq!(contents["notCreatedHere"].as_array().unwrap().len(), 2);

    let kept = tether(&inventory, &["apply", "--prune", path]);
    assert_eq!(kept.status.code(), Some(2), "{}", all_output(&kept));
    assert!(
        stdout(&kept).contains("kept: it holds 2 objects this inventory did not create"),
        "{}",
        all_output(&kept)
    );
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let live = namespaces.get(&team).await.unwrap();
    assert!(live.metadata.deletion_timestamp.is_none(), "not deleted");

    // Its owner opts it in on the live object: the diff says so, and prune deletes it.
    kubectl(&[
        "annotate",
        "namespace",
        &team,
        "tether.dev/prune=with-contents",
    ]);
    let diff = stdout(&tether(&inventory, &["diff", path]));
    assert!(
        diff.contains("It is deleted with them (tether.dev/prune: with-contents)"),
        "{diff}"
    );
    let pruned = tether(&inventory, &["apply", "--prune", path]);
    assert_eq!(pruned.status.code(), Some(0), "{}", all_output(&pruned));
    let live = namespaces.get_opt(&team).await.unwrap();
    assert!(
        going(live, |n| n.metadata.deletion_timestamp.is_some()),
        "deleted once it opted in"
    );
}

#[tokio::test]
async fn a_claim_whose_model_is_gone_is_kept_until_it_opts_in() {
    let (client, ns, inventory) = setup("claim-guard").await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client, &ns);
    let repo = Repo::new(&[("base.yaml", &base(&ns)), ("claim.yaml", &claim(&ns, ""))]);
    let path = repo.path().to_str().unwrap();
    let created = tether(&inventory, &["apply", path]);
    assert_eq!(created.status.code(), Some(0), "{}", all_output(&created));

    repo.remove("claim.yaml");
    let diff = stdout(&tether(&inventory, &["diff", path]));
    assert!(
        diff.contains(&format!("delete (with --prune) PersistentVolumeClaim {ns}/data"))
            && diff.contains("\n  kept: a PersistentVolumeClaim's volume, and its data, usually go with it; it is deleted once it carries the annotation tether.dev/prune: with-contents"),
        "{diff}"
    );
    let kept = tether(&inventory, &["apply", "--prune", path]);
    assert_eq!(kept.status.code(), Some(2), "{}", all_output(&kept));
    assert!(
        stdout(&kept)
            .contains("the annotation tether.dev/prune: with-contents on it lets prune delete it"),
        "{}",
        all_output(&kept)
    );
    let live = claims.get_opt("data").await.unwrap().expect("kept");
    assert!(live.metadata.deletion_timestamp.is_none());

    // The opt-in written in Git, applied, then the model removed: prune deletes it.
    repo.write("claim.yaml", &claim(&ns, "tether.dev/prune: with-contents"));
    let annotated = tether(&inventory, &["apply", path]);
    assert_eq!(
        annotated.status.code(),
        Some(0),
        "{}",
        all_output(&annotated)
    );
    repo.remove("claim.yaml");
    let diff = stdout(&tether(&inventory, &["diff", path]));
    assert!(
        diff.contains("deleted with its volume (tether.dev/prune: with-contents)"),
        "{diff}"
    );
    let pruned = tether(&inventory, &["apply", "--prune", path]);
    assert_eq!(pruned.status.code(), Some(0), "{}", all_output(&pruned));
    let live = claims.get_opt("data").await.unwrap();
    assert!(going(live, |c| c.metadata.deletion_timestamp.is_some()));

    // A value tether does not know is refused at its place, before anything is applied.
    repo.write("claim.yaml", &claim(&ns, "tether.dev/prune: with-contnets"));
    let refused = tether(&inventory, &["apply", path]);
    let text = all_output(&refused).replace(['│', ' ', '\n'], "");
    assert_ne!(refused.status.code(), Some(0), "{text}");
    assert!(text.contains("claim.yaml:6:"), "located: {text}");
    assert!(
        text.contains(
            r#"tether.dev/prune:"with-contnets"isnotavaluetetherknows(itreadswith-contents)"#
        ),
        "{text}"
    );
}
