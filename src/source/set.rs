//! Security Event Tokens (RFC 8417) from a Shared Signals transmitter, checked with no I/O: the
//! JOSE header read, the key chosen by `kid` from a [`Keys`] set, the `alg` held to the source's
//! allow-list and to that key's type (so a token can never pick HS256 over an RSA key, nor
//! `none`), the signature verified by `jsonwebtoken` over the token's bytes, and only then the
//! claims parsed (strictly: a member named twice is refused) and checked: `typ`, `iss`, `aud`,
//! `jti`, `iat`, `events`. Each refusal carries RFC 8935's error code, which a push is answered
//! with and a poll reports in `setErrs`.

use std::collections::HashMap;
use std::sync::Arc;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use idem_schemas::canonical;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::MAX_EVENT_ID;

/// The longest token taken (a SET is a few kilobytes).
pub const MAX_SET: usize = 64 * 1024;

/// The least an RSA key's modulus has, in bits.
const MIN_RSA_BITS: usize = 2048;

/// RFC 8935 §2.4's error codes (also RFC 8936's `setErrs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Err {
    /// Not a SET, or its claims are malformed.
    InvalidRequest,
    /// No key for its `kid`, an algorithm refused for that key, or a signature that fails.
    InvalidKey,
    /// Its `iss` is not the source's transmitter.
    InvalidIssuer,
    /// The source's audience is not among its `aud`.
    InvalidAudience,
    /// The push's `Authorization` is not the configured one.
    AuthenticationFailed,
    /// The transmitter may not send here.
    AccessDenied,
    /// A verification for the subscribed stream with another `state`, or for another stream.
    InvalidState,
}

impl Err {
    /// The code as RFC 8935 writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Err::InvalidRequest => "invalid_request",
            Err::InvalidKey => "invalid_key",
            Err::InvalidIssuer => "invalid_issuer",
            Err::InvalidAudience => "invalid_audience",
            Err::AuthenticationFailed => "authentication_failed",
            Err::AccessDenied => "access_denied",
            Err::InvalidState => "invalid_state",
        }
    }
}

/// A SET refused: its code and a description that says what is wrong without echoing what the
/// source expects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {description}", err.as_str())]
pub struct SetRefusal {
    /// The code.
    pub err: Err,
    /// What is wrong.
    pub description: String,
}

impl SetRefusal {
    /// A refusal with `err` and `description`.
    pub fn new(err: Err, description: impl Into<String>) -> Self {
        SetRefusal {
            err,
            description: description.into(),
        }
    }
}

fn invalid(description: impl Into<String>) -> SetRefusal {
    SetRefusal::new(Err::InvalidRequest, description)
}

fn bad_key(description: impl Into<String>) -> SetRefusal {
    SetRefusal::new(Err::InvalidKey, description)
}

/// What kind of key verifies an algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    /// RSA, of at least 2048 bits.
    Rsa,
    /// EC on P-256.
    P256,
    /// EC on P-384.
    P384,
    /// OKP on Ed25519.
    Ed25519,
}

/// The signing algorithms a source may allow: public-key ones only (`none` and HS* never).
pub const ALGORITHMS: [(&str, Algorithm, KeyType); 9] = [
    ("RS256", Algorithm::RS256, KeyType::Rsa),
    ("RS384", Algorithm::RS384, KeyType::Rsa),
    ("RS512", Algorithm::RS512, KeyType::Rsa),
    ("PS256", Algorithm::PS256, KeyType::Rsa),
    ("PS384", Algorithm::PS384, KeyType::Rsa),
    ("PS512", Algorithm::PS512, KeyType::Rsa),
    ("ES256", Algorithm::ES256, KeyType::P256),
    ("ES384", Algorithm::ES384, KeyType::P384),
    ("EdDSA", Algorithm::EdDSA, KeyType::Ed25519),
];

/// The algorithm named `name`, if a source may allow it.
pub fn algorithm(name: &str) -> Option<(Algorithm, KeyType)> {
    ALGORITHMS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, a, t)| (*a, *t))
}

/// One verification key of a transmitter's JWK Set.
pub struct VerifyingKey {
    decoding: DecodingKey,
    kind: KeyType,
    /// The `alg` the JWK names, if it names one: then no other is accepted with it.
    alg: Option<String>,
}

/// A transmitter's verification keys by `kid`.
#[derive(Default, Clone)]
pub struct Keys {
    by_kid: HashMap<String, Arc<VerifyingKey>>,
}

impl Keys {
    /// The key named `kid`.
    pub fn get(&self, kid: &str) -> Option<&Arc<VerifyingKey>> {
        self.by_kid.get(kid)
    }

    /// How many keys there are.
    pub fn len(&self) -> usize {
        self.by_kid.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_kid.is_empty()
    }

