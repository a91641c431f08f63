//! Who is asking: the Bearer API key names the tenant (compared in constant time), and a tenant
//! with a `signing_secret` must also sign each request with the Standard Webhooks scheme.

use std::collections::HashMap;

use axum::http::HeaderMap;
use idem_schemas::signature::{self, VerifyError};
use subtle::ConstantTimeEq;

use crate::config::{Config, Tenant};
use crate::http::problem::{ApiError, Kind};

/// Finds tenants by API key without comparing the presented key to every stored one.
pub struct ApiKeys {
    by_hash: HashMap<[u8; 32], String>,
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
            .map(|t| (hash(t.api_key.as_bytes()), t.name.clone()))
            .collect();
        ApiKeys { by_hash }
    }

    /// The tenant whose API key the `Authorization: Bearer` header carries.
    pub fn authenticate<'c>(
        &self,
        config: &'c Config,
        headers: &HeaderMap,
    ) -> Result<&'c Tenant, ApiError> {
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
            .and_then(|name| config.tenants.get(name))
            .filter(|t| bool::from(t.api_key.as_bytes().ct_eq(token.as_bytes())))
            .ok_or_else(|| unauthorized("the API key is not valid"))?;
        Ok(tenant)
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
