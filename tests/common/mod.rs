//! What the integration tests share: a real `idem serve` process on a temp data directory, a
//! real receiver server on loopback that records every callback, and request signing.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::IntoResponse;
use idem_schemas::signature::Secret;

pub const SIGNING_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
pub const CALLBACK_SECRET: &str = "whsec_Y2FsbGJhY2stc2VjcmV0LWZvci10ZXN0cw==";
pub const KEY_SECRET: &str = "test-key-secret-0123456789abcdef";

/// Probes every 50 ms until `done` holds for the probed value or `within` has passed; returns
/// the last value probed, for the caller to assert on.
pub async fn eventually<T, Fut>(
    within: Duration,
    mut probe: impl FnMut() -> Fut,
    done: impl Fn(&T) -> bool,
) -> T
where
    Fut: std::future::Future<Output = T>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let value = probe().await;
        if done(&value) || tokio::time::Instant::now() >= deadline {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

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
/// `Retry-After`.
#[derive(Clone, Copy)]
pub struct Answer {
    pub status: u16,
    pub delay: Duration,
    pub retry_after: Option<u64>,
}

/// `status` at once.
pub fn status(status: u16) -> Answer {
    Answer {
        status,
        delay: Duration::ZERO,
        retry_after: None,
    }
}

/// `200` after `delay`.
pub fn hang(delay: Duration) -> Answer {
    Answer {
        status: 200,
        delay,
        retry_after: None,
    }
}

#[derive(Default)]
struct ReceiverState {
    seen: Mutex<Vec<Received>>,
    /// Per path, the answers still to give; the last one repeats.
    answers: Mutex<HashMap<String, Vec<Answer>>>,
}

/// A real HTTP server standing in for the tenant's systems.
pub struct Receiver {
    pub addr: SocketAddr,
    state: Arc<ReceiverState>,
    server: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Starts a receiver that answers 200 at once unless told otherwise.
    pub async fn start() -> Receiver {
        let state = Arc::new(ReceiverState::default());
        let app = axum::Router::new()
            .fallback(receive)
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind receiver");
        let addr = listener.local_addr().expect("receiver addr");
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
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
            &[Answer {
                status,
                delay,
                retry_after: None,
            }],
        );
    }

    /// Answer `path` with `answers` in turn; the last one repeats.
    pub fn script(&self, path: &str, answers: &[Answer]) {
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
    let mut response = code.into_response();
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

/// The store the tests run against: sled in their data directory (the default), or, with
/// `IDEM_TEST_STORE=postgres`, a fresh database of the PostgreSQL server at
/// `IDEM_TEST_POSTGRES_URL` (default: this machine's, `postgres://postgres@127.0.0.1:5432`) for
/// each config, so tests run in parallel. A server that does not answer fails the test.
pub fn store_section() -> String {
    match std::env::var("IDEM_TEST_STORE").as_deref() {
        Err(_) | Ok("sled") => String::new(),
        Ok("postgres") => format!(
            "[store]\nbackend = \"postgres\"\nurl = \"{}\"\npool_size = 4\n",
            fresh_database()
        ),
        Ok(other) => panic!("IDEM_TEST_STORE={other:?}: use sled or postgres"),
    }
}

/// The retry that `send` makes after its server was killed mid-claim and started again. On sled
/// the claim is taken over at once (the process that held it is gone); on PostgreSQL once the
/// killed node's heartbeat has expired (the database cannot tell a crashed node from a slow
/// one before that), so until then it is in flight (409) and sent again.
pub async fn retry_after_crash<F, Fut>(send: F) -> Resp
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Resp>,
{
    let mut send = send;
    if std::env::var("IDEM_TEST_STORE").as_deref() != Ok("postgres") {
        return send().await;
    }
    eventually(Duration::from_secs(15), send, |r| r.status != 409).await
}

/// Runs `work` with a client of the database at `url`, on a thread and runtime of its own (the
/// caller may be inside a test's runtime). A server that does not answer fails the test.
pub fn with_postgres<T, F, Fut>(url: &str, work: F) -> T
where
    T: Send + 'static,
    F: FnOnce(tokio_postgres::Client) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T>,
{
    let url = url.to_string();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap_or_else(|e| panic!("PostgreSQL at {url} does not answer: {e}"));
            tokio::spawn(connection);
            work(client).await
        })
    })
    .join()
    .expect("the database work")
}

