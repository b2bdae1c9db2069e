//! Deployment attestations from the command line: `apply --attestation-key` signs one
//! after an apply that changed the cluster; `tether verify` checks the newest (or a
//! file's) signature and compares the cluster's live objects with it.

use std::process::ExitCode;

use miette::IntoDiagnostic;
use tether_engine::attestation::registry::AttestationRegistry;
use tether_engine::attestation::{self, AttestationError, Checking, Kept, Places};
use tether_engine::oci::Reference;
use tether_engine::reconcile::{ApplyReport, Planned, Reconciler};
use tether_trust::dsse::RecordKey;

use super::args::{EXIT_ERROR, EXIT_INVALID, VerifyArgs};
use super::flags::{AttestFlags, access, trusted_keys};
use super::terminal;

/// The key, bound and places an apply attests with.
pub(super) struct Attest {
    key: RecordKey,
    keep: usize,
    places: Places,
}

/// The attestation key of `flags`, read; none without `--attestation-key`.
pub(super) fn attest_of(flags: &AttestFlags) -> miette::Result<Option<Attest>> {
    let Some(file) = &flags.attestation_key else {
        return Ok(None);
    };
    let origin = format!("--attestation-key {}", file.display());
    let text = std::fs::read_to_string(file).map_err(|e| miette::miette!("{origin}: {e}"))?;
    let key = RecordKey::parse(&text, &origin).map_err(|e| miette::miette!("{e}"))?;
    let registry = match &flags.attestation_registry {
        Some(url) => Some(AttestationRegistry {
            repository: Reference::parse(url)
                .map_err(|e| miette::miette!("--attestation-registry: {e}"))?,
            access: access(
                flags.attestation_registry_creds.as_deref(),
                flags.attestation_registry_insecure,
                "--attestation-registry-creds",
            )?,
        }),
        None => None,
    };
    Ok(Some(Attest {
        key,
        keep: flags.attestations_kept,
        places: Places {
            in_cluster: !flags.attestation_registry_only,
            registry,
        },
    }))
}

/// Attests an apply, and says so on stderr (`prefix`: the cluster, when several).
pub(super) async fn attest_apply(
    reconciler: &Reconciler,
    planned: &Planned,
    applied: &ApplyReport,
    attest: &Attest,
    prefix: &str,
) -> miette::Result<()> {
    let kept = reconciler
        .attest(
            planned,
            applied,
            &attest.key,
            attest.keep,
            attest.places.clone(),
        )
        .await
        .map_err(|e| terminal::error(e).wrap_err("applied, but not attested"))?;
    if let Some(kept) = kept {
        let namespace = &reconciler.inventory().namespace;
        let kept = Kept {
            name: kept.name.map(|name| format!("{namespace}/{name}")),
            ..kept
        };
        eprintln!("{prefix}attested: {kept}");
    }
    Ok(())
}

/// `tether verify`: 0 when the attestation is a trusted key's and the cluster still
/// holds what it says, 1 when the cluster drifted, 2 when it is not verified.
pub async fn verify(args: &VerifyArgs) -> miette::Result<ExitCode> {
    let keys = trusted_keys(&args.key, "--key")?;
    let client = tether_engine::cluster::connect(&args.cluster.target())
        .await
        .map_err(terminal::error)?;
    let inventory = args.inventory.inventory();
    let checking = match &args.attestation {
        Some(url) if Reference::is_oci(url) => {
            let repository = Reference::parse(&in_repository(url, &inventory.name))
                .map_err(|e| miette::miette!("--attestation: {e}"))?;
            Checking::InRegistry(AttestationRegistry {
                repository,
                access: args.registry.access()?,
            })
        }
        Some(file) => {
            let text = std::fs::read_to_string(file)
                .into_diagnostic()
                .map_err(|e| e.wrap_err(file.clone()))?;
            let envelope = attestation::envelope(&text, file).map_err(terminal::error)?;
            Checking::Given {
                origin: file.clone(),
                envelope,
            }
        }
        None => Checking::InCluster,
    };
    let checked = match attestation::check(&client, checking, &inventory, &keys).await {
        Ok(checked) => checked,
        Err(error @ AttestationError::Unverified { .. }) => {
            eprintln!("{:?}", terminal::error(error).wrap_err("not verified"));
            return Ok(ExitCode::from(EXIT_ERROR));
        }
        Err(error) => return Err(terminal::error(error)),
    };
    let deployment = &checked.attestation.deployment;
    println!("{}: signed by {}", checked.origin, checked.signer);
    println!(
        "  {} at {} to cluster {} (inventory {}), {}",
        deployment.source,
        deployment.revision.as_deref().unwrap_or("no commit"),
        deployment.cluster,
        deployment.inventory,
        deployment.time
    );
    if let Some(verified) = &deployment.verified {
        println!("  verified then: {verified}");
    }
    if checked.drift.is_empty() {
        println!(
            "the cluster holds what it attests: {} objects, as applied",
            checked.attestation.objects.len()
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!("drifted since ({}):", checked.drift.len());
    for each in &checked.drift {
        println!("  {each}");
    }
    Ok(ExitCode::from(EXIT_INVALID))
}

/// `url` with the inventory's tag when it names none (`oci://host/path`): its newest.
fn in_repository(url: &str, inventory: &str) -> String {
    let path = url.rsplit('/').next().unwrap_or_default();
    match path.contains(':') || path.contains('@') {
        true => url.to_string(),
        false => format!("{url}:{inventory}"),
    }
}
