//! The API's check of a Source's newest deployment attestation
//! (`GET /api/v1/sources/{namespace}/{name}/attestation`): what `tether verify` says,
//! as JSON, to whoever may see the Source. The attestation is opened against the
//! public half of the Source's own attestation key, read now from its Secret, so a
//! ConfigMap written by someone without that key is refused; then the live objects are
//! compared with it, read as the Source's identity.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tether_engine::attestation::{AttestationError, check};
use tether_engine::oci::OciError;
use tether_web::API_SCHEMA;

use super::handling::{Failure, WebState};
use super::pages::visible_snapshot;

pub(crate) async fn attestation(
    State(state): State<WebState>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, Failure> {
    let snapshot = visible_snapshot(&state, &headers, namespace, name).await?;
    let failure = |status, message: String| Failure::new(status, message, false);
    let attesting = snapshot.handle.attestation.as_ref().ok_or_else(|| {
        failure(
            StatusCode::NOT_FOUND,
            "the Source attests nothing: it has no spec.attestation".into(),
        )
    })?;
    let client = snapshot.client.as_ref().ok_or_else(|| {
        failure(
            StatusCode::SERVICE_UNAVAILABLE,
            "the Source has not reached its cluster yet".into(),
        )
    })?;
    let keys = attesting.secret.public_keys().await.map_err(|e| {
        failure(
            StatusCode::SERVICE_UNAVAILABLE,
            tether_core::error_chain(&e),
        )
    })?;
    let checking = attesting
        .secret
        .newest(&attesting.inventory.name)
        .await
        .map_err(|e| {
            failure(
                StatusCode::SERVICE_UNAVAILABLE,
                tether_core::error_chain(&e),
            )
        })?;
    let checked = match check(client, checking, &attesting.inventory, &keys).await {
        Ok(checked) => checked,
        Err(error @ AttestationError::Unverified { .. }) => {
            return Ok(axum::Json(json!({
                "schema": API_SCHEMA,
                "verified": false,
                "reason": error.to_string(),
            }))
            .into_response());
        }
        Err(
            error @ (AttestationError::NotFound { .. }
            | AttestationError::Pull(OciError::NotFound { .. })),
        ) => {
            return Err(failure(StatusCode::NOT_FOUND, error.to_string()));
        }
        Err(error) => {
            return Err(failure(
                StatusCode::BAD_GATEWAY,
                tether_core::error_chain(&error),
            ));
        }
    };
    let drift: Vec<String> = checked.drift.iter().map(ToString::to_string).collect();
    Ok(axum::Json(json!({
        "schema": API_SCHEMA,
        "verified": true,
        "attestation": checked.origin,
        "signer": checked.signer.to_string(),
        "deployment": checked.attestation.deployment,
        "objects": checked.attestation.objects.len(),
        "clean": drift.is_empty(),
        "drift": drift,
    }))
    .into_response())
}
