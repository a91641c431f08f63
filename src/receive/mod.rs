//! `idem receive`: the reference receiver, the checklist of a correct webhook consumer as a
//! tool. It verifies the Standard Webhooks signature over the raw bytes before parsing anything
//! (401 when it fails or the timestamp is stale), deduplicates on `webhook-id` — remembered in an
//! append-only file for longer than idem's retry horizon, so across its own restarts too —
//! answers 2xx to a discarded duplicate (so the sender stops retrying), and prints one line per
//! callback. An id is recorded durably before its effect (the printed line) and the 2xx. With
//! `--ssf-issuer`, it is a Shared Signals receiver too: a pushed SET (RFC 8935) is verified
//! against its transmitter's keys (`set`), deduplicated on its `iss` and `jti` the same way, and
//! answered 202, or 400 with RFC 8935's `err`.

mod set;

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use idem_schemas::signature::{verify, Secret};
use idem_schemas::timefmt::now_ms;
use tokio::sync::Mutex;

use crate::source::set::{Err as SetErr, SetRefusal};

/// How the receiver runs.
pub struct Options {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Accepted signing secrets.
    pub secrets: Vec<Secret>,
    /// The Shared Signals transmitter SETs are taken from (its issuer and this receiver's
    /// audience), if any.
    pub ssf: Option<(String, String)>,
    /// The file of seen ids.
    pub state: PathBuf,
    /// How long an id is remembered.
    pub remember: Duration,
    /// Accepted clock skew of `webhook-timestamp`.
    pub tolerance: Duration,
}

/// Ids seen within the horizon, and the file that remembers them.
struct Seen {
    ids: HashMap<String, u64>,
    file: File,
}

impl Seen {
    /// Loads the ids still within `remember`, and rewrites the file with only those.
    fn open(path: &Path, remember: Duration) -> std::io::Result<Seen> {
        let horizon = now_ms().saturating_sub(remember.as_millis() as u64);
        let mut ids = HashMap::new();
        if let Ok(f) = File::open(path) {
            for line in BufReader::new(f).lines().map_while(Result::ok) {
                let Some((at, id)) = line.split_once(' ') else {
                    continue;
                };
                if let Ok(at) = at.parse::<u64>() {
                    if at >= horizon {
                        ids.insert(id.to_string(), at);
                    }
                }
            }
        }
        let tmp = path.with_extension("tmp");
        {
            let mut out = File::create(&tmp)?;
            for (id, at) in &ids {
                writeln!(out, "{at} {id}")?;
            }
            out.sync_all()?;
        }
        std::fs::rename(&tmp, path)?;
        let file = OpenOptions::new().append(true).open(path)?;
        Ok(Seen { ids, file })
    }

    /// Records `id` durably; false if it was already seen.
    fn record(&mut self, id: &str) -> std::io::Result<bool> {
        if self.ids.contains_key(id) {
            return Ok(false);
        }
        let at = now_ms();
        writeln!(self.file, "{at} {id}")?;
        self.file.sync_data()?;
        self.ids.insert(id.to_string(), at);
        Ok(true)
    }
}

struct Receiver {
    secrets: Vec<Secret>,
    ssf: Option<Arc<set::SetSource>>,
    tolerance_secs: u64,
    seen: Mutex<Seen>,
}

