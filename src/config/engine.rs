//! The engine's sections: `[store]`, `[idempotency]`, `[delivery]` and `[decisions]`, read into
//! the engine's own `Settings` (whose defaults they are), each value checked against its bounds.
//! The store is checked without connecting to it.

use std::path::Path;

use idem_actors::settings::{Backend, Decisions, Delivery, Idempotency};
use idem_actors::Settings;
use serde::Deserialize;

use super::bounded::{duration, invalid, number, SecretText};
use super::ConfigError;

/// The connections one node holds to the database unless told otherwise, and the most it may.
const POOL: u32 = 16;
const MAX_POOL: u32 = 1024;

/// The fewest bytes a `key_secret` may have: it is the HMAC key of every stored digest.
const MIN_KEY_SECRET: usize = 32;

/// `[store]` as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStore {
    backend: Option<String>,
    url: Option<SecretText>,
    pool_size: Option<i64>,
}

/// `[idempotency]` as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawIdempotency {
    key_ttl: Option<String>,
    in_flight_timeout: Option<String>,
    key_secret: Option<SecretText>,
    idle_actor_timeout: Option<String>,
    sweep_interval: Option<String>,
    max_live_actors: Option<i64>,
    max_wait: Option<String>,
    max_waiters: Option<i64>,
}

/// `[delivery]` as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDelivery {
    inline_timeout: Option<String>,
    retry_interval: Option<String>,
    max_retries: Option<i64>,
    schedule: Option<Vec<String>>,
    breaker_threshold: Option<i64>,
    breaker_cooldown: Option<String>,
    max_in_flight_per_endpoint: Option<i64>,
    max_hold: Option<String>,
}

/// `[decisions]` as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDecisions {
    retention: Option<String>,
}

/// The engine's settings from its sections, sled living in `data_dir`.
pub(super) fn settings(
    store: RawStore,
    idempotency: RawIdempotency,
    delivery: RawDelivery,
    decisions: RawDecisions,
    data_dir: &Path,
) -> Result<Settings, ConfigError> {
    let defaults = Settings::default();
    let retention = decisions.retention.as_deref();
    Ok(Settings {
        store: backend(store, data_dir)?,
        idempotency: self::idempotency(idempotency, &defaults.idempotency)?,
        delivery: self::delivery(delivery, &defaults.delivery)?,
        decisions: Decisions {
            retention: duration(
                "decisions.retention",
                retention,
                defaults.decisions.retention,
            )?,
        },
    })
}

/// `[store]`: sled in `data_dir` (the default), or PostgreSQL at `url`.
fn backend(raw: RawStore, data_dir: &Path) -> Result<Backend, ConfigError> {
    match raw.backend.as_deref().unwrap_or("sled") {
        "sled" => {
            if raw.url.is_some() || raw.pool_size.is_some() {
                return Err(invalid(
                    "store.url",
                    "url and pool_size are for backend = \"postgres\"; sled lives in data_dir",
                ));
            }
            Ok(Backend::Sled {
                data_dir: data_dir.to_path_buf(),
            })
        }
        "postgres" => {
            let raw_url = raw.url.ok_or_else(|| {
                invalid(
                    "store.url",
                    "is required with backend = \"postgres\", e.g. \"postgres://postgres@127.0.0.1:5432/idem\"",
                )
            })?;
            // Read from a file or the environment, the URL holds a password: never echoed.
            let written = matches!(raw_url, SecretText::Literal(_));
            let url = raw_url.resolve("store.url")?;
            Backend::check_postgres_url(&url).map_err(|why| match written {
                true => invalid("store.url", why),
                false => invalid(
                    "store.url",
                    "what it names is not a PostgreSQL URL (postgres://user:password@host:port/database)",
                ),
            })?;
            let pool_size = number(
                "store.pool_size",
                raw.pool_size,
                POOL,
                1..=MAX_POOL,
                "connections",
            )?;
            Ok(Backend::Postgres {
                url,
                pool_size: pool_size as usize,
            })
        }
        other => Err(invalid(
            "store.backend",
            format!("{other:?} is not a backend: use \"sled\" or \"postgres\""),
        )),
    }
}

