//! The test receiver: a real HTTP server on loopback standing in for a tenant's systems. It
//! records every callback idem sends (path, headers, body, when) and answers each path as the
//! test scripts it (a status, after a delay, with a `Retry-After`); 200 at once by default.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::IntoResponse;
use idem_schemas::signature::Secret;

/// One callback as the receiver saw it.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
    pub at: std::time::Instant,
}

impl Received {
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map(String::as_str).unwrap_or("")
    }

    /// True when the callback's signature verifies under `secret`.
    pub fn signed_with(&self, secret: &str) -> bool {
        let secret = Secret::parse(secret).expect("secret");
        let now = idem_schemas::timefmt::now_ms() as i64 / 1000;
        idem_schemas::signature::verify(
            &[secret],
            self.header("webhook-id"),
            self.header("webhook-timestamp"),
            self.header("webhook-signature"),
            &self.body,
            now,
            300,
        )
        .is_ok()
    }
}

/// How the receiver answers a path: a status, after an optional delay, with an optional
/// `Retry-After` and JSON body.
#[derive(Clone, Copy)]
pub struct ScriptedAnswer {
    pub status: u16,
    pub delay: Duration,
    pub retry_after: Option<u64>,
    /// A JSON body, if any.
    pub body: Option<&'static str>,
}

/// `status` at once.
pub fn status(status: u16) -> ScriptedAnswer {
    ScriptedAnswer {
        status,
        delay: Duration::ZERO,
        retry_after: None,
        body: None,
    }
}

/// `400` with RFC 8935's error body naming `err`, as a receiver refuses a SET.
pub fn refuse_set(body: &'static str) -> ScriptedAnswer {
    ScriptedAnswer {
        body: Some(body),
        ..status(400)
    }
}

/// `200` after `delay`.
pub fn hang(delay: Duration) -> ScriptedAnswer {
    ScriptedAnswer {
        status: 200,
        delay,
        retry_after: None,
        body: None,
    }
}

#[derive(Default)]
struct ReceiverState {
    seen: Mutex<Vec<Received>>,
    /// Per path, the answers still to give; the last one repeats.
    answers: Mutex<HashMap<String, Vec<ScriptedAnswer>>>,
}

/// A real HTTP server standing in for the tenant's systems.
pub struct Receiver {
    pub addr: SocketAddr,
    state: Arc<ReceiverState>,
    server: tokio::task::JoinHandle<()>,
}

/// Serves `app` on a free loopback port until the task is aborted: its address and that task.
pub async fn serve_on_loopback(app: axum::Router) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("its address");
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (addr, server)
}

impl Receiver {
    /// Starts a receiver that answers 200 at once unless told otherwise.
    pub async fn start() -> Receiver {
        let state = Arc::new(ReceiverState::default());
        let app = axum::Router::new()
            .fallback(receive)
            .with_state(state.clone());
        let (addr, server) = serve_on_loopback(app).await;
        Receiver {
            addr,
            state,
            server,
        }
    }

    /// The URL of `path` on this receiver.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Answer `path` with `status` after `delay`, from now on.
    pub fn answer(&self, path: &str, status: u16, delay: Duration) {
        self.script(
            path,
            &[ScriptedAnswer {
                status,
                delay,
                retry_after: None,
                body: None,
            }],
        );
    }

    /// Answer `path` with `answers` in turn; the last one repeats.
    pub fn script(&self, path: &str, answers: &[ScriptedAnswer]) {
        self.state
            .answers
            .lock()
            .expect("lock")
            .insert(path.to_string(), answers.to_vec());
    }

    /// Every callback received so far.
    pub fn seen(&self) -> Vec<Received> {
        self.state.seen.lock().expect("lock").clone()
    }

    /// The callbacks received on `path`.
    pub fn seen_on(&self, path: &str) -> Vec<Received> {
        self.seen().into_iter().filter(|r| r.path == path).collect()
    }

    /// Waits until at least `n` callbacks arrived (or panics after 20 s).
    pub async fn wait_for(&self, n: usize) -> Vec<Received> {
        for _ in 0..2000 {
            let seen = self.seen();
            if seen.len() >= n {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("expected {n} callbacks, got {}", self.seen().len());
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn receive(
    State(state): State<Arc<ReceiverState>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    let path = uri.path().to_string();
    let headers = headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    state.seen.lock().expect("lock").push(Received {
        path: path.clone(),
        headers,
        body: body.to_vec(),
        at: std::time::Instant::now(),
    });
    let answer = {
        let mut answers = state.answers.lock().expect("lock");
        match answers.get_mut(&path) {
            Some(queue) if queue.len() > 1 => queue.remove(0),
            Some(queue) => queue[0],
            None => status(200),
        }
    };
    tokio::time::sleep(answer.delay).await;
    let code = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK);
    let mut response = match answer.body {
        Some(body) => (
            code,
            [("content-type", "application/json")],
            body.to_string(),
        )
            .into_response(),
        None => code.into_response(),
    };
    if let Some(secs) = answer.retry_after {
        response
            .headers_mut()
            .insert("retry-after", secs.to_string().parse().expect("header"));
    }
    if code.is_redirection() {
        response
            .headers_mut()
            .insert("location", "/ok".parse().expect("header"));
    }
    response
}

/// The most of `arrivals` that overlapped, each taken to last `held_for` from its arrival: how
/// many requests a receiver had in flight at once, at most.
pub fn most_at_once(arrivals: &[std::time::Instant], held_for: Duration) -> usize {
    arrivals
        .iter()
        .map(|&t| {
            arrivals
                .iter()
                .filter(|&&s| s <= t && t < s + held_for)
                .count()
        })
        .max()
        .unwrap_or(0)
}