    /// The signing keys of a JWK Set document (RFC 7517 §5). A key with no `kid`, with `use`
    /// other than `sig`, symmetric, on a curve not supported, or RSA under 2048 bits is left out
    /// (and named in `skipped`); a document that is not a JWK Set is an error.
    pub fn parse(document: &[u8]) -> Result<(Keys, Vec<String>), String> {
        let value = canonical::parse(document).map_err(|e| format!("not a JWK Set: {e}"))?;
        let keys = value
            .get("keys")
            .and_then(Value::as_array)
            .ok_or("not a JWK Set: no \"keys\" array")?;
        let mut by_kid = HashMap::new();
        let mut skipped = Vec::new();
        for (n, raw) in keys.iter().enumerate() {
            match key(raw) {
                Ok((kid, key)) => {
                    by_kid.insert(kid, Arc::new(key));
                }
                Err(why) => skipped.push(format!("keys[{n}]: {why}")),
            }
        }
        Ok((Keys { by_kid }, skipped))
    }
}

fn key(raw: &Value) -> Result<(String, VerifyingKey), String> {
    let jwk: Jwk = serde_json::from_value(raw.clone()).map_err(|e| e.to_string())?;
    let kid = jwk.common.key_id.clone().ok_or("no kid")?;
    if matches!(jwk.common.public_key_use, Some(ref u) if *u != PublicKeyUse::Signature) {
        return Err(format!("{kid:?} is not a signing key"));
    }
    let kind = match &jwk.algorithm {
        AlgorithmParameters::RSA(rsa) => {
            let n = URL_SAFE_NO_PAD
                .decode(rsa.n.as_bytes())
                .map_err(|_| format!("{kid:?}: its n is not base64url"))?;
            let bits = n.iter().skip_while(|b| **b == 0).count() * 8;
            if bits < MIN_RSA_BITS {
                return Err(format!("{kid:?}: RSA under {MIN_RSA_BITS} bits"));
            }
            KeyType::Rsa
        }
        AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
            EllipticCurve::P256 => KeyType::P256,
            EllipticCurve::P384 => KeyType::P384,
            _ => return Err(format!("{kid:?}: an unsupported curve")),
        },
        AlgorithmParameters::OctetKeyPair(okp) if okp.curve == EllipticCurve::Ed25519 => {
            KeyType::Ed25519
        }
        AlgorithmParameters::OctetKeyPair(_) => return Err(format!("{kid:?}: not Ed25519")),
        AlgorithmParameters::OctetKey(_) => {
            return Err(format!("{kid:?}: a symmetric key is never used"))
        }
    };
    let decoding = DecodingKey::from_jwk(&jwk).map_err(|e| format!("{kid:?}: {e}"))?;
    let alg = jwk.common.key_algorithm.map(|a| format!("{a:?}"));
    Ok((
        kid,
        VerifyingKey {
            decoding,
            kind,
            alg,
        },
    ))
}

/// What a source checks a SET against.
#[derive(Debug, Clone)]
pub struct Expect<'a> {
    /// `iss`, compared exactly.
    pub issuer: &'a str,
    /// One of `aud`.
    pub audience: &'a str,
    /// The algorithms allowed.
    pub algorithms: &'a [String],
}

/// A SET's JOSE header, as far as choosing its key goes.
#[derive(Debug, Deserialize)]
pub struct Header {
    /// The algorithm it claims.
    pub alg: String,
    /// The key it names.
    pub kid: Option<String>,
    /// Its type: `secevent+jwt`.
    pub typ: Option<String>,
}

/// Reads the header of a compact JWS and checks what needs no key: three parts, `typ`, an
/// `alg` the source allows, a `kid`.
pub fn header(token: &str, expect: &Expect<'_>) -> Result<Header, SetRefusal> {
    let parts = token.split('.').count();
    if parts == 5 {
        return Err(invalid(
            "an encrypted SET (JWE) is not taken: sign it, as SSF does",
        ));
    }
    if parts != 3 {
        return Err(invalid("not a compact JWS: a SET is three base64url parts"));
    }
    let encoded = token.split('.').next().unwrap_or_default();
    let bytes = URL_SAFE_NO_PAD
        .decode(encoded.as_bytes())
        .map_err(|_| invalid("the JOSE header is not base64url"))?;
    canonical::parse(&bytes).map_err(|e| invalid(format!("the JOSE header: {e}")))?;
    let header: Header =
        serde_json::from_slice(&bytes).map_err(|e| invalid(format!("the JOSE header: {e}")))?;
    let typ = header.typ.as_deref().unwrap_or_default();
    if !typ.eq_ignore_ascii_case("secevent+jwt")
        && !typ.eq_ignore_ascii_case("application/secevent+jwt")
    {
        return Err(invalid("the JOSE header's typ must be secevent+jwt"));
    }
    if !expect.algorithms.contains(&header.alg) {
        return Err(bad_key(format!(
            "the algorithm {:?} is not accepted here",
            cut(&header.alg)
        )));
    }
    if header.kid.as_deref().is_none_or(str::is_empty) {
        return Err(bad_key("the JOSE header names no kid"));
    }
    Ok(header)
}

