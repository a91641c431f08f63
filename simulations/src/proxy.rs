//! A fault proxy between one node and the database (`--partitions`): a TCP relay on loopback
//! that forwards both ways until it is told to black-hole, and then forwards nothing, silently
//! (no reset, no close: the node's packets wait, as they would behind a dropped route), until
//! it heals; what was sent meanwhile then arrives late, which is the point: a late write of a
//! node that lost its claims and leases must be fenced.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A running relay.
pub struct Proxy {
    /// The port the node connects to.
    pub port: u16,
    cut: Arc<AtomicBool>,
}

impl Proxy {
    /// Relays a free loopback port to `upstream` (`host:port`).
    pub async fn start(upstream: String) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let cut = Arc::new(AtomicBool::new(false));
        let relay_cut = cut.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(pipe(client_read, server_write, relay_cut.clone()));
                tokio::spawn(pipe(server_read, client_write, relay_cut.clone()));
            }
        });
        Ok(Proxy { port, cut })
    }

    /// Black-holes every connection (new ones are accepted, and wait too).
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }

    /// Forwards again, what waited first.
    pub fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

/// Copies `from` to `to` while the route is up; while it is cut, holds what it has read.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    cut: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        while cut.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        while cut.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
