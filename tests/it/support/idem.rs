//! The idem under test: the real `idem serve` binary of this build, started on a config written
//! next to its data directory, its first line read for the address it listens on and its log
//! kept for assertion messages; signalled, killed or stopped as a test needs, and killed when
//! dropped.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
        Self::start_env(dir, config, &[])
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

    /// The process's resident memory now and at its peak so far, in KiB (`VmRSS` and `VmHWM`
    /// of /proc/<pid>/status).
    pub fn memory(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the process's status");
        let kib = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or_else(|| panic!("no {name} in {status}"))
        };
        (kib("VmRSS:"), kib("VmHWM:"))
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
