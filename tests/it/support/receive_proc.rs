//! `idem receive`, the reference receiver, as a process of its own: the tests read what it
//! prints (one line per callback, new or duplicate), kill it so that its port refuses
//! connections, and start it again on the same port and state file.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use crate::support::config::CALLBACK_SECRET;

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
        ReceiveProc::start_with(listen, state, &[])
    }

    /// [`ReceiveProc::start`] with more arguments (`--ssf-issuer …`).
    pub fn start_with(listen: &str, state: &Path, args: &[&str]) -> ReceiveProc {
        let mut child = Command::new(env!("CARGO_BIN_EXE_idem"))
            .args(["receive", "--listen", listen, "--secret", CALLBACK_SECRET])
            .arg("--state")
            .arg(state)
            .args(args)
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
