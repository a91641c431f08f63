//! idem as a client of a Shared Signals transmitter: where its metadata is (SSF §7.2 and
//! RFC 8414 §3, the issuer's path appended after the well-known name), and the Bearer token idem
//! calls it with. A token is either configured as it is, or fetched with OAuth 2.0 client
//! credentials (RFC 6749 §4.4) from the token endpoint of the issuer's OAuth metadata (or a
//! configured `token_url`), kept in memory only, renewed before its `expires_in` runs out and
//! once when the transmitter answers 401. The stream management calls and the poll client go
//! through [`Access::send`]. No token, nor the client secret, is ever logged or stored: their
//! `Debug` leaves them out and no error quotes them.

use std::time::Duration;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde::Deserialize;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// How long one call to the transmitter or its token endpoint may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The most a token is renewed ahead of its expiry.
const MAX_RENEW_AHEAD: Duration = Duration::from_secs(60);

/// The most bytes read of a metadata document or a token answer.
const MAX_DOCUMENT: usize = 64 * 1024;

/// RFC 6749 Appendix B: everything but the unreserved characters is escaped.
pub const FORM: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// How idem authenticates to a transmitter. Its `Debug` leaves the secrets out.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Auth {
    /// A static Bearer token, sent as it is.
    Bearer(String),
    /// OAuth 2.0 client credentials.
    Client {
        /// The client's id.
        client_id: String,
        /// The client's secret.
        client_secret: String,
        /// The token endpoint; none: the one of the issuer's OAuth metadata.
        token_url: Option<String>,
        /// The scope asked for, if any.
        scope: Option<String>,
    },
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::Bearer(_) => f.write_str("Bearer(..)"),
            Auth::Client {
                client_id,
                token_url,
                scope,
                ..
            } => f
                .debug_struct("Client")
                .field("client_id", client_id)
                .field("client_secret", &"..")
                .field("token_url", token_url)
                .field("scope", scope)
                .finish(),
        }
    }
}

/// Why a call to a transmitter failed. Never quotes a token or a secret.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The issuer is not an http(s) URL.
    #[error("the issuer {0:?} is not an http(s) URL")]
    Issuer(String),
    /// No answer, or one cut short.
    #[error("{what} did not answer: {why}")]
    Unreachable { what: &'static str, why: String },
    /// An answer with a status that is not a success.
    #[error("{what} answered {status}{}", error.as_ref().map(|e| format!(" ({e})")).unwrap_or_default())]
    Status {
        what: &'static str,
        status: u16,
        /// An OAuth error code, when the token endpoint gave one.
        error: Option<String>,
    },
    /// An answer that is not what the protocol says.
    #[error("{what} answered what is not {expected}: {why}")]
    Malformed {
        what: &'static str,
        expected: &'static str,
        why: String,
    },
}

/// The well-known URL of `name` for `issuer`: `/.well-known/<name>` between the issuer's host
/// and its path (SSF §7.2, RFC 8414 §3.1); a trailing `/` of the issuer is dropped.
pub fn well_known(issuer: &str, name: &str) -> Result<String, UpstreamError> {
    let rest = issuer
        .strip_prefix("https://")
        .map(|r| ("https://", r))
        .or_else(|| issuer.strip_prefix("http://").map(|r| ("http://", r)));
    let Some((scheme, rest)) = rest else {
        return Err(UpstreamError::Issuer(issuer.to_string()));
    };
    if rest.contains(['?', '#']) {
        return Err(UpstreamError::Issuer(issuer.to_string()));
    }
    let (host, path) = match rest.find('/') {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    if host.is_empty() {
        return Err(UpstreamError::Issuer(issuer.to_string()));
    }
    let path = path.trim_end_matches('/');
    Ok(format!("{scheme}{host}/.well-known/{name}{path}"))
}

/// When a token answered with `expires_in` seconds at `now` is renewed: a tenth of its life
/// ahead of its expiry, at most [`MAX_RENEW_AHEAD`]; without `expires_in`, only on a 401.
pub fn renew_at(now: Instant, expires_in: Option<u64>) -> Option<Instant> {
    let life = Duration::from_secs(expires_in?);
    Some(now + life - (life / 10).min(MAX_RENEW_AHEAD))
}

/// A token endpoint's answer (RFC 6749 §5.1).
#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    token_type: String,
    expires_in: Option<u64>,
}

/// An OAuth error answer (RFC 6749 §5.2), for its code only.
#[derive(Deserialize)]
struct OauthError {
    error: String,
}

/// The token in use, and when it is renewed.
struct Held {
    token: String,
    renew_at: Option<Instant>,
}

