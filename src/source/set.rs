//! Security Event Tokens (RFC 8417) from a Shared Signals transmitter, checked with no I/O: the
//! JOSE header read, the key chosen by `kid` from a [`Keys`] set, the `alg` held to the source's
//! allow-list and to that key's type (so a token can never pick HS256 over an RSA key, nor
//! `none`), the signature verified over the token's bytes, and only then the claims parsed
//! (strictly: a member named twice is refused) and checked: `typ`, `iss`, `aud`, `jti`, `iat`,
//! `events`. A header asking for a JWS extension (`crit`, `b64`) is refused: idem understands
//! none. Each refusal carries RFC 8935's error code, which a push is answered with and a poll
//! reports in `setErrs`.
//!
//! A JWK is read with `jsonwebtoken`'s JWK model and parsed once, when its set is read, into
//! `aws-lc-rs` public keys (one for each algorithm the key may verify), which keep what a
//! verification needs (an RSA modulus's Montgomery constants, an EC point checked on its curve):
//! a SET's verification parses no key.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_lc_rs::signature::{
    self as sig, ParsedPublicKey, RsaParameters, RsaPublicKeyComponents, VerificationAlgorithm,
};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use idem_schemas::canonical;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::MAX_EVENT_ID;

/// The longest token taken (a SET is a few kilobytes).
pub const MAX_SET: usize = 64 * 1024;

/// The most events a SET may carry. SSF sends one event per SET, and RFC 8417 makes a SET's
/// events one logical event; a few more leave room for extensions, and a SET of thousands is
/// refused rather than read event by event.
pub const MAX_SET_EVENTS: usize = 16;

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

/// How an algorithm's signature is checked (RFC 7518 §3.1).
#[derive(Clone, Copy)]
enum Scheme {
    /// RSASSA-PKCS1-v1_5 or RSASSA-PSS, with a key of 2048 to 8192 bits.
    Rsa(&'static RsaParameters),
    /// ECDSA (the signature `R || S`, as JWS writes it) or Ed25519.
    Point(&'static dyn VerificationAlgorithm),
}

/// The signing algorithms a source may allow: public-key ones only (`none` and HS* never).
static ALGORITHMS: [(&str, KeyType, Scheme); 9] = [
    (
        "RS256",
        KeyType::Rsa,
        Scheme::Rsa(&sig::RSA_PKCS1_2048_8192_SHA256),
    ),
    (
        "RS384",
        KeyType::Rsa,
        Scheme::Rsa(&sig::RSA_PKCS1_2048_8192_SHA384),
    ),
    (
        "RS512",
        KeyType::Rsa,
        Scheme::Rsa(&sig::RSA_PKCS1_2048_8192_SHA512),
    ),
    (
        "PS256",
        KeyType::Rsa,
        Scheme::Rsa(&sig::RSA_PSS_2048_8192_SHA256),
    ),
    (
        "PS384",
        KeyType::Rsa,
        Scheme::Rsa(&sig::RSA_PSS_2048_8192_SHA384),
    ),
    (
        "PS512",
        KeyType::Rsa,
        Scheme::Rsa(&sig::RSA_PSS_2048_8192_SHA512),
    ),
    (
        "ES256",
        KeyType::P256,
        Scheme::Point(&sig::ECDSA_P256_SHA256_FIXED),
    ),
    (
        "ES384",
        KeyType::P384,
        Scheme::Point(&sig::ECDSA_P384_SHA384_FIXED),
    ),
    ("EdDSA", KeyType::Ed25519, Scheme::Point(&sig::ED25519)),
];

/// The kind of key the algorithm named `name` needs, if a source may allow it.
pub fn algorithm(name: &str) -> Option<KeyType> {
    ALGORITHMS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, kind, _)| *kind)
}

