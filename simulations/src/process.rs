//! The system under test: a real `idem serve` process (a failpoints build), restarted on the
//! same data directory and port after every crash, each incarnation with its own FAILPOINTS.

use std::path::{Path, PathBuf};
use std::process::Child;

/// Debian's libfaketime, which moves the clock of the process it is preloaded into
/// (`scripts/install-faketime` installs it).
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// A supervised `idem serve`.
pub struct IdemProcess {
    binary: PathBuf,
    config: PathBuf,
    logs: PathBuf,
    child: Option<Child>,
    /// Run under Debian's `faketime` with this clock offset (`+300s`, `-120s`), if any.
    clock: Option<String>,
    /// How many incarnations were started.
    pub starts: usize,
    /// How many incarnations exited by themselves (not killed by a signal).
    pub exits: usize,
}

impl IdemProcess {
    /// Prepares (does not start) `binary serve --config config`, logging under `logs`.
    pub fn new(binary: &Path, config: &Path, logs: &Path) -> Self {
        IdemProcess {
            binary: binary.to_path_buf(),
            config: config.to_path_buf(),
            logs: logs.to_path_buf(),
            child: None,
            clock: None,
            starts: 0,
            exits: 0,
        }
    }

    /// Every incarnation runs with its clock `offset` off this machine's (libfaketime's
    /// `FAKETIME`).
    pub fn skewed(mut self, offset: String) -> Self {
        self.clock = Some(offset);
        self
    }

    /// Starts an incarnation with `failpoints` and waits until it listens.
    pub fn start(&mut self, failpoints: &str) -> std::io::Result<()> {
        self.starts += 1;
        let log = std::fs::File::create(self.logs.join(format!("idem-{}.log", self.starts)))?;
        // libfaketime preloaded into idem itself (the `faketime` program would stand between
        // this supervisor and idem, and take its signals).
        let mut env = vec![("FAILPOINTS", failpoints)];
        if let Some(offset) = &self.clock {
            env.extend([("LD_PRELOAD", LIBFAKETIME), ("FAKETIME", offset.as_str())]);
        }
        let (child, _) = devtools::serve(&self.binary, &self.config, &env, log.into())?;
        self.child = Some(child);
        Ok(())
    }

    /// True while the current incarnation runs. A dead one was reaped; its exit status says
    /// whether a failpoint killed it.
    pub fn alive(&mut self) -> bool {
        match self.child.as_mut().map(|c| c.try_wait()) {
            Some(Ok(None)) => true,
            exited => {
                if let Some(Ok(Some(status))) = exited {
                    use std::os::unix::process::ExitStatusExt;
                    if status.signal().is_none() {
                        self.exits += 1;
                    }
                }
                self.child = None;
                false
            }
        }
    }

    /// The config file it is started with.
    pub fn config(&self) -> &Path {
        &self.config
    }

    /// SIGHUP: the process reloads its config file.
    pub fn reload(&mut self) {
        self.signal(libc::SIGHUP);
    }

    /// SIGSTOP: the process stalls (its heartbeat, its leases and its writes with it) until
    /// [`IdemProcess::resume`].
    pub fn pause(&mut self) {
        self.signal(libc::SIGSTOP);
    }

    /// SIGCONT: a stalled process goes on from where it was, its late writes included.
    pub fn resume(&mut self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&mut self, signal: i32) {
        if let Some(child) = &self.child {
            // SAFETY: kill(2) on our own child's pid.
            unsafe {
                libc::kill(child.id() as i32, signal);
            }
        }
    }

    /// SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// How many incarnations logged `needle`.
    pub fn incarnations_logging(&self, needle: &str) -> usize {
        (1..=self.starts)
            .filter_map(|n| std::fs::read_to_string(self.logs.join(format!("idem-{n}.log"))).ok())
            .filter(|log| log.contains(needle))
            .count()
    }

    /// Counts `needle` in every incarnation's log.
    pub fn count_in_logs(&self, needle: &str) -> usize {
        (1..=self.starts)
            .filter_map(|n| std::fs::read_to_string(self.logs.join(format!("idem-{n}.log"))).ok())
            .map(|log| log.matches(needle).count())
            .sum()
    }
}

impl Drop for IdemProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
