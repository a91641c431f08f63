//! What the engine is built from: the configuration's sections that the engine reads, each
//! setting declared once, here: its type, its default (`Default`), and how it is read from the
//! file and bounded (serde, through the readers of [`read`]). The binary's `config` deserializes
//! these sections as they are; a section's rules that span its settings are its `checked`. The
//! engine shares them (`Arc<Settings>`) with everything below it, which reads them where they are
//! and keeps no copy of its own. What follows from several settings (a delivery's retention, a
//! probe's deadline) is a method, worked out where it is needed.
//!
//! Serialized, a section is what a reload cannot change: the binary compares the serializations
//! of two configurations to name the keys that need a restart. A setting read from the
//! configuration in force (so reloaded at once) is skipped there, and a secret is serialized as
//! its fingerprint, never as itself.

use std::path::PathBuf;
use std::time::Duration;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

/// The engine's settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize)]
pub struct Settings {
    /// `[store]`: sled in a data directory, or PostgreSQL.
    pub store: Backend,
    /// `[idempotency]`: claim windows, the digests' secret, the actors' limits.
    pub idempotency: IdempotencySettings,
    /// `[delivery]`: callback attempts, retries and the endpoints' breaker.
    pub delivery: DeliverySettings,
    /// `[decisions]`: how long decisions are kept for lookup.
    pub decisions: DecisionSettings,
}

impl Settings {
    /// How long a delivery is kept after its creation: as long as its decision, whose lookup
    /// shows its status, and at least as long as its key.
    pub fn delivery_retention(&self) -> Duration {
        self.idempotency.key_ttl.max(self.decisions.retention)
    }
}

/// `[idempotency]`. Its `Debug` leaves `key_secret` out.
#[derive(Clone, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct IdempotencySettings {
    /// How long a key and its stored result live after the claim.
    #[serde(deserialize_with = "read::duration")]
    pub key_ttl: Duration,
    /// After this, an `in_flight` claim may be taken over even from a live holder.
    #[serde(deserialize_with = "read::duration")]
    pub in_flight_timeout: Duration,
    /// The secret of the keyed digests (keys, subjects, body fingerprints): required, at least
    /// [`IdempotencySettings::MIN_KEY_SECRET`] bytes.
    #[serde(
        deserialize_with = "IdempotencySettings::read_key_secret",
        serialize_with = "read::fingerprint"
    )]
    pub key_secret: Vec<u8>,
    /// An actor with nothing to do for this long stops (its log stays in the store).
    #[serde(deserialize_with = "read::duration")]
    pub idle_actor_timeout: Duration,
    /// How often expired claims, deliveries and decisions are swept. Unwritten, it is zero as
    /// read (a written duration never is) until [`IdempotencySettings::checked`] makes it
    /// [`IdempotencySettings::sweep_interval_for`] `key_ttl`.
    #[serde(deserialize_with = "read::duration", default)]
    pub sweep_interval: Duration,
    /// At most this many claim actors run at once; beyond, new keys are refused (503).
    #[serde(deserialize_with = "read::at_least::<_, _, 1>")]
    pub max_live_actors: usize,
    /// The longest a request may wait for an in-flight key's answer (`Prefer: wait`). Read per
    /// request from the configuration in force: a reload applies it at once.
    #[serde(deserialize_with = "read::duration", skip_serializing)]
    pub max_wait: Duration,
    /// At most this many requests wait on one key; beyond, 409 at once.
    #[serde(deserialize_with = "read::within::<_, _, 1, 100_000>")]
    pub max_waiters: usize,
}

impl IdempotencySettings {
    /// The fewest bytes a `key_secret` may have: it is the HMAC key of every stored digest.
    pub const MIN_KEY_SECRET: usize = 32;

    /// `in_flight_timeout` in milliseconds, as the claim rules read it.
    pub fn in_flight_timeout_ms(&self) -> u64 {
        self.in_flight_timeout.as_millis() as u64
    }

    /// The sweep's interval when none is set: a tenth of `key_ttl`, between 200 ms and a minute.
    pub fn sweep_interval_for(key_ttl: Duration) -> Duration {
        (key_ttl / 10).clamp(Duration::from_millis(200), Duration::from_secs(60))
    }

