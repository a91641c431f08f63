//! Access tokens for a tenant's SSF receivers (OAuth 2.0 client credentials, RFC 6749 §4.4):
//! `ssf1.<payload>.<mac>`, the payload naming the tenant, the receiver and the expiry, the MAC
//! an HMAC-SHA-256 under a key derived from `key_secret` over the payload and a digest of the
//! receiver's client secret. Any node that shares `key_secret` checks one with no session table,
//! and changing a receiver's secret (or removing the receiver) revokes its tokens.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use idem_schemas::hash::{hmac_sha256, sha256};
use subtle::ConstantTimeEq;

const PREFIX: &str = "ssf1.";

/// Why a token is refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not a token idem issued, or altered, or issued for a secret no longer configured.
    #[error("the access token is not valid")]
    Invalid,
    /// Issued for another tenant.
    #[error("the access token is for another tenant")]
    OtherTenant,
    /// Past its expiry.
    #[error("the access token has expired")]
    Expired,
}

fn mac(key: &[u8; 32], payload: &str, client_secret: &str) -> [u8; 32] {
    let secret = sha256(client_secret.as_bytes());
    hmac_sha256(key, &[payload.as_bytes(), &secret])
}

/// A token for `receiver` of `tenant` (names of `[A-Za-z0-9_-]`), valid until `expires_at_ms`.
pub fn issue(
    key: &[u8; 32],
    tenant: &str,
    receiver: &str,
    client_secret: &str,
    expires_at_ms: u64,
) -> String {
    let payload = format!("{tenant}.{receiver}.{expires_at_ms}");
    let mac = mac(key, &payload, client_secret);
    format!(
        "{PREFIX}{}.{}",
        URL_SAFE_NO_PAD.encode(payload),
        URL_SAFE_NO_PAD.encode(mac)
    )
}

/// The receiver a token of `tenant` was issued to, if it is valid at `now_ms`; `secret_of`
/// gives a receiver's client secret as configured now.
pub fn check<'s>(
    key: &[u8; 32],
    token: &str,
    tenant: &str,
    now_ms: u64,
    secret_of: impl Fn(&str) -> Option<&'s str>,
) -> Result<String, TokenError> {
    let rest = token.strip_prefix(PREFIX).ok_or(TokenError::Invalid)?;
    let (payload, tag) = rest.split_once('.').ok_or(TokenError::Invalid)?;
    let payload = URL_SAFE_NO_PAD
        .decode(payload)
        .ok()
        .and_then(|p| String::from_utf8(p).ok())
        .ok_or(TokenError::Invalid)?;
    let tag = URL_SAFE_NO_PAD
        .decode(tag)
        .map_err(|_| TokenError::Invalid)?;
    let mut parts = payload.split('.');
    let (Some(for_tenant), Some(receiver), Some(expiry), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Invalid);
    };
    let secret = secret_of(receiver).ok_or(TokenError::Invalid)?;
    if !bool::from(mac(key, &payload, secret).ct_eq(&tag)) {
        return Err(TokenError::Invalid);
    }
    if for_tenant != tenant {
        return Err(TokenError::OtherTenant);
    }
    let expiry: u64 = expiry.parse().map_err(|_| TokenError::Invalid)?;
    if now_ms >= expiry {
        return Err(TokenError::Expired);
    }
    Ok(receiver.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; 32] = [3; 32];

    fn secrets(receiver: &str) -> Option<&'static str> {
        (receiver == "okta").then_some("okta-client-secret-0001")
    }

    #[test]
    fn checks_what_it_issued_until_it_expires() {
        let token = issue(&KEY, "acme", "okta", "okta-client-secret-0001", 2_000);
        assert_eq!(
            check(&KEY, &token, "acme", 1_999, secrets),
            Ok("okta".into())
        );
        assert_eq!(
            check(&KEY, &token, "acme", 2_000, secrets),
            Err(TokenError::Expired)
        );
        assert_eq!(
            check(&KEY, &token, "other", 1_000, secrets),
            Err(TokenError::OtherTenant)
        );
        assert_eq!(
            check(&[4; 32], &token, "acme", 1_000, secrets),
            Err(TokenError::Invalid)
        );
    }

    #[test]
    fn refuses_a_token_altered_or_issued_for_an_old_secret() {
        let old = issue(&KEY, "acme", "okta", "an-older-secret-of-okta", 2_000);
        assert_eq!(
            check(&KEY, &old, "acme", 1_000, secrets),
            Err(TokenError::Invalid)
        );
        let token = issue(&KEY, "acme", "okta", "okta-client-secret-0001", 2_000);
        // The payload re-encoded with a later expiry keeps the old MAC.
        let (_, tag) = token.rsplit_once('.').expect("tag");
        let forged = format!(
            "{PREFIX}{}.{tag}",
            URL_SAFE_NO_PAD.encode("acme.okta.9999999")
        );
        assert_eq!(
            check(&KEY, &forged, "acme", 1_000, secrets),
            Err(TokenError::Invalid)
        );
        for junk in [
            "",
            "ssf1.",
            "ssf1.x.y",
            "Bearer x",
            &token[..token.len() - 2],
        ] {
            assert_eq!(
                check(&KEY, junk, "acme", 1_000, secrets),
                Err(TokenError::Invalid)
            );
        }
    }
}
