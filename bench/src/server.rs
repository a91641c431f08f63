//! The system under load: a real `idem serve` (release build, no failpoints) on a temp data
//! directory with the bench tenant's config, optionally under a wrapper command (valgrind for
//! `--callgrind`), and a fast in-process receiver for its callbacks. Also reads the server's peak
//! RSS and the data directory's size on disk.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

use crate::signals::{
    CALLBACK_SECRET, OPEN_API_KEY, SESSION_REVOKED, SET_RECEIVER, SET_RECEIVER_SECRET, SET_TYPE,
    SIGNING_SECRET, SSF_AUDIENCE, SSF_EVENT, SSF_ISSUER,
};

/// The store an idem of the bench runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StoreKind {
    /// sled, embedded in the scenario's temp dir
    Sled,
    /// PostgreSQL: a fresh database of the local server
    Postgres,
}

/// A fresh idem on a temp dir `dir` and `store` (a `[store]` section: empty for sled), calling
/// `receiver` (and with `traces`, exporting its traces there); `key_ttl` for the window
/// scenario. With a non-empty `wrapper` (a program and its arguments), idem runs as that
/// program's last argument.
pub fn start_idem(
    binary: &Path,
    dir: &Path,
    store: &str,
    (receiver, traces): (SocketAddr, bool),
    key_ttl: &str,
    wrapper: &[OsString],
) -> Result<IdemUnderLoad, String> {
    let data = dir.join("data");
    // The transmitter's signing key: ES256, whose signature costs a fraction of RS256's.
    let key = dir.join("transmitter.pem");
    std::fs::write(&key, devtools::jose::ec_pem()).map_err(|e| format!("the key: {e}"))?;
    let telemetry = match traces {
        true => format!("[telemetry]\notlp_endpoint = \"http://{receiver}\""),
        false => String::new(),
    };
    let config = format!(
        r#"
listen = "127.0.0.1:0"
data_dir = "{data}"
{store}
{telemetry}
[idempotency]
key_secret = "bench-key-secret-0123456789abcdef"
key_ttl = "{key_ttl}"
sweep_interval = "1s"
# Decisions kept as long as the keys, so that the window scenario's store follows the key window.
[decisions]
retention = "{key_ttl}"
[tenants.acme]
api_key = "sk_bench_test_key"
signing_secret = "{SIGNING_SECRET}"
callback_secret = "{CALLBACK_SECRET}"
[tenants.acme.playbooks.sim_swap]
decision = "deny"
actions = [ {{ name = "lock_account", url = "http://{receiver}/lock" }} ]
# The rules scenario's: sim_swap's decision and action, and three rules none of its signals
# matches, the last counting the subject's decisions.
[tenants.acme.playbooks.ruled]
decision = "deny"
actions = [ {{ name = "lock_account", url = "http://{receiver}/lock" }} ]
[[tenants.acme.playbooks.ruled.rules]]
name = "high-risk"
when = 'has(signal.metadata.risk) && signal.metadata.risk >= 90'
decision = "step_up"
[[tenants.acme.playbooks.ruled.rules]]
name = "test-numbers"
when = 'signal.subject.startsWith("+999")'
decision = "allow"
[[tenants.acme.playbooks.ruled.rules]]
name = "repeated"
when = 'subject.decisions("ruled", duration("1h")) > 100'
decision = "review"
[tenants.acme.playbooks.noop]
decision = "allow"
actions = []
# The set scenario's: one SET to each stream that asks for it (the bench receiver's one).
[tenants.acme.playbooks.{SET_TYPE}]
decision = "deny"
actions = [ {{ name = "revoke", set = "{SESSION_REVOKED}", subject_format = "phone_number" }} ]
[tenants.acme.ssf]
signing_keys = ["{key}"]
[tenants.acme.ssf.receivers.{SET_RECEIVER}]
client_secret = "{SET_RECEIVER_SECRET}"
audience = "https://receiver.bench.example"
endpoints = ["http://127.0.0.1"]
# The ssf scenario's transmitter: its JWK Set is the file it writes before idem starts.
[tenants.acme.sources.tx]
kind = "ssf"
issuer = "{SSF_ISSUER}"
audience = "{SSF_AUDIENCE}"
jwks = "{jwks}"
[[tenants.acme.sources.tx.map]]
event = "{SSF_EVENT}"
type = "sim_swap"
[tenants.open]
api_key = "{OPEN_API_KEY}"
callback_secret = "{CALLBACK_SECRET}"
[tenants.open.playbooks.sim_swap]
decision = "deny"
actions = [ {{ name = "lock_account", url = "http://{receiver}/lock" }} ]
"#,
        data = data.display(),
        jwks = dir.join("jwks.json").display(),
        key = key.display(),
    );
    IdemUnderLoad::start(binary, dir, &data, &config, wrapper).map_err(|e| e.to_string())
}