    /// The section as read, with its rules across settings: a `key_secret` is required, and an
    /// unwritten `sweep_interval` follows `key_ttl`.
    pub fn checked(mut self) -> Result<Self, read::Refusal> {
        if self.key_secret.is_empty() {
            return Err(read::Refusal::new(
                "idempotency.key_secret",
                "is required: a long random string that keys the digests of idempotency keys",
            ));
        }
        if self.sweep_interval.is_zero() {
            self.sweep_interval = Self::sweep_interval_for(self.key_ttl);
        }
        Ok(self)
    }

    /// `key_secret` as written: a secret (see [`read::SecretText`]) of at least
    /// [`IdempotencySettings::MIN_KEY_SECRET`] bytes.
    fn read_key_secret<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        match read::secret(d)? {
            s if s.is_empty() => Err(read::refuse(
                "is required: a long random string that keys the digests of idempotency keys",
            )),
            s if s.len() < Self::MIN_KEY_SECRET => Err(read::refuse(format_args!(
                "is {} bytes; it keys the digests of keys and subjects, so it must be at least \
                 {} random bytes",
                s.len(),
                Self::MIN_KEY_SECRET
            ))),
            s => Ok(s.into_bytes()),
        }
    }
}

impl Default for IdempotencySettings {
    /// The defaults, with no `key_secret` (the configuration requires one).
    fn default() -> Self {
        let key_ttl = Duration::from_secs(24 * 3600);
        IdempotencySettings {
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

impl std::fmt::Debug for IdempotencySettings {
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
/// breaker's in `breaker`. Read by hand (its `Deserialize`): its schedule is written as
/// `schedule` or as `max_retries` steps of `retry_interval`, never both.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct DeliverySettings {
    /// The deadline of each callback attempt (the first one is made inside the request).
    pub inline_timeout: Duration,
    /// The wait before each retry of a series, from the end of the attempt before it: at most
    /// [`DeliverySettings::MAX_STEPS`].
    pub schedule: Vec<Duration>,
    /// Consecutive retryable failures that open an endpoint.
    pub breaker_threshold: u32,
    /// How long an open endpoint waits before one probe.
    pub breaker_cooldown: Duration,
    /// Attempts at once to one endpoint, across every node.
    pub max_in_flight_per_endpoint: usize,
    /// How long a delivery may be held by an open endpoint since its first hold before it is
    /// dead (`endpoint_open`); unset, the schedule's total ([`DeliverySettings::max_hold`]).
    pub max_hold: Option<Duration>,
}

impl Default for DeliverySettings {
    fn default() -> Self {
        DeliverySettings {
            inline_timeout: Duration::from_secs(5),
            schedule: vec![Duration::from_secs(300); 3],
            breaker_threshold: 5,
            breaker_cooldown: Duration::from_secs(60),
            max_in_flight_per_endpoint: 8,
            max_hold: None,
        }
    }
}

impl DeliverySettings {
    /// The most steps a schedule (or `max_retries`) may have.
    pub const MAX_STEPS: usize = 100;

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

    /// The retry worker's tick: a fraction of the shortest step, so a retry is late by little,
    /// and at most a second, so a due delivery never waits long.
    pub fn retry_tick(&self) -> Duration {
        (self.shortest_step() / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
    }

    /// How long a probe of an open endpoint may run before another may start: a probe whose
    /// node died is followed by another once its deadline has passed.
    pub fn probe_timeout(&self) -> Duration {
        self.inline_timeout + Duration::from_secs(1)
    }
}

impl<'de> Deserialize<'de> for DeliverySettings {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        /// The keys of `[delivery]`.
        const KEYS: &[&str] = &[
            "inline_timeout",
            "retry_interval",
            "max_retries",
            "schedule",
            "breaker_threshold",
            "breaker_cooldown",
            "max_in_flight_per_endpoint",
            "max_hold",
        ];
        struct Section;
        impl<'de> Visitor<'de> for Section {
            type Value = DeliverySettings;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("the [delivery] table")
            }

            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<DeliverySettings, A::Error> {
                use read::{Dur, Within};
                let mut delivery = DeliverySettings::default();
                let (mut schedule, mut interval, mut retries) = (None, None, None);
                while let Some(key) = map.next_key_seed(read::TableKey(KEYS))? {
                    let d = &mut delivery;
                    match key {
                        "inline_timeout" => d.inline_timeout = map.next_value::<Dur>()?.0,
                        "retry_interval" => interval = Some(map.next_value::<Dur>()?.0),
                        "max_retries" => {
                            type Retries = Within<usize, 0, { DeliverySettings::MAX_STEPS as i64 }>;
                            retries = Some(map.next_value::<Retries>()?.0)
                        }
                        "schedule" => schedule = Some(map.next_value::<Steps>()?.0),
                        "breaker_threshold" => {
                            d.breaker_threshold = map.next_value::<Within<_, 1, 10_000>>()?.0
                        }
                        "breaker_cooldown" => d.breaker_cooldown = map.next_value::<Dur>()?.0,
                        "max_in_flight_per_endpoint" => {
                            d.max_in_flight_per_endpoint =
                                map.next_value::<Within<_, 1, 10_000>>()?.0
                        }
                        "max_hold" => d.max_hold = Some(map.next_value::<Dur>()?.0),
                        other => return Err(de::Error::unknown_field(other, KEYS)),
                    }
                }
                delivery.schedule = match schedule {
                    Some(_) if interval.is_some() || retries.is_some() => {
                        return Err(read::refuse_at(
                            ".schedule",
                            "replaces retry_interval and max_retries; set one or the other",
                        ))
                    }
                    Some(steps) => steps,
                    None => vec![
                        interval.unwrap_or(delivery.longest_step());
                        retries.unwrap_or(delivery.schedule.len())
                    ],
                };
                Ok(delivery)
            }
        }
        d.deserialize_struct("Delivery", KEYS, Section)
    }
}

/// `delivery.schedule` as written: at most [`DeliverySettings::MAX_STEPS`] durations.
struct Steps(Vec<Duration>);

impl<'de> Deserialize<'de> for Steps {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let steps = Vec::<String>::deserialize(d)?;
        if steps.len() > DeliverySettings::MAX_STEPS {
            return Err(read::refuse(format_args!(
                "at most {} steps",
                DeliverySettings::MAX_STEPS
            )));
        }
        let steps = steps.iter().map(|step| read::parse_duration(step));
        steps
            .collect::<Result<_, _>>()
            .map(Steps)
            .map_err(read::refuse)
    }
}

/// `[decisions]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DecisionSettings {
    /// How long a decision (keyless ones too) is kept for lookup.
    #[serde(deserialize_with = "read::duration")]
    pub retention: Duration,
}