/// Creates an empty database on the test server; its URL.
pub fn fresh_database() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let server = std::env::var("IDEM_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into());
    let server = server.trim_end_matches('/').to_string();
    let name = format!(
        "idem_test_{}_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        idem_schemas::timefmt::now_ms()
    );
    let create = format!("CREATE DATABASE {name}");
    with_postgres(&format!("{server}/postgres"), |client| async move {
        client
            .batch_execute(&create)
            .await
            .unwrap_or_else(|e| panic!("cannot create the test database: {e}"));
    });
    format!("{server}/{name}")
}

/// A config for tests: tenant `acme` (signed requests), tenant `beta` (API key only), both with
/// a `sim_swap` playbook whose actions call `receiver`. `extra` is added to `[idempotency]`.
/// The store is the one [`store_section`] names.
pub fn config(
    data_dir: &Path,
    receiver: &Receiver,
    idempotency_extra: &str,
    delivery: &str,
) -> String {
    config_on(
        &store_section(),
        data_dir,
        receiver,
        idempotency_extra,
        delivery,
    )
}

/// [`config`] on the store of `store` (a `[store]` section, or nothing for sled).
pub fn config_on(
    store: &str,
    data_dir: &Path,
    receiver: &Receiver,
    idempotency_extra: &str,
    delivery: &str,
) -> String {
    format!(
        r#"
listen = "127.0.0.1:0"
data_dir = "{data}"

{store}
[idempotency]
key_secret = "{KEY_SECRET}"
{idempotency_extra}

[delivery]
{delivery}

[tenants.acme]
api_key = "sk_acme_test_key"
signing_secret = "{SIGNING_SECRET}"
callback_secret = "{CALLBACK_SECRET}"

[tenants.acme.playbooks.sim_swap]
decision = "deny"
actions = [
  {{ name = "lock_account", url = "{lock}" }},
  {{ name = "open_case", url = "{case}" }},
]

[tenants.acme.playbooks.port_out]
decision = "review"
actions = []

[tenants.beta]
api_key = "sk_beta_test_key"
callback_secret = "{CALLBACK_SECRET}"

[tenants.beta.playbooks.sim_swap]
decision = "step_up"
actions = [ {{ name = "notify", url = "{notify}" }} ]

# Decided once per subject: within the window, further signals for a subject make no decision.
[tenants.beta.playbooks.account_takeover]
decision = "deny"
once_per_subject = "1h"
actions = [ {{ name = "lock", url = "{takeover}" }} ]

[tenants.beta.playbooks.breach]
decision = "step_up"
once_per_subject = "700ms"
actions = [ {{ name = "reset", url = "{breach}" }} ]

[tenants.beta.playbooks.outcomes]
decision = "review"
actions = [
  {{ name = "ok", url = "{ok}" }},
  {{ name = "busy", url = "{busy}" }},
  {{ name = "refused", url = "{refused}" }},
  {{ name = "moved", url = "{moved}" }},
  {{ name = "slow", url = "{slow}" }},
  {{ name = "limited", url = "{limited}" }},
]
"#,
        data = data_dir.display(),
        lock = receiver.url("/lock"),
        case = receiver.url("/case"),
        notify = receiver.url("/notify"),
        takeover = receiver.url("/takeover"),
        breach = receiver.url("/breach"),
        ok = receiver.url("/ok"),
        busy = receiver.url("/busy"),
        refused = receiver.url("/refused"),
        moved = receiver.url("/moved"),
        slow = receiver.url("/slow"),
        limited = receiver.url("/limited"),
    )
}

/// A running `idem serve`.
pub struct Idem {
    pub base: String,
    pub config_path: PathBuf,
    child: Child,
    stderr: Arc<Mutex<String>>,
}

