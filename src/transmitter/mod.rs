//! idem as a Shared Signals transmitter (SSF 1.0): each tenant with `[tenants.<t>.ssf]` has an
//! issuer, signing keys published as a JWK Set (`keys`), receivers that authenticate with OAuth
//! client credentials for short-lived tokens any node can check (`token`), and the streams those
//! receivers manage (`stream`, the rules; the store keeps them). A push stream's credential is
//! sealed under a key derived from `key_secret` (the engine's sealer, which seals SETs too).

pub mod keys;
pub mod stream;
pub mod token;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use keys::SigningKey;

/// A tenant's transmitter, as configured.
#[derive(Debug, Clone)]
pub struct Transmitter {
    /// Its signing keys: the first signs, every one is published.
    pub keys: Vec<Arc<SigningKey>>,
    /// Its receivers, by `client_id`.
    pub receivers: BTreeMap<String, Receiver>,
    /// How long an access token is good for.
    pub token_lifetime: Duration,
    /// How soon after one verification of a stream another may be asked for.
    pub min_verification_interval: Duration,
    /// How many failed token requests a receiver and an address may make.
    pub token_failures: TokenFailures,
}

/// `token_failures`: how many failed token requests (an unknown client, a wrong secret) a
/// receiver and a peer address may make at once, and how soon one more is allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenFailures {
    /// Failures a receiver's `client_id` may have in a burst.
    pub per_client: u32,
    /// Failures one address may have in a burst, whatever client it names.
    pub per_address: u32,
    /// One more failure is allowed every `every`.
    pub every: Duration,
}

impl Default for TokenFailures {
    fn default() -> Self {
        TokenFailures {
            per_client: 10,
            per_address: 20,
            every: Duration::from_secs(60),
        }
    }
}

/// A receiver that may manage streams. Its `Debug` leaves the secret out.
#[derive(Clone)]
pub struct Receiver {
    /// Its OAuth 2.0 client secret.
    pub client_secret: String,
    /// The `aud` of its streams' SETs.
    pub audience: String,
    /// Where its push streams may send (URL prefixes); none: any https URL.
    pub endpoints: Vec<reqwest::Url>,
    /// The most its tokens may be granted.
    pub scopes: token::Scopes,
}

impl Receiver {
    /// Whether this receiver's streams may push to `url`: under one of its `endpoints` (the
    /// same scheme and host, the same port where the entry names one, and a path under the
    /// entry's), or, when it has none, any https URL whose host is not inside idem's own
    /// network (loopback, private, link-local…: see [`idem_actors::destination`]). idem sends
    /// SETs where receivers say, so this keeps a receiver from pointing idem at what only idem
    /// can reach; a name that resolves inside is caught when a SET is sent.
    pub fn may_push_to(&self, url: &str) -> bool {
        let Ok(url) = reqwest::Url::parse(url) else {
            return false;
        };
        if self.endpoints.is_empty() {
            return url.scheme() == "https"
                && url
                    .host_str()
                    .is_some_and(|host| !idem_actors::destination::host_inside(host));
        }
        self.endpoints.iter().any(|entry| {
            entry.scheme() == url.scheme()
                && entry.host_str() == url.host_str()
                && entry
                    .port()
                    .is_none_or(|port| url.port_or_known_default() == Some(port))
                && url.path().starts_with(entry.path())
        })
    }
}

impl Receiver {
    /// Whether one of its `endpoints` names `host` (as a URL's `host_str`): the one way its
    /// streams may push inside idem's own network.
    pub fn names_host(&self, host: &str) -> bool {
        self.endpoints
            .iter()
            .any(|entry| entry.host_str() == Some(host))
    }
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("client_secret", &"..")
            .field("audience", &self.audience)
            .field("endpoints", &self.endpoints)
            .field("scopes", &self.scopes)
            .finish()
    }
}

/// The key every node derives from `key_secret` to sign its transmitters' access tokens.
pub struct TransmitterSecrets {
    /// Signs access tokens.
    pub token_key: [u8; 32],
}

impl TransmitterSecrets {
    /// The key `derive` gives (the engine's [`idem_actors::Engine::derived_key`]).
    pub fn new(derive: impl Fn(&[u8]) -> [u8; 32]) -> TransmitterSecrets {
        TransmitterSecrets {
            token_key: derive(b"idem/ssf-token/v1"),
        }
    }
}
