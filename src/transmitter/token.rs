//! Access tokens for a tenant's SSF receivers (OAuth 2.0 client credentials, RFC 6749 §4.4):
//! `ssf1.<payload>.<mac>`, the payload naming the tenant, the receiver, the expiry and the scopes
//! granted (the CAEP interoperability profile's `ssf.read` and `ssf.manage`), the MAC an
//! HMAC-SHA-256 under a key derived from `key_secret` over the payload and a digest of the
//! receiver's client secret. Any node that shares `key_secret` checks one with no session table,
//! and changing a receiver's secret (or removing the receiver) revokes its tokens.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use idem_schemas::hash::{hmac_sha256, sha256};
use subtle::ConstantTimeEq;

const PREFIX: &str = "ssf1.";

/// The scope that reads streams, their status, and polls.
pub const READ: &str = "ssf.read";
/// The scope that creates, changes and deletes streams, their status and subjects, and asks
/// for verifications.
pub const MANAGE: &str = "ssf.manage";

/// What a token lets its receiver do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scopes {
    /// `ssf.read`.
    pub read: bool,
    /// `ssf.manage`.
    pub manage: bool,
}

impl Scopes {
    /// Both.
    pub const ALL: Scopes = Scopes {
        read: true,
        manage: true,
    };

    /// The scopes a space-separated list names (RFC 6749 §3.3), or the first name that is no
    /// scope of idem's; none if the list is empty.
    pub fn parse<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Option<Scopes>, String> {
        let mut scopes = Scopes {
            read: false,
            manage: false,
        };
        for name in names {
            match name {
                READ => scopes.read = true,
                MANAGE => scopes.manage = true,
                other => return Err(other.to_string()),
            }
        }
        Ok((scopes.read || scopes.manage).then_some(scopes))
    }

    /// Whether every scope of these is among `other`'s.
    pub fn within(self, other: Scopes) -> bool {
        (!self.read || other.read) && (!self.manage || other.manage)
    }

    /// Those among both.
    pub fn and(self, other: Scopes) -> Scopes {
        Scopes {
            read: self.read && other.read,
            manage: self.manage && other.manage,
        }
    }

    /// As OAuth writes them: space-separated.
    pub fn names(self) -> String {
        let names: Vec<&str> = [(self.read, READ), (self.manage, MANAGE)]
            .into_iter()
            .filter_map(|(has, name)| has.then_some(name))
            .collect();
        names.join(" ")
    }

    /// As a token's payload carries them.
    fn code(self) -> &'static str {
        match (self.read, self.manage) {
            (true, true) => "rm",
            (true, false) => "r",
            (false, true) => "m",
            (false, false) => "-",
        }
    }

    fn of_code(code: &str) -> Option<Scopes> {
        let (read, manage) = match code {
            "rm" => (true, true),
            "r" => (true, false),
            "m" => (false, true),
            "-" => (false, false),
            _ => return None,
        };
        Some(Scopes { read, manage })
    }
}

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

/// A token for `receiver` of `tenant` (names of `[A-Za-z0-9_-]`) with `scopes`, valid until
/// `expires_at_ms`.
pub fn issue(
    key: &[u8; 32],
    (tenant, receiver): (&str, &str),
    client_secret: &str,
    scopes: Scopes,
    expires_at_ms: u64,
) -> String {
    let payload = format!("{tenant}.{receiver}.{expires_at_ms}.{}", scopes.code());
    let mac = mac(key, &payload, client_secret);
    format!(
        "{PREFIX}{}.{}",
        URL_SAFE_NO_PAD.encode(payload),
        URL_SAFE_NO_PAD.encode(mac)
    )
}

/// The receiver a token of `tenant` was issued to and the scopes it was granted, if it is valid
/// at `now_ms`; `secret_of` gives a receiver's client secret as configured now. A token issued
/// before tokens carried scopes has both.
pub fn check<'s>(
    key: &[u8; 32],
    token: &str,
    tenant: &str,
    now_ms: u64,
    secret_of: impl Fn(&str) -> Option<&'s str>,
) -> Result<(String, Scopes), TokenError> {
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
    let (Some(for_tenant), Some(receiver), Some(expiry), scopes, None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
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
    let scopes = match scopes {
        None => Scopes::ALL,
        Some(code) => Scopes::of_code(code).ok_or(TokenError::Invalid)?,
    };
    Ok((receiver.to_string(), scopes))
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
        let token = issue(
            &KEY,
            ("acme", "okta"),
            "okta-client-secret-0001",
            Scopes::ALL,
            2_000,
        );
        assert_eq!(
            check(&KEY, &token, "acme", 1_999, secrets),
            Ok(("okta".into(), Scopes::ALL))
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
        let old = issue(
            &KEY,
            ("acme", "okta"),
            "an-older-secret-of-okta",
            Scopes::ALL,
            2_000,
        );
        assert_eq!(
            check(&KEY, &old, "acme", 1_000, secrets),
            Err(TokenError::Invalid)
        );
        let token = issue(
            &KEY,
            ("acme", "okta"),
            "okta-client-secret-0001",
            Scopes::ALL,
            2_000,
        );
        // The payload re-encoded with a later expiry keeps the old MAC.
        let (_, tag) = token.rsplit_once('.').expect("tag");
        let forged = format!(
            "{PREFIX}{}.{tag}",
            URL_SAFE_NO_PAD.encode("acme.okta.9999999.rm")
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

    #[test]
    fn a_token_carries_the_scopes_it_was_granted_and_an_older_one_has_both() {
        let read = Scopes {
            read: true,
            manage: false,
        };
        let token = issue(
            &KEY,
            ("acme", "okta"),
            "okta-client-secret-0001",
            read,
            2_000,
        );
        assert_eq!(
            check(&KEY, &token, "acme", 1_000, secrets),
            Ok(("okta".into(), read))
        );
        // The scopes are under the MAC: widened, the token is refused.
        let (_, tag) = token.rsplit_once('.').expect("tag");
        let widened = format!(
            "{PREFIX}{}.{tag}",
            URL_SAFE_NO_PAD.encode("acme.okta.2000.rm")
        );
        assert_eq!(
            check(&KEY, &widened, "acme", 1_000, secrets),
            Err(TokenError::Invalid)
        );
        let payload = "acme.okta.2000";
        let older = format!(
            "{PREFIX}{}.{}",
            URL_SAFE_NO_PAD.encode(payload),
            URL_SAFE_NO_PAD.encode(mac(&KEY, payload, "okta-client-secret-0001"))
        );
        assert_eq!(
            check(&KEY, &older, "acme", 1_000, secrets),
            Ok(("okta".into(), Scopes::ALL))
        );
    }

    #[test]
    fn scopes_are_read_from_a_space_separated_list() {
        assert_eq!(
            Scopes::parse("ssf.manage ssf.read".split(' ')),
            Ok(Some(Scopes::ALL))
        );
        assert_eq!(Scopes::parse([]), Ok(None));
        assert_eq!(Scopes::parse(["ssf.write"]), Err("ssf.write".into()));
        assert_eq!(Scopes::ALL.names(), "ssf.read ssf.manage");
        let manage = Scopes::parse([MANAGE]).expect("known").expect("some");
        assert!(manage.within(Scopes::ALL) && !Scopes::ALL.within(manage));
        assert_eq!(manage.and(Scopes::ALL), manage);
    }
}