impl Default for DecisionSettings {
    fn default() -> Self {
        DecisionSettings {
            retention: Duration::from_secs(30 * 86_400),
        }
    }
}

/// Which store the engine runs on. Serialized as `[store]` is written, without `data_dir` (a
/// top-level key of its own) and with the URL's fingerprint.
#[derive(Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "backend", rename_all = "lowercase")]
pub enum Backend {
    /// sled, embedded, in a data directory of this machine.
    Sled {
        /// Where its files live.
        #[serde(skip)]
        data_dir: std::path::PathBuf,
    },
    /// PostgreSQL.
    Postgres {
        /// The connection URL.
        #[serde(serialize_with = "read::fingerprint")]
        url: String,
        /// Connections this node holds.
        pool_size: usize,
        /// How long `idem serve` waits at start for the database to connect and answer: a
        /// node's own deadline, not part of what nodes share.
        #[serde(skip)]
        connect_timeout: std::time::Duration,
    },
}

impl std::fmt::Debug for Backend {
    /// Leaves the URL out: it may carry a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backend::Sled { data_dir } => {
                f.debug_struct("Sled").field("data_dir", data_dir).finish()
            }
            Backend::Postgres {
                pool_size,
                connect_timeout,
                ..
            } => f
                .debug_struct("Postgres")
                .field("url", &"..")
                .field("pool_size", pool_size)
                .field("connect_timeout", connect_timeout)
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

/// Reading settings with serde: a duration, a number within its bounds, a secret; each refused
/// with a reason, on one line. A refusal travels through serde as a custom error whose message
/// is marked as one, so that the reader of the file tells it from the file's own errors (its
/// syntax, a wrong type, an unknown key: those name their line) and names it by the key serde
/// was reading ([`refusal`]).
pub mod read {
    use std::fmt::Display;
    use std::path::PathBuf;
    use std::time::Duration;

    use serde::de::{self, DeserializeSeed};
    use serde::{Deserialize, Deserializer, Serializer};

    /// What marks a custom error's message as a refusal, and ends the key beneath.
    const MARK: char = '\u{1}';

