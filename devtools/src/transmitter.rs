//! A Shared Signals transmitter on loopback, as the tests and the simulations play it: its JWK
//! Set at `/jwks` (counting fetches, replaceable for a rotation) and an RFC 8936 poll endpoint at
//! `/poll` that gives every SET not yet acknowledged again on each poll (a short long poll when
//! there is none), records the `ack`s and `setErrs` it is sent, and can be told to fail its next
//! polls or to stop answering them. Played hostile, it gives more SETs than asked for, or answers
//! the next polls with bodies given as they are (a member that is no SET, a flood). Panics on a
//! poisoned lock (a test's own panic).

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use serde_json::{json, Value};

/// The Bearer token the poll endpoint takes.
pub const POLL_TOKEN: &str = "poll-token-0123456789";

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
    /// Every pending SET is given, whatever `maxEvents` asks.
    ignore_max_events: bool,
    /// Bodies the next polls are answered with, as they are.
    answers: VecDeque<axum::body::Bytes>,
    /// How many `ack`s and `setErrs` each poll carried.
    requests: Vec<(usize, usize)>,
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
        let shared = Arc::new(Mutex::new(Shared {
            jwks,
            ..Shared::default()
        }));
        let app = axum::Router::new()
            .route("/jwks", axum::routing::get(jwks_handler))
            .route("/poll", axum::routing::post(poll_handler))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let addr = listener.local_addr()?;
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
    let bearer = format!("Bearer {POLL_TOKEN}");
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(bearer.as_str()) {
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
