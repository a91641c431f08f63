//! A transmitter's JWK Set, fetched (an `http(s)` URL, or the `jwks_uri` of a subscribed
//! source's transmitter's SSF metadata) or read (a file) and cached per source.
//! A `kid` the cache does not hold fetches the set again, at most once per `refetch` interval
//! counting every fetch, so a sender who invents `kid`s cannot make idem fetch at will. A fetch
//! is bounded in time and size, and only the requests of its own source that need a new key wait
//! for it: a known key is read without waiting, and other sources never wait. Each key is parsed
//! once, when its set is read ([`Keys::parse`]): a cached key verifies without parsing again.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use super::set::{Keys, VerifyingKey};

/// The largest JWK Set document read.
pub const MAX_JWKS: usize = 256 * 1024;

/// How long a fetch may take.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a JWK Set is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwksAt {
    /// Fetched with `GET`.
    Url(String),
    /// Read from disk.
    File(PathBuf),
    /// Fetched from the `jwks_uri` of the SSF metadata of the transmitter of this issuer
    /// (read again at each fetch, so a moved set is followed).
    Metadata(String),
}

impl JwksAt {
    /// `text` as the config writes it: an `http://` or `https://` URL, else a path.
    pub fn parse(text: &str) -> JwksAt {
        if text.starts_with("https://") || text.starts_with("http://") {
            JwksAt::Url(text.to_string())
        } else {
            JwksAt::File(PathBuf::from(text))
        }
    }
}

/// Why no key was found for a `kid`.
#[derive(Debug, thiserror::Error)]
pub enum Missing {
    /// The set, fetched now or within the interval, has no such key.
    #[error("no key of the transmitter's JWK Set has this kid")]
    Unknown,
    /// The set could not be fetched (a transient failure on either side).
    #[error("the transmitter's JWK Set could not be fetched: {0}")]
    Fetch(String),
}

/// A source's cached key set.
pub struct KeyCache {
    at: JwksAt,
    refetch: Duration,
    client: reqwest::Client,
    keys: RwLock<Arc<Keys>>,
    /// When the set was last fetched and, if it failed, why; held while a fetch runs.
    last: tokio::sync::Mutex<Option<(Instant, Option<String>)>>,
}

impl KeyCache {
    /// An empty cache of the set at `at`, fetched again at most once per `refetch`.
    pub fn new(at: JwksAt, refetch: Duration, client: reqwest::Client) -> Self {
        KeyCache {
            at,
            refetch,
            client,
            keys: RwLock::new(Arc::new(Keys::default())),
            last: tokio::sync::Mutex::new(None),
        }
    }

    fn cached(&self, kid: &str) -> Option<Arc<VerifyingKey>> {
        let keys = match self.keys.read() {
            Ok(keys) => keys,
            Err(poisoned) => poisoned.into_inner(),
        };
        keys.get(kid).cloned()
    }

    /// The key named `kid`: from the cache, else from the set fetched again if the last fetch is
    /// older than the interval.
    pub async fn key(&self, kid: &str) -> Result<Arc<VerifyingKey>, Missing> {
        if let Some(key) = self.cached(kid) {
            return Ok(key);
        }
        let mut last = self.last.lock().await;
        // Another request may have fetched it while this one waited.
        if let Some(key) = self.cached(kid) {
            return Ok(key);
        }
        if let Some((at, failed)) = last.as_ref() {
            if at.elapsed() < self.refetch {
                // Within the interval the last fetch's answer stands: a set without the key,
                // or a failure (which is not the sender's fault, so not "no such key").
                return Err(failed.clone().map_or(Missing::Unknown, Missing::Fetch));
            }
        }
        let fetched = match self.fetch().await {
            Ok(document) => Keys::parse(&document),
            Err(e) => Err(e),
        };
        *last = Some((Instant::now(), fetched.as_ref().err().cloned()));
        let (keys, skipped) = fetched.map_err(Missing::Fetch)?;
        if !skipped.is_empty() {
            tracing::warn!(jwks = ?self.at, ?skipped, "keys of a JWK Set left out");
        }
        let found = keys.get(kid).cloned();
        match self.keys.write() {
            Ok(mut cached) => *cached = Arc::new(keys),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(keys),
        }
        found.ok_or(Missing::Unknown)
    }

    async fn fetch(&self) -> Result<Vec<u8>, String> {
        match &self.at {
            JwksAt::File(path) => {
                let path = path.clone();
                let bytes = tokio::task::spawn_blocking(move || {
                    std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))
                })
                .await
                .map_err(|e| e.to_string())??;
                if bytes.len() > MAX_JWKS {
                    return Err(format!("over {MAX_JWKS} bytes"));
                }
                Ok(bytes)
            }
            JwksAt::Url(url) => self.fetch_url(url).await,
            JwksAt::Metadata(issuer) => {
                let url = self.jwks_uri(issuer).await?;
                self.fetch_url(&url).await
            }
        }
    }

    /// The `jwks_uri` of the SSF metadata of `issuer`'s transmitter (SSF §7.1), whose `issuer`
    /// must be `issuer`.
    async fn jwks_uri(&self, issuer: &str) -> Result<String, String> {
        let at =
            super::upstream::well_known(issuer, "ssf-configuration").map_err(|e| e.to_string())?;
        let document = self
            .fetch_url(&at)
            .await
            .map_err(|e| format!("the SSF metadata: {e}"))?;
        #[derive(serde::Deserialize)]
        struct Metadata {
            issuer: String,
            jwks_uri: Option<String>,
        }
        let metadata: Metadata = serde_json::from_slice(&document)
            .map_err(|e| format!("the SSF metadata is not its JSON document: {e}"))?;
        if metadata.issuer != issuer {
            return Err(format!(
                "the SSF metadata names another issuer ({:?})",
                metadata.issuer
            ));
        }
        metadata
            .jwks_uri
            .filter(|u| u.starts_with("https://") || u.starts_with("http://"))
            .ok_or_else(|| "the SSF metadata has no http(s) jwks_uri".to_string())
    }

    /// The document at `url`, bounded in time and size.
    async fn fetch_url(&self, url: &str) -> Result<Vec<u8>, String> {
        let fetch = async {
            let mut response = self
                .client
                .get(url)
                .header("accept", "application/jwk-set+json, application/json")
                .send()
                .await
                .map_err(|e| e.to_string())?;
            if !response.status().is_success() {
                return Err(format!("it answered {}", response.status()));
            }
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
                if body.len() + chunk.len() > MAX_JWKS {
                    return Err(format!("over {MAX_JWKS} bytes"));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(body)
        };
        tokio::time::timeout(FETCH_TIMEOUT, fetch)
            .await
            .map_err(|_| format!("no answer within {FETCH_TIMEOUT:?}"))?
    }
}
