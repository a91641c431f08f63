//! `--callgrind`: the server's instructions per request, a figure that does not move with the
//! machine's speed. idem runs under `valgrind --tool=callgrind`; each scenario sends 300 warm-up
//! requests, the counters are zeroed (`callgrind_control -z`), the measured requests are sent,
//! the counters are dumped (`callgrind_control -d`), and the dump's total instructions over the
//! measured requests is the figure. This module is the measuring; `scenario` runs the list.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::load::{drive, Stats};
use crate::server::{start_idem, IdemUnderLoad};

/// Requests sent before the counters are zeroed: connections opened, caches and pools warm.
pub const WARM_UP: u64 = 300;
/// Closed-loop workers (instructions per request hardly depend on it).
pub const CONCURRENCY: usize = 4;

/// What one scenario measured while the counters ran.
pub struct Measured {
    /// Requests sent between zeroing and dumping (any status).
    pub requests: u64,
    /// Their answers by status (0 = no answer).
    pub statuses: BTreeMap<u16, u64>,
    /// What the figure does not say.
    pub note: String,
}

impl From<Stats> for Measured {
    fn from(stats: Stats) -> Measured {
        Measured {
            requests: stats.requests,
            statuses: stats.statuses,
            note: String::new(),
        }
    }
}

/// The counters of an idem running under callgrind.
pub struct Counters {
    pid: u32,
    /// `--callgrind-out-file`; dumps are written beside it as `<out>.N`.
    out: PathBuf,
}

impl Counters {
    /// Zeroes the counters.
    pub async fn zero(&self) -> Result<(), String> {
        control("-z", self.pid).await
    }

