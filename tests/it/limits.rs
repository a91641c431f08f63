//! Limits under hostile or heavy use: a tenant over its rate limit gets 429 with Retry-After
//! (others never notice), the bound on live claim actors answers 503 instead of growing without
//! end, and a body over the limit is refused even when streamed without a length.

use std::time::Duration;

use crate::support::*;

#[tokio::test]
async fn a_tenant_over_its_rate_limit_gets_429_and_others_do_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start().await;
    let cfg = config(&dir.path().join("data"), &receiver, "", "").replace(
        "[tenants.beta]\napi_key = \"sk_beta_test_key\"",
        "[tenants.beta]\napi_key = \"sk_beta_test_key\"\nrate_limit = 3",
    );
    assert!(cfg.contains("rate_limit = 3"));
    let idem = Idem::start(dir.path(), &cfg);
    let client = Client::new(&idem.base);
    let body = r#"{"type":"port_out","subject":"x"}"#;
    // One burst, sent at once: how long each request takes to process does not refill it.
    let burst = (0..5).map(|_| client.signal(Req::new(&sim_swap("+1555")).beta()));
    let statuses = futures::future::join_all(burst).await;
    let ok = statuses.iter().filter(|r| r.status == 201).count();
    let limited: Vec<&Resp> = statuses.iter().filter(|r| r.status == 429).collect();
    assert_eq!(ok, 3, "the burst is one second's worth");
    assert_eq!(limited.len(), 2);
    assert_eq!(limited[0].problem_type(), "urn:idem:problem:rate-limited");
    assert!(limited[0]
        .header("retry-after")
        .and_then(|s| s.parse::<u64>().ok())
        .is_some_and(|s| s >= 1));
    let other_key = unique("a");
    let other = client
        .signal(Req::new(body).key(&other_key).acme_signed(&other_key))
        .await;
    assert_eq!(other.status, 201, "another tenant is not limited");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        client
            .signal(Req::new(&sim_swap("+1555")).beta())
            .await
            .status,
        201,
        "refilled"
    );
}

#[tokio::test]
async fn live_claim_actors_are_bounded() {
    let (_dir, _receiver, _idem, client) = Harness::new()
        .idempotency("max_live_actors = 2\nidle_actor_timeout = \"30s\"")
        .start()
        .await;
    let body = sim_swap("+1555");
    let (k1, k2, k3) = (unique("b1"), unique("b2"), unique("b3"));
    assert_eq!(
        client.signal(Req::new(&body).key(&k1).beta()).await.status,
        201
    );
    assert_eq!(
        client.signal(Req::new(&body).key(&k2).beta()).await.status,
        201
    );
    let refused = client.signal(Req::new(&body).key(&k3).beta()).await;
    assert_eq!(refused.status, 503);
    assert_eq!(refused.problem_type(), "urn:idem:problem:unavailable");
    assert!(refused.header("retry-after").is_some());
    // Keys whose actors are alive are still served.
    assert!(client
        .signal(Req::new(&body).key(&k1).beta())
        .await
        .replayed());
    let text =
        String::from_utf8(client.send("GET", "/metrics", Req::new("")).await.body).expect("utf8");
    assert!(
        text.contains("idem_live_actors{family=\"claim\"} 2"),
        "{text}"
    );
}

#[tokio::test]
async fn an_unannounced_oversized_body_is_refused() {
    let (_dir, _receiver, idem, _client) = Harness::new().start().await;
    // A chunked body has no Content-Length: the limit is enforced while reading.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = idem.base.trim_start_matches("http://").to_string();
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let head = "POST /v1/signals HTTP/1.1\r\nhost: idem\r\ncontent-type: application/json\r\nauthorization: Bearer sk_beta_test_key\r\ntransfer-encoding: chunked\r\n\r\n";
    stream.write_all(head.as_bytes()).await.expect("head");
    let chunk = format!("400\r\n{}\r\n", " ".repeat(1024));
    for _ in 0..80 {
        if stream.write_all(chunk.as_bytes()).await.is_err() {
            break;
        }
    }
    let _ = stream.write_all(b"0\r\n\r\n").await;
    let mut answer = vec![0u8; 64];
    let n = stream.read(&mut answer).await.expect("answer");
    let status_line = String::from_utf8_lossy(&answer[..n]).to_string();
    assert!(status_line.starts_with("HTTP/1.1 413"), "{status_line}");
}

#[tokio::test]
async fn slow_and_oversized_requests_are_cut_off_while_others_are_served() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start().await;
    // [http] must come before the tenant tables: put it in front of [delivery].
    let cfg = config(&dir.path().join("data"), &receiver, "", "");
    let cfg = cfg.replace(
        "[delivery]\n",
        "[http]\nread_timeout = \"1s\"\n\n[delivery]\n",
    );
    let idem = Idem::start(dir.path(), &cfg);
    let addr = idem.base.trim_start_matches("http://").to_string();

    // Slowloris: headers trickle in and never finish.
    let started = std::time::Instant::now();
    let mut slow = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    slow.write_all(b"POST /v1/signals HTTP/1.1\r\nhost: idem\r\n")
        .await
        .expect("write");
    let trickle = async {
        for _ in 0..50 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if slow.write_all(b"x-slow: 1\r\n").await.is_err() {
                break;
            }
        }
    };
    // Meanwhile an ordinary request is served.
    let client = Client::new(&idem.base);
    let served = client.signal(Req::new(&sim_swap("+1555")).beta());
    let (_, response) = tokio::join!(trickle, served);
    assert_eq!(response.status, 201);
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(3), slow.read_to_end(&mut rest)).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the slow client was cut off"
    );

    // A slow body gets 408 after the deadline.
    let mut stream = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    stream
        .write_all(b"POST /v1/signals HTTP/1.1\r\nhost: idem\r\ncontent-type: application/json\r\nauthorization: Bearer sk_beta_test_key\r\ncontent-length: 100\r\n\r\n{\"type\":")
        .await
        .expect("write");
    let mut answer = vec![0u8; 256];
    let n = tokio::time::timeout(Duration::from_secs(4), stream.read(&mut answer))
        .await
        .expect("answered")
        .expect("read");
    let text = String::from_utf8_lossy(&answer[..n]).to_string();
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");

    // Oversized headers are refused.
    let mut stream = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    let huge = format!(
        "GET /healthz HTTP/1.1\r\nhost: idem\r\nx-big: {}\r\n\r\n",
        "a".repeat(64 * 1024)
    );
    let _ = stream.write_all(huge.as_bytes()).await;
    let mut answer = vec![0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(4), stream.read(&mut answer))
        .await
        .expect("answered")
        .unwrap_or(0);
    let text = String::from_utf8_lossy(&answer[..n]).to_string();
    assert!(n == 0 || text.starts_with("HTTP/1.1 431"), "{text}");
}
