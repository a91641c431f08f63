//! `[tenants.<t>.ssf]`: the tenant as a Shared Signals transmitter. Its signing keys are read
//! from their PEM files here (a bad one is an error naming the file), so a reload (SIGHUP) reads
//! them again; its receivers each have a client secret (literal, file or environment) and an
//! audience.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use idem_actors::settings::read::{Dur, Resolved};
use serde::{Deserialize, Deserializer};

use super::{invalid, is_name, refused, ConfigError};
use crate::transmitter::keys::SigningKey;
use crate::transmitter::token::{Scopes, MANAGE, READ};
use crate::transmitter::{Receiver, TokenFailures, Transmitter};

/// The fewest characters a receiver's client secret may have.
const MIN_CLIENT_SECRET: usize = 16;

/// `[tenants.<t>.ssf]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSsf {
    #[serde(default)]
    signing_keys: Vec<PathBuf>,
    token_lifetime: Option<Dur>,
    min_verification_interval: Option<Dur>,
    token_failures: Option<RawTokenFailures>,
    #[serde(default)]
    receivers: BTreeMap<String, RawReceiver>,
}

/// `token_failures = { per_client, per_address, every }` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTokenFailures {
    per_client: Option<u32>,
    per_address: Option<u32>,
    every: Option<Dur>,
}

/// `[tenants.<t>.ssf.receivers.<client_id>]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReceiver {
    client_secret: Option<Resolved>,
    audience: Option<String>,
    #[serde(default)]
    endpoints: Vec<String>,
    /// The scopes its tokens may be granted: `ssf.read`, `ssf.manage` (default both).
    scopes: Option<Vec<String>>,
}

/// A tenant's `ssf`, read into its `Transmitter`.
pub(super) fn read<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Transmitter>, D::Error> {
    let raw = RawSsf::deserialize(d)?;
    transmitter("", raw).map(Some).map_err(refused)
}