    /// Dumps the counters; the instructions counted since they were last zeroed (the sum over
    /// the dump files this dump wrote), and those files.
    pub async fn dump(&self) -> Result<(u64, Vec<PathBuf>), String> {
        let before = dumps(&self.out);
        control("-d", self.pid).await?;
        // The dump is written by the server's process; wait until its files are complete (their
        // totals line is the last thing written).
        let started = Instant::now();
        loop {
            let new: Vec<PathBuf> = dumps(&self.out).difference(&before).cloned().collect();
            let totals: Option<Vec<u64>> = new
                .iter()
                .map(|p| {
                    std::fs::read_to_string(p)
                        .ok()
                        .and_then(|t| instructions_in(&t))
                })
                .collect();
            match totals {
                Some(totals) if !totals.is_empty() => return Ok((totals.iter().sum(), new)),
                _ if started.elapsed() > Duration::from_secs(120) => {
                    return Err(format!(
                        "callgrind_control -d {}: no complete dump beside {} after 120 s",
                        self.pid,
                        self.out.display()
                    ))
                }
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
}

/// Fails with what to install if valgrind or callgrind_control cannot be run.
pub fn check_installed() -> Result<(), String> {
    for program in ["valgrind", "callgrind_control"] {
        match Command::new(program).arg("--version").output() {
            Ok(out) if out.status.success() => {}
            Ok(out) => {
                return Err(format!(
                    "--callgrind: `{program} --version` failed ({}); is valgrind installed? (apt-get install valgrind)",
                    out.status
                ))
            }
            Err(e) => {
                return Err(format!(
                    "--callgrind needs valgrind and callgrind_control, and {program} cannot be run ({e}): apt-get install valgrind"
                ))
            }
        }
    }
    Ok(())
}

/// A fresh idem on `dir` under `valgrind --tool=callgrind`, and its counters.
pub fn start(
    binary: &Path,
    dir: &Path,
    receiver: (SocketAddr, bool),
) -> Result<(IdemUnderLoad, Counters), String> {
    let out = dir.join("cg.out");
    let mut out_flag = OsString::from("--callgrind-out-file=");
    out_flag.push(&out);
    let wrapper = [
        OsString::from("valgrind"),
        OsString::from("--quiet"),
        OsString::from("--tool=callgrind"),
        out_flag,
    ];
    let idem = start_idem(binary, dir, "", receiver, "24h", &wrapper)?;
    let counters = Counters {
        pid: idem.pid(),
        out,
    };
    Ok((idem, counters))
}

/// `WARM_UP` requests `send(0..WARM_UP)`, the counters zeroed, then `requests` more
/// (`send(WARM_UP..)`), at `CONCURRENCY`: what the measured ones got.
pub async fn after_warm_up<F, Fut>(
    counters: &Counters,
    requests: u64,
    send: F,
) -> Result<Stats, String>
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = u16> + Send,
{
    let send = Arc::new(send);
    let forever = Duration::from_secs(24 * 3600);
    let s = send.clone();
    drive(CONCURRENCY, forever, Some(WARM_UP), None, move |n| s(n)).await;
    counters.zero().await?;
    Ok(drive(CONCURRENCY, forever, Some(requests), None, move |n| {
        send(WARM_UP + n)
    })
    .await)
}

/// Runs `callgrind_control <flag> <pid>`.
async fn control(flag: &'static str, pid: u32) -> Result<(), String> {
    let output = tokio::task::spawn_blocking(move || {
        Command::new("callgrind_control")
            .arg(flag)
            .arg(pid.to_string())
            .output()
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("cannot run callgrind_control (apt-get install valgrind): {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "callgrind_control {flag} {pid} failed ({}): {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// Copies a scenario's dump `files` into `dir` as `<scenario>.cg.out` (one file per thread
/// dump, numbered after the first).
pub fn keep_dumps(files: &[PathBuf], dir: &Path, scenario: &str) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("--callgrind-keep {}: {e}", dir.display()))?;
    for (n, file) in files.iter().enumerate() {
        let name = match n {
            0 => format!("{scenario}.cg.out"),
            n => format!("{scenario}.cg.out.{n}"),
        };
        std::fs::copy(file, dir.join(&name))
            .map_err(|e| format!("--callgrind-keep {}: {e}", dir.join(name).display()))?;
    }
    Ok(())
}

/// The dump files beside `out` (`<out>.N`).
fn dumps(out: &Path) -> BTreeSet<PathBuf> {
    let (Some(dir), Some(name)) = (out.parent(), out.file_name()) else {
        return BTreeSet::new();
    };
    let mut prefix = name.to_os_string();
    prefix.push(".");
    let prefix = prefix.to_string_lossy().into_owned();
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// The instructions a callgrind profile counted: its `totals:` line (the sum of its costs), or
/// its `summary:` line if it has no totals; the first event, which is `Ir` by default.
fn instructions_in(profile: &str) -> Option<u64> {
    let line = |prefix: &str| {
        profile
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
    };
    line("totals:").or_else(|| line("summary:"))
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profiles_instructions_are_its_totals_line_or_else_its_summary() {
        let dump = "version: 1\ncreator: callgrind-3.19.0\nevents: Ir\nsummary: 0\n\nfn=(1) main\n3 5\n\ntotals: 5\n";
        assert_eq!(instructions_in(dump), Some(5));
        assert_eq!(
            instructions_in("events: Ir Dr\nsummary: 1234 99\n"),
            Some(1234)
        );
        assert_eq!(instructions_in("events: Ir\n"), None);
    }

    #[test]
    fn thousands_are_separated() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(95_312), "95,312");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn dumps_are_the_numbered_files_beside_the_output() {
        let dir = tempfile::tempdir().expect("tempdir");
        for name in ["cg.out", "cg.out.1", "cg.out.2", "other.1"] {
            std::fs::write(dir.path().join(name), "").expect("write");
        }
        let found = dumps(&dir.path().join("cg.out"));
        let names: Vec<_> = found.iter().filter_map(|p| p.file_name()).collect();
        assert_eq!(names, ["cg.out.1", "cg.out.2"]);
    }
}
