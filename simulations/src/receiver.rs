//! The fault-injecting receiver: a raw HTTP/1.1 server on loopback standing in for the tenant's
//! systems. Each callback is verified and recorded, then answered with a seeded fault: 200, 503,
//! 429 with `Retry-After`, a hang past idem's deadline, a connection reset, or a 200 whose body
//! trickles in slowly. A Security Event Token pushed to a stream's endpoint (`/ssf/…`) is
//! recorded the same way, its signature left to the checker (`streams`), which knows the keys.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_schemas::signature::{verify, Secret};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::rng::Rng;

/// One callback as received.
#[derive(Debug, Clone)]
pub struct Callback {
    /// Its `webhook-id`.
    pub webhook_id: String,
    /// The raw body.
    pub body: Vec<u8>,
    /// Whether its signature verified.
    pub signature_ok: bool,
    /// Whether it was answered 2xx (an effect happened).
    pub answered_ok: bool,
    /// The request's path.
    pub path: String,
    /// When it arrived, in ms since the epoch.
    pub at_ms: u64,
}

impl Callback {
    /// Whether it is a pushed SET rather than a callback.
    pub fn is_set(&self) -> bool {
        self.path.starts_with("/ssf/")
    }
}

/// The faults, with their weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallbackFault {
    Ok,
    Busy,
    Limited,
    Hang,
    Reset,
    SlowBody,
}

const WEIGHTS: [(CallbackFault, u64); 6] = [
    (CallbackFault::Ok, 55),
    (CallbackFault::Busy, 12),
    (CallbackFault::Limited, 8),
    (CallbackFault::Hang, 8),
    (CallbackFault::Reset, 9),
    (CallbackFault::SlowBody, 8),
];

/// What the receiver saw.
pub struct FaultyReceiver {
    /// Its address.
    pub addr: std::net::SocketAddr,
    /// Every callback.
    pub seen: Arc<Mutex<Vec<Callback>>>,
    /// Every fault injected.
    pub faults: Arc<Mutex<Vec<CallbackFault>>>,
    /// While false, every request is answered 200 (to let the run settle).
    pub faulty: Arc<std::sync::atomic::AtomicBool>,
}

impl FaultyReceiver {
    /// Starts the receiver; faults are drawn from `seed`.
    pub async fn start(
        seed: u64,
        secret: Secret,
        hang: Duration,
    ) -> std::io::Result<FaultyReceiver> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let faults = Arc::new(Mutex::new(Vec::new()));
        let faulty = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let rng = Arc::new(Mutex::new(Rng::new(seed)));
        let (s, f, on) = (seen.clone(), faults.clone(), faulty.clone());
        let secret = Arc::new(secret);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let fault = if on.load(std::sync::atomic::Ordering::Relaxed) {
                    let mut rng = rng.lock().unwrap_or_else(|p| p.into_inner());
                    let mut roll = rng.range(0, 100);
                    WEIGHTS
                        .iter()
                        .find(|(_, w)| {
                            if roll < *w {
                                true
                            } else {
                                roll -= w;
                                false
                            }
                        })
                        .map_or(CallbackFault::Ok, |(fault, _)| *fault)
                } else {
                    CallbackFault::Ok
                };
                let (s, f, secret) = (s.clone(), f.clone(), secret.clone());
                tokio::spawn(async move {
                    let _ = serve(stream, fault, &secret, hang, &s, &f).await;
                });
            }
        });
        Ok(FaultyReceiver {
            addr,
            seen,
            faults,
            faulty,
        })
    }
}

async fn serve(
    mut stream: TcpStream,
    fault: CallbackFault,
    secret: &Secret,
    hang: Duration,
    seen: &Mutex<Vec<Callback>>,
    faults: &Mutex<Vec<CallbackFault>>,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let path = head
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_string();
    let header = |name: &str| {
        head.lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| v.trim().to_string())
            })
            .unwrap_or_default()
    };
    let length: usize = header("content-length").parse().unwrap_or(0);
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = buf[head_end..head_end + length].to_vec();
    let webhook_id = header("webhook-id");
    let now_ms = idem_schemas::timefmt::now_ms();
    let now = now_ms as i64 / 1000;
    let signature_ok = verify(
        std::slice::from_ref(secret),
        &webhook_id,
        &header("webhook-timestamp"),
        &header("webhook-signature"),
        &body,
        now,
        300,
    )
    .is_ok();
    faults.lock().unwrap_or_else(|p| p.into_inner()).push(fault);
    let record = |answered_ok| {
        seen.lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Callback {
                webhook_id: webhook_id.clone(),
                body: body.clone(),
                signature_ok,
                answered_ok,
                path: path.clone(),
                at_ms: now_ms,
            })
    };
    const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
    match fault {
        CallbackFault::Ok => {
            record(true);
            stream.write_all(OK).await?;
        }
        CallbackFault::Busy => {
            record(false);
            stream
                .write_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                .await?;
        }
        CallbackFault::Limited => {
            record(false);
            stream
                .write_all(b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 0\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                .await?;
        }
        CallbackFault::Hang => {
            // Past idem's deadline: idem gives up; whatever comes after, it counts no effect.
            record(false);
            tokio::time::sleep(hang).await;
        }
        CallbackFault::Reset => {
            record(false);
            // A zero linger makes the close a reset and never blocks (the deprecation is about
            // non-zero lingers blocking on drop).
            #[allow(deprecated)]
            stream.set_linger(Some(Duration::ZERO))?;
            drop(stream);
        }
        CallbackFault::SlowBody => {
            // The status is 2xx at once: an effect, even though the body trickles in.
            record(true);
            stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 8\r\nconnection: close\r\n\r\n")
                .await?;
            for b in b"received" {
                tokio::time::sleep(Duration::from_millis(40)).await;
                stream.write_all(&[*b]).await?;
            }
        }
    }
    Ok(())
}