impl Idem {
    /// Starts `idem serve` with the config text, written next to the data directory.
    pub fn start(dir: &Path, config: &str) -> Idem {
        let config_path = dir.join("idem.toml");
        std::fs::write(&config_path, config).expect("write config");
        Self::start_with(config_path, &[])
    }

    /// Starts `idem serve` with the config text and extra environment (e.g. `FAILPOINTS`).
    pub fn start_env(dir: &Path, config: &str, env: &[(&str, &str)]) -> Idem {
        let config_path = dir.join("idem.toml");
        std::fs::write(&config_path, config).expect("write config");
        Self::start_with(config_path, env)
    }

    /// Waits (up to 10 s) for the process to exit by itself; its exit status. Async, so the
    /// test's receiver keeps serving meanwhile.
    pub async fn wait_exit(mut self) -> (std::process::ExitStatus, PathBuf) {
        let status = self.exited().await;
        (status, self.config_path.clone())
    }

    /// Waits (up to 10 s) for the process to exit by itself; its exit status, the process's
    /// log still readable.
    pub async fn exited(&mut self) -> std::process::ExitStatus {
        for _ in 0..1000 {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("idem did not exit; stderr: {}", self.stderr());
    }

    /// Starts `idem serve --config path` again (same data directory).
    pub fn start_with(config_path: PathBuf, env: &[(&str, &str)]) -> Idem {
        Self::start_full(config_path, env, &[])
    }

    /// Starts `idem serve --config path ARGS…` with extra environment.
    pub fn start_full(config_path: PathBuf, env: &[(&str, &str)], args: &[&str]) -> Idem {
        let mut child = Command::new(env!("CARGO_BIN_EXE_idem"))
            .arg("serve")
            .arg("--config")
            .arg(&config_path)
            .args(args)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn idem");
        let stderr_log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().expect("stderr");
        let log = stderr_log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                log.lock().expect("lock").push_str(&(line + "\n"));
            }
        });
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let first = lines.next().and_then(Result::ok).unwrap_or_else(|| {
            panic!(
                "idem printed no address; stderr: {}",
                stderr_log.lock().expect("lock")
            )
        });
        let base = first
            .strip_prefix("idem listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
            .to_string();
        std::thread::spawn(move || for _ in lines.by_ref() {});
        Idem {
            base,
            config_path,
            child,
            stderr: stderr_log,
        }
    }

    /// What the process logged so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().expect("lock").clone()
    }

    /// Sends `signal` (e.g. `libc::SIGHUP`).
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.child.id() as i32, signal);
        }
    }

    /// SIGKILL: no flush, no cleanup.
    pub fn kill(mut self) -> PathBuf {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.config_path.clone()
    }

    /// SIGTERM, then waits for the exit status.
    pub async fn terminate(self) -> (std::process::ExitStatus, PathBuf) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        self.wait_exit().await
    }
}

impl Drop for Idem {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A response as the tests look at it.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
    pub fn replayed(&self) -> bool {
        self.header("idempotent-replayed") == Some("true")
    }
    /// The problem `type` of an error response (asserting it is problem+json).
    pub fn problem_type(&self) -> String {
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "status {} body {}",
            self.status,
            String::from_utf8_lossy(&self.body)
        );
        let p = self.json();
        assert_eq!(p["status"], self.status);
        assert!(p["detail"].as_str().is_some_and(|d| !d.is_empty()));
        p["type"].as_str().expect("type").to_string()
    }
}

/// Builds and sends requests to one idem.
#[derive(Clone)]
pub struct Client {
    pub base: String,
    http: reqwest::Client,
}