fn idempotency(raw: RawIdempotency, d: &Idempotency) -> Result<Idempotency, ConfigError> {
    let key_secret = raw
        .key_secret
        .map(|s| s.resolve("idempotency.key_secret"))
        .transpose()?;
    let key_secret = match key_secret {
        Some(s) if s.len() >= MIN_KEY_SECRET => s.into_bytes(),
        Some(s) if !s.is_empty() => {
            return Err(invalid(
                "idempotency.key_secret",
                format!(
                    "is {} bytes; it keys the digests of keys and subjects, so it must be at \
                     least {MIN_KEY_SECRET} random bytes",
                    s.len()
                ),
            ))
        }
        _ => {
            return Err(invalid(
                "idempotency.key_secret",
                "is required: a long random string that keys the digests of idempotency keys",
            ))
        }
    };
    let key_ttl = duration("idempotency.key_ttl", raw.key_ttl.as_deref(), d.key_ttl)?;
    Ok(Idempotency {
        key_ttl,
        in_flight_timeout: duration(
            "idempotency.in_flight_timeout",
            raw.in_flight_timeout.as_deref(),
            d.in_flight_timeout,
        )?,
        key_secret,
        idle_actor_timeout: duration(
            "idempotency.idle_actor_timeout",
            raw.idle_actor_timeout.as_deref(),
            d.idle_actor_timeout,
        )?,
        sweep_interval: duration(
            "idempotency.sweep_interval",
            raw.sweep_interval.as_deref(),
            Idempotency::sweep_interval_for(key_ttl),
        )?,
        max_live_actors: number(
            "idempotency.max_live_actors",
            raw.max_live_actors,
            d.max_live_actors,
            1..,
            "",
        )?,
        max_wait: duration("idempotency.max_wait", raw.max_wait.as_deref(), d.max_wait)?,
        max_waiters: number(
            "idempotency.max_waiters",
            raw.max_waiters,
            d.max_waiters,
            1..=100_000,
            "",
        )?,
    })
}

fn delivery(raw: RawDelivery, d: &Delivery) -> Result<Delivery, ConfigError> {
    let schedule = match raw.schedule {
        Some(_) if raw.retry_interval.is_some() || raw.max_retries.is_some() => {
            return Err(invalid(
                "delivery.schedule",
                "replaces retry_interval and max_retries; set one or the other",
            ))
        }
        Some(steps) if steps.len() > 100 => {
            return Err(invalid("delivery.schedule", "at most 100 steps"))
        }
        Some(steps) => steps
            .iter()
            .map(|step| duration("delivery.schedule", Some(step), d.longest_step()))
            .collect::<Result<Vec<_>, _>>()?,
        None => {
            let retries = number(
                "delivery.max_retries",
                raw.max_retries,
                d.schedule.len(),
                0..=100,
                "",
            )?;
            let interval = duration(
                "delivery.retry_interval",
                raw.retry_interval.as_deref(),
                d.longest_step(),
            )?;
            vec![interval; retries]
        }
    };
    Ok(Delivery {
        inline_timeout: duration(
            "delivery.inline_timeout",
            raw.inline_timeout.as_deref(),
            d.inline_timeout,
        )?,
        breaker_threshold: number(
            "delivery.breaker_threshold",
            raw.breaker_threshold,
            d.breaker_threshold,
            1..=10_000,
            "",
        )?,
        breaker_cooldown: duration(
            "delivery.breaker_cooldown",
            raw.breaker_cooldown.as_deref(),
            d.breaker_cooldown,
        )?,
        max_in_flight_per_endpoint: number(
            "delivery.max_in_flight_per_endpoint",
            raw.max_in_flight_per_endpoint,
            d.max_in_flight_per_endpoint,
            1..=10_000,
            "",
        )?,
        // Unset, it follows the schedule (its total).
        max_hold: raw
            .max_hold
            .as_deref()
            .map(|text| duration("delivery.max_hold", Some(text), Default::default()))
            .transpose()?,
        schedule,
    })
}
