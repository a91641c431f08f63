//! A Shared Signals transmitter's JOSE, as the tests, the bench and the simulations play one,
//! independent of the crate idem verifies with: compact JWS signed with ring (RS256 with the
//! fixture RSA key, ES256 with a P-256 key made per run), each key's public JWK, and the
//! forgeries a hostile sender tries (`alg: none`, HS256 keyed with the RSA public key, an ES256
//! header over an RSA key's `kid`). Panics on what cannot fail with these fixed inputs.

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use hmac::{Hmac, Mac};
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair, RsaKeyPair};
use serde_json::{json, Value};
use sha2::Sha256;

/// The fixture RSA key (PKCS#8 PEM, 2048 bits), a test key only.
const RSA_PEM: &str = include_str!("../fixtures/transmitter-rsa.pem");

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// A transmitter's key for signing compact JWS, and its `kid`.
pub enum JwsKey {
    Rsa { kid: String, key: RsaKeyPair },
    Ec { kid: String, key: EcdsaKeyPair },
}

impl JwsKey {
    /// The fixture RSA key under `kid`.
    pub fn rsa(kid: &str) -> JwsKey {
        let body: String = RSA_PEM
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect();
        let der = STANDARD.decode(body).expect("PEM base64");
        JwsKey::Rsa {
            kid: kid.into(),
            key: RsaKeyPair::from_pkcs8(&der).expect("RSA PKCS#8"),
        }
    }

    /// A new P-256 key under `kid`.
    pub fn ec(kid: &str) -> JwsKey {
        let rng = SystemRandom::new();
        let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).expect("P-256 key");
        JwsKey::Ec {
            kid: kid.into(),
            key: EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).expect("P-256 key"),
        }
    }

    pub fn kid(&self) -> &str {
        match self {
            JwsKey::Rsa { kid, .. } | JwsKey::Ec { kid, .. } => kid,
        }
    }

    pub fn alg(&self) -> &'static str {
        match self {
            JwsKey::Rsa { .. } => "RS256",
            JwsKey::Ec { .. } => "ES256",
        }
    }

    /// The public JWK.
    pub fn jwk(&self) -> Value {
        match self {
            JwsKey::Rsa { kid, key } => {
                let public: ring::rsa::PublicKeyComponents<Vec<u8>> = key.public().into();
                json!({"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
                    "n": b64(&public.n), "e": b64(&public.e)})
            }
            JwsKey::Ec { kid, key } => {
                let point = key.public_key().as_ref();
                json!({"kty": "EC", "kid": kid, "use": "sig", "crv": "P-256",
                    "x": b64(&point[1..33]), "y": b64(&point[33..65])})
            }
        }
    }

    /// The bytes of the public key a careless verifier would use as an HMAC secret.
    pub fn public_bytes(&self) -> Vec<u8> {
        match self {
            JwsKey::Rsa { key, .. } => key.public().as_ref().to_vec(),
            JwsKey::Ec { key, .. } => key.public_key().as_ref().to_vec(),
        }
    }

    /// `claims` as a compact JWS under `header`, signed with this key.
    pub fn sign_with_header(&self, header: &Value, claims: &Value) -> String {
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let rng = SystemRandom::new();
        let signature = match self {
            JwsKey::Rsa { key, .. } => {
                let mut sig = vec![0; key.public().modulus_len()];
                key.sign(
                    &signature::RSA_PKCS1_SHA256,
                    &rng,
                    input.as_bytes(),
                    &mut sig,
                )
                .expect("RSA signature");
                sig
            }
            JwsKey::Ec { key, .. } => key
                .sign(&rng, input.as_bytes())
                .expect("ECDSA signature")
                .as_ref()
                .to_vec(),
        };
        format!("{input}.{}", b64(&signature))
    }

    /// `claims` as a SET signed with this key, as a transmitter sends it.
    pub fn sign(&self, claims: &Value) -> String {
        let header = json!({"alg": self.alg(), "kid": self.kid(), "typ": "secevent+jwt"});
        self.sign_with_header(&header, claims)
    }
}

