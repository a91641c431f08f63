//! idem as a Shared Signals transmitter (SSF 1.0): each tenant with `[tenants.<t>.ssf]` has an
//! issuer, signing keys published as a JWK Set (`keys`), receivers that authenticate with OAuth
//! client credentials for short-lived tokens any node can check (`token`), and the streams those
//! receivers manage (`stream`, the rules; the store keeps them). What must be kept but not in
//! clear is sealed under a key derived from `key_secret` (`seal`).

pub mod keys;
pub mod seal;
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
}

/// A receiver that may manage streams. Its `Debug` leaves the secret out.
#[derive(Clone)]
pub struct Receiver {
    /// Its OAuth 2.0 client secret.
    pub client_secret: String,
    /// The `aud` of its streams' SETs.
    pub audience: String,
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("client_secret", &"..")
            .field("audience", &self.audience)
            .finish()
    }
}

/// The keys every node derives from `key_secret` for its transmitters.
pub struct Secrets {
    /// Seals what is stored but not in clear.
    pub sealer: seal::Sealer,
    /// Signs access tokens.
    pub token_key: [u8; 32],
}

impl Secrets {
    /// The keys `derive` gives for each purpose (the engine's [`idem_actors::Engine::derived_key`]).
    pub fn new(derive: impl Fn(&[u8]) -> [u8; 32]) -> Secrets {
        Secrets {
            sealer: seal::Sealer::new(derive(b"idem/ssf-seal/v1")),
            token_key: derive(b"idem/ssf-token/v1"),
        }
    }
}