/// A request under construction.
pub struct Req {
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Req {
    /// A JSON body with no headers.
    pub fn new(body: &str) -> Req {
        Req {
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.as_bytes().to_vec(),
        }
    }
    pub fn header(mut self, name: &str, value: &str) -> Req {
        self.headers.push((name.into(), value.into()));
        self
    }
    pub fn without(mut self, name: &str) -> Req {
        self.headers.retain(|(n, _)| n != name);
        self
    }
    /// `beta`'s Bearer key (no signature needed).
    pub fn beta(self) -> Req {
        self.header("authorization", "Bearer sk_beta_test_key")
    }
    /// `acme`'s Bearer key and a valid signature with `id` as webhook-id.
    pub fn acme_signed(self, id: &str) -> Req {
        let ts = idem_schemas::timefmt::now_ms() as i64 / 1000;
        self.acme_signed_at(id, ts)
    }
    pub fn acme_signed_at(self, id: &str, ts: i64) -> Req {
        let sig = Secret::parse(SIGNING_SECRET)
            .expect("secret")
            .sign(id, ts, &self.body);
        self.header("authorization", "Bearer sk_acme_test_key")
            .header("webhook-id", id)
            .header("webhook-timestamp", &ts.to_string())
            .header("webhook-signature", &sig)
    }
    pub fn key(self, key: &str) -> Req {
        self.header("idempotency-key", key)
    }
}

impl Client {
    pub fn new(base: &str) -> Client {
        Client {
            base: base.to_string(),
            http: reqwest::Client::new(),
        }
    }

    pub async fn send(&self, method: &str, path: &str, req: Req) -> Resp {
        self.try_send(method, path, req).await.expect("request")
    }

    /// Like `send`, but a connection that breaks (the server died) is an `Err`.
    pub async fn try_send(
        &self,
        method: &str,
        path: &str,
        req: Req,
    ) -> Result<Resp, reqwest::Error> {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut r = self.http.request(method, format!("{}{}", self.base, path));
        for (k, v) in req.headers {
            r = r.header(k, v);
        }
        let response = r.body(req.body).send().await?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
            .collect();
        let body = response.bytes().await?.to_vec();
        Ok(Resp {
            status,
            headers,
            body,
        })
    }

    pub async fn signal(&self, req: Req) -> Resp {
        self.send("POST", "/v1/signals", req).await
    }

    /// `GET /v1/deliveries/{id}` as tenant beta, whose playbooks the delivery tests use.
    pub async fn beta_delivery(&self, id: &str) -> Resp {
        self.send("GET", &format!("/v1/deliveries/{id}"), Req::new("").beta())
            .await
    }
}

/// A signal body.
pub fn sim_swap(subject: &str) -> String {
    format!(
        r#"{{"type":"sim_swap","subject":"{subject}","occurred_at":"2026-11-29T17:54:32Z","metadata":{{"risk":97,"source":"carrier"}}}}"#
    )
}

/// A unique string for keys.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid_like())
}

fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}-{}",
        std::process::id(),
        idem_schemas::timefmt::now_ms(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// Everything the store of the config at `config_path` holds, as (where, bytes): every file of
/// its data directory `data_dir` on sled, every row's columns on PostgreSQL.
pub fn stored(config_path: &Path, data_dir: &Path) -> Vec<(String, Vec<u8>)> {
    let config = std::fs::read_to_string(config_path).expect("read config");
    let url = config
        .lines()
        .find_map(|l| l.strip_prefix("url = \""))
        .and_then(|l| l.strip_suffix('"'));
    let Some(url) = url.map(str::to_string) else {
        return files_under(data_dir)
            .into_iter()
            .map(|(path, bytes)| (path.display().to_string(), bytes))
            .collect();
    };
    with_postgres(&url, |client| async move {
        let mut out = Vec::new();
        for (table, text, bytes) in [
            ("idem_claims", "tenant", "digest || log"),
            ("idem_deliveries", "id || ' ' || tenant", "log"),
        ] {
            let rows = client
                .query(&format!("SELECT {text}, {bytes} FROM {table}"), &[])
                .await
                .expect("read the table");
            for row in rows {
                let text: String = row.get(0);
                let mut bytes: Vec<u8> = row.get(1);
                bytes.extend_from_slice(text.as_bytes());
                out.push((table.to_string(), bytes));
            }
        }
        out
    })
}

/// Every file under `dir`, read whole.
pub fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.clone(), std::fs::read(&p).expect("read")));
            }
        }
    }
    out
}