/// Runs the receiver until `shutdown`; `on_listen` is told the bound address.
pub async fn run(
    options: Options,
    on_listen: impl FnOnce(SocketAddr),
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let seen = Seen::open(&options.state, options.remember)?;
    let receiver = Arc::new(Receiver {
        secrets: options.secrets,
        ssf: options
            .ssf
            .map(|(issuer, audience)| set::SetSource::new(issuer, audience)),
        tolerance_secs: options.tolerance.as_secs(),
        seen: Mutex::new(seen),
    });
    let app = axum::Router::new().fallback(receive).with_state(receiver);
    let listener = tokio::net::TcpListener::bind(options.listen).await?;
    on_listen(listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

async fn receive(
    State(r): State<Arc<Receiver>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let is_set = header(&headers, "content-type")
        .is_some_and(|t| t.eq_ignore_ascii_case("application/secevent+jwt"));
    match (&r.ssf, is_set) {
        (Some(ssf), true) => receive_set(&r, ssf, &body).await,
        (None, true) => refuse_set(SetRefusal::new(
            SetErr::AccessDenied,
            "this receiver takes no SETs (start it with --ssf-issuer)",
        )),
        (_, false) => receive_callback(&r, uri, &headers, &body)
            .await
            .into_response(),
    }
}

/// RFC 8935's 400 for a refused SET.
fn refuse_set(refusal: SetRefusal) -> Response {
    let body = serde_json::json!({"err": refusal.err.as_str(), "description": refusal.description});
    (
        StatusCode::BAD_REQUEST,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// A pushed SET: checked, recorded durably, printed, then 202.
async fn receive_set(r: &Receiver, ssf: &set::SetSource, body: &[u8]) -> Response {
    let Ok(token) = std::str::from_utf8(body) else {
        return refuse_set(SetRefusal::new(
            SetErr::InvalidRequest,
            "the SET is not text",
        ));
    };
    let accepted = match ssf.check(token.trim()).await {
        Ok(accepted) => accepted,
        Err(refusal) => {
            println!(
                "refused SET ({}: {})",
                refusal.err.as_str(),
                refusal.description
            );
            return refuse_set(refusal);
        }
    };
    if accepted.id.chars().any(char::is_control) {
        return refuse_set(SetRefusal::new(
            SetErr::InvalidRequest,
            "a jti of control characters",
        ));
    }
    let fresh = match r.seen.lock().await.record(&format!("set {}", accepted.id)) {
        Ok(fresh) => fresh,
        Err(e) => {
            eprintln!("cannot record {}: {e}", accepted.id);
            return (StatusCode::SERVICE_UNAVAILABLE, "cannot record the SET\n").into_response();
        }
    };
    match fresh {
        true => println!("new SET {} {}", accepted.id, accepted.summary),
        false => println!("duplicate SET {} (discarded)", accepted.id),
    }
    StatusCode::ACCEPTED.into_response()
}

/// A Standard Webhooks callback.
async fn receive_callback(
    r: &Receiver,
    uri: Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> (StatusCode, &'static str) {
    let (Some(id), Some(ts), Some(sig)) = (
        header(headers, "webhook-id"),
        header(headers, "webhook-timestamp"),
        header(headers, "webhook-signature"),
    ) else {
        println!("refused {} (unsigned)", uri.path());
        return (
            StatusCode::UNAUTHORIZED,
            "missing webhook signature headers\n",
        );
    };
    let now = (now_ms() / 1000) as i64;
    // Verify the raw bytes before parsing anything.
    if let Err(e) = verify(&r.secrets, id, ts, sig, body, now, r.tolerance_secs) {
        println!("refused {id} ({e})");
        return (StatusCode::UNAUTHORIZED, "signature verification failed\n");
    }
    let fresh = {
        let mut seen = r.seen.lock().await;
        match seen.record(id) {
            Ok(fresh) => fresh,
            Err(e) => {
                eprintln!("cannot record {id}: {e}");
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "cannot record the delivery\n",
                );
            }
        }
    };
    if !fresh {
        println!("duplicate {id} (discarded)");
        return (StatusCode::OK, "duplicate\n");
    }
    let envelope: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let field = |path: &[&str]| {
        path.iter()
            .try_fold(&envelope, |v, k| v.get(k))
            .and_then(|v| v.as_str())
            .unwrap_or("?")
            .to_string()
    };
    println!(
        "new {id} {} action={} decision={} path={}",
        field(&["type"]),
        field(&["data", "action"]),
        field(&["data", "decision_id"]),
        uri.path()
    );
    (StatusCode::OK, "ok\n")
}