/// A running idem the bench loads.
pub struct IdemUnderLoad {
    child: Child,
    /// `http://127.0.0.1:port`.
    pub base: String,
    /// `127.0.0.1:port`.
    pub addr: std::net::SocketAddr,
    /// Its data directory.
    pub data_dir: PathBuf,
}

impl IdemUnderLoad {
    /// Starts `binary serve` with `config`, whose `data_dir` is `data_dir`, under `wrapper` if
    /// it is not empty.
    pub fn start(
        binary: &Path,
        dir: &Path,
        data_dir: &Path,
        config: &str,
        wrapper: &[OsString],
    ) -> std::io::Result<IdemUnderLoad> {
        let path = dir.join("idem.toml");
        std::fs::write(&path, config)?;
        let (child, base) = devtools::serve_under(wrapper, binary, &path, &[], Stdio::inherit())?;
        let addr = base
            .trim_start_matches("http://")
            .parse()
            .map_err(|_| std::io::Error::other(format!("idem listens on {base}?")))?;
        Ok(IdemUnderLoad {
            child,
            base,
            addr,
            data_dir: data_dir.to_path_buf(),
        })
    }

    /// The server's process id (the wrapper's, which is the same process under valgrind).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `http://127.0.0.1:port/v1/signals`.
    pub fn signals_url(&self) -> String {
        format!("{}/v1/signals", self.base)
    }

    /// Its `ssf` source's URL, where SETs are pushed.
    pub fn ssf_url(&self) -> String {
        format!("{}/v1/sources/acme/tx", self.base)
    }

    /// Peak resident set size of the server, in bytes (VmHWM).
    pub fn peak_rss(&self) -> u64 {
        self.proc_field("status", "VmHWM:") * 1024
    }

    /// Current resident set size, in bytes (VmRSS).
    pub fn rss(&self) -> u64 {
        self.proc_field("status", "VmRSS:") * 1024
    }

    /// Bytes the server has caused to be written to storage so far (`write_bytes` in
    /// `/proc/<pid>/io`: sled's log and nothing else it writes, counted when the pages are
    /// dirtied, so without the sockets).
    pub fn storage_bytes_written(&self) -> u64 {
        self.proc_field("io", "write_bytes:")
    }

    /// The number after `field` in `/proc/<pid>/<file>` (0 if it cannot be read).
    fn proc_field(&self, file: &str, field: &str) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/{file}", self.child.id()))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix(field))
                    .and_then(|l| l.split_whitespace().next())
                    .and_then(|n| n.parse().ok())
            })
            .unwrap_or(0)
    }

    /// Bytes the data directory occupies on disk (allocated blocks).
    pub fn disk_bytes(&self) -> u64 {
        disk_usage(&self.data_dir)
    }
}

impl Drop for IdemUnderLoad {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid; a clean shutdown flushes the store.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let _ = self.child.wait();
    }
}

fn disk_usage(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if meta.is_dir() {
        std::fs::read_dir(path)
            .map(|entries| entries.flatten().map(|e| disk_usage(&e.path())).sum())
            .unwrap_or(0)
    } else {
        meta.blocks() * 512
    }
}

/// Starts a receiver that answers every callback 200 at once, and takes every trace export
/// (an empty answer: all of it accepted); returns its address.
pub async fn fast_receiver() -> std::io::Result<std::net::SocketAddr> {
    let app = axum::Router::new()
        .route("/v1/traces", axum::routing::post(|| async { "" }))
        .fallback(|| async { "ok" });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(addr)
}
