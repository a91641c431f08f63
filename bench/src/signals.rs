//! The bench's signals: the bench tenants' secrets, a keyed signal's body and headers signed as
//! idem expects them (tenant `acme`), a keyless one's from the tenant that signs nothing
//! (`open`: a signed request is claimed under its `webhook-id`, so it is never keyless), sending
//! one through an HTTP client, and the client itself.

use idem_schemas::signature::Secret;

/// The bench tenant's signing secret (requests to idem are signed with it).
pub const SIGNING_SECRET: &str = "whsec_YmVuY2gtc2lnbmluZy1zZWNyZXQ=";
/// The bench tenant's callback secret (idem signs its callbacks with it).
pub const CALLBACK_SECRET: &str = "whsec_YmVuY2gtY2FsbGJhY2stc2VjcmV0";

/// The `set` scenario's receiver: its `client_id` at the bench tenant's transmitter.
pub const SET_RECEIVER: &str = "bench";
/// Its client secret.
pub const SET_RECEIVER_SECRET: &str = "bench-receiver-secret-0001";
/// The signal type whose playbook sends a SET.
pub const SET_TYPE: &str = "sim_swap_set";
/// The event type that SET carries, and its stream asks for.
pub const SESSION_REVOKED: &str =
    "https://schemas.openid.net/secevent/caep/event-type/session-revoked";

/// The `ssf` scenario's transmitter: the SETs' `iss`, `aud` and event type.
pub const SSF_ISSUER: &str = "https://transmitter.bench.example/ssf";
/// The audience the bench's `ssf` source expects.
pub const SSF_AUDIENCE: &str = "https://idem.bench.example/acme";
/// The event type its SETs carry (mapped to `sim_swap`).
pub const SSF_EVENT: &str =
    "https://schemas.openid.net/secevent/risc/event-type/credential-compromise";

/// The API key of the tenant whose signals are not signed.
pub const OPEN_API_KEY: &str = "sk_bench_open_test_key";

/// Signal `n` of `signal_type`: its body and headers, signed under `key` as its `webhook-id`,
/// or without a key from the tenant that signs nothing.
pub fn signed(
    signal_type: &str,
    n: u64,
    key: Option<&str>,
) -> (String, Vec<(&'static str, String)>) {
    let body =
        format!(r#"{{"type":"{signal_type}","subject":"+4477009{n:08}","metadata":{{"n":{n}}}}}"#);
    let Some(id) = key.map(str::to_string) else {
        let headers = vec![
            ("authorization", format!("Bearer {OPEN_API_KEY}")),
            ("content-type", "application/json".to_string()),
        ];
        return (body, headers);
    };
    let ts = idem_schemas::timefmt::now_ms() as i64 / 1000;
    let sig = Secret::parse(SIGNING_SECRET)
        .map(|s| s.sign(&id, ts, body.as_bytes()))
        .unwrap_or_default();
    let mut headers = vec![
        ("authorization", "Bearer sk_bench_test_key".to_string()),
        ("content-type", "application/json".to_string()),
        ("webhook-id", id),
        ("webhook-timestamp", ts.to_string()),
        ("webhook-signature", sig),
    ];
    if let Some(k) = key {
        headers.push(("idempotency-key", k.to_string()));
    }
    (body, headers)
}

/// Sends one signed signal; its status (0 when no answer) and whether it was a replay.
pub async fn signal(
    http: &reqwest::Client,
    url: &str,
    signal_type: &str,
    n: u64,
    key: Option<&str>,
) -> (u16, bool) {
    let (body, headers) = signed(signal_type, n, key);
    let mut r = http.post(url).body(body);
    for (name, value) in headers {
        r = r.header(name, value);
    }
    match r.send().await {
        Ok(resp) => {
            let replayed = resp.headers().contains_key("idempotent-replayed");
            let status = resp.status().as_u16();
            let _ = resp.bytes().await;
            (status, replayed)
        }
        Err(_) => (0, false),
    }
}

/// An HTTP client whose pool keeps a connection per worker.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(2048)
        .build()
        .unwrap_or_default()
}
