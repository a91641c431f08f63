//! The load driver: `concurrency` closed-loop workers, each sending its next request as soon as
//! the previous one is answered, for a fixed duration (or a fixed count). Latencies are kept
//! whole and sorted at the end, so percentiles are exact.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What one run measured.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    /// Requests answered (any status).
    pub requests: u64,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Every latency, sorted.
    pub latencies: Vec<Duration>,
    /// Answers by status (0 = no answer).
    pub statuses: BTreeMap<u16, u64>,
}

impl Stats {
    /// Requests per second.
    pub fn rate(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The `p`-th percentile latency (0–100).
    pub fn percentile(&self, p: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let i = ((p / 100.0) * (self.latencies.len() - 1) as f64).round() as usize;
        self.latencies[i.min(self.latencies.len() - 1)]
    }

    /// Merges another worker's stats.
    fn merge(&mut self, other: Stats) {
        self.requests += other.requests;
        self.latencies.extend(other.latencies);
        for (k, v) in other.statuses {
            *self.statuses.entry(k).or_default() += v;
        }
    }
}

/// Runs `concurrency` workers until `duration` passes or `total` requests were sent. Each
/// request is `send(n)`, `n` counting from 0 across workers; it returns the status (0 = none).
/// With `rate`, request `n` is due at `n / rate` seconds and its latency counts from then (so a
/// slow server is not hidden by the load waiting for it).
pub async fn drive<F, Fut>(
    concurrency: usize,
    duration: Duration,
    total: Option<u64>,
    rate: Option<f64>,
    send: F,
) -> Stats
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = u16> + Send,
{
    let send = Arc::new(send);
    let counter = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + duration;
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (send, counter) = (send.clone(), counter.clone());
        workers.push(tokio::spawn(async move {
            let mut stats = Stats::default();
            loop {
                let n = counter.fetch_add(1, Ordering::Relaxed);
                if total.is_some_and(|t| n >= t) || Instant::now() >= deadline {
                    break;
                }
                let t0 = match rate {
                    Some(r) => {
                        let due = start + Duration::from_secs_f64(n as f64 / r);
                        tokio::time::sleep_until(due.into()).await;
                        due
                    }
                    None => Instant::now(),
                };
                if Instant::now() >= deadline {
                    break;
                }
                let status = send(n).await;
                stats.latencies.push(t0.elapsed());
                stats.requests += 1;
                *stats.statuses.entry(status).or_default() += 1;
            }
            stats
        }));
    }
    let mut all = Stats::default();
    for w in workers {
        if let Ok(s) = w.await {
            all.merge(s);
        }
    }
    all.elapsed = start.elapsed();
    all.latencies.sort();
    all
}