/// One verification key of a transmitter's JWK Set, parsed once.
pub struct VerifyingKey {
    kind: KeyType,
    /// The `alg` the JWK names, if it names one: then no other is accepted with it.
    alg: Option<String>,
    /// The key parsed for each algorithm it may verify, by the algorithm's name.
    parsed: Vec<(&'static str, ParsedPublicKey)>,
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

/// A JWK's public key material, decoded.
enum Material {
    /// An RSA modulus and exponent, big-endian.
    Rsa { n: Vec<u8>, e: Vec<u8> },
    /// An uncompressed EC point (`0x04 || x || y`), or an Ed25519 key.
    Point(Vec<u8>),
}

fn key(raw: &Value) -> Result<(String, VerifyingKey), String> {
    let jwk: Jwk = serde_json::from_value(raw.clone()).map_err(|e| e.to_string())?;
    let kid = jwk.common.key_id.clone().ok_or("no kid")?;
    if matches!(jwk.common.public_key_use, Some(ref u) if *u != PublicKeyUse::Signature) {
        return Err(format!("{kid:?} is not a signing key"));
    }
    let decode = |name: &str, value: &str| {
        URL_SAFE_NO_PAD
            .decode(value.as_bytes())
            .map_err(|_| format!("{kid:?}: its {name} is not base64url"))
    };
    let (kind, material) = match &jwk.algorithm {
        AlgorithmParameters::RSA(rsa) => {
            let n = decode("n", &rsa.n)?;
            let e = decode("e", &rsa.e)?;
            // RFC 7518 §6.3.1: each in the fewest octets.
            if n.first() == Some(&0) || e.first() == Some(&0) {
                return Err(format!("{kid:?}: its n or e has a leading zero octet"));
            }
            if n.len() * 8 < MIN_RSA_BITS {
                return Err(format!("{kid:?}: RSA under {MIN_RSA_BITS} bits"));
            }
            (KeyType::Rsa, Material::Rsa { n, e })
        }
        AlgorithmParameters::EllipticCurve(ec) => {
            let (kind, size) = match ec.curve {
                EllipticCurve::P256 => (KeyType::P256, 32),
                EllipticCurve::P384 => (KeyType::P384, 48),
                _ => return Err(format!("{kid:?}: an unsupported curve")),
            };
            let (x, y) = (decode("x", &ec.x)?, decode("y", &ec.y)?);
            // RFC 7518 §6.2.1.2 and §6.2.1.3: each coordinate the full size of the curve's.
            if x.len() != size || y.len() != size {
                return Err(format!("{kid:?}: its x and y are not {size} octets each"));
            }
            let mut point = Vec::with_capacity(1 + 2 * size);
            point.push(0x04);
            point.extend_from_slice(&x);
            point.extend_from_slice(&y);
            (kind, Material::Point(point))
        }
        AlgorithmParameters::OctetKeyPair(okp) if okp.curve == EllipticCurve::Ed25519 => {
            let x = decode("x", &okp.x)?;
            if x.len() != 32 {
                return Err(format!("{kid:?}: its x is not 32 octets"));
            }
            (KeyType::Ed25519, Material::Point(x))
        }
        AlgorithmParameters::OctetKeyPair(_) => return Err(format!("{kid:?}: not Ed25519")),
        AlgorithmParameters::OctetKey(_) => {
            return Err(format!("{kid:?}: a symmetric key is never used"))
        }
    };
    let alg = jwk.common.key_algorithm.map(|a| format!("{a:?}"));
    // Parsed here, once, for each algorithm the key may verify: an EC point is checked on its
    // curve, an RSA key's Montgomery constants are kept after its first verification.
    let mut parsed = Vec::new();
    for (name, _, scheme) in ALGORITHMS
        .iter()
        .filter(|(name, k, _)| *k == kind && alg.as_deref().is_none_or(|a| a == *name))
    {
        let key = match (scheme, &material) {
            (Scheme::Rsa(params), Material::Rsa { n, e }) => {
                RsaPublicKeyComponents { n, e }.to_parsed_public_key(params)
            }
            (Scheme::Point(algorithm), Material::Point(bytes)) => {
                ParsedPublicKey::new(*algorithm, bytes)
            }
            _ => continue,
        };
        parsed.push((*name, key.map_err(|e| format!("{kid:?}: {e}"))?));
    }
    Ok((kid, VerifyingKey { kind, alg, parsed }))
}

/// What a source checks a SET against.
#[derive(Debug, Clone)]
pub struct Expect<'a> {
    /// `iss`, compared exactly.
    pub issuer: &'a str,
    /// What one of `aud` must be (any of these).
    pub audience: &'a [String],
    /// The algorithms allowed.
    pub algorithms: &'a [String],
    /// Now, in Unix seconds.
    pub now_secs: i64,
    /// How old an `iat` may be.
    pub max_age: Duration,
    /// How far ahead of now an `iat` may be (clock skew).
    pub skew: Duration,
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
    /// Every member, as read.
    #[serde(skip)]
    members: Value,
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
    let raw = canonical::parse(&bytes).map_err(|e| invalid(format!("the JOSE header: {e}")))?;
    no_extensions(&raw)?;
    let mut header =
        Header::deserialize(&raw).map_err(|e| invalid(format!("the JOSE header: {e}")))?;
    header.members = raw;
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

/// Refuses a JOSE header that asks for an extension: idem understands none, so any `crit`
/// (RFC 7515 §4.1.11: a recipient that does not understand a listed extension must refuse the
/// JWS), well-formed or not, is refused; and `b64` other than `true` (RFC 7797's unencoded
/// payload, which would need `crit` and changes what the signature covers).
fn no_extensions(header: &Value) -> Result<(), SetRefusal> {
    match header.get("crit") {
        None => {}
        Some(Value::Array(names)) if !names.is_empty() && names.iter().all(Value::is_string) => {
            let names: Vec<String> = names
                .iter()
                .take(4)
                .filter_map(Value::as_str)
                .map(|n| format!("{:?}", cut(n)))
                .collect();
            return Err(invalid(format!(
                "the JOSE header's crit names extensions this receiver does not understand ({}): \
                 a SET with crit is refused (RFC 7515 §4.1.11)",
                names.join(", ")
            )));
        }
        Some(_) => {
            return Err(invalid(
                "the JOSE header's crit is not a non-empty array of names (RFC 7515 §4.1.11); \
                 this receiver understands no extension, so a SET with crit is refused",
            ))
        }
    }
    match header.get("b64") {
        None | Some(Value::Bool(true)) => Ok(()),
        Some(_) => Err(invalid(
            "the JOSE header's b64 is not true: an unencoded payload (RFC 7797) is not taken",
        )),
    }
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
    let kind =
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
    let parsed = key
        .parsed
        .iter()
        .find(|(name, _)| *name == header.alg)
        .map(|(_, parsed)| parsed)
        .ok_or_else(|| bad_key("the algorithm does not fit the key"))?;
    // The header's registered members (RFC 7515 §4.1) as `jsonwebtoken` types them.
    jsonwebtoken::Header::deserialize(&header.members)
        .map_err(|e| invalid(format!("not a valid JWS: {e}")))?;
    let (signed, signature) = token
        .rsplit_once('.')
        .ok_or_else(|| invalid("not a compact JWS: a SET is three base64url parts"))?;
    let signature = URL_SAFE_NO_PAD
        .decode(signature.as_bytes())
        .map_err(|_| invalid("not a valid JWS: its signature is not base64url"))?;
    parsed
        .verify_sig(signed.as_bytes(), &signature)
        .map_err(|_| bad_key("the signature does not verify"))?;
    // The signature holds: the claims are read from the verified bytes, strictly.
    let payload = signed.split_once('.').map(|(_, p)| p).unwrap_or_default();
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
        Some(Value::String(one)) => expect.audience.iter().any(|e| e == one),
        Some(Value::Array(many)) => many
            .iter()
            .filter_map(Value::as_str)
            .any(|a| expect.audience.iter().any(|e| e == a)),
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
    let iat = object
        .get("iat")
        .and_then(Value::as_f64)
        .ok_or_else(|| invalid("the SET has no numeric iat"))?;
    issued_within(iat, expect)?;
    let events = object
        .get("events")
        .and_then(Value::as_object)
        .ok_or_else(|| invalid("the SET's events is not a JSON object"))?;
    if events.is_empty() {
        return Err(invalid("the SET's events is empty"));
    }
    if events.len() > MAX_SET_EVENTS {
        return Err(invalid(format!(
            "the SET carries {} events; at most {MAX_SET_EVENTS} are taken (SSF sends one)",
            events.len()
        )));
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

/// Whether a SET issued at `iat` (Unix seconds) is within the source's window: at most
/// `max_age` old (a SET older than its claim could be sent again and decided again) and at most
/// `skew` ahead.
fn issued_within(iat: f64, expect: &Expect<'_>) -> Result<(), SetRefusal> {
    let now = expect.now_secs as f64;
    let max_age = expect.max_age.as_secs();
    if iat < now - max_age as f64 {
        return Err(invalid(format!(
            "the SET's iat is more than {max_age} s in the past: a SET this old is not taken \
             (its claim may have ended, and it would be decided again)"
        )));
    }
    let skew = expect.skew.as_secs();
    if iat > now + skew as f64 {
        return Err(invalid(format!(
            "the SET's iat is more than {skew} s in the future: the transmitter's clock or the SET \
             is wrong"
        )));
    }
    Ok(())
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
            audience: std::slice::from_ref(&audience),
            algorithms: &algorithms,
            now_secs: 1_000,
            max_age: Duration::from_secs(999),
            skew: Duration::from_secs(300),
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

    #[test]
    fn any_crit_and_a_b64_other_than_true_are_refused() {
        let (algorithms, issuer, audience) = expect();
        let expect = Expect {
            issuer: &issuer,
            audience: std::slice::from_ref(&audience),
            algorithms: &algorithms,
            now_secs: 1_000,
            max_age: Duration::from_secs(999),
            skew: Duration::from_secs(300),
        };
        let refused = |extra: &str| {
            let written = format!(r#"{{"alg":"RS256","typ":"secevent+jwt","kid":"k"{extra}}}"#);
            header(&format!("{}.{}.", encode(&written), encode("{}")), &expect)
                .err()
                .map(|r| (r.err, r.description))
        };
        for extra in [
            r#","crit":["exp"],"exp":1"#,
            r#","crit":["b64"],"b64":false"#,
            r#","crit":["b64"],"b64":true"#,
            r#","crit":[]"#,
            r#","crit":"b64""#,
            r#","crit":[1]"#,
            r#","crit":null"#,
        ] {
            let (err, description) = refused(extra).unwrap_or_else(|| panic!("{extra} taken"));
            assert_eq!(err, Err::InvalidRequest, "{extra}");
            assert!(description.contains("crit"), "{extra}: {description}");
        }
        for extra in [r#","b64":false"#, r#","b64":"false""#, r#","b64":null"#] {
            let (err, description) = refused(extra).unwrap_or_else(|| panic!("{extra} taken"));
            assert_eq!(err, Err::InvalidRequest, "{extra}");
            assert!(description.contains("b64"), "{extra}: {description}");
        }
        assert_eq!(refused(r#","b64":true"#), None, "b64 true is the default");
    }

    fn header_err(token: &str, expect: &Expect<'_>) -> Option<Err> {
        header(token, expect).err().map(|r| r.err)
    }

    #[test]
    fn claims_are_checked_after_the_signature() {
        let (algorithms, issuer, audience) = expect();
        let expect = Expect {
            issuer: &issuer,
            audience: std::slice::from_ref(&audience),
            algorithms: &algorithms,
            now_secs: 1_000,
            max_age: Duration::from_secs(999),
            skew: Duration::from_secs(300),
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
        let events = |n: usize| {
            let members: Vec<String> = (0..n).map(|i| format!(r#""e{i}":{{}}"#)).collect();
            format!(
                r#"{{"iss":"https://tx.example","aud":"https://rx.example","jti":"j","iat":1,"events":{{{}}}}}"#,
                members.join(",")
            )
        };
        assert_eq!(check(&events(MAX_SET_EVENTS)), Ok("j".to_string()));
        assert_eq!(check(&events(MAX_SET_EVENTS + 1)), Err(Err::InvalidRequest));
        assert_eq!(check(&events(4_000)), Err(Err::InvalidRequest));
    }

    #[test]
    fn iat_is_within_max_age_behind_and_the_skew_ahead() {
        let (algorithms, issuer, audience) = expect();
        let now = 1_764_000_000;
        let expect = Expect {
            issuer: &issuer,
            audience: std::slice::from_ref(&audience),
            algorithms: &algorithms,
            now_secs: now,
            max_age: Duration::from_secs(3600),
            skew: Duration::from_secs(300),
        };
        let check = |iat: Value| {
            let claims = serde_json::json!({"iss": issuer, "aud": audience, "jti": "j",
                "iat": iat, "events": {"u": {}}});
            claims_of(claims, &expect)
                .map(|_| ())
                .map_err(|r| (r.err, r.description))
        };
        for iat in [now, now - 3600, now + 300] {
            assert_eq!(check(iat.into()), Ok(()), "{iat}");
        }
        assert_eq!(
            check((now as f64 + 0.5).into()),
            Ok(()),
            "a fractional NumericDate"
        );
        let ten_years = 10 * 365 * 86_400;
        for (iat, why) in [
            (0, "in the past"),
            (-1, "in the past"),
            (now - 3601, "in the past"),
            (now - ten_years, "in the past"),
            (now + 301, "in the future"),
            (now + ten_years, "in the future"),
        ] {
            let refused = check(iat.into());
            assert!(
                matches!(&refused, Err((Err::InvalidRequest, d)) if d.contains(why)),
                "{iat}: {refused:?}"
            );
        }
        assert!(check(serde_json::json!("1764000000")).is_err(), "a string");
        assert!(check(serde_json::json!(1e300)).is_err(), "far ahead");
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

    /// A SET of `claims` under `header`, signed by `sign` over its signing input.
    fn signed(header: &Value, claims: &Value, sign: impl Fn(&[u8]) -> Vec<u8>) -> String {
        let input = format!(
            "{}.{}",
            encode(&header.to_string()),
            encode(&claims.to_string())
        );
        let signature = sign(input.as_bytes());
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature))
    }

    #[test]
    fn a_key_parsed_once_verifies_every_set_of_its_algorithms_and_nothing_else() {
        use devtools::jose::JwsKey;
        use ring::signature::{RSA_PKCS1_SHA256, RSA_PSS_SHA256};

        let (_, issuer, audience) = expect();
        let algorithms: Vec<String> = ["RS256", "PS256", "ES256"].map(String::from).into();
        let now = 1_764_000_000;
        let expect = Expect {
            issuer: &issuer,
            audience: std::slice::from_ref(&audience),
            algorithms: &algorithms,
            now_secs: now,
            max_age: Duration::from_secs(3600),
            skew: Duration::from_secs(300),
        };
        let claims = |jti: &str| {
            serde_json::json!({"iss": issuer, "aud": audience, "jti": jti, "iat": now,
                "events": {"https://schemas.openid.net/secevent/risc/event-type/account-disabled": {}}})
        };
        let rsa = JwsKey::rsa("rsa");
        let ec = JwsKey::ec("ec");
        // The RSA key's JWK names no alg, so it verifies RS256 and PS256 alike.
        let mut rsa_jwk = rsa.jwk();
        if let Some(members) = rsa_jwk.as_object_mut() {
            members.remove("alg");
        }
        let document = serde_json::json!({"keys": [rsa_jwk, ec.jwk()]}).to_string();
        let (keys, skipped) = Keys::parse(document.as_bytes()).expect("a JWK Set");
        assert!(skipped.is_empty(), "{skipped:?}");
        let JwsKey::Rsa { key: pair, .. } = &rsa else {
            panic!("an RSA key")
        };
        let rsa_with = |padding: &'static dyn ring::signature::RsaEncoding| {
            move |input: &[u8]| {
                let mut out = vec![0; pair.public().modulus_len()];
                let rng = ring::rand::SystemRandom::new();
                pair.sign(padding, &rng, input, &mut out).expect("RSA");
                out
            }
        };
        let header = |alg: &str, kid: &str| serde_json::json!({"alg": alg, "kid": kid, "typ": "secevent+jwt"});
        let check = |token: &str| {
            let read = super::header(token, &expect)?;
            let key = keys
                .get(read.kid.as_deref().unwrap_or_default())
                .ok_or_else(|| bad_key("no such kid"))?;
            verify(token, &read, key, &expect).map(|set| set.jti)
        };
        for round in 0..2 {
            let rs256 = signed(
                &header("RS256", "rsa"),
                &claims("rs"),
                rsa_with(&RSA_PKCS1_SHA256),
            );
            assert_eq!(check(&rs256), Ok("rs".to_string()), "round {round}");
            let ps256 = signed(
                &header("PS256", "rsa"),
                &claims("ps"),
                rsa_with(&RSA_PSS_SHA256),
            );
            assert_eq!(check(&ps256), Ok("ps".to_string()), "round {round}");
            assert_eq!(
                check(&ec.sign(&claims("es"))),
                Ok("es".to_string()),
                "round {round}"
            );
        }
        // A signature of RS256 presented as PS256, one altered, one of other claims.
        let rs256 = signed(
            &header("PS256", "rsa"),
            &claims("x"),
            rsa_with(&RSA_PKCS1_SHA256),
        );
        assert_eq!(check(&rs256).map_err(|r| r.err), Err(Err::InvalidKey));
        let good = ec.sign(&claims("x"));
        let (input, signature) = good.rsplit_once('.').expect("a JWS");
        let mut bytes = URL_SAFE_NO_PAD.decode(signature).expect("base64url");
        bytes[5] ^= 1;
        let altered = format!("{input}.{}", URL_SAFE_NO_PAD.encode(&bytes));
        assert_eq!(check(&altered).map_err(|r| r.err), Err(Err::InvalidKey));
        let other = ec.sign(&claims("y"));
        let spliced = format!("{}.{}", other.rsplit_once('.').expect("a JWS").0, signature);
        assert_eq!(check(&spliced).map_err(|r| r.err), Err(Err::InvalidKey));
        let unreadable = format!("{input}.{signature}!");
        assert_eq!(
            check(&unreadable).map_err(|r| r.err),
            Err(Err::InvalidRequest)
        );
        // The RSA key under ES256, the EC key under RS256.
        let confused = ec.sign_with_header(&header("ES256", "rsa"), &claims("x"));
        assert_eq!(check(&confused).map_err(|r| r.err), Err(Err::InvalidKey));
        let confused = rsa.sign_with_header(&header("RS256", "ec"), &claims("x"));
        assert_eq!(check(&confused).map_err(|r| r.err), Err(Err::InvalidKey));
        // A JWK that names RS256 verifies no PS256.
        let document = serde_json::json!({"keys": [rsa.jwk()]}).to_string();
        let (named, _) = Keys::parse(document.as_bytes()).expect("a JWK Set");
        let ps256 = signed(
            &header("PS256", "rsa"),
            &claims("ps"),
            rsa_with(&RSA_PSS_SHA256),
        );
        let read = super::header(&ps256, &expect).expect("a header");
        let refused = verify(&ps256, &read, named.get("rsa").expect("the key"), &expect);
        assert_eq!(
            refused.map(|s| s.jti).map_err(|r| r.err),
            Err(Err::InvalidKey)
        );
    }

    #[test]
    fn es384_and_eddsa_sets_verify_with_their_keys_parsed_once() {
        use ring::rand::SystemRandom;
        use ring::signature::{
            EcdsaKeyPair, Ed25519KeyPair, KeyPair, ECDSA_P384_SHA384_FIXED_SIGNING,
        };

        let (_, issuer, audience) = expect();
        let algorithms: Vec<String> = ["ES384", "EdDSA"].map(String::from).into();
        let now = 1_764_000_000;
        let expect = Expect {
            issuer: &issuer,
            audience: std::slice::from_ref(&audience),
            algorithms: &algorithms,
            now_secs: now,
            max_age: Duration::from_secs(3600),
            skew: Duration::from_secs(300),
        };
        let claims = serde_json::json!({"iss": issuer, "aud": audience, "jti": "j", "iat": now,
            "events": {"https://schemas.openid.net/secevent/caep/event-type/session-revoked": {}}});
        let rng = SystemRandom::new();
        let p384 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P384_SHA384_FIXED_SIGNING, &rng)
            .ok()
            .and_then(|pkcs8| {
                let alg = &ECDSA_P384_SHA384_FIXED_SIGNING;
                EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).ok()
            })
            .expect("a P-384 key");
        let ed = Ed25519KeyPair::generate_pkcs8(&rng)
            .ok()
            .and_then(|pkcs8| Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).ok())
            .expect("an Ed25519 key");
        let point = p384.public_key().as_ref();
        let document = serde_json::json!({"keys": [
            {"kty": "EC", "crv": "P-384", "kid": "p384",
                "x": URL_SAFE_NO_PAD.encode(&point[1..49]), "y": URL_SAFE_NO_PAD.encode(&point[49..97])},
            {"kty": "OKP", "crv": "Ed25519", "kid": "ed",
                "x": URL_SAFE_NO_PAD.encode(ed.public_key().as_ref())},
        ]})
        .to_string();
        let (keys, skipped) = Keys::parse(document.as_bytes()).expect("a JWK Set");
        assert!(skipped.is_empty(), "{skipped:?}");
        let header = |alg: &str, kid: &str| serde_json::json!({"alg": alg, "kid": kid, "typ": "secevent+jwt"});
        let check = |token: &str| {
            let read = super::header(token, &expect)?;
            let key = keys
                .get(read.kid.as_deref().unwrap_or_default())
                .ok_or_else(|| bad_key("no such kid"))?;
            verify(token, &read, key, &expect).map(|set| set.jti)
        };
        let es384 = signed(&header("ES384", "p384"), &claims, |input| {
            p384.sign(&rng, input).expect("ECDSA").as_ref().to_vec()
        });
        let eddsa = signed(&header("EdDSA", "ed"), &claims, |input| {
            ed.sign(input).as_ref().to_vec()
        });
        for _ in 0..2 {
            assert_eq!(check(&es384), Ok("j".to_string()));
            assert_eq!(check(&eddsa), Ok("j".to_string()));
        }
        // Each under the other's kid: the algorithm does not fit the key.
        let crossed = signed(&header("EdDSA", "p384"), &claims, |input| {
            ed.sign(input).as_ref().to_vec()
        });
        assert_eq!(check(&crossed).map_err(|r| r.err), Err(Err::InvalidKey));
        // EdDSA's signature of other claims.
        let mut other = claims.clone();
        other["jti"] = "k".into();
        let other = signed(&header("EdDSA", "ed"), &other, |input| {
            ed.sign(input).as_ref().to_vec()
        });
        let (input, _) = eddsa.rsplit_once('.').expect("a JWS");
        let (_, signature) = other.rsplit_once('.').expect("a JWS");
        let spliced = format!("{input}.{signature}");
        assert_eq!(check(&spliced).map_err(|r| r.err), Err(Err::InvalidKey));
    }

    #[test]
    fn a_jwk_that_is_no_valid_public_key_is_left_out_when_its_set_is_read() {
        let x = "MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4";
        let y = "4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM";
        let off_curve = "4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyA";
        let short = URL_SAFE_NO_PAD.encode([7u8; 31]);
        let mut n = vec![0u8];
        n.extend([0xc5u8; 256]);
        let n = URL_SAFE_NO_PAD.encode(n);
        let doc = serde_json::json!({"keys": [
            {"kty": "EC", "crv": "P-256", "kid": "good", "x": x, "y": y},
            {"kty": "EC", "crv": "P-256", "kid": "off-curve", "x": x, "y": off_curve},
            {"kty": "EC", "crv": "P-256", "kid": "short", "x": short, "y": y},
            {"kty": "EC", "crv": "P-384", "kid": "p256-as-p384", "x": x, "y": y},
            {"kty": "RSA", "kid": "leading-zero", "n": n, "e": "AQAB"},
            {"kty": "OKP", "crv": "Ed25519", "kid": "ed-short", "x": short},
        ]})
        .to_string();
        let (keys, skipped) = Keys::parse(doc.as_bytes()).expect("a JWK Set");
        assert_eq!(keys.len(), 1, "{skipped:?}");
        assert!(keys.get("good").is_some());
        for kid in [
            "off-curve",
            "short",
            "p256-as-p384",
            "leading-zero",
            "ed-short",
        ] {
            assert!(
                skipped.iter().any(|s| s.contains(kid)),
                "{kid} not named in {skipped:?}"
            );
        }
    }
}
