//! Refusals at the senders' surfaces (`sources`: a provider's delivery or Okta's verification;
//! `ssf`: a pushed SET), counted and logged at a bounded rate. Every refusal is counted in
//! `idem_refusals_total{surface, reason}`, whose reasons are a closed set (the problem's slug,
//! RFC 8935's `err`, or `unknown-source`), so the series stay few whatever a sender sends. A
//! line is logged for at most [`LINES_PER_INTERVAL`] refusals of a surface in each
//! [`INTERVAL`]; the rest are counted, not logged, and the first refusal after the interval
//! logs one line saying how many were left out. A flood of garbage then costs the log a few
//! lines a minute, while the metric still tells its size. [`Window`] is the decision, with no
//! I/O; [`note`] applies it to the surface's window.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant};

use prometheus::{register_int_counter_vec, IntCounterVec};

/// Refusals by surface and reason.
pub static REFUSALS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "idem_refusals_total",
        "Requests refused at the senders' surfaces, by surface and reason",
        &["surface", "reason"]
    )
    .expect("metric registers once")
});

/// A provider's delivery to `POST /v1/sources/{tenant}/{source}` (or Okta's `GET`).
pub const SOURCES: &str = "sources";
/// A SET pushed to an `ssf` source (RFC 8935).
pub const SSF: &str = "ssf";

/// The reason of a delivery to no such tenant or source (answered as an unauthenticated one).
pub const UNKNOWN_SOURCE: &str = "unknown-source";

/// The most refusals of one surface logged in one [`INTERVAL`].
pub const LINES_PER_INTERVAL: u64 = 10;

/// The window [`LINES_PER_INTERVAL`] counts in.
pub const INTERVAL: Duration = Duration::from_secs(60);

/// One surface's current window: when it began, the refusals logged and left out in it.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    started: Instant,
    logged: u64,
    suppressed: u64,
}

/// What to do with one refusal.
#[derive(Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Log it.
    pub log: bool,
    /// Before it, log that this many refusals of the window before were left out.
    pub suppressed_before: Option<u64>,
}

impl Window {
    /// A window beginning at `now`.
    pub fn new(now: Instant) -> Window {
        Window {
            started: now,
            logged: 0,
            suppressed: 0,
        }
    }

    /// One more refusal at `now`: a window past its [`INTERVAL`] ends (saying how many it left
    /// out, if any) and a new one begins; within a window the first [`LINES_PER_INTERVAL`]
    /// are logged.
    pub fn admit(&mut self, now: Instant) -> Verdict {
        let mut suppressed_before = None;
        if now.saturating_duration_since(self.started) >= INTERVAL {
            suppressed_before = Some(self.suppressed).filter(|n| *n > 0);
            *self = Window::new(now);
        }
        let log = self.logged < LINES_PER_INTERVAL;
        match log {
            true => self.logged += 1,
            false => self.suppressed += 1,
        }
        Verdict {
            log,
            suppressed_before,
        }
    }
}

static WINDOWS: LazyLock<Mutex<HashMap<&'static str, Window>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// Counts a refusal of `surface` for `reason`; whether to log it (the caller logs it, with
/// what it knows). Logs the line for the refusals a past window left out.
pub fn note(surface: &'static str, reason: &'static str) -> bool {
    REFUSALS.with_label_values(&[surface, reason]).inc();
    let now = Instant::now();
    let verdict = {
        let mut windows = WINDOWS.lock().unwrap_or_else(PoisonError::into_inner);
        windows
            .entry(surface)
            .or_insert_with(|| Window::new(now))
            .admit(now)
    };
    if let Some(n) = verdict.suppressed_before {
        tracing::warn!(
            surface,
            suppressed = n,
            "suppressed {n} refusals in the last {}s (at most {LINES_PER_INTERVAL} logged a window; idem_refusals_total counts every one)",
            INTERVAL.as_secs()
        );
    }
    verdict.log
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_logs_its_first_refusals_then_counts_the_rest_and_says_so_after() {
        let t0 = Instant::now();
        let mut w = Window::new(t0);
        for _ in 0..LINES_PER_INTERVAL {
            assert_eq!(
                w.admit(t0),
                Verdict {
                    log: true,
                    suppressed_before: None
                }
            );
        }
        for _ in 0..25 {
            assert!(!w.admit(t0 + INTERVAL / 2).log);
        }
        let next = w.admit(t0 + INTERVAL);
        assert_eq!(
            next,
            Verdict {
                log: true,
                suppressed_before: Some(25)
            }
        );
        // A quiet window says nothing of suppression.
        let later = w.admit(t0 + INTERVAL * 3);
        assert_eq!(later.suppressed_before, None);
        assert!(later.log);
    }
}