/// The fixture RSA key's PKCS#8 PEM, for a transmitter idem plays.
pub fn rsa_pem() -> &'static str {
    RSA_PEM
}

/// A new P-256 key as PKCS#8 PEM, for a transmitter idem plays.
pub fn ec_pem() -> String {
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
        .expect("P-256 key");
    let body = STANDARD.encode(pkcs8.as_ref());
    let lines: Vec<&str> = body
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).expect("base64 is ASCII"))
        .collect();
    format!(
        "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
        lines.join("\n")
    )
}

/// The RFC 7638 thumbprint of a public JWK (RSA or EC), base64url.
pub fn thumbprint(jwk: &Value) -> String {
    let members: Value = match jwk["kty"].as_str() {
        Some("RSA") => json!({"e": jwk["e"], "kty": "RSA", "n": jwk["n"]}),
        _ => json!({"crv": jwk["crv"], "kty": jwk["kty"], "x": jwk["x"], "y": jwk["y"]}),
    };
    b64(ring::digest::digest(&ring::digest::SHA256, members.to_string().as_bytes()).as_ref())
}

/// A JWK Set of `keys`.
pub fn jwk_set(keys: &[&JwsKey]) -> Value {
    json!({"keys": keys.iter().map(|k| k.jwk()).collect::<Vec<_>>()})
}

/// An unsigned token: `alg: none`.
pub fn unsigned(kid: &str, claims: &Value) -> String {
    let header = json!({"alg": "none", "kid": kid, "typ": "secevent+jwt"});
    format!(
        "{}.{}.",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    )
}

/// The confusion attack: HS256 keyed with the public key bytes of the key `kid` names.
pub fn hs256_with(kid: &str, secret: &[u8], claims: &Value) -> String {
    let header = json!({"alg": "HS256", "kid": kid, "typ": "secevent+jwt"});
    let input = format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    );
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("hmac");
    mac.update(input.as_bytes());
    format!("{input}.{}", b64(&mac.finalize().into_bytes()))
}

/// The header and claims of a compact JWS `token` whose signature verifies under the key of
/// `jwks` its `kid` names, with that key's algorithm (RS256 or ES256): a receiver's check of a
/// SET, independent of the transmitter that signed it.
pub fn verify(token: &str, jwks: &Value) -> Result<(Value, Value), String> {
    let unb64 = |part: &str| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(part)
            .map_err(|e| format!("not base64url: {e}"))
    };
    let mut parts = token.split('.');
    let (Some(header), Some(claims), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("not a compact JWS".into());
    };
    let header_json: Value =
        serde_json::from_slice(&unb64(header)?).map_err(|e| format!("header: {e}"))?;
    let key = jwks["keys"]
        .as_array()
        .and_then(|keys| keys.iter().find(|k| k["kid"] == header_json["kid"]))
        .ok_or("no key with the token's kid")?;
    let input = format!("{header}.{claims}");
    let signature = unb64(signature)?;
    let field = |name: &str| unb64(key[name].as_str().unwrap_or_default());
    match (header_json["alg"].as_str(), key["kty"].as_str()) {
        (Some("RS256"), Some("RSA")) => ring::rsa::PublicKeyComponents {
            n: field("n")?,
            e: field("e")?,
        }
        .verify(
            &signature::RSA_PKCS1_2048_8192_SHA256,
            input.as_bytes(),
            &signature,
        )
        .map_err(|_| "the RS256 signature does not verify".to_string())?,
        (Some("ES256"), Some("EC")) => {
            let mut point = vec![4];
            point.extend(field("x")?);
            point.extend(field("y")?);
            signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, &point)
                .verify(input.as_bytes(), &signature)
                .map_err(|_| "the ES256 signature does not verify".to_string())?
        }
        (alg, kty) => return Err(format!("alg {alg:?} does not fit a {kty:?} key")),
    }
    let claims: Value =
        serde_json::from_slice(&unb64(claims)?).map_err(|e| format!("claims: {e}"))?;
    Ok((header_json, claims))
}