/// A verified SET's claims.
#[derive(Debug)]
pub struct Set {
    /// Its `jti`.
    pub jti: String,
    /// Its `iss`.
    pub iss: String,
    /// Every claim (what subject pointers read).
    pub claims: Value,
}

impl Set {
    /// Its events: each event-type URI with its payload, in the token's order.
    pub fn events(&self) -> impl Iterator<Item = (&String, &Value)> {
        self.claims
            .get("events")
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(Map::iter)
    }
}

/// Verifies `token` (whose `header` is read) with `key`, then checks its claims.
pub fn verify(
    token: &str,
    header: &Header,
    key: &VerifyingKey,
    expect: &Expect<'_>,
) -> Result<Set, SetRefusal> {
    let (alg, kind) =
        algorithm(&header.alg).ok_or_else(|| bad_key("the algorithm is not a public-key one"))?;
    if kind != key.kind {
        return Err(bad_key(format!(
            "the algorithm {} does not fit the key its kid names",
            header.alg
        )));
    }
    if key.alg.as_ref().is_some_and(|a| *a != header.alg) {
        return Err(bad_key(format!(
            "the key its kid names is for another algorithm than {}",
            header.alg
        )));
    }
    let mut validation = Validation::new(alg);
    validation.required_spec_claims.clear();
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    jsonwebtoken::decode::<serde::de::IgnoredAny>(token, &key.decoding, &validation).map_err(
        |e| match e.kind() {
            jsonwebtoken::errors::ErrorKind::InvalidSignature => {
                bad_key("the signature does not verify")
            }
            jsonwebtoken::errors::ErrorKind::InvalidAlgorithm => {
                bad_key("the algorithm does not fit the key")
            }
            _ => invalid(format!("not a valid JWS: {e}")),
        },
    )?;
    // The signature holds: the claims are read from the verified bytes, strictly.
    let payload = token.split('.').nth(1).unwrap_or_default();
    let bytes = URL_SAFE_NO_PAD
        .decode(payload.as_bytes())
        .map_err(|_| invalid("the claims are not base64url"))?;
    let claims = canonical::parse(&bytes).map_err(|e| invalid(format!("the claims: {e}")))?;
    claims_of(claims, expect)
}

/// Checks a verified SET's claims.
fn claims_of(claims: Value, expect: &Expect<'_>) -> Result<Set, SetRefusal> {
    let object = claims
        .as_object()
        .ok_or_else(|| invalid("the claims are not a JSON object"))?;
    let iss = object
        .get("iss")
        .and_then(Value::as_str)
        .ok_or_else(|| SetRefusal::new(Err::InvalidIssuer, "the SET has no iss"))?;
    if iss != expect.issuer {
        return Err(SetRefusal::new(
            Err::InvalidIssuer,
            "the SET's iss is not this source's transmitter",
        ));
    }
    let audience = match object.get("aud") {
        Some(Value::String(one)) => one == expect.audience,
        Some(Value::Array(many)) => many.iter().any(|a| a.as_str() == Some(expect.audience)),
        _ => false,
    };
    if !audience {
        return Err(SetRefusal::new(
            Err::InvalidAudience,
            "this receiver is not among the SET's aud",
        ));
    }
    let jti = object
        .get("jti")
        .and_then(Value::as_str)
        .filter(|j| !j.is_empty() && j.len() <= MAX_EVENT_ID)
        .ok_or_else(|| invalid(format!("the SET has no jti of 1 to {MAX_EVENT_ID} bytes")))?;
    if !object.get("iat").is_some_and(Value::is_number) {
        return Err(invalid("the SET has no numeric iat"));
    }
    let events = object
        .get("events")
        .and_then(Value::as_object)
        .ok_or_else(|| invalid("the SET's events is not a JSON object"))?;
    if events.is_empty() {
        return Err(invalid("the SET's events is empty"));
    }
    if let Some((uri, _)) = events.iter().find(|(_, payload)| !payload.is_object()) {
        return Err(invalid(format!(
            "the event {:?} is not a JSON object",
            cut(uri)
        )));
    }
    Ok(Set {
        jti: jti.to_string(),
        iss: iss.to_string(),
        claims,
    })
}