/// The transmitter written under `key` (the rest of its key beneath the table being read).
fn transmitter(key: &str, raw: RawSsf) -> Result<Transmitter, ConfigError> {
    if raw.signing_keys.is_empty() {
        return Err(invalid(
            format!("{key}.signing_keys"),
            "is required: at least one PKCS#8 PEM file (RSA of 2048 bits or more, or P-256)",
        ));
    }
    let mut keys: Vec<Arc<SigningKey>> = Vec::new();
    for path in &raw.signing_keys {
        let signing = SigningKey::read(path).map_err(|e| {
            invalid(
                format!("{key}.signing_keys"),
                format!("{}: {e}", path.display()),
            )
        })?;
        if keys.iter().any(|k| k.kid() == signing.kid()) {
            return Err(invalid(
                format!("{key}.signing_keys"),
                format!("{} is listed twice", path.display()),
            ));
        }
        keys.push(Arc::new(signing));
    }
    let mut receivers = BTreeMap::new();
    for (client_id, r) in raw.receivers {
        let rkey = format!("{key}.receivers.{client_id}");
        if !is_name(&client_id) {
            return Err(invalid(
                &rkey,
                "a receiver's client_id is 1 to 64 of [A-Za-z0-9_-]",
            ));
        }
        let client_secret = r
            .client_secret
            .map(|s| s.0)
            .ok_or_else(|| invalid(format!("{rkey}.client_secret"), "is required"))?;
        if client_secret.chars().count() < MIN_CLIENT_SECRET {
            return Err(invalid(
                format!("{rkey}.client_secret"),
                format!("is shorter than {MIN_CLIENT_SECRET} characters: use a long random secret"),
            ));
        }
        let audience = r
            .audience
            .filter(|a| !a.is_empty())
            .ok_or_else(|| invalid(format!("{rkey}.audience"), "is required"))?;
        let endpoints = r
            .endpoints
            .iter()
            .map(|e| {
                reqwest::Url::parse(e)
                    .ok()
                    .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
                    .filter(|u| u.query().is_none() && u.fragment().is_none())
                    .ok_or_else(|| {
                        invalid(
                            format!("{rkey}.endpoints"),
                            format!("{e:?} is not an http(s) URL with a host"),
                        )
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let scopes = match &r.scopes {
            None => Scopes::ALL,
            Some(names) => Scopes::parse(names.iter().map(String::as_str))
                .map_err(|name| {
                    invalid(
                        format!("{rkey}.scopes"),
                        format!("{name:?} is neither {READ:?} nor {MANAGE:?}"),
                    )
                })?
                .ok_or_else(|| {
                    invalid(
                        format!("{rkey}.scopes"),
                        format!("is empty: list {READ:?}, {MANAGE:?} or both"),
                    )
                })?,
        };
        receivers.insert(
            client_id,
            Receiver {
                client_secret,
                audience,
                endpoints,
                scopes,
            },
        );
    }
    let token_lifetime = raw
        .token_lifetime
        .map_or(Duration::from_secs(3600), |d| d.0);
    if token_lifetime < Duration::from_secs(1) {
        return Err(invalid(
            format!("{key}.token_lifetime"),
            "is under a second: a token's expires_in is whole seconds",
        ));
    }
    let min_verification_interval = raw
        .min_verification_interval
        .map_or(Duration::from_secs(15), |d| d.0);
    let token_failures = token_failures(key, raw.token_failures)?;
    Ok(Transmitter {
        keys,
        receivers,
        token_lifetime,
        min_verification_interval,
        token_failures,
    })
}

/// `token_failures`, each part defaulted, each at least one (of its unit).
fn token_failures(key: &str, raw: Option<RawTokenFailures>) -> Result<TokenFailures, ConfigError> {
    let default = TokenFailures::default();
    let Some(raw) = raw else {
        return Ok(default);
    };
    let failures = TokenFailures {
        per_client: raw.per_client.unwrap_or(default.per_client),
        per_address: raw.per_address.unwrap_or(default.per_address),
        every: raw.every.map_or(default.every, |d| d.0),
    };
    for (name, value) in [
        ("per_client", failures.per_client),
        ("per_address", failures.per_address),
    ] {
        if value == 0 {
            return Err(invalid(
                format!("{key}.token_failures.{name}"),
                "is at least 1: a receiver with the wrong secret must be told so",
            ));
        }
    }
    if failures.every < Duration::from_millis(1) {
        return Err(invalid(
            format!("{key}.token_failures.every"),
            "is at least 1ms",
        ));
    }
    Ok(failures)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `[tenants.acme.ssf]` with one receiver, whose own lines are `receiver`.
    fn read(receiver: &str) -> Result<Transmitter, ConfigError> {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = dir.path().join("acme.pem");
        std::fs::write(&key, devtools::jose::ec_pem()).expect("write key");
        let text = format!(
            "signing_keys = [{key:?}]\n[receivers.okta]\nclient_secret = \"okta-client-secret-0001\"\naudience = \"https://okta.example\"\n{receiver}\n",
        );
        let raw: RawSsf = toml::from_str(&text).expect("toml");
        transmitter("tenants.acme.ssf", raw)
    }

    #[test]
    fn a_receiver_is_granted_both_scopes_unless_its_scopes_say_otherwise() {
        let okta = |t: Transmitter| t.receivers["okta"].scopes;
        assert_eq!(read("").map(okta).expect("valid"), Scopes::ALL);
        let read_only = read("scopes = [\"ssf.read\"]").map(okta).expect("valid");
        assert!(read_only.read && !read_only.manage);
        for (scopes, why) in [("[]", "is empty"), ("[\"ssf.write\"]", "\"ssf.write\"")] {
            let e = read(&format!("scopes = {scopes}")).expect_err("refused");
            let text = e.to_string();
            assert!(
                text.contains("tenants.acme.ssf.receivers.okta.scopes"),
                "{text}"
            );
            assert!(text.contains(why), "{text}");
        }
    }
}
