//! `redis`, the anchor for a durable claim: what the best thing a user could put in front of a
//! disk does with the same job. A throw-away `redis-server` on the scenario's temp dir and its own
//! port, with `appendonly yes` and `appendfsync always` (every write on disk before its answer,
//! the syncs batched across clients, as idem's group commit batches them), driven with
//! `SET key v NX`, a new key per request, from the bench's closed-loop workers over as many
//! connections. `claim` is idem doing the same: one durable write per new key.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

use super::ScenarioContext;
use crate::report::ScenarioRow;

/// The server, killed when dropped.
struct RedisServer {
    child: Child,
    port: u16,
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `redis-server` on `dir`, durable per write, and waits for it to answer.
async fn start(dir: &std::path::Path) -> Result<RedisServer, String> {
    let port = devtools::free_port().map_err(|e| e.to_string())?;
    let child = Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args([
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--save",
            "",
        ])
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| {
            format!(
                "cannot run redis-server ({e}): the redis scenario needs Debian's redis-server \
                 package (the bench installs nothing itself)"
            )
        })?;
    let server = RedisServer { child, port };
    let started = Instant::now();
    loop {
        if let Ok(mut c) = Connection::open(port).await {
            if matches!(c.command(&["PING"]).await.as_deref(), Ok("+PONG")) {
                return Ok(server);
            }
        }
        if started.elapsed() > Duration::from_secs(10) {
            return Err(format!("redis-server did not answer on port {port}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One RESP connection.
struct Connection {
    stream: BufReader<TcpStream>,
    line: String,
}

impl Connection {
    async fn open(port: u16) -> std::io::Result<Connection> {
        let stream = TcpStream::connect(("127.0.0.1", port)).await?;
        stream.set_nodelay(true)?;
        Ok(Connection {
            stream: BufReader::new(stream),
            line: String::new(),
        })
    }

    /// Sends `args` as one command; its one-line reply (`+OK`, `$-1`, `-ERR …`).
    async fn command(&mut self, args: &[&str]) -> std::io::Result<String> {
        let mut request = format!("*{}\r\n", args.len());
        for arg in args {
            request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        self.stream.get_mut().write_all(request.as_bytes()).await?;
        self.line.clear();
        self.stream.read_line(&mut self.line).await?;
        Ok(self.line.trim_end().to_string())
    }
}

/// The scenario: the bench's concurrency, duration and rate against a fresh redis-server.
pub async fn run(ctx: &ScenarioContext<'_>) -> Result<ScenarioRow, String> {
    let server = start(ctx.dir).await?;
    let mut connections = Vec::new();
    for _ in 0..ctx.args.concurrency {
        let c = Connection::open(server.port)
            .await
            .map_err(|e| e.to_string())?;
        connections.push(Mutex::new(c));
    }
    let connections = Arc::new(connections);
    let stats = ctx
        .drive(move |n| {
            let connections = connections.clone();
            async move {
                let mut c = connections[n as usize % connections.len()].lock().await;
                let key = format!("claim-{n}");
                match c.command(&["SET", &key, "v", "NX"]).await.as_deref() {
                    Ok("+OK") => 201,
                    Ok("$-1") => 409,
                    _ => 500,
                }
            }
        })
        .await;
    drop(server);
    Ok(ScenarioRow {
        name: "redis".into(),
        rss: 0,
        disk: 0,
        stats,
        note: "redis-server: SET key v NX, appendonly yes, appendfsync always".into(),
        floor_p99: None,
    })
}
