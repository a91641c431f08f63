//! A bare HTTP/1.1 client for the storm: keep-alive connections opened ahead, each request's
//! bytes built once before the burst and written with one call, each answer read as far as its
//! status, the `Idempotent-Replayed` header and its body's length. A thousand simultaneous
//! requests through a general client cost the load generator more than the server; this way the
//! burst measures the server.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One request's bytes, ready to write.
pub fn request(path: &str, host: SocketAddr, headers: &[(&str, String)], body: &str) -> Vec<u8> {
    let mut out = format!("POST {path} HTTP/1.1\r\nhost: {host}\r\n");
    for (name, value) in headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
    out.into_bytes()
}

/// Opens `n` connections to `addr`.
pub async fn connect(addr: SocketAddr, n: usize) -> std::io::Result<Vec<TcpStream>> {
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        conns.push(stream);
    }
    Ok(conns)
}

/// One request's exchange: what came back, and how long it took.
pub struct Exchange {
    /// The status code (0: no answer).
    pub status: u16,
    /// Whether `Idempotent-Replayed: true` was among the headers.
    pub replayed: bool,
    /// From just before the write to the answer's last byte.
    pub latency: Duration,
}

/// Sends `request` on `stream` and reads the answer; the stream stays usable when it succeeds.
pub async fn exchange(stream: &mut TcpStream, request: &[u8]) -> Exchange {
    let started = Instant::now();
    // No answer reads as status 0.
    let (status, replayed) = round_trip(stream, request).await.unwrap_or_default();
    Exchange {
        status,
        replayed,
        latency: started.elapsed(),
    }
}

async fn round_trip(stream: &mut TcpStream, request: &[u8]) -> std::io::Result<(u16, bool)> {
    stream.write_all(request).await?;
    let mut buf = Vec::with_capacity(1024);
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        if stream.read_buf(&mut buf).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let bad = || std::io::Error::from(std::io::ErrorKind::InvalidData);
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(bad)?;
    let header = |name: &str| {
        head.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':').map(str::trim))
    };
    let replayed = header("idempotent-replayed") == Some("true");
    let length: usize = header("content-length")
        .and_then(|v| v.parse().ok())
        .ok_or_else(bad)?;
    while buf.len() < head_end + length {
        if stream.read_buf(&mut buf).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok((status, replayed))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that answers `/replayed` with the replay header and `/big` with a body larger
    /// than one read, on keep-alive connections.
    async fn server() -> SocketAddr {
        let app = axum::Router::new()
            .route(
                "/replayed",
                axum::routing::post(|| async { ([("idempotent-replayed", "true")], "{}") }),
            )
            .route(
                "/big",
                axum::routing::post(|| async {
                    (axum::http::StatusCode::CONFLICT, "x".repeat(200_000))
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        addr
    }

    #[tokio::test]
    async fn reads_status_replay_flag_and_whole_bodies_on_one_connection() {
        let addr = server().await;
        let mut conns = connect(addr, 1).await.expect("connect");
        let stream = &mut conns[0];
        let headers = [("content-type", "application/json".to_string())];
        let replayed = request("/replayed", addr, &headers, "{\"a\":1}");
        let big = request("/big", addr, &headers, "{}");
        // The big body must be read to its end, or the next answer on the connection is garbage.
        for (req, status, flag) in [
            (&replayed, 200, true),
            (&big, 409, false),
            (&replayed, 200, true),
        ] {
            let answer = exchange(stream, req).await;
            assert_eq!((answer.status, answer.replayed), (status, flag));
        }
        let missing = exchange(stream, &request("/nowhere", addr, &headers, "")).await;
        assert_eq!((missing.status, missing.replayed), (404, false));
    }

    #[tokio::test]
    async fn a_closed_connection_reads_as_no_answer() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            // Accept, then close without answering.
            let _ = listener.accept().await;
        });
        let mut conns = connect(addr, 1).await.expect("connect");
        let answer = exchange(&mut conns[0], &request("/", addr, &[], "")).await;
        assert_eq!(answer.status, 0);
    }
}
