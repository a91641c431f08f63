//! A Shared Signals transmitter on loopback, as the tests and the simulations play it: its JWK
//! Set at `/jwks` (counting fetches, replaceable for a rotation) and an RFC 8936 poll endpoint at
//! `/poll` that gives every SET not yet acknowledged again on each poll (a short long poll when
//! there is none), records the `ack`s and `setErrs` it is sent, and can be told to fail its next
//! polls or to stop answering them. Its issuer is `<base>/ssf`: its OAuth metadata (RFC 8414) at
//! `/.well-known/oauth-authorization-server/ssf` names a token endpoint at `/token` that gives
//! tokens of a set life for the client credentials [`CLIENT_ID`] and [`CLIENT_SECRET`]; the poll
//! endpoint takes such a token while it lives, or [`POLL_TOKEN`], and counts what it refuses.
//! Panics on a poisoned lock (a test's own panic).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Value};

/// The Bearer token the poll endpoint takes.
pub const POLL_TOKEN: &str = "poll-token-0123456789";

/// The OAuth client the token endpoint knows.
pub const CLIENT_ID: &str = "idem-receiver";

/// Its secret.
pub const CLIENT_SECRET: &str = "client-secret-0123456789abcdef";

#[derive(Default)]
struct Shared {
    jwks: Value,
    jwks_fetches: u64,
    /// SETs to give, by jti, until acknowledged.
    pending: BTreeMap<String, String>,
    acked: Vec<String>,
    set_errs: BTreeMap<String, Value>,
    fail_next: u32,
    /// Polls are taken and never answered (their acks not read): a transmitter gone quiet.
    hold: bool,
    /// The next poll that gives SETs holds every poll after it.
    hold_after_give: bool,
    /// Tokens given, each with when it stops being taken.
    tokens: BTreeMap<String, Instant>,
    tokens_given: u64,
    /// The `expires_in` of each token given.
    token_life: u64,
    /// Calls refused for their Authorization.
    unauthorized: u64,
    /// The issuer, `<base>/ssf`.
    issuer: String,
}

impl Shared {
    /// Whether `headers` carry [`POLL_TOKEN`] or a token of the token endpoint still alive.
    fn authorized(&mut self, headers: &HeaderMap) -> bool {
        let token = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or_default();
        let alive = self
            .tokens
            .get(token)
            .is_some_and(|until| Instant::now() < *until);
        if token == POLL_TOKEN || alive {
            return true;
        }
        self.unauthorized += 1;
        false
    }
}

/// The transmitter on loopback: its base URL, and what it serves and was sent.
#[derive(Clone)]
pub struct LoopbackTransmitter {
    pub base: String,
    shared: Arc<Mutex<Shared>>,
}

impl LoopbackTransmitter {
    /// Starts it, serving `jwks`.
    pub async fn start(jwks: Value) -> LoopbackTransmitter {
        match LoopbackTransmitter::try_start(jwks).await {
            Ok(t) => t,
            Err(e) => panic!("the transmitter cannot listen: {e}"),
        }
    }

    /// Starts it, serving `jwks`, or says why it cannot listen.
    pub async fn try_start(jwks: Value) -> std::io::Result<LoopbackTransmitter> {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Mutex::new(Shared {
            jwks,
            token_life: 3600,
            issuer: format!("http://{addr}/ssf"),
            ..Shared::default()
        }));
        let app = axum::Router::new()
            .route("/jwks", axum::routing::get(jwks_handler))
            .route("/poll", axum::routing::post(poll_handler))
            .route(
                "/.well-known/oauth-authorization-server/ssf",
                axum::routing::get(oauth_metadata),
            )
            .route("/token", axum::routing::post(token_handler))
            .with_state(shared.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(LoopbackTransmitter {
            base: format!("http://{addr}"),
            shared,
        })
    }

