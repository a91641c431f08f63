//! What the engine is built from: the configuration's sections that the engine reads, each
//! setting typed once, with its default here. The binary's `config` reads them from the file and
//! checks their bounds; the engine shares them (`Arc<Settings>`) with everything below it, which
//! reads them where they are and keeps no copy of its own. What follows from several settings (a
//! delivery's retention, a probe's deadline) is a method, worked out where it is needed.

use std::path::PathBuf;
use std::time::Duration;

/// The engine's settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Settings {
    /// `[store]`: sled in a data directory, or PostgreSQL.
    pub store: Backend,
    /// `[idempotency]`: claim windows, the digests' secret, the actors' limits.
    pub idempotency: Idempotency,
    /// `[delivery]`: callback attempts, retries and the endpoints' breaker.
    pub delivery: Delivery,
    /// `[decisions]`: how long decisions are kept for lookup.
    pub decisions: Decisions,
}

impl Settings {
    /// How long a delivery is kept after its creation: as long as its decision, whose lookup
    /// shows its status, and at least as long as its key.
    pub fn delivery_retention(&self) -> Duration {
        self.idempotency.key_ttl.max(self.decisions.retention)
    }
}

/// `[idempotency]`. Its `Debug` leaves `key_secret` out.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Idempotency {
    /// How long a key and its stored result live after the claim.
    pub key_ttl: Duration,
    /// After this, an `in_flight` claim may be taken over even from a live holder.
    pub in_flight_timeout: Duration,
    /// The secret of the keyed digests (keys, subjects, body fingerprints).
    pub key_secret: Vec<u8>,
    /// An actor with nothing to do for this long stops (its log stays in the store).
    pub idle_actor_timeout: Duration,
    /// How often expired claims, deliveries and decisions are swept.
    pub sweep_interval: Duration,
    /// At most this many claim actors run at once; beyond, new keys are refused (503).
    pub max_live_actors: usize,
    /// The longest a request may wait for an in-flight key's answer (`Prefer: wait`).
    pub max_wait: Duration,
    /// At most this many requests wait on one key; beyond, 409 at once.
    pub max_waiters: usize,
}

impl Idempotency {
    /// `in_flight_timeout` in milliseconds, as the claim rules read it.
    pub fn in_flight_timeout_ms(&self) -> u64 {
        self.in_flight_timeout.as_millis() as u64
    }

    /// The sweep's interval when none is set: a tenth of `key_ttl`, between 200 ms and a minute.
    pub fn sweep_interval_for(key_ttl: Duration) -> Duration {
        (key_ttl / 10).clamp(Duration::from_millis(200), Duration::from_secs(60))
    }
}

impl Default for Idempotency {
    /// The defaults, with no `key_secret` (the configuration requires one).
    fn default() -> Self {
        let key_ttl = Duration::from_secs(24 * 3600);
        Idempotency {
            key_ttl,
            in_flight_timeout: Duration::from_secs(30),
            key_secret: Vec::new(),
            idle_actor_timeout: Duration::from_millis(250),
            sweep_interval: Self::sweep_interval_for(key_ttl),
            max_live_actors: 100_000,
            max_wait: Duration::from_secs(10),
            max_waiters: 64,
        }
    }
}

impl std::fmt::Debug for Idempotency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Idempotency")
            .field("key_ttl", &self.key_ttl)
            .field("in_flight_timeout", &self.in_flight_timeout)
            .field("key_secret", &"..")
            .field("idle_actor_timeout", &self.idle_actor_timeout)
            .field("sweep_interval", &self.sweep_interval)
            .field("max_live_actors", &self.max_live_actors)
            .field("max_wait", &self.max_wait)
            .field("max_waiters", &self.max_waiters)
            .finish()
    }
}

/// `[delivery]`. The retry policy's decisions on these settings are in `delivery::state`, the
/// breaker's in `breaker`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Delivery {
    /// The deadline of each callback attempt (the first one is made inside the request).
    pub inline_timeout: Duration,
    /// The wait before each retry of a series, from the end of the attempt before it.
    pub schedule: Vec<Duration>,
    /// Consecutive retryable failures that open an endpoint.
    pub breaker_threshold: u32,
    /// How long an open endpoint waits before one probe.
    pub breaker_cooldown: Duration,
    /// Attempts at once to one endpoint, across every node.
    pub max_in_flight_per_endpoint: usize,
    /// How long a delivery may be held by an open endpoint since its first hold before it is
    /// dead (`endpoint_open`); unset, the schedule's total ([`Delivery::max_hold`]).
    pub max_hold: Option<Duration>,
}

impl Default for Delivery {
    fn default() -> Self {
        Delivery {
            inline_timeout: Duration::from_secs(5),
            schedule: vec![Duration::from_secs(300); 3],
            breaker_threshold: 5,
            breaker_cooldown: Duration::from_secs(60),
            max_in_flight_per_endpoint: 8,
            max_hold: None,
        }
    }
}

impl Delivery {
    /// How long a delivery may be held by an open endpoint since its first hold: `max_hold`,
    /// or the schedule's total, and at least one cooldown (so at least one probe may come).
    pub fn max_hold(&self) -> Duration {
        self.max_hold.unwrap_or_else(|| {
            self.schedule
                .iter()
                .sum::<Duration>()
                .max(self.breaker_cooldown)
        })
    }

    /// The schedule's longest step (zero without retries).
    pub fn longest_step(&self) -> Duration {
        self.schedule.iter().max().copied().unwrap_or_default()
    }

    /// The schedule's shortest step (a second without retries).
    pub fn shortest_step(&self) -> Duration {
        self.schedule
            .iter()
            .min()
            .copied()
            .unwrap_or(Duration::from_secs(1))
    }

    /// How long a probe of an open endpoint may run before another may start: a probe whose
    /// node died is followed by another once its deadline has passed.
    pub fn probe_timeout(&self) -> Duration {
        self.inline_timeout + Duration::from_secs(1)
    }
}

/// `[decisions]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Decisions {
    /// How long a decision (keyless ones too) is kept for lookup.
    pub retention: Duration,
}

impl Default for Decisions {
    fn default() -> Self {
        Decisions {
            retention: Duration::from_secs(30 * 86_400),
        }
    }
}

/// Which store the engine runs on.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Backend {
    /// sled, embedded, in a data directory of this machine.
    Sled {
        /// Where its files live.
        data_dir: std::path::PathBuf,
    },
    /// PostgreSQL.
    Postgres {
        /// The connection URL.
        url: String,
        /// Connections this node holds.
        pool_size: usize,
    },
}

impl std::fmt::Debug for Backend {
    /// Leaves the URL out: it may carry a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backend::Sled { data_dir } => {
                f.debug_struct("Sled").field("data_dir", data_dir).finish()
            }
            Backend::Postgres { pool_size, .. } => f
                .debug_struct("Postgres")
                .field("url", &"..")
                .field("pool_size", pool_size)
                .finish(),
        }
    }
}

impl Backend {
    /// Whether `url` can name a PostgreSQL database (checked without connecting); why not.
    pub fn check_postgres_url(url: &str) -> Result<(), String> {
        url.parse::<tokio_postgres::Config>()
            .map(drop)
            .map_err(|e| format!("{url:?} is not a PostgreSQL URL: {e}"))
    }
}

impl Default for Backend {
    /// sled in `data`, relative to the working directory.
    fn default() -> Self {
        Backend::Sled {
            data_dir: PathBuf::from("data"),
        }
    }
}