/// True when `needle` occurs in `haystack`.
pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// A keyed signal and the answer its first request got.
pub struct Answered {
    pub key: String,
    pub body: String,
    pub first: Vec<u8>,
}

impl Answered {
    /// The signal's request, signed anew (tenant acme).
    pub fn request(&self) -> Req {
        Req::new(&self.body).key(&self.key).acme_signed(&self.key)
    }
}

/// Asserts that every signal of `answered` replays its first answer byte for byte at `base`.
pub async fn assert_replays(base: &str, answered: &[Answered]) {
    let client = Client::new(base);
    for a in answered {
        let r = client.signal(a.request()).await;
        assert_eq!(
            r.status,
            201,
            "{}: {}",
            a.key,
            String::from_utf8_lossy(&r.body)
        );
        assert!(r.replayed(), "{}: a replay", a.key);
        assert_eq!(r.body, a.first, "{}: the same bytes", a.key);
    }
}

/// Sends new keyed signals (tenant acme) one at a time until one is not answered 201, at most
/// `limit`: the answered ones, then the first that was not, with its answer (none when the
/// connection broke: the server went away).
pub async fn send_until_refused(
    base: &str,
    limit: usize,
) -> (Vec<Answered>, Option<(Answered, Option<Resp>)>) {
    let client = Client::new(base);
    let mut answered = Vec::new();
    for n in 0..limit {
        let mut a = Answered {
            key: unique("refused"),
            body: sim_swap(&format!("+4477{n:08}")),
            first: Vec::new(),
        };
        match client.try_send("POST", "/v1/signals", a.request()).await {
            Ok(r) if r.status == 201 => {
                a.first = r.body;
                answered.push(a);
            }
            Ok(r) => return (answered, Some((a, Some(r)))),
            Err(_) => return (answered, Some((a, None))),
        }
    }
    (answered, None)
}

/// A response's status, headers and body, for assertion messages.
pub fn text(r: &Resp) -> String {
    format!(
        "status {} headers {:?} body {}",
        r.status,
        r.headers,
        String::from_utf8_lossy(&r.body)
    )
}

/// The `decision_id` of a decision's body.
pub fn decision_id(r: &Resp) -> String {
    r.json()["decision_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no decision_id: {}", text(r)))
        .to_string()
}

/// Whether `r` answers with another signal's decision for the subject (`once_per_subject`).
pub fn deduplicated(r: &Resp) -> bool {
    r.header("idem-deduplicated") == Some("subject")
}

/// Asserts that `r` is a new decision's first processing.
pub fn assert_first(r: &Resp, what: &str) {
    assert_eq!(r.status, 201, "{what}: {}", text(r));
    assert!(!r.replayed(), "{what}: a first processing: {}", text(r));
    assert!(!deduplicated(r), "{what}: not deduplicated: {}", text(r));
}

/// Asserts that `r` replays `first`'s bytes (a retry of a key).
pub fn assert_replay_of(r: &Resp, first: &Resp, what: &str) {
    assert_eq!(r.status, 201, "{what}: {}", text(r));
    assert!(r.replayed(), "{what}: Idempotent-Replayed: {}", text(r));
    assert_eq!(
        String::from_utf8_lossy(&r.body),
        String::from_utf8_lossy(&first.body),
        "{what}: the same bytes"
    );
}

/// Asserts that `r` is a problem of `status` whose type ends in `slug`.
pub fn assert_problem(r: &Resp, status: u16, slug: &str, what: &str) {
    assert_eq!(r.status, status, "{what}: {}", text(r));
    assert_eq!(
        r.problem_type(),
        format!("urn:idem:problem:{slug}"),
        "{what}: {}",
        text(r)
    );
}