    fn shared(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().expect("transmitter state")
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Its issuer, `<base>/ssf`.
    pub fn issuer(&self) -> String {
        self.url("/ssf")
    }

    /// Tokens given from now on live `seconds` (their `expires_in`).
    pub fn set_token_life(&self, seconds: u64) {
        self.shared().token_life = seconds;
    }

    /// How many tokens the token endpoint gave.
    pub fn tokens_given(&self) -> u64 {
        self.shared().tokens_given
    }

    /// Every token given so far is refused from now on.
    pub fn revoke_tokens(&self) {
        self.shared().tokens.clear();
    }

    /// How many calls were refused for their Authorization.
    pub fn unauthorized(&self) -> u64 {
        self.shared().unauthorized
    }

    /// Serves `jwks` from now on.
    pub fn set_jwks(&self, jwks: Value) {
        self.shared().jwks = jwks;
    }

    /// How many times the JWK Set was fetched.
    pub fn jwks_fetches(&self) -> u64 {
        self.shared().jwks_fetches
    }

    /// Queues a SET for polling.
    pub fn queue(&self, jti: &str, token: &str) {
        self.shared().pending.insert(jti.into(), token.into());
    }

    /// The jtis of the SETs still waiting to be acknowledged.
    pub fn pending_jtis(&self) -> Vec<String> {
        self.shared().pending.keys().cloned().collect()
    }

    /// The jtis acknowledged so far, in order.
    pub fn acked(&self) -> Vec<String> {
        self.shared().acked.clone()
    }

    /// The `setErrs` reported so far, by jti.
    pub fn set_errs(&self) -> BTreeMap<String, Value> {
        self.shared().set_errs.clone()
    }

    pub fn pending(&self) -> usize {
        self.shared().pending.len()
    }

    /// From now on polls are never answered, nor their acks read (or, with `false`, again).
    pub fn hold(&self, hold: bool) {
        self.shared().hold = hold;
    }

    /// Queues a SET, and holds every poll after the one that gives it: idem gets the SET, and
    /// its ack never arrives.
    pub fn queue_then_hold(&self, jti: &str, token: &str) {
        let mut s = self.shared();
        s.pending.insert(jti.into(), token.into());
        s.hold_after_give = true;
    }

    /// The next `n` polls answer 500.
    pub fn fail_next(&self, n: u32) {
        self.shared().fail_next = n;
    }
}

async fn jwks_handler(State(shared): State<Arc<Mutex<Shared>>>) -> impl IntoResponse {
    let mut s = shared.lock().expect("transmitter state");
    s.jwks_fetches += 1;
    Json(s.jwks.clone())
}

async fn poll_handler(
    State(shared): State<Arc<Mutex<Shared>>>,
    headers: HeaderMap,
    Json(request): Json<Value>,
) -> axum::response::Response {
    if !shared
        .lock()
        .expect("transmitter state")
        .authorized(&headers)
    {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let immediately = request["returnImmediately"].as_bool().unwrap_or(false);
    let max = request["maxEvents"].as_u64().unwrap_or(u64::MAX) as usize;
    let hold = shared.lock().expect("transmitter state").hold;
    if hold {
        std::future::pending::<()>().await;
    }
    {
        let mut s = shared.lock().expect("transmitter state");
        if s.fail_next > 0 {
            s.fail_next -= 1;
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        }
        for jti in request["ack"].as_array().into_iter().flatten() {
            let jti = jti.as_str().unwrap_or_default().to_string();
            s.pending.remove(&jti);
            s.acked.push(jti);
        }
        if let Some(errs) = request["setErrs"].as_object() {
            for (jti, err) in errs {
                s.pending.remove(jti);
                s.set_errs.insert(jti.clone(), err.clone());
            }
        }
    }
    // A short long poll: wait a little for a SET when there is none.
    for _ in 0..20 {
        let ready = immediately || !shared.lock().expect("transmitter state").pending.is_empty();
        if ready {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut s = shared.lock().expect("transmitter state");
    let sets: BTreeMap<String, String> = s
        .pending
        .iter()
        .take(max)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !sets.is_empty() && s.hold_after_give {
        s.hold_after_give = false;
        s.hold = true;
    }
    Json(json!({"sets": sets, "moreAvailable": s.pending.len() > max})).into_response()
}

async fn oauth_metadata(State(shared): State<Arc<Mutex<Shared>>>) -> impl IntoResponse {
    let s = shared.lock().expect("transmitter state");
    let base = s.issuer.trim_end_matches("/ssf").to_string();
    Json(json!({
        "issuer": s.issuer,
        "token_endpoint": format!("{base}/token"),
        "grant_types_supported": ["client_credentials"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic"],
    }))
}

/// RFC 6749 §4.4 with `client_secret_basic`: a new token of the set life, or
/// `invalid_client`.
async fn token_handler(
    State(shared): State<Arc<Mutex<Shared>>>,
    headers: HeaderMap,
    body: String,
) -> axum::response::Response {
    let basic = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|b| STANDARD.decode(b).ok())
        .and_then(|b| String::from_utf8(b).ok());
    let expected = format!("{CLIENT_ID}:{CLIENT_SECRET}");
    if basic.as_deref() != Some(expected.as_str()) {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"error": "invalid_client"})),
        )
            .into_response();
    }
    if !body
        .split('&')
        .any(|p| p == "grant_type=client_credentials")
    {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "unsupported_grant_type"})),
        )
            .into_response();
    }
    let mut s = shared.lock().expect("transmitter state");
    s.tokens_given += 1;
    let token = format!("access-token-{:04}", s.tokens_given);
    let life = s.token_life;
    s.tokens
        .insert(token.clone(), Instant::now() + Duration::from_secs(life));
    Json(json!({"access_token": token, "token_type": "Bearer", "expires_in": life})).into_response()
}
