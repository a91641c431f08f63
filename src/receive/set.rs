//! The reference receiver's Shared Signals side (`idem receive --ssf-issuer`): a transmitter's
//! SETs checked as a receiver must (RFC 8935): its metadata read from
//! `/.well-known/ssf-configuration`, its JWK Set from the metadata's `jwks_uri`, each SET's key
//! chosen by `kid` with an `alg` that fits it, then `typ`, `iss`, `aud`, `jti`, `iat` and `events`
//! checked (by the same checks an `ssf` source makes). The keys are fetched at the first SET and
//! again for a `kid` they do not hold, at most once a minute.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::Mutex;

use crate::source::set::{self, Err as SetErr, Expect, Keys, SetRefusal};

/// The algorithms a receiver accepts: what SSF transmitters sign with.
const ALGORITHMS: [&str; 2] = ["RS256", "ES256"];

/// The least time between two fetches of the transmitter's keys once it has answered; after a
/// failed fetch, a second.
const REFETCH: Duration = Duration::from_secs(60);
const RETRY: Duration = Duration::from_secs(1);

/// How old a SET's `iat` may be (a transmitter redelivers a SET with its bytes unchanged, for as
/// long as its retries last), and how far ahead of this clock.
const MAX_AGE: Duration = Duration::from_secs(30 * 86_400);
const SKEW: Duration = Duration::from_secs(300);

/// The largest metadata or JWK Set document read.
const MAX_DOCUMENT: usize = 256 * 1024;

/// The transmitter a receiver takes SETs from.
pub struct SetSource {
    issuer: String,
    audience: String,
    algorithms: Vec<String>,
    http: reqwest::Client,
    keys: Mutex<Cached>,
}

#[derive(Default)]
struct Cached {
    keys: Keys,
    /// When the keys were last fetched, and whether that fetch worked.
    fetched: Option<(Instant, bool)>,
}

/// A SET that was checked: its `jti` and what to print of it.
pub struct Accepted {
    /// `iss` and `jti`, what a receiver deduplicates on.
    pub id: String,
    /// One line: the event types, `sub_id` and `txn`.
    pub summary: String,
}

impl SetSource {
    /// SETs of `issuer` for `audience`.
    pub fn new(issuer: String, audience: String) -> Arc<SetSource> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        Arc::new(SetSource {
            issuer,
            audience,
            algorithms: ALGORITHMS.iter().map(|a| a.to_string()).collect(),
            http,
            keys: Mutex::new(Cached::default()),
        })
    }

    /// Where the transmitter's metadata is (SSF §7.2): the issuer's path after
    /// `/.well-known/ssf-configuration`.
    fn metadata_url(&self) -> Result<String, String> {
        let url = reqwest::Url::parse(&self.issuer).map_err(|e| format!("--ssf-issuer: {e}"))?;
        let origin = url.origin().ascii_serialization();
        let path = url.path().trim_end_matches('/');
        Ok(format!("{origin}/.well-known/ssf-configuration{path}"))
    }

    async fn document(&self, url: &str) -> Result<Value, String> {
        let mut response = self
            .http
            .get(url)
            .send()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        if !response.status().is_success() {
            return Err(format!("{url}: {}", response.status()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| format!("{url}: {e}"))? {
            body.extend_from_slice(&chunk);
            if body.len() > MAX_DOCUMENT {
                return Err(format!("{url}: larger than {MAX_DOCUMENT} bytes"));
            }
        }
        serde_json::from_slice(&body).map_err(|e| format!("{url}: {e}"))
    }

    /// The transmitter's keys, fetched anew from its metadata's `jwks_uri`.
    async fn fetch(&self) -> Result<Keys, String> {
        let metadata = self.document(&self.metadata_url()?).await?;
        if metadata["issuer"].as_str() != Some(self.issuer.as_str()) {
            return Err(format!(
                "the metadata names the issuer {}, not {}",
                metadata["issuer"], self.issuer
            ));
        }
        let jwks_uri = metadata["jwks_uri"]
            .as_str()
            .ok_or("the metadata names no jwks_uri")?;
        let jwks = self.document(jwks_uri).await?;
        let (keys, _skipped) = Keys::parse(jwks.to_string().as_bytes())?;
        Ok(keys)
    }

    /// The key `kid` names: from the keys held, or from the keys fetched again when they do not
    /// hold it and the last fetch is old enough.
    async fn key(&self, kid: &str) -> Result<Arc<set::VerifyingKey>, SetRefusal> {
        let mut cached = self.keys.lock().await;
        if let Some(key) = cached.keys.get(kid) {
            return Ok(key.clone());
        }
        let due = match cached.fetched {
            None => true,
            Some((at, true)) => at.elapsed() >= REFETCH,
            Some((at, false)) => at.elapsed() >= RETRY,
        };
        if due {
            match self.fetch().await {
                Ok(keys) => {
                    cached.keys = keys;
                    cached.fetched = Some((Instant::now(), true));
                }
                Err(e) => {
                    println!("cannot fetch the transmitter's keys: {e}");
                    cached.fetched = Some((Instant::now(), false));
                }
            }
        }
        cached.keys.get(kid).cloned().ok_or_else(|| {
            SetRefusal::new(SetErr::InvalidKey, "no key of the transmitter has this kid")
        })
    }

    /// `token` checked.
    pub async fn check(&self, token: &str) -> Result<Accepted, SetRefusal> {
        let expect = Expect {
            issuer: &self.issuer,
            audience: std::slice::from_ref(&self.audience),
            algorithms: &self.algorithms,
            now_secs: (idem_schemas::timefmt::now_ms() / 1000) as i64,
            max_age: MAX_AGE,
            skew: SKEW,
        };
        let header = set::header(token, &expect)?;
        let key = self.key(header.kid.as_deref().unwrap_or_default()).await?;
        let verified = set::verify(token, &header, &key, &expect)?;
        let events: Vec<&str> = verified.events().map(|(uri, _)| uri.as_str()).collect();
        let summary = format!(
            "events={} sub_id={} txn={}",
            events.join(","),
            verified.claims.get("sub_id").unwrap_or(&Value::Null),
            verified
                .claims
                .get("txn")
                .and_then(Value::as_str)
                .unwrap_or("-"),
        );
        Ok(Accepted {
            id: format!("{} {}", verified.iss, verified.jti),
            summary,
        })
    }
}
