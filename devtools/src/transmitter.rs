//! A Shared Signals transmitter on loopback, as the tests and the simulations play it: its JWK
//! Set at `/jwks` (counting fetches, replaceable for a rotation) and an RFC 8936 poll endpoint at
//! `/poll` that gives every SET not yet acknowledged again on each poll (a short long poll when
//! there is none), records the `ack`s and `setErrs` it is sent, and can be told to fail its next
//! polls or to stop answering them. Its issuer is `<base>/ssf`: its OAuth metadata (RFC 8414) at
//! `/.well-known/oauth-authorization-server/ssf` names a token endpoint at `/token` that gives
//! tokens of a set life for the client credentials [`CLIENT_ID`] and [`CLIENT_SECRET`]; the poll
//! endpoint takes such a token while it lives, or [`POLL_TOKEN`], and counts what it refuses.
//! As an SSF 1.0 transmitter (§§7-8) it serves its metadata at
//! `/.well-known/ssf-configuration/ssf` and the stream management endpoints it names
//! (`/streams`, `/status`, `/verify`, `/subjects:add`, `/subjects:remove`) to the same tokens,
//! keeping each stream's configuration, status and subjects; given a signing key
//! ([`LoopbackTransmitter::sign_with`]), a verification request makes a verification SET, queued
//! for polling or pushed to the stream's endpoint with its `authorization_header`.
//! Played hostile, it gives more SETs than asked for, or answers the next polls with bodies given
//! as they are (a member that is no SET, a flood). Panics on a poisoned lock (a test's own panic).

use std::collections::{BTreeMap, VecDeque};
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

/// The `aud` of the streams it makes, unless told otherwise.
pub const STREAM_AUDIENCE: &str = "https://idem.example.test/acme";

