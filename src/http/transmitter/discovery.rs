//! `GET /.well-known/ssf-configuration/ssf/{tenant}`: the transmitter's metadata (SSF §7.1),
//! and `GET /ssf/{tenant}/jwks`: every configured key's public JWK, the signing one first.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use idem_schemas::{AuthorizationScheme, TransmitterMetadata};
use serde_json::{json, Value};

use super::{find, issuer};
use crate::http::problem::ApiError;
use crate::http::App;
use crate::transmitter::stream::{POLL, PUSH};

/// The transmitter's metadata.
pub async fn metadata(
    State(app): State<Arc<App>>,
    Path(tenant): Path<String>,
) -> Result<Response, ApiError> {
    let live = app.live.load_full();
    find(&live, &tenant)?;
    let issuer = issuer(&app, &live, &tenant);
    let streams = format!("{issuer}/streams");
    Ok(Json(TransmitterMetadata {
        spec_version: "1_0".into(),
        jwks_uri: format!("{issuer}/jwks"),
        delivery_methods_supported: vec![PUSH.into(), POLL.into()],
        status_endpoint: format!("{streams}/status"),
        add_subject_endpoint: format!("{streams}/subjects:add"),
        remove_subject_endpoint: format!("{streams}/subjects:remove"),
        verification_endpoint: format!("{streams}/verify"),
        configuration_endpoint: streams,
        authorization_schemes: vec![AuthorizationScheme {
            spec_urn: "urn:ietf:rfc:6749".into(),
        }],
        default_subjects: "ALL".into(),
        issuer,
    })
    .into_response())
}

/// The transmitter's JWK Set.
pub async fn jwks(
    State(app): State<Arc<App>>,
    Path(tenant): Path<String>,
) -> Result<Response, ApiError> {
    let live = app.live.load_full();
    let (_, ssf) = find(&live, &tenant)?;
    let keys: Vec<Value> = ssf.keys.iter().map(|k| k.jwk().clone()).collect();
    Ok((
        [("content-type", "application/jwk-set+json")],
        Json(json!({ "keys": keys })),
    )
        .into_response())
}