/// `text` cut to 64 characters, for a description.
fn cut(text: &str) -> String {
    text.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expect() -> (Vec<String>, String, String) {
        (
            vec!["RS256".to_string(), "ES256".to_string()],
            "https://tx.example".to_string(),
            "https://rx.example".to_string(),
        )
    }

    fn encode(value: &str) -> String {
        URL_SAFE_NO_PAD.encode(value.as_bytes())
    }

    #[test]
    fn the_header_refuses_none_hmac_a_wrong_typ_and_a_jwe() {
        let (algorithms, issuer, audience) = expect();
        let expect = Expect {
            issuer: &issuer,
            audience: &audience,
            algorithms: &algorithms,
        };
        let token = |header: &str| format!("{}.{}.", encode(header), encode("{}"));
        let refused = |header: &str| header_err(&token(header), &expect);
        assert_eq!(
            refused(r#"{"alg":"none","typ":"secevent+jwt","kid":"k"}"#),
            Some(Err::InvalidKey)
        );
        assert_eq!(
            refused(r#"{"alg":"HS256","typ":"secevent+jwt","kid":"k"}"#),
            Some(Err::InvalidKey)
        );
        assert_eq!(
            refused(r#"{"alg":"RS256","typ":"JWT","kid":"k"}"#),
            Some(Err::InvalidRequest)
        );
        assert_eq!(
            refused(r#"{"alg":"RS256","typ":"secevent+jwt"}"#),
            Some(Err::InvalidKey)
        );
        assert_eq!(
            refused(r#"{"alg":"RS256","typ":"secevent+jwt","kid":"k","alg":"none"}"#),
            Some(Err::InvalidRequest)
        );
        assert_eq!(
            refused(r#"{"alg":"RS256","typ":"application/secevent+jwt","kid":"k"}"#),
            None
        );
        assert_eq!(header_err("a.b.c.d.e", &expect), Some(Err::InvalidRequest));
        assert_eq!(
            header_err("not a token", &expect),
            Some(Err::InvalidRequest)
        );
    }

    fn header_err(token: &str, expect: &Expect<'_>) -> Option<Err> {
        header(token, expect).err().map(|r| r.err)
    }

    #[test]
    fn claims_are_checked_after_the_signature() {
        let (algorithms, issuer, audience) = expect();
        let expect = Expect {
            issuer: &issuer,
            audience: &audience,
            algorithms: &algorithms,
        };
        let check = |claims: &str| {
            claims_of(serde_json::from_str(claims).expect("json"), &expect)
                .map(|s| s.jti)
                .map_err(|r| r.err)
        };
        let good = r#"{"iss":"https://tx.example","aud":["x","https://rx.example"],"jti":"j1","iat":1,"events":{"u":{}}}"#;
        assert_eq!(check(good), Ok("j1".to_string()));
        assert_eq!(
            check(
                r#"{"iss":"https://tx.example/","aud":"https://rx.example","jti":"j","iat":1,"events":{"u":{}}}"#
            ),
            Err(Err::InvalidIssuer)
        );
        assert_eq!(
            check(
                r#"{"iss":"https://tx.example","aud":"other","jti":"j","iat":1,"events":{"u":{}}}"#
            ),
            Err(Err::InvalidAudience)
        );
        assert_eq!(
            check(
                r#"{"iss":"https://tx.example","aud":"https://rx.example","iat":1,"events":{"u":{}}}"#
            ),
            Err(Err::InvalidRequest)
        );
        assert_eq!(
            check(
                r#"{"iss":"https://tx.example","aud":"https://rx.example","jti":"j","events":{"u":{}}}"#
            ),
            Err(Err::InvalidRequest)
        );
        assert_eq!(
            check(
                r#"{"iss":"https://tx.example","aud":"https://rx.example","jti":"j","iat":1,"events":{}}"#
            ),
            Err(Err::InvalidRequest)
        );
        assert_eq!(
            check(
                r#"{"iss":"https://tx.example","aud":"https://rx.example","jti":"j","iat":1,"events":{"u":1}}"#
            ),
            Err(Err::InvalidRequest)
        );
    }

    #[test]
    fn a_jwk_set_keeps_only_signing_keys_that_can_verify() {
        let doc = br#"{"keys":[
            {"kty":"oct","kid":"h","k":"c2VjcmV0"},
            {"kty":"RSA","kid":"small","n":"AQAB","e":"AQAB"},
            {"kty":"EC","crv":"P-256","x":"MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4","y":"4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM","kid":"ec","use":"sig"},
            {"kty":"EC","crv":"P-256","x":"MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4","y":"4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM","kid":"enc","use":"enc"},
            {"kty":"EC","crv":"P-256","x":"MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4","y":"4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM"}
        ]}"#;
        let (keys, skipped) = Keys::parse(doc).expect("a JWK Set");
        assert_eq!(keys.len(), 1);
        assert!(keys.get("ec").is_some());
        assert_eq!(skipped.len(), 4, "{skipped:?}");
        assert!(Keys::parse(b"{}").is_err());
        assert!(Keys::parse(br#"{"keys":[],"keys":[]}"#).is_err());
    }
}
