//! Talking to idem as its callers do: [`Req`] builds a request (a JSON body, a tenant's
//! credentials, a signature, an Idempotency-Key), [`Client`] sends it and [`Resp`] is what came
//! back; also the bodies and unique keys the tests send.

use std::collections::HashMap;
use std::time::Duration;

use idem_schemas::signature::Secret;

use crate::support::config::{OKTA_HOOK_AUTH, SIGNING_SECRET};
use crate::support::wait::eventually;

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

/// An Okta event hook delivery of one `user.mfa.factor.deactivate` event `uuid` about `who`,
/// for the source [`with_okta_hook`](crate::support::config::with_okta_hook) adds.
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