/// Asserts that none of what the store holds (see [`stored`]) carries `subject` in clear, with
/// or without its leading `+`.
pub fn assert_subject_not_held(held: &[(String, Vec<u8>)], subject: &str) {
    assert!(
        held.iter().map(|(_, b)| b.len()).sum::<usize>() > 0,
        "the store wrote something"
    );
    for (place, bytes) in held {
        assert!(
            !contains(bytes, subject.as_bytes()),
            "raw subject found in {place}"
        );
        assert!(
            !contains(bytes, subject.trim_start_matches('+').as_bytes()),
            "the subject's digits found in {place}"
        );
    }
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

/// The Authorization value of the Okta source [`with_okta_hook`] adds.
pub const OKTA_HOOK_AUTH: &str = "okta-hook-value";

/// `config` with an Okta source `hook` on tenant beta: `user.*` events become `sim_swap`
/// signals (one action, `/notify`) about the event's first target.
pub fn with_okta_hook(config: &str) -> String {
    format!(
        "{config}\n[tenants.beta.sources.hook]\nkind = \"okta\"\nsecret = \"{OKTA_HOOK_AUTH}\"\n\
         [[tenants.beta.sources.hook.map]]\nevent = \"user.*\"\ntype = \"sim_swap\"\n\
         subject = \"/target/0/alternateId\"\n"
    )
}

/// An Okta event hook delivery of one `user.mfa.factor.deactivate` event `uuid` about `who`,
/// for the source [`with_okta_hook`] adds.
pub fn okta_hook_delivery(uuid: &str, who: &str) -> Req {
    let body = serde_json::json!({"data": {"events": [{
        "uuid": uuid, "eventType": "user.mfa.factor.deactivate",
        "target": [{"alternateId": who}]
    }]}})
    .to_string();
    Req::new(&body).header("authorization", OKTA_HOOK_AUTH)
}

/// Percent-encodes a query value (a raw subject has `+`, which a query would read as a space).
pub fn enc(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `idem receive`, the reference receiver, as its own process (with [`CALLBACK_SECRET`]):
/// stopped for real (its port then refuses connections) and started again on the same port.
pub struct ReceiveProc {
    child: Child,
    /// `http://` and the address it listens on.
    pub base: String,
    lines: std::sync::mpsc::Receiver<String>,
    /// Every line taken from `lines` so far.
    read: Mutex<Vec<String>>,
}

impl ReceiveProc {
    /// Starts `idem receive` on `listen` (port 0: a free one), remembering ids in `state`.
    pub fn start(listen: &str, state: &Path) -> ReceiveProc {
        let mut child = Command::new(env!("CARGO_BIN_EXE_idem"))
            .args(["receive", "--listen", listen, "--secret", CALLBACK_SECRET])
            .arg("--state")
            .arg(state)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn idem receive");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let first = lines.next().and_then(Result::ok).expect("address line");
        let base = first
            .strip_prefix("idem receive listening on ")
            .expect("the address")
            .to_string();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        ReceiveProc {
            child,
            base,
            lines: rx,
            read: Mutex::default(),
        }
    }

    /// The address it listens on, `host:port`.
    pub fn addr(&self) -> &str {
        self.base.trim_start_matches("http://")
    }

    fn next(&self, within: Duration) -> Option<String> {
        let line = self.lines.recv_timeout(within).ok()?;
        self.read.lock().expect("lock").push(line.clone());
        Some(line)
    }

    /// The next printed line (or panics after 10 s).
    pub fn line(&self) -> String {
        self.next(Duration::from_secs(10)).expect("a printed line")
    }

    /// Waits (up to 20 s) for a line starting with `prefix`, passing over others.
    pub fn wait_line(&self, prefix: &str) -> String {
        loop {
            match self.next(Duration::from_secs(20)) {
                Some(line) if line.starts_with(prefix) => return line,
                Some(_) => continue,
                None => panic!("idem receive printed no line starting with {prefix:?}"),
            }
        }
    }

    /// Every line it printed so far, those already read included.
    pub fn printed(&self) -> Vec<String> {
        while self.next(Duration::ZERO).is_some() {}
        self.read.lock().expect("lock").clone()
    }

    /// Kills it (SIGKILL); the address it listened on.
    pub fn stop(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.addr().to_string()
    }
}

impl Drop for ReceiveProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
