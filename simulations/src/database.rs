//! The PostgreSQL server the nodes share, crashed and started again (`--db-restarts`): the
//! Debian cluster serving the run's port, stopped with `pg_ctlcluster … stop -m immediate` (a
//! crash: no checkpoint, recovery from its WAL at start) and started again. Whatever happens to
//! the run, the server is started again before the run ends ([`PostgresCluster::ensure_up`]).

use std::process::Command;
use std::time::{Duration, Instant};

/// A local cluster, by its version and name.
pub struct PostgresCluster {
    version: String,
    name: String,
    port: u16,
    down: bool,
}

impl PostgresCluster {
    /// The cluster of `pg_lsclusters` that serves `port`.
    pub fn serving(port: u16) -> Result<PostgresCluster, String> {
        let out = Command::new("pg_lsclusters")
            .arg("-h")
            .output()
            .map_err(|e| format!("pg_lsclusters: {e} (--db-restarts needs Debian's postgresql)"))?;
        let listing = String::from_utf8_lossy(&out.stdout);
        listing
            .lines()
            .map(|line| line.split_whitespace().collect::<Vec<_>>())
            .find(|fields| fields.get(2).and_then(|p| p.parse().ok()) == Some(port))
            .and_then(|fields| {
                Some(PostgresCluster {
                    version: fields.first()?.to_string(),
                    name: fields.get(1)?.to_string(),
                    port,
                    down: false,
                })
            })
            .ok_or_else(|| format!("no cluster of pg_lsclusters serves port {port}"))
    }

    /// Crashes the server: an immediate stop, as a power cut would leave it.
    pub fn crash(&mut self) -> Result<(), String> {
        self.down = true;
        self.ctl(&["stop", "-m", "immediate"])
    }

    /// Starts it again and waits until it answers (recovery replays its WAL).
    pub fn start(&mut self) -> Result<(), String> {
        self.ctl(&["start"])?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            let ready = Command::new("pg_isready")
                .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string()])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                self.down = false;
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!(
            "the server on port {} did not come back",
            self.port
        ))
    }

    /// Starts it if the run left it down.
    pub fn ensure_up(&mut self) -> Result<(), String> {
        match self.down {
            true => self.start(),
            false => Ok(()),
        }
    }

    fn ctl(&self, action: &[&str]) -> Result<(), String> {
        let status = Command::new("pg_ctlcluster")
            .args([self.version.as_str(), self.name.as_str()])
            .args(action)
            .status()
            .map_err(|e| format!("pg_ctlcluster: {e}"))?;
        match status.success() {
            true => Ok(()),
            false => Err(format!(
                "pg_ctlcluster {} {} {}: {status}",
                self.version,
                self.name,
                action.join(" ")
            )),
        }
    }
}

impl Drop for PostgresCluster {
    fn drop(&mut self) {
        if let Err(e) = self.ensure_up() {
            eprintln!("simulations: {e}");
        }
    }
}
