//! Deployment attestations from the command line: `apply --attestation-key` signs one
//! after an apply that changed the cluster; `tether verify` checks the newest (or a
//! file's) signature and compares the cluster's live objects with it.

use std::process::ExitCode;

use miette::IntoDiagnostic;
use tether_engine::attestation::{self, AttestationError};
use tether_engine::reconcile::{ApplyReport, Planned, Reconciler};
use tether_trust::dsse::RecordKey;

use super::args::{EXIT_ERROR, EXIT_INVALID, VerifyArgs};
use super::flags::{AttestFlags, trusted_keys};
use super::terminal;

/// The key and bound an apply attests with.
pub(super) struct Attest {
    key: RecordKey,
    keep: usize,
}

/// The attestation key of `flags`, read; none without `--attestation-key`.
pub(super) fn attest_of(flags: &AttestFlags) -> miette::Result<Option<Attest>> {
    let Some(file) = &flags.attestation_key else {
        return Ok(None);
    };
    let origin = format!("--attestation-key {}", file.display());
    let text = std::fs::read_to_string(file).map_err(|e| miette::miette!("{origin}: {e}"))?;
    let key = RecordKey::parse(&text, &origin).map_err(|e| miette::miette!("{e}"))?;
    Ok(Some(Attest {
        key,
        keep: flags.attestations_kept,
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
        .attest(planned, applied, &attest.key, attest.keep)
        .await
        .map_err(|e| terminal::error(e).wrap_err("applied, but not attested"))?;
    if let Some(kept) = kept {
        eprintln!(
            "{prefix}attested: ConfigMap {}/{} ({} objects, signed by {})",
            reconciler.inventory().namespace,
            kept.name,
            kept.objects,
            kept.signer
        );
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
    let given = match &args.attestation {
        Some(file) => {
            let origin = file.display().to_string();
            let text = std::fs::read_to_string(file)
                .into_diagnostic()
                .map_err(|e| e.wrap_err(origin.clone()))?;
            let envelope = attestation::envelope(&text, &origin).map_err(terminal::error)?;
            Some((origin, envelope))
        }
        None => None,
    };
    let inventory = args.inventory.inventory();
    let checked = match attestation::check(&client, given, &inventory, &keys).await {
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
