//! The simulated nodes' storage, as a local cluster's own provisioner gives it (kind's
//! local-path, minikube's hostpath): a default StorageClass `standard`, a volume made at
//! once for each claim of that class (kube-controller-manager binds the two), and the
//! volume removed once its claim is gone. Claims of other classes are left alone, as a
//! cluster without their provisioner leaves them.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;

/// The default StorageClass.
pub const CLASS: &str = "standard";
/// Its provisioner's name.
const PROVISIONER: &str = "sim.tether.dev/hostpath";

/// Makes the class (once), then provisions and removes volumes until the watch ends.
pub async fn run(client: Client) -> Result<(), kube::Error> {
    let class: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": CLASS, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    }))
    .map_err(kube::Error::SerdeError)?;
    match Api::<StorageClass>::all(client.clone())
        .create(&PostParams::default(), &class)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e),
    }
    let claims = watcher(
        Api::<PersistentVolumeClaim>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .applied_objects()
    .map_ok(|claim| Seen::Claim(Box::new(claim)));
    let volumes = watcher(
        Api::<PersistentVolume>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .applied_objects()
    .map_ok(|volume| Seen::Volume(Box::new(volume)));
    let mut events = std::pin::pin!(futures::stream::select(claims, volumes));
    let volumes: Api<PersistentVolume> = Api::all(client);
    while let Some(seen) = events.next().await {
        let result = match seen.map_err(|e| kube::Error::Service(Box::new(e)))? {
            Seen::Claim(claim) => match volume_for(&claim) {
                Some(volume) => volumes
                    .create(&PostParams::default(), &volume)
                    .await
                    .map(|_| ()),
                None => Ok(()),
            },
            Seen::Volume(volume) if released(&volume) => volumes
                .delete(&volume.name_any(), &DeleteParams::default())
                .await
                .map(|_| ()),
            Seen::Volume(_) => Ok(()),
        };
        match result {
            Ok(()) => {}
            // Made or removed already (a claim seen twice).
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {}
            Err(error) => tracing::debug!(%error, "a volume could not be made or removed"),
        }
    }
    Ok(())
}

enum Seen {
    Claim(Box<PersistentVolumeClaim>),
    Volume(Box<PersistentVolume>),
}

/// The volume a claim of the class gets: its size and access modes, a directory of
/// the node's, reserved for that claim. `None` for a claim of another class, one
/// bound already, or one being deleted.
fn volume_for(claim: &PersistentVolumeClaim) -> Option<PersistentVolume> {
    let spec = claim.spec.as_ref()?;
    let ours = spec.storage_class_name.as_deref() == Some(CLASS);
    let waiting = spec.volume_name.as_deref().is_none_or(str::is_empty)
        && claim.metadata.deletion_timestamp.is_none();
    if !(ours && waiting) {
        return None;
    }
    let namespace = claim.namespace()?;
    let name = claim.name_any();
    let uid = claim.uid()?;
    let storage = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map_or_else(|| "1Gi".to_string(), |q| q.0.clone());
    serde_json::from_value(json!({
        "metadata": {
            "name": format!("pvc-{uid}"),
            "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER},
        },
        "spec": {
            "capacity": {"storage": storage},
            "accessModes": spec.access_modes.clone().unwrap_or_else(|| vec!["ReadWriteOnce".into()]),
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": CLASS,
            "volumeMode": spec.volume_mode.clone().unwrap_or_else(|| "Filesystem".into()),
            "hostPath": {"path": format!("/var/lib/tether-sim/volumes/{namespace}/{name}")},
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                         "namespace": namespace, "name": name, "uid": uid},
        },
    }))
    .ok()
}

/// A volume of the class whose claim is gone: the provisioner's to remove.
fn released(volume: &PersistentVolume) -> bool {
    let class = volume
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref());
    let phase = volume.status.as_ref().and_then(|s| s.phase.as_deref());
    class == Some(CLASS) && phase == Some("Released")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(class: Option<&str>, volume: Option<&str>) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "state-tether-0", "namespace": "tether-system", "uid": "u1"},
            "spec": {
                "storageClassName": class,
                "volumeName": volume,
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "2Gi"}},
            },
        }))
        .unwrap()
    }

    #[test]
    fn a_waiting_claim_of_the_class_gets_a_volume_reserved_for_it() {
        let volume = volume_for(&claim(Some(CLASS), None)).unwrap();
        let spec = volume.spec.unwrap();
        assert_eq!(volume.metadata.name.as_deref(), Some("pvc-u1"));
        assert_eq!(spec.capacity.unwrap()["storage"].0, "2Gi");
        let claim_ref = spec.claim_ref.unwrap();
        assert_eq!(claim_ref.name.as_deref(), Some("state-tether-0"));
        assert_eq!(claim_ref.uid.as_deref(), Some("u1"));
        assert_eq!(spec.storage_class_name.as_deref(), Some(CLASS));
    }

    #[test]
    fn claims_of_other_classes_and_bound_claims_are_left_alone() {
        assert!(volume_for(&claim(Some("manual"), None)).is_none());
        assert!(volume_for(&claim(None, None)).is_none());
        assert!(volume_for(&claim(Some(CLASS), Some("pvc-u1"))).is_none());
    }
}
