//! The Standard Webhooks signature scheme, used inbound (verifying a tenant's signed signal) and
//! outbound (signing our callbacks). A signature is `v1,` + base64 HMAC-SHA-256 over
//! `{id}.{timestamp}.{raw body}`; a header may carry several, space-separated, so secrets can be
//! rotated. Verification compares in constant time and checks the timestamp against a tolerance.

use base64::alphabet;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use ring::hmac;
use subtle::ConstantTimeEq;

/// A webhook signing secret: the bytes behind `whsec_<base64>`, and the HMAC keyed with them
/// (its key schedule done once, not per signature). Its `Debug` never shows them.
#[derive(Clone)]
pub struct Secret {
    bytes: Vec<u8>,
    keyed: hmac::Key,
}

impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        self.bytes == other.bytes
    }
}

impl Eq for Secret {}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// Why a secret string could not be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretError {
    /// The part after `whsec_` is not base64.
    #[error("is not base64 after the `whsec_` prefix")]
    NotBase64,
    /// The secret decodes to nothing.
    #[error("is empty")]
    Empty,
}

impl Secret {
    /// Parses `whsec_<base64>`; the prefix and the padding are optional, as in the Standard
    /// Webhooks libraries.
    pub fn parse(s: &str) -> Result<Self, SecretError> {
        const LENIENT: GeneralPurpose = GeneralPurpose::new(
            &alphabet::STANDARD,
            GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
        );
        let b64 = s.strip_prefix("whsec_").unwrap_or(s);
        let bytes = LENIENT.decode(b64).map_err(|_| SecretError::NotBase64)?;
        if bytes.is_empty() {
            return Err(SecretError::Empty);
        }
        let keyed = hmac::Key::new(hmac::HMAC_SHA256, &bytes);
        Ok(Secret { bytes, keyed })
    }

    /// The HMAC-SHA-256 tag of `{id}.{timestamp}.{body}`.
    fn tag(&self, id: &str, timestamp: i64, body: &[u8]) -> hmac::Tag {
        let mut mac = hmac::Context::with_key(&self.keyed);
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(itoa::Buffer::new().format(timestamp).as_bytes());
        mac.update(b".");
        mac.update(body);
        mac.sign()
    }

    /// One `v1,<base64>` signature of `body` under this secret.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        format!("v1,{}", STANDARD.encode(self.tag(id, timestamp, body)))
    }
}

/// The `webhook-signature` header value: one signature per secret, space-separated.
pub fn sign_all(secrets: &[Secret], id: &str, timestamp: i64, body: &[u8]) -> String {
    secrets
        .iter()
        .map(|s| s.sign(id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Why a signed request was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VerifyError {
    /// `webhook-timestamp` is not an integer number of seconds.
    #[error("webhook-timestamp is not unix seconds")]
    BadTimestamp,
    /// `webhook-timestamp` is further from now than the tolerance.
    #[error("webhook-timestamp is outside the accepted clock skew")]
    Stale,
    /// No `v1,` signature in the header matches any secret.
    #[error("no signature in webhook-signature matches")]
    NoMatch,
}

/// Verifies a Standard Webhooks request: the timestamp within `tolerance_secs` of `now_secs`
/// (both ways), and at least one `v1,` signature valid under at least one secret.
pub fn verify(
    secrets: &[Secret],
    id: &str,
    timestamp: &str,
    signatures: &str,
    body: &[u8],
    now_secs: i64,
    tolerance_secs: u64,
) -> Result<(), VerifyError> {
    let ts: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| VerifyError::BadTimestamp)?;
    if now_secs.abs_diff(ts) > tolerance_secs {
        return Err(VerifyError::Stale);
    }
    for candidate in signatures.split(' ') {
        let Some(b64) = candidate.strip_prefix("v1,") else {
            continue;
        };
        let Ok(tag) = STANDARD.decode(b64) else {
            continue;
        };
        for secret in secrets {
            // Compared in constant time.
            if bool::from(secret.tag(id, ts, body).as_ref().ct_eq(&tag)) {
                return Ok(());
            }
        }
    }
    Err(VerifyError::NoMatch)
}

#[cfg(test)]
mod tests {
    use super::*;

    // The example of the Standard Webhooks specification.
    const SPEC_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const SPEC_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const SPEC_TS: i64 = 1614265330;
    const SPEC_BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SPEC_SIG: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    #[test]
    fn signs_like_the_specification() {
        let secret = Secret::parse(SPEC_SECRET).expect("spec secret");
        assert_eq!(secret.sign(SPEC_ID, SPEC_TS, SPEC_BODY), SPEC_SIG);
    }

    #[test]
    fn verifies_any_listed_signature_under_any_secret() {
        let good = Secret::parse(SPEC_SECRET).expect("secret");
        let other = Secret::parse("whsec_b3RoZXI=").expect("secret");
        let header = format!("v1,AAAA {SPEC_SIG}");
        let verdict = verify(
            &[other.clone(), good],
            SPEC_ID,
            "1614265330",
            &header,
            SPEC_BODY,
            SPEC_TS + 10,
            300,
        );
        assert_eq!(verdict, Ok(()));
        let verdict = verify(
            &[other],
            SPEC_ID,
            "1614265330",
            &header,
            SPEC_BODY,
            SPEC_TS,
            300,
        );
        assert_eq!(verdict, Err(VerifyError::NoMatch));
    }

    #[test]
    fn refuses_tampering_and_skew() {
        let s = Secret::parse(SPEC_SECRET).expect("secret");
        let ts = SPEC_TS.to_string();
        let v = |body: &[u8], now: i64| {
            verify(
                std::slice::from_ref(&s),
                SPEC_ID,
                &ts,
                SPEC_SIG,
                body,
                now,
                300,
            )
        };
        assert_eq!(v(SPEC_BODY, SPEC_TS), Ok(()));
        assert_eq!(
            v(br#"{"test": 2432232315}"#, SPEC_TS),
            Err(VerifyError::NoMatch)
        );
        assert_eq!(v(SPEC_BODY, SPEC_TS + 301), Err(VerifyError::Stale));
        assert_eq!(v(SPEC_BODY, SPEC_TS - 301), Err(VerifyError::Stale));
        let bad_ts = verify(
            std::slice::from_ref(&s),
            SPEC_ID,
            "soon",
            SPEC_SIG,
            SPEC_BODY,
            SPEC_TS,
            300,
        );
        assert_eq!(bad_ts, Err(VerifyError::BadTimestamp));
    }

    #[test]
    fn rejects_bad_secrets() {
        assert_eq!(Secret::parse("whsec_!!!"), Err(SecretError::NotBase64));
        assert_eq!(Secret::parse("whsec_"), Err(SecretError::Empty));
        assert!(format!("{:?}", Secret::parse(SPEC_SECRET)).contains(".."));
        assert_eq!(
            Secret::parse("whsec_b3RoZXI"),
            Secret::parse("whsec_b3RoZXI=")
        );
    }
}