    /// The longest duration any key may have: times are added to unix milliseconds and stored
    /// as 64-bit integers.
    pub const MAX_DURATION: Duration = Duration::from_secs(3650 * 24 * 3600);

    /// A value refused, by its dotted key, outside serde (a rule across keys).
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Refusal {
        /// The dotted key.
        pub key: String,
        /// Why.
        pub reason: String,
    }

    impl Refusal {
        /// `key` refused for `reason`.
        pub fn new(key: impl Into<String>, reason: impl Into<String>) -> Self {
            Refusal {
                key: key.into(),
                reason: reason.into(),
            }
        }
    }

    /// Refuses the value being read, for `reason`.
    pub fn refuse<E: de::Error>(reason: impl Display) -> E {
        refuse_at("", reason)
    }

    /// Refuses a key beneath the value being read, for `reason`: `rest` is what its dotted key
    /// adds to the value's (".schedule", "[0].url"; empty: the value itself).
    pub fn refuse_at<E: de::Error>(rest: &str, reason: impl Display) -> E {
        E::custom(format_args!("{MARK}{rest}{MARK}{reason}"))
    }

    /// The rest of the key (see [`refuse_at`]) and the reason of a refusal, from its error's
    /// message; `None` for any other error.
    pub fn refusal(message: &str) -> Option<(&str, &str)> {
        message.strip_prefix(MARK)?.split_once(MARK)
    }

    /// A duration as written ("250ms", "5s", "24h"): longer than zero and at most
    /// [`MAX_DURATION`]; why not.
    pub fn parse_duration(text: &str) -> Result<Duration, String> {
        let d = humantime::parse_duration(text)
            .map_err(|e| format!("{text:?} is not a duration like \"5s\" ({e})"))?;
        if d.is_zero() {
            return Err("must be longer than zero".into());
        }
        if d > MAX_DURATION {
            return Err("must be at most 3650 days".into());
        }
        Ok(d)
    }

    /// A duration as written (see [`parse_duration`]), for a hand-written reader.
    pub struct Dur(pub Duration);