/// What idem calls one transmitter with: its issuer, its credentials, and the token in hand.
pub struct Access {
    issuer: String,
    auth: Auth,
    client: reqwest::Client,
    /// The token endpoint once discovered.
    token_endpoint: Mutex<Option<String>>,
    /// The token in hand; held while a new one is fetched, so one is fetched at a time.
    held: Mutex<Option<Held>>,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("issuer", &self.issuer)
            .field("auth", &self.auth)
            .finish()
    }
}

/// `response`'s body, at most [`MAX_DOCUMENT`] bytes.
async fn body_of(
    what: &'static str,
    mut response: reqwest::Response,
) -> Result<Vec<u8>, UpstreamError> {
    let mut body = Vec::new();
    let unreachable = |e: reqwest::Error| UpstreamError::Unreachable {
        what,
        why: e.without_url().to_string(),
    };
    while let Some(chunk) = response.chunk().await.map_err(unreachable)? {
        if body.len() + chunk.len() > MAX_DOCUMENT {
            return Err(UpstreamError::Malformed {
                what,
                expected: "a document",
                why: format!("over {MAX_DOCUMENT} bytes"),
            });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

impl Access {
    /// Calls `issuer`'s transmitter with `auth`, over `client`.
    pub fn new(issuer: String, auth: Auth, client: reqwest::Client) -> Access {
        Access {
            issuer,
            auth,
            client,
            token_endpoint: Mutex::new(None),
            held: Mutex::new(None),
        }
    }

    /// The transmitter's issuer.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The HTTP client calls go out on.
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// A JSON document at `url`, read as `T`.
    pub async fn document<T: serde::de::DeserializeOwned>(
        &self,
        what: &'static str,
        url: &str,
    ) -> Result<T, UpstreamError> {
        let response = tokio::time::timeout(
            CALL_TIMEOUT,
            self.client
                .get(url)
                .header("accept", "application/json")
                .send(),
        )
        .await
        .map_err(|_| UpstreamError::Unreachable {
            what,
            why: format!("no answer within {CALL_TIMEOUT:?}"),
        })?
        .map_err(|e| UpstreamError::Unreachable {
            what,
            why: e.without_url().to_string(),
        })?;
        if !response.status().is_success() {
            return Err(UpstreamError::Status {
                what,
                status: response.status().as_u16(),
                error: None,
            });
        }
        let body = body_of(what, response).await?;
        serde_json::from_slice(&body).map_err(|e| UpstreamError::Malformed {
            what,
            expected: "its JSON document",
            why: e.to_string(),
        })
    }

    /// The token endpoint: the configured one, else the one of the issuer's OAuth metadata,
    /// whose `issuer` must be the transmitter's.
    async fn token_url(&self, configured: &Option<String>) -> Result<String, UpstreamError> {
        if let Some(url) = configured {
            return Ok(url.clone());
        }
        if let Some(url) = &*self.token_endpoint.lock().await {
            return Ok(url.clone());
        }
        #[derive(Deserialize)]
        struct Metadata {
            issuer: String,
            token_endpoint: Option<String>,
        }
        let what = "the OAuth metadata";
        let url = well_known(&self.issuer, "oauth-authorization-server")?;
        let metadata: Metadata = self.document(what, &url).await?;
        if metadata.issuer != self.issuer {
            return Err(UpstreamError::Malformed {
                what,
                expected: "the transmitter's issuer's (RFC 8414 §3.3)",
                why: format!("its issuer is {:?}", metadata.issuer),
            });
        }
        let endpoint = metadata.token_endpoint.ok_or(UpstreamError::Malformed {
            what,
            expected: "metadata with a token endpoint",
            why: "no token_endpoint".to_string(),
        })?;
        *self.token_endpoint.lock().await = Some(endpoint.clone());
        Ok(endpoint)
    }

    /// A new token from the token endpoint.
    async fn fetch(
        &self,
        client_id: &str,
        client_secret: &str,
        token_url: &Option<String>,
        scope: &Option<String>,
    ) -> Result<Held, UpstreamError> {
        let what = "the token endpoint";
        let url = self.token_url(token_url).await?;
        let mut form = "grant_type=client_credentials".to_string();
        if let Some(scope) = scope {
            form.push_str(&format!("&scope={}", utf8_percent_encode(scope, FORM)));
        }
        // RFC 6749 §2.3.1: the id and the secret form-encoded, then Basic.
        let id = utf8_percent_encode(client_id, FORM).to_string();
        let secret = utf8_percent_encode(client_secret, FORM).to_string();
        let asked = Instant::now();
        let response = tokio::time::timeout(
            CALL_TIMEOUT,
            self.client
                .post(&url)
                .basic_auth(id, Some(secret))
                .header("content-type", "application/x-www-form-urlencoded")
                .header("accept", "application/json")
                .body(form)
                .send(),
        )
        .await
        .map_err(|_| UpstreamError::Unreachable {
            what,
            why: format!("no answer within {CALL_TIMEOUT:?}"),
        })?
        .map_err(|e| UpstreamError::Unreachable {
            what,
            why: e.without_url().to_string(),
        })?;
        let status = response.status();
        let body = body_of(what, response).await?;
        if !status.is_success() {
            let error = serde_json::from_slice::<OauthError>(&body)
                .ok()
                .map(|e| e.error.chars().take(64).collect());
            return Err(UpstreamError::Status {
                what,
                status: status.as_u16(),
                error,
            });
        }
        let answer: TokenAnswer =
            serde_json::from_slice(&body).map_err(|e| UpstreamError::Malformed {
                what,
                expected: "an RFC 6749 token answer",
                why: e.to_string(),
            })?;
        if !answer.token_type.eq_ignore_ascii_case("bearer") || answer.access_token.is_empty() {
            return Err(UpstreamError::Malformed {
                what,
                expected: "a Bearer token",
                why: format!("a token of type {:?}", answer.token_type),
            });
        }
        Ok(Held {
            token: answer.access_token,
            renew_at: renew_at(asked, answer.expires_in),
        })
    }

    /// The token to call with now: the static one, or the one in hand unless it is due for
    /// renewal (or was refused), else a new one.
    pub async fn bearer(&self) -> Result<String, UpstreamError> {
        let (client_id, client_secret, token_url, scope) = match &self.auth {
            Auth::Bearer(token) => return Ok(token.clone()),
            Auth::Client {
                client_id,
                client_secret,
                token_url,
                scope,
            } => (client_id, client_secret, token_url, scope),
        };
        let mut in_hand = self.held.lock().await;
        if let Some(held) = &*in_hand {
            if held.renew_at.is_none_or(|at| Instant::now() < at) {
                return Ok(held.token.clone());
            }
        }
        let held = self
            .fetch(client_id, client_secret, token_url, scope)
            .await?;
        let token = held.token.clone();
        *in_hand = Some(held);
        Ok(token)
    }

    /// Drops `refused`, the token the transmitter just answered 401 to, if it is still in hand.
    async fn forget(&self, refused: &str) {
        let mut in_hand = self.held.lock().await;
        if in_hand.as_ref().is_some_and(|h| h.token == refused) {
            *in_hand = None;
        }
    }

    /// Sends the request `build` makes with the token in hand; on a 401 with client
    /// credentials, once more with a new token.
    pub async fn send<F>(
        &self,
        what: &'static str,
        build: F,
    ) -> Result<reqwest::Response, UpstreamError>
    where
        F: Fn(&reqwest::Client) -> reqwest::RequestBuilder,
    {
        let mut retried = false;
        loop {
            let token = self.bearer().await?;
            let response = build(&self.client)
                .bearer_auth(&token)
                .send()
                .await
                .map_err(|e| UpstreamError::Unreachable {
                    what,
                    why: e.without_url().to_string(),
                })?;
            let refused = response.status() == reqwest::StatusCode::UNAUTHORIZED;
            if refused && !retried && matches!(self.auth, Auth::Client { .. }) {
                self.forget(&token).await;
                retried = true;
                continue;
            }
            return Ok(response);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_issuer_path_follows_the_well_known_name() {
        let at = |issuer| well_known(issuer, "ssf-configuration").ok();
        assert_eq!(
            at("https://sts.example.com/ssf").as_deref(),
            Some("https://sts.example.com/.well-known/ssf-configuration/ssf")
        );
        assert_eq!(
            at("https://sts.example.com/tenants/a/").as_deref(),
            Some("https://sts.example.com/.well-known/ssf-configuration/tenants/a")
        );
        assert_eq!(
            at("http://127.0.0.1:8080").as_deref(),
            Some("http://127.0.0.1:8080/.well-known/ssf-configuration")
        );
        assert!(at("ftp://x/ssf").is_none());
        assert!(at("https:///ssf").is_none());
        assert!(at("https://x/ssf?q=1").is_none());
    }

    #[test]
    fn a_token_is_renewed_a_tenth_of_its_life_ahead_at_most_a_minute() {
        let now = Instant::now();
        assert_eq!(
            renew_at(now, Some(100)),
            Some(now + Duration::from_secs(90))
        );
        assert_eq!(
            renew_at(now, Some(3600)),
            Some(now + Duration::from_secs(3540))
        );
        assert_eq!(renew_at(now, Some(0)), Some(now));
        assert_eq!(renew_at(now, None), None);
    }

    #[test]
    fn debug_leaves_the_secrets_out() {
        let auth = Auth::Client {
            client_id: "idem".into(),
            client_secret: "s3cr3t-value".into(),
            token_url: None,
            scope: None,
        };
        let bearer = Auth::Bearer("b3ar3r-value".into());
        let shown = format!("{auth:?} {bearer:?}");
        assert!(
            !shown.contains("s3cr3t") && !shown.contains("b3ar3r"),
            "{shown}"
        );
        assert!(shown.contains("idem"), "{shown}");
    }
}
