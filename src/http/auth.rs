//! Who is asking: the Bearer API key names the tenant (compared in constant time), and a tenant
//! with a `signing_secret` must also sign each request with the Standard Webhooks scheme. Every
//! tenant route but `POST /v1/signals` (whose checks keep their own order) takes
//! [`TenantAuth`], the authenticated tenant, as an extractor.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::HeaderMap;
use idem_schemas::signature::{self, VerifyError};
use subtle::ConstantTimeEq;

use crate::config::{Config, Tenant};
use crate::http::problem::{ApiError, Kind};
use crate::http::{App, Live};

/// Finds tenants by API key without comparing the presented key to every stored one.
pub struct ApiKeys {
    by_hash: HashMap<[u8; 32], Arc<Tenant>>,
}

fn hash(key: &[u8]) -> [u8; 32] {
    idem_schemas::hash::sha256(key)
}

impl ApiKeys {
    /// Indexes the tenants of `config`.
    pub fn new(config: &Config) -> Self {
        let by_hash = config
            .tenants
            .values()
            .map(|t| (hash(t.api_key.as_bytes()), Arc::new(t.clone())))
            .collect();
        ApiKeys { by_hash }
    }

    /// The tenant whose API key the `Authorization: Bearer` header carries.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<Arc<Tenant>, ApiError> {
        let unauthorized = |detail: &str| ApiError::new(Kind::Unauthorized, detail);
        let value = headers
            .get("authorization")
            .ok_or_else(|| unauthorized("send Authorization: Bearer <your API key>"))?;
        let value = value
            .to_str()
            .map_err(|_| unauthorized("the Authorization header is not ASCII"))?;
        let token = value
            .split_once(' ')
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .ok_or_else(|| unauthorized("the Authorization scheme must be Bearer"))?;
        let tenant = self
            .by_hash
            .get(&hash(token.as_bytes()))
            .filter(|t| bool::from(t.api_key.as_bytes().ct_eq(token.as_bytes())))
            .ok_or_else(|| unauthorized("the API key is not valid"))?;
        Ok(tenant.clone())
    }
}

/// The tenant a request's API key authenticates (401 otherwise), and the configuration in
/// force when it came, which the whole request reads even if a reload lands meanwhile.
pub struct TenantAuth {
    /// The tenant.
    pub tenant: Arc<Tenant>,
    /// The configuration in force.
    pub live: Arc<Live>,
}

impl FromRequestParts<Arc<App>> for TenantAuth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<App>) -> Result<Self, ApiError> {
        let live = app.live.load_full();
        let tenant = live.api_keys.authenticate(&parts.headers)?;
        Ok(TenantAuth { tenant, live })
    }
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Result<&'h str, ApiError> {
    headers
        .get(name)
        .ok_or_else(|| {
            ApiError::new(
                Kind::SignatureRequired,
                format!("this tenant signs its requests: send webhook-id, webhook-timestamp and webhook-signature (missing {name})"),
            )
        })?
        .to_str()
        .map_err(|_| ApiError::new(Kind::InvalidSignature, format!("{name} is not ASCII")))
}

/// Verifies the request's Standard Webhooks signature when the tenant requires one; returns the
/// `webhook-id` it was signed with.
pub fn verify_signature<'h>(
    tenant: &Tenant,
    headers: &'h HeaderMap,
    body: &[u8],
    now_secs: i64,
    tolerance_secs: u64,
) -> Result<Option<&'h str>, ApiError> {
    if tenant.signing_secrets.is_empty() {
        return Ok(None);
    }
    let id = header(headers, "webhook-id")?;
    let timestamp = header(headers, "webhook-timestamp")?;
    let signatures = header(headers, "webhook-signature")?;
    signature::verify(
        &tenant.signing_secrets,
        id,
        timestamp,
        signatures,
        body,
        now_secs,
        tolerance_secs,
    )
    .map_err(|e| match e {
        VerifyError::Stale => ApiError::new(
            Kind::StaleTimestamp,
            format!("webhook-timestamp must be within {tolerance_secs} s of the server's clock; sign again with the current time"),
        ),
        VerifyError::BadTimestamp => ApiError::new(
            Kind::InvalidSignature,
            "webhook-timestamp must be unix seconds",
        ),
        VerifyError::NoMatch => ApiError::new(
            Kind::InvalidSignature,
            "no v1 signature in webhook-signature matches: sign \"{webhook-id}.{webhook-timestamp}.{raw body}\" with HMAC-SHA-256 under the tenant's signing_secret",
        ),
    })?;
    Ok(Some(id))
}
