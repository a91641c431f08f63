//! A transmitter's signing keys: read from PKCS#8 PEM files (RSA of 2048 bits or more, signing
//! RS256, or P-256, signing ES256), each published in the JWK Set under a `kid` that is its RFC
//! 7638 thumbprint, so every node and every restart names a key the same way. Signing is ring's;
//! no private key is ever written anywhere by idem.

use std::path::Path;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use idem_schemas::hash::sha256;
use ring::rand::SystemRandom;
use ring::rsa::PublicKeyComponents;
use ring::signature::{self, EcdsaKeyPair, KeyPair, RsaKeyPair};
use serde_json::{json, Value};

/// A key that cannot be used, and why.
#[derive(Debug, thiserror::Error)]
pub enum SigningKeyError {
    /// The file could not be read.
    #[error("cannot read {0}")]
    Read(String),
    /// The file is not a PEM `PRIVATE KEY`.
    #[error("is not a PKCS#8 PEM private key (-----BEGIN PRIVATE KEY-----){0}")]
    NotPkcs8(&'static str),
    /// It is PKCS#8, but neither an RSA key nor a P-256 key ring takes.
    #[error("is neither an RSA key nor a P-256 (ES256) key")]
    Unsupported,
    /// An RSA key of fewer than 2048 bits or more than 4096 bits.
    #[error("is an RSA key outside 2048 to 4096 bits")]
    RsaSize,
    /// Signing failed.
    #[error("cannot sign")]
    Sign,
}

enum Pair {
    Rsa(RsaKeyPair),
    Ec(EcdsaKeyPair),
}

/// One signing key, with its public JWK.
pub struct SigningKey {
    pair: Pair,
    kid: String,
    jwk: Value,
    /// The protected header of its SETs, `{"alg","kid","typ":"secevent+jwt"}`, base64url:
    /// the same for every SET it signs.
    header: String,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKey({} {})", self.alg(), self.kid)
    }
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// What an RSA key's RFC 7638 thumbprint digests: its required members in lexicographic order,
/// with no whitespace (base64url needs no escaping).
fn rsa_thumbprint_input(e: &str, n: &str) -> String {
    format!(r#"{{"e":"{e}","kty":"RSA","n":"{n}"}}"#)
}

/// A big-endian integer without leading zero bytes, as a JWK writes it.
fn unsigned(bytes: &[u8]) -> &[u8] {
    let first = bytes.iter().position(|&b| b != 0).unwrap_or(bytes.len());
    &bytes[first..]
}

/// The DER inside a PEM `PRIVATE KEY` block.
fn pkcs8_der(pem: &str) -> Result<Vec<u8>, SigningKeyError> {
    const BEGIN: &str = "-----BEGIN PRIVATE KEY-----";
    const END: &str = "-----END PRIVATE KEY-----";
    let Some(start) = pem.find(BEGIN) else {
        let hint = if pem.contains("BEGIN RSA PRIVATE KEY") || pem.contains("BEGIN EC PRIVATE KEY")
        {
            ": convert it with `openssl pkcs8 -topk8 -nocrypt`"
        } else if pem.contains("BEGIN ENCRYPTED PRIVATE KEY") {
            ": it is encrypted; give idem the key unencrypted, from a secret store"
        } else {
            ""
        };
        return Err(SigningKeyError::NotPkcs8(hint));
    };
    let body = &pem[start + BEGIN.len()..];
    let end = body.find(END).ok_or(SigningKeyError::NotPkcs8(""))?;
    let text: String = body[..end].split_whitespace().collect();
    STANDARD
        .decode(text)
        .map_err(|_| SigningKeyError::NotPkcs8(""))
}

impl SigningKey {
    /// Reads the key in the PEM file at `path`.
    pub fn read(path: &Path) -> Result<SigningKey, SigningKeyError> {
        let pem = std::fs::read_to_string(path)
            .map_err(|e| SigningKeyError::Read(format!("{}: {e}", path.display())))?;
        SigningKey::from_pem(&pem)
    }

    /// The key in `pem`, a PKCS#8 `PRIVATE KEY` block.
    pub fn from_pem(pem: &str) -> Result<SigningKey, SigningKeyError> {
        let der = pkcs8_der(pem)?;
        let (pair, jwk, thumbprint) = match RsaKeyPair::from_pkcs8(&der) {
            Ok(rsa) => {
                let public = PublicKeyComponents::<Vec<u8>>::from(rsa.public());
                let (e, n) = (b64(unsigned(&public.e)), b64(unsigned(&public.n)));
                let thumbprint = rsa_thumbprint_input(&e, &n);
                let jwk = json!({"kty": "RSA", "e": e, "n": n});
                (Pair::Rsa(rsa), jwk, thumbprint)
            }
            Err(rsa_error) => {
                let rng = SystemRandom::new();
                let ec = EcdsaKeyPair::from_pkcs8(
                    &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
                    &der,
                    &rng,
                )
                .map_err(|_| match rsa_error.to_string().as_str() {
                    // ring takes RSA keys of 2048 to 4096 bits.
                    "TooSmall" | "TooLarge" => SigningKeyError::RsaSize,
                    _ => SigningKeyError::Unsupported,
                })?;
                let point = ec.public_key().as_ref();
                // An uncompressed P-256 point: 0x04 ‖ x ‖ y, 32 bytes each.
                let (x, y) = point
                    .get(1..)
                    .map(|xy| xy.split_at(xy.len() / 2))
                    .ok_or(SigningKeyError::Unsupported)?;
                let (x, y) = (b64(x), b64(y));
                let thumbprint = format!(r#"{{"crv":"P-256","kty":"EC","x":"{x}","y":"{y}"}}"#);
                let jwk = json!({"kty": "EC", "crv": "P-256", "x": x, "y": y});
                (Pair::Ec(ec), jwk, thumbprint)
            }
        };
        // RFC 7638: the thumbprint is over the required members in lexicographic order, with
        // no whitespace (base64url needs no escaping).
        let kid = b64(&sha256(thumbprint.as_bytes()));
        let mut jwk = jwk;
        if let Some(members) = jwk.as_object_mut() {
            members.insert("kid".into(), Value::from(kid.clone()));
            members.insert("use".into(), Value::from("sig"));
            members.insert(
                "alg".into(),
                Value::from(match pair {
                    Pair::Rsa(_) => "RS256",
                    Pair::Ec(_) => "ES256",
                }),
            );
        }
        let alg = match pair {
            Pair::Rsa(_) => "RS256",
            Pair::Ec(_) => "ES256",
        };
        let header = json!({"alg": alg, "kid": kid, "typ": "secevent+jwt"});
        let header = b64(header.to_string().as_bytes());
        Ok(SigningKey {
            pair,
            kid,
            jwk,
            header,
        })
    }

    /// Its `kid`.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The JWS algorithm it signs with.
    pub fn alg(&self) -> &'static str {
        match self.pair {
            Pair::Rsa(_) => "RS256",
            Pair::Ec(_) => "ES256",
        }
    }

    /// Its public JWK, with `kid`, `alg` and `use`.
    pub fn jwk(&self) -> &Value {
        &self.jwk
    }

    /// A Security Event Token: a compact JWS of the JSON `claims` with the protected header
    /// `{"alg","kid","typ":"secevent+jwt"}`.
    pub fn sign(&self, claims: &[u8]) -> Result<String, SigningKeyError> {
        let input = format!("{}.{}", self.header, b64(claims));
        let rng = SystemRandom::new();
        let signature = match &self.pair {
            Pair::Rsa(rsa) => {
                let mut out = vec![0; rsa.public().modulus_len()];
                rsa.sign(
                    &signature::RSA_PKCS1_SHA256,
                    &rng,
                    input.as_bytes(),
                    &mut out,
                )
                .map_err(|_| SigningKeyError::Sign)?;
                out
            }
            Pair::Ec(ec) => ec
                .sign(&rng, input.as_bytes())
                .map_err(|_| SigningKeyError::Sign)?
                .as_ref()
                .to_vec(),
        };
        Ok(format!("{input}.{}", b64(&signature)))
    }
}

impl idem_actors::set::SetSigner for SigningKey {
    fn sign(&self, claims: &[u8]) -> Result<String, String> {
        SigningKey::sign(self, claims).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::signature::{UnparsedPublicKey, RSA_PKCS1_2048_8192_SHA256};

    const RSA_PEM: &str = include_str!("../../devtools/fixtures/transmitter-rsa.pem");

    fn unb64(text: &str) -> Vec<u8> {
        URL_SAFE_NO_PAD.decode(text).expect("base64url")
    }

    #[test]
    fn an_rsa_key_signs_rs256_under_its_thumbprint() {
        let key = SigningKey::from_pem(RSA_PEM).expect("key");
        assert_eq!(key.alg(), "RS256");
        let jwk = key.jwk();
        assert_eq!(jwk["kid"], key.kid());
        assert_eq!(
            (jwk["use"].as_str(), jwk["alg"].as_str()),
            (Some("sig"), Some("RS256"))
        );
        let jws = key.sign(br#"{"jti":"1"}"#).expect("sign");
        let (input, signature) = jws.rsplit_once('.').expect("three parts");
        let header: Value =
            serde_json::from_slice(&unb64(input.split('.').next().expect("header"))).expect("json");
        assert_eq!(
            header,
            json!({"alg": "RS256", "kid": key.kid(), "typ": "secevent+jwt"})
        );
        let public = ring::rsa::PublicKeyComponents {
            n: unb64(jwk["n"].as_str().expect("n")),
            e: unb64(jwk["e"].as_str().expect("e")),
        };
        public
            .verify(
                &RSA_PKCS1_2048_8192_SHA256,
                input.as_bytes(),
                &unb64(signature),
            )
            .expect("verifies under the published JWK");
        // The same key read again is named the same.
        assert_eq!(SigningKey::from_pem(RSA_PEM).expect("key").kid(), key.kid());
    }

    #[test]
    fn an_rsa_thumbprint_is_rfc_7638s() {
        // RFC 7638 §3.1's example key and thumbprint.
        let n = "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw";
        let digest = sha256(rsa_thumbprint_input("AQAB", n).as_bytes());
        assert_eq!(b64(&digest), "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs");
    }

    #[test]
    fn a_p256_key_signs_es256() {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .expect("key");
        let pem = format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            STANDARD.encode(pkcs8.as_ref())
        );
        let key = SigningKey::from_pem(&pem).expect("key");
        assert_eq!(key.alg(), "ES256");
        let jwk = key.jwk();
        let mut point = vec![4];
        point.extend(unb64(jwk["x"].as_str().expect("x")));
        point.extend(unb64(jwk["y"].as_str().expect("y")));
        let jws = key.sign(b"{}").expect("sign");
        let (input, sig) = jws.rsplit_once('.').expect("parts");
        UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, &point)
            .verify(input.as_bytes(), &unb64(sig))
            .expect("verifies");
    }

    #[test]
    fn refuses_what_is_not_a_pkcs8_signing_key() {
        let pkcs1 = RSA_PEM.replace("PRIVATE KEY", "RSA PRIVATE KEY");
        let error = SigningKey::from_pem(&pkcs1)
            .expect_err("PKCS#1")
            .to_string();
        assert!(error.contains("openssl pkcs8 -topk8"), "{error}");
        assert!(SigningKey::from_pem("").is_err());
        let cut = &RSA_PEM[..RSA_PEM.len() / 2];
        assert!(SigningKey::from_pem(&format!("{cut}\n-----END PRIVATE KEY-----")).is_err());
        // An Ed25519 key (RFC 8410's example) is PKCS#8, but not one a transmitter signs with.
        let ed25519 = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEINTuctv5E1hK1bbY8fdp+K06/nwoy/HU++CXqI9EdVhC\n-----END PRIVATE KEY-----\n";
        assert!(matches!(
            SigningKey::from_pem(ed25519),
            Err(SigningKeyError::Unsupported)
        ));
    }
}