/// SSF's verification event.
pub const VERIFICATION_EVENT: &str =
    "https://schemas.openid.net/secevent/ssf/event-type/verification";

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
    /// Streams by id: their configuration as the transmitter answers it.
    streams: BTreeMap<String, Value>,
    /// Each stream's status and reason.
    status: BTreeMap<String, (String, Option<String>)>,
    /// Subjects added to or removed from a stream, in order: (stream, action, subject).
    subjects: Vec<(String, String, Value)>,
    /// The management calls made, as `METHOD /path`.
    calls: Vec<String>,
    streams_made: u64,
    /// The `iss` streams are made with, when not the issuer.
    stream_iss: Option<String>,
    /// The `aud` streams are made with.
    stream_aud: String,
    /// Verification SETs made, each (stream, state).
    verifications: Vec<(String, Option<String>)>,
    signer: Option<Arc<crate::jose::JwsKey>>,
    sets_made: u64,
    /// Every pending SET is given, whatever `maxEvents` asks.
    ignore_max_events: bool,
    /// Bodies the next polls are answered with, as they are.
    answers: VecDeque<axum::body::Bytes>,
    /// How many `ack`s and `setErrs` each poll carried.
    requests: Vec<(usize, usize)>,
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
            stream_aud: STREAM_AUDIENCE.to_string(),
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
            .route(
                "/.well-known/ssf-configuration/ssf",
                axum::routing::get(ssf_metadata),
            )
            .route(
                "/streams",
                axum::routing::post(create_stream)
                    .get(read_stream)
                    .patch(update_stream)
                    .put(replace_stream)
                    .delete(delete_stream),
            )
            .route("/status", axum::routing::get(read_status).post(set_status))
            .route("/verify", axum::routing::post(verify_stream))
            .route("/subjects:add", axum::routing::post(add_subject))
            .route("/subjects:remove", axum::routing::post(remove_subject))
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

    /// Verification SETs are signed with `key` from now on (none are made without one).
    pub fn sign_with(&self, key: crate::jose::JwsKey) {
        self.shared().signer = Some(Arc::new(key));
    }

    /// Streams are made with `iss` from now on (none: its issuer).
    pub fn set_stream_iss(&self, iss: Option<&str>) {
        self.shared().stream_iss = iss.map(str::to_string);
    }

    /// The streams it keeps, by id.
    pub fn streams(&self) -> BTreeMap<String, Value> {
        self.shared().streams.clone()
    }

    /// How many streams it made.
    pub fn streams_made(&self) -> u64 {
        self.shared().streams_made
    }

    /// Stream `id`'s status and reason.
    pub fn stream_status(&self, id: &str) -> Option<(String, Option<String>)> {
        self.shared().status.get(id).cloned()
    }

    /// Forgets stream `id`, as a transmitter that deleted it on its own does.
    pub fn drop_stream(&self, id: &str) {
        let mut s = self.shared();
        s.streams.remove(id);
        s.status.remove(id);
    }

    /// The management calls made so far, as `METHOD /path`.
    pub fn calls(&self) -> Vec<String> {
        self.shared().calls.clone()
    }

    /// The subjects added or removed, each (stream, `add` or `remove`, subject).
    pub fn subjects(&self) -> Vec<(String, String, Value)> {
        self.shared().subjects.clone()
    }

    /// The verifications asked for, each (stream, state).
    pub fn verifications(&self) -> Vec<(String, Option<String>)> {
        self.shared().verifications.clone()
    }

    /// A SET of `events` about stream `id`, signed with its key, as it sends one.
    pub fn set_about(&self, id: &str, events: Value) -> String {
        let mut s = self.shared();
        let Some(key) = s.signer.clone() else {
            panic!("the transmitter has no signing key");
        };
        s.sets_made += 1;
        let iat = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let claims = json!({
            "iss": s.stream_iss.clone().unwrap_or_else(|| s.issuer.clone()),
            "aud": s.stream_aud, "jti": format!("ssf-{}-{}", id, s.sets_made),
            "iat": iat, "sub_id": {"format": "opaque", "id": id},
            "events": events,
        });
        key.sign(&claims)
    }

    /// Sends `token` to stream `id` as its delivery says: queued for polling, or pushed with its
    /// `authorization_header`; a push's HTTP status.
    pub async fn deliver(&self, id: &str, jti: &str, token: &str) -> Option<u16> {
        deliver(&self.shared, id, jti, token).await
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

    /// Gives every pending SET on each poll, more than `maxEvents` asks for (or, with
    /// `false`, at most that again).
    pub fn ignore_max_events(&self, ignore: bool) {
        self.shared().ignore_max_events = ignore;
    }

    /// The next poll is answered with `body` (JSON) as it is, once its acks are read; several
    /// calls answer as many polls, in order.
    pub fn answer_next(&self, body: impl Into<axum::body::Bytes>) {
        self.shared().answers.push_back(body.into());
    }

    /// How many answers given with [`LoopbackTransmitter::answer_next`] are still to be given.
    pub fn answers_left(&self) -> usize {
        self.shared().answers.len()
    }

    /// How many `ack`s and `setErrs` each poll so far carried, in order.
    pub fn requests(&self) -> Vec<(usize, usize)> {
        self.shared().requests.clone()
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
        let acks = request["ack"].as_array().map_or(0, Vec::len);
        let errs = request["setErrs"].as_object().map_or(0, |e| e.len());
        s.requests.push((acks, errs));
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
    if let Some(body) = shared
        .lock()
        .expect("transmitter state")
        .answers
        .pop_front()
    {
        return (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response();
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
    let max = match s.ignore_max_events {
        true => usize::MAX,
        false => max,
    };
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

type Shared_ = Arc<Mutex<Shared>>;

fn lock(shared: &Shared_) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().expect("transmitter state")
}

/// The value of `name` in `uri`'s query.
fn query(uri: &axum::http::Uri, name: &str) -> Option<String> {
    uri.query()?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == name).then(|| v.to_string())
    })
}

/// Records the call; whether its token is taken (if not, the call is answered 401).
fn admit(shared: &Shared_, headers: &HeaderMap, call: &str) -> bool {
    let mut s = lock(shared);
    s.calls.push(call.to_string());
    s.authorized(headers)
}

async fn ssf_metadata(State(shared): State<Shared_>) -> impl IntoResponse {
    let s = lock(&shared);
    let base = s.issuer.trim_end_matches("/ssf").to_string();
    Json(json!({
        "spec_version": "1_0",
        "issuer": s.issuer,
        "jwks_uri": format!("{base}/jwks"),
        "delivery_methods_supported": ["urn:ietf:rfc:8935", "urn:ietf:rfc:8936"],
        "configuration_endpoint": format!("{base}/streams"),
        "status_endpoint": format!("{base}/status"),
        "add_subject_endpoint": format!("{base}/subjects:add"),
        "remove_subject_endpoint": format!("{base}/subjects:remove"),
        "verification_endpoint": format!("{base}/verify"),
        "authorization_schemes": [{"spec_urn": "urn:ietf:rfc:6749"}],
    }))
}