    impl<'de> Deserialize<'de> for Dur {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let text = String::deserialize(d)?;
            parse_duration(&text).map(Dur).map_err(refuse)
        }
    }

    /// A duration field (see [`Dur`]).
    pub fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Dur::deserialize(d).map(|d| d.0)
    }

    /// `n` as a `T` between `low` and `high` (`i64::MAX`: no upper bound), or why not; `unit`
    /// names what it counts ("connections", say), or is empty.
    pub fn bounded<T: TryFrom<i64>>(n: i64, low: i64, high: i64, unit: &str) -> Result<T, String> {
        let unit = match unit.is_empty() {
            true => String::new(),
            false => format!(" {unit}"),
        };
        match (low..=high).contains(&n) {
            true => T::try_from(n).ok(),
            false => None,
        }
        .ok_or_else(|| match high {
            i64::MAX => format!("must be at least {low}{unit}"),
            _ => format!("must be between {low} and {high}{unit}"),
        })
    }

    /// A whole number between `LOW` and `HIGH` (see [`bounded`]), for a hand-written reader.
    pub struct Within<T, const LOW: i64, const HIGH: i64>(pub T);

    impl<'de, T: TryFrom<i64>, const LOW: i64, const HIGH: i64> Deserialize<'de>
        for Within<T, LOW, HIGH>
    {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let n = i64::deserialize(d)?;
            bounded(n, LOW, HIGH, "").map(Within).map_err(refuse)
        }
    }

    /// A number field between `LOW` and `HIGH`.
    pub fn within<'de, D, T, const LOW: i64, const HIGH: i64>(d: D) -> Result<T, D::Error>
    where
        D: Deserializer<'de>,
        T: TryFrom<i64>,
    {
        Within::<T, LOW, HIGH>::deserialize(d).map(|w| w.0)
    }

    /// A number field of at least `LOW`.
    pub fn at_least<'de, D, T, const LOW: i64>(d: D) -> Result<T, D::Error>
    where
        D: Deserializer<'de>,
        T: TryFrom<i64>,
    {
        within::<D, T, LOW, { i64::MAX }>(d)
    }

    /// A secret as written: the value itself, `{ file = PATH }` (the file's content, one
    /// trailing newline dropped: a mounted secret) or `{ env = NAME }` (an environment
    /// variable). Read when the configuration is, so a reload reads files again; neither the
    /// value nor the file's content ever appears in an error.
    #[derive(Deserialize, Clone)]
    #[serde(
        untagged,
        expecting = "a secret: a string, { file = \"PATH\" } or { env = \"NAME\" }"
    )]
    pub enum SecretText {
        /// The value itself.
        Literal(String),
        /// A file holding it.
        File(FromFile),
        /// An environment variable holding it.
        Env(FromEnv),
    }

    /// `{ file = PATH }`.
    #[derive(Deserialize, Clone)]
    #[serde(deny_unknown_fields)]
    pub struct FromFile {
        file: PathBuf,
    }

    /// `{ env = NAME }`.
    #[derive(Deserialize, Clone)]
    #[serde(deny_unknown_fields)]
    pub struct FromEnv {
        env: String,
    }

    impl SecretText {
        /// The secret, read from where it is; why not (naming the file or variable only).
        pub fn resolve(self) -> Result<String, String> {
            match self {
                SecretText::Literal(value) => Ok(value),
                SecretText::File(FromFile { file }) => {
                    let text = std::fs::read_to_string(&file)
                        .map_err(|e| format!("cannot read the file {}: {e}", file.display()))?;
                    let text = text.strip_suffix('\n').unwrap_or(&text);
                    Ok(text.strip_suffix('\r').unwrap_or(text).to_string())
                }
                SecretText::Env(FromEnv { env }) => std::env::var(&env).map_err(|_| {
                    format!("the environment variable {env} is not set (or not UTF-8)")
                }),
            }
        }
    }

    /// A secret (see [`SecretText`]), read from where it is, for a written table.
    pub struct Resolved(pub String);

    impl<'de> Deserialize<'de> for Resolved {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            SecretText::deserialize(d)?
                .resolve()
                .map(Resolved)
                .map_err(refuse)
        }
    }

    /// A secret field (see [`SecretText`]), read from where it is.
    pub fn secret<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        Resolved::deserialize(d).map(|s| s.0)
    }

    /// Writes a secret as its SHA-256, in hex: enough to tell whether it changed.
    pub fn fingerprint<T: AsRef<[u8]>, S: Serializer>(secret: &T, s: S) -> Result<S::Ok, S::Error> {
        let digest = idem_schemas::hash::sha256(secret.as_ref());
        s.collect_str(&format_args!("sha256:{}", idem_schemas::lower_hex(&digest)))
    }

    /// A key of a table read by hand: one of its keys, else refused as serde's derive refuses
    /// an unknown field (the file's error, with its line).
    pub struct TableKey(pub &'static [&'static str]);

    impl<'de> DeserializeSeed<'de> for TableKey {
        type Value = &'static str;

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<&'static str, D::Error> {
            let key = String::deserialize(d)?;
            let known = self.0.iter().find(|k| **k == key);
            known
                .copied()
                .ok_or_else(|| de::Error::unknown_field(&key, self.0))
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn a_number_within_its_bounds_is_read_and_one_outside_is_refused_with_them() {
            assert_eq!(bounded::<usize>(10, 1, 10, ""), Ok(10));
            assert_eq!(
                bounded::<usize>(0, 1, 10, ""),
                Err("must be between 1 and 10".into())
            );
            assert_eq!(
                bounded::<u32>(-1, 1, 10, "connections"),
                Err("must be between 1 and 10 connections".into())
            );
            assert!(
                bounded::<u32>(i64::MAX, 1, i64::MAX, "").is_err(),
                "not a u32"
            );
            assert_eq!(
                bounded::<u32>(0, 1, i64::MAX, "per second"),
                Err("must be at least 1 per second".into())
            );
        }

        #[test]
        fn a_duration_is_longer_than_zero_and_at_most_ten_years() {
            assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
            assert!(parse_duration("0s").is_err());
            assert!(parse_duration("3651d").is_err());
            assert!(parse_duration("soon").unwrap_err().contains("\"soon\""));
        }

        #[test]
        fn a_refusal_is_told_from_other_errors_with_the_key_beneath() {
            let e: serde::de::value::Error = refuse_at(".schedule", "why");
            assert_eq!(refusal(&e.to_string()), Some((".schedule", "why")));
            let e: serde::de::value::Error = refuse("why");
            assert_eq!(refusal(&e.to_string()), Some(("", "why")));
            assert_eq!(refusal("unknown field `x`"), None);
        }
    }
}