/// The configuration of stream `id` as asked in `body`.
fn configured(s: &Shared, id: &str, body: &Value) -> Value {
    let base = s.issuer.trim_end_matches("/ssf").to_string();
    let mut delivery = body["delivery"].clone();
    if delivery["method"] == "urn:ietf:rfc:8936" {
        delivery["endpoint_url"] = json!(format!("{base}/poll"));
    }
    json!({
        "stream_id": id,
        "iss": s.stream_iss.clone().unwrap_or_else(|| s.issuer.clone()),
        "aud": s.stream_aud,
        "delivery": delivery,
        "events_supported": body["events_requested"],
        "events_requested": body["events_requested"],
        "events_delivered": body["events_requested"],
        "description": body["description"],
    })
}

async fn create_stream(
    State(shared): State<Shared_>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> axum::response::Response {
    if !admit(&shared, &headers, "POST /streams") {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let mut s = lock(&shared);
    s.streams_made += 1;
    let id = format!("stream-{}", s.streams_made);
    let config = configured(&s, &id, &body);
    s.streams.insert(id.clone(), config.clone());
    s.status.insert(id, ("enabled".into(), None));
    (StatusCode::CREATED, Json(config)).into_response()
}

async fn read_stream(
    State(shared): State<Shared_>,
    headers: HeaderMap,
    uri: axum::http::Uri,
) -> axum::response::Response {
    if !admit(&shared, &headers, "GET /streams") {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let s = lock(&shared);
    match query(&uri, "stream_id") {
        Some(id) => match s.streams.get(&id) {
            Some(config) => Json(config.clone()).into_response(),
            None => StatusCode::NOT_FOUND.into_response(),
        },
        None => Json(json!(s.streams.values().collect::<Vec<_>>())).into_response(),
    }
}

/// PATCH (`whole` false) or PUT (`whole` true) of a stream.
fn change_stream(
    shared: &Shared_,
    headers: &HeaderMap,
    body: Value,
    whole: bool,
) -> axum::response::Response {
    let call = if whole {
        "PUT /streams"
    } else {
        "PATCH /streams"
    };
    if !admit(shared, headers, call) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let mut s = lock(shared);
    let id = body["stream_id"].as_str().unwrap_or_default().to_string();
    let Some(old) = s.streams.get(&id).cloned() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let mut asked = if whole { json!({}) } else { old.clone() };
    for key in ["delivery", "events_requested", "description"] {
        if !body[key].is_null() {
            asked[key] = body[key].clone();
        }
    }
    let config = configured(&s, &id, &asked);
    s.streams.insert(id, config.clone());
    Json(config).into_response()
}

async fn update_stream(
    State(shared): State<Shared_>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> axum::response::Response {
    change_stream(&shared, &headers, body, false)
}

async fn replace_stream(
    State(shared): State<Shared_>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> axum::response::Response {
    change_stream(&shared, &headers, body, true)
}

async fn delete_stream(
    State(shared): State<Shared_>,
    headers: HeaderMap,
    uri: axum::http::Uri,
) -> axum::response::Response {
    if !admit(&shared, &headers, "DELETE /streams") {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let mut s = lock(&shared);
    let id = query(&uri, "stream_id").unwrap_or_default();
    s.status.remove(&id);
    match s.streams.remove(&id) {
        Some(_) => StatusCode::NO_CONTENT.into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

fn status_of(s: &Shared, id: &str) -> axum::response::Response {
    match s.status.get(id) {
        Some((status, reason)) => {
            let mut body = json!({"stream_id": id, "status": status});
            if let Some(reason) = reason {
                body["reason"] = json!(reason);
            }
            Json(body).into_response()
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn read_status(
    State(shared): State<Shared_>,
    headers: HeaderMap,
    uri: axum::http::Uri,
) -> axum::response::Response {
    if !admit(&shared, &headers, "GET /status") {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let id = query(&uri, "stream_id").unwrap_or_default();
    status_of(&lock(&shared), &id)
}

async fn set_status(
    State(shared): State<Shared_>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> axum::response::Response {
    if !admit(&shared, &headers, "POST /status") {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let mut s = lock(&shared);
    let id = body["stream_id"].as_str().unwrap_or_default().to_string();
    let status = body["status"].as_str().unwrap_or_default().to_string();
    if !["enabled", "paused", "disabled"].contains(&status.as_str()) {
        return StatusCode::BAD_REQUEST.into_response();
    }
    if !s.status.contains_key(&id) {
        return StatusCode::NOT_FOUND.into_response();
    }
    let reason = body["reason"].as_str().map(str::to_string);
    s.status.insert(id.clone(), (status, reason));
    status_of(&s, &id)
}

async fn verify_stream(
    State(shared): State<Shared_>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> axum::response::Response {
    if !admit(&shared, &headers, "POST /verify") {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let id = body["stream_id"].as_str().unwrap_or_default().to_string();
    let state = body["state"].as_str().map(str::to_string);
    let token = {
        let mut s = lock(&shared);
        if !s.streams.contains_key(&id) {
            return StatusCode::NOT_FOUND.into_response();
        }
        s.verifications.push((id.clone(), state.clone()));
        if s.signer.is_none() {
            return StatusCode::NO_CONTENT.into_response();
        }
        drop(s);
        let t = LoopbackTransmitter {
            base: String::new(),
            shared: shared.clone(),
        };
        let mut event = json!({});
        if let Some(state) = &state {
            event["state"] = json!(state);
        }
        let jti = format!("verify-{}", lock(&shared).verifications.len());
        (jti, t.set_about(&id, json!({VERIFICATION_EVENT: event})))
    };
    let shared = shared.clone();
    // Sent after the answer, as a transmitter does.
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        deliver(&shared, &id, &token.0, &token.1).await;
    });
    StatusCode::NO_CONTENT.into_response()
}

async fn subject_call(
    shared: &Shared_,
    headers: &HeaderMap,
    body: Value,
    action: &str,
) -> axum::response::Response {
    if !admit(shared, headers, &format!("POST /subjects:{action}")) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let mut s = lock(shared);
    let id = body["stream_id"].as_str().unwrap_or_default().to_string();
    if !s.streams.contains_key(&id) {
        return StatusCode::NOT_FOUND.into_response();
    }
    if !body["subject"].is_object() {
        return StatusCode::BAD_REQUEST.into_response();
    }
    s.subjects
        .push((id, action.to_string(), body["subject"].clone()));
    // SSF §8.1.3.2: an added subject is 200; §8.1.3.3: a removed one 204.
    match action {
        "remove" => StatusCode::NO_CONTENT.into_response(),
        _ => StatusCode::OK.into_response(),
    }
}

async fn add_subject(
    State(shared): State<Shared_>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> axum::response::Response {
    subject_call(&shared, &headers, body, "add").await
}

async fn remove_subject(
    State(shared): State<Shared_>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> axum::response::Response {
    subject_call(&shared, &headers, body, "remove").await
}

/// Sends `token` to stream `id` as its delivery says; a push's HTTP status.
async fn deliver(shared: &Shared_, id: &str, jti: &str, token: &str) -> Option<u16> {
    let delivery = lock(shared).streams.get(id)?["delivery"].clone();
    if delivery["method"] == "urn:ietf:rfc:8936" {
        lock(shared)
            .pending
            .insert(jti.to_string(), token.to_string());
        return None;
    }
    let url = delivery["endpoint_url"].as_str()?.to_string();
    let authorization = delivery["authorization_header"]
        .as_str()
        .map(str::to_string);
    push(&url, authorization.as_deref(), token).await
}

/// POSTs `token` to the http `url` as RFC 8935 says; the status answered.
async fn push(url: &str, authorization: Option<&str>, token: &str) -> Option<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://")?;
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let mut stream = tokio::net::TcpStream::connect(host).await.ok()?;
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/secevent+jwt\r\naccept: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        token.len()
    );
    if let Some(authorization) = authorization {
        request.push_str(&format!("authorization: {authorization}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(token);
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.ok()?;
    let text = String::from_utf8_lossy(&answer);
    text.split(' ').nth(1)?.parse().ok()
}
