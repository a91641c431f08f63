//! The configuration file (TOML), read and validated into typed settings before anything runs.
//! Every key but `idempotency.key_secret` and the tenants has a default; unknown keys are refused
//! with the line they are on. An error names the key and the reason in one line.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use idem_actors::store::Backend;
use idem_schemas::signature::Secret;
use idem_schemas::Verdict;
use serde::Deserialize;

/// The most actions one playbook may have (each is a callback per decision).
pub const MAX_ACTIONS: usize = 16;

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address to listen on; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Where the embedded store lives (the sled backend).
    pub data_dir: PathBuf,
    /// Which store holds claims and deliveries.
    pub store: Backend,
    /// Claim windows and the key digest secret.
    pub idempotency: Idempotency,
    /// Callback delivery.
    pub delivery: Delivery,
    /// Inbound signature checks.
    pub signatures: Signatures,
    /// The HTTP front's limits.
    pub http: Http,
    /// Decisions kept for lookup.
    pub decisions: Decisions,
    /// Tenants by name.
    pub tenants: HashMap<String, Tenant>,
}

/// `[idempotency]`. Its `Debug` leaves `key_secret` out.
#[derive(Clone)]
pub struct Idempotency {
    /// How long a key and its stored result live.
    pub key_ttl: Duration,
    /// A claim whose holder died is retakeable after this.
    pub in_flight_timeout: Duration,
    /// Secret of the keyed digests (keys, subjects, body fingerprints).
    pub key_secret: Vec<u8>,
    /// A claim actor with nothing to do for this long stops (its log stays on disk).
    pub idle_actor_timeout: Duration,
    /// How often expired claims are pruned from disk.
    pub sweep_interval: Duration,
    /// At most this many claim actors at once; a new key beyond it gets 503.
    pub max_live_actors: usize,
    /// The longest a request may wait for an in-flight key's answer (`Prefer: wait`).
    pub max_wait: Duration,
    /// At most this many requests wait on one key; beyond, 409 at once.
    pub max_waiters: usize,
}

/// `[delivery]`.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// Deadline of the attempt made inside the ingest request.
    pub inline_timeout: Duration,
    /// The wait before each retry (`schedule`, or `max_retries` times `retry_interval`).
    pub schedule: Vec<Duration>,
    /// Consecutive retryable failures that open an endpoint.
    pub breaker_threshold: u32,
    /// How long an open endpoint waits before one probe.
    pub breaker_cooldown: Duration,
    /// Attempts at once to one endpoint.
    pub max_in_flight_per_endpoint: usize,
}

/// `[http]`.
#[derive(Debug, Clone)]
pub struct Http {
    /// How long a client may take to send a request's headers, and then its body.
    pub read_timeout: Duration,
}

/// `[decisions]`.
#[derive(Debug, Clone)]
pub struct Decisions {
    /// How long a decision (keyless ones too) is kept for `GET /v1/decisions`.
    pub retention: Duration,
}

/// `[signatures]`.
#[derive(Debug, Clone)]
pub struct Signatures {
    /// Accepted clock skew of `webhook-timestamp`, both ways.
    pub tolerance: Duration,
}

/// A tenant. Its `Debug` leaves the API key out (secrets print as `Secret(..)`).
#[derive(Clone)]
pub struct Tenant {
    /// Its name (the key under `[tenants]`).
    pub name: String,
    /// Its Bearer token.
    pub api_key: String,
    /// Inbound signing secrets; empty means authenticated by API key alone.
    pub signing_secrets: Vec<Secret>,
    /// Outbound signing secrets; every one signs each callback.
    pub callback_secrets: Vec<Secret>,
    /// Playbooks by signal type.
    pub playbooks: HashMap<String, Playbook>,
    /// Signals per second this tenant may post (bursts up to one second's worth); none = no limit.
    pub rate_limit: Option<u32>,
    /// Providers' webhooks taken as they are sent, by source name.
    pub sources: HashMap<String, crate::source::Source>,
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

impl std::fmt::Debug for Tenant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tenant")
            .field("name", &self.name)
            .field("api_key", &"..")
            .field("signing_secrets", &self.signing_secrets)
            .field("callback_secrets", &self.callback_secrets)
            .field("playbooks", &self.playbooks)
            .field("rate_limit", &self.rate_limit)
            .field("sources", &self.sources)
            .finish()
    }
}

/// A playbook: what a signal type becomes.
#[derive(Debug, Clone)]
pub struct Playbook {
    /// The verdict.
    pub decision: Verdict,
    /// The callbacks, in order.
    pub actions: Vec<Action>,
    /// Within this long after a decision for a subject, further signals of this type for that
    /// subject make no new decision: they get the first one's response.
    pub once_per_subject: Option<Duration>,
}

/// One callback of a playbook.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Action {
    /// Its name, unique in the playbook.
    pub name: String,
    /// Where it is POSTed.
    pub url: String,
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("config {path}: cannot read: {reason}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The file is not valid TOML for this schema.
    #[error("config {path}: {reason}")]
    Syntax {
        /// The file.
        path: String,
        /// The parser's words, on one line.
        reason: String,
    },
    /// A value is refused.
    #[error("config: {key}: {reason}")]
    Invalid {
        /// The dotted key.
        key: String,
        /// Why.
        reason: String,
    },
}

fn invalid(key: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        reason: reason.into(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    listen: Option<String>,
    data_dir: Option<PathBuf>,
    #[serde(default)]
    idempotency: RawIdempotency,
    #[serde(default)]
    delivery: RawDelivery,
    #[serde(default)]
    signatures: RawSignatures,
    #[serde(default)]
    http: RawHttp,
    #[serde(default)]
    store: RawStore,
    #[serde(default)]
    decisions: RawDecisions,
    #[serde(default)]
    tenants: BTreeMap<String, RawTenant>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawStore {
    backend: Option<String>,
    url: Option<String>,
    pool_size: Option<u32>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawIdempotency {
    key_ttl: Option<String>,
    in_flight_timeout: Option<String>,
    key_secret: Option<String>,
    idle_actor_timeout: Option<String>,
    sweep_interval: Option<String>,
    max_live_actors: Option<i64>,
    max_wait: Option<String>,
    max_waiters: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawDelivery {
    inline_timeout: Option<String>,
    retry_interval: Option<String>,
    max_retries: Option<i64>,
    schedule: Option<Vec<String>>,
    breaker_threshold: Option<i64>,
    breaker_cooldown: Option<String>,
    max_in_flight_per_endpoint: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    read_timeout: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawDecisions {
    retention: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawSignatures {
    tolerance: Option<String>,
}

/// A string, or a list of them (secrets, for rotation).
#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTenant {
    api_key: Option<String>,
    signing_secret: Option<OneOrMany>,
    callback_secret: Option<OneOrMany>,
    rate_limit: Option<i64>,
    #[serde(default)]
    playbooks: BTreeMap<String, RawPlaybook>,
    #[serde(default)]
    sources: BTreeMap<String, crate::source::RawSource>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlaybook {
    decision: Option<String>,
    #[serde(default)]
    actions: Vec<Action>,
    once_per_subject: Option<String>,
}

fn duration(key: &str, raw: Option<&str>, default: &str) -> Result<Duration, ConfigError> {
    let text = raw.unwrap_or(default);
    let d = humantime::parse_duration(text)
        .map_err(|e| invalid(key, format!("{text:?} is not a duration like \"5s\" ({e})")))?;
    if d.is_zero() {
        return Err(invalid(key, "must be longer than zero"));
    }
    // Times are added to unix milliseconds and stored as 64-bit integers.
    if d > MAX_DURATION {
        return Err(invalid(key, "must be at most 3650 days"));
    }
    Ok(d)
}

fn secrets(key: &str, raw: Option<OneOrMany>) -> Result<Vec<Secret>, ConfigError> {
    let list = match raw {
        None => return Ok(Vec::new()),
        Some(OneOrMany::One(s)) => vec![s],
        Some(OneOrMany::Many(v)) => v,
    };
    if list.is_empty() {
        return Err(invalid(key, "an empty list; omit the key instead"));
    }
    list.iter()
        .map(|s| Secret::parse(s).map_err(|e| invalid(key, format!("a secret {e}"))))
        .collect()
}

impl Config {
    /// Reads and validates the file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        Self::parse(&text).map_err(|e| match e {
            ConfigError::Syntax { reason, .. } => ConfigError::Syntax {
                path: path.display().to_string(),
                reason,
            },
            other => other,
        })
    }

    /// Parses and validates TOML text.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Syntax {
            path: String::new(),
            reason: one_line(text, &e),
        })?;
        Self::validate(raw)
    }

    fn validate(raw: RawConfig) -> Result<Config, ConfigError> {
        let listen_text = raw.listen.as_deref().unwrap_or("127.0.0.1:8080");
        let listen = listen_text.parse().map_err(|_| {
            invalid(
                "listen",
                format!("{listen_text:?} is not an address like \"127.0.0.1:8080\""),
            )
        })?;
        let data_dir = raw.data_dir.unwrap_or_else(|| PathBuf::from("data"));
        if data_dir.as_os_str().is_empty() {
            return Err(invalid("data_dir", "must not be empty"));
        }

        let store = store(raw.store, &data_dir)?;

        let i = raw.idempotency;
        let key_secret =
            match i.key_secret {
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
                _ => return Err(invalid(
                    "idempotency.key_secret",
                    "is required: a long random string that keys the digests of idempotency keys",
                )),
            };
        let key_ttl = duration("idempotency.key_ttl", i.key_ttl.as_deref(), "24h")?;
        let idempotency = Idempotency {
            key_ttl,
            in_flight_timeout: duration(
                "idempotency.in_flight_timeout",
                i.in_flight_timeout.as_deref(),
                "30s",
            )?,
            key_secret,
            idle_actor_timeout: duration(
                "idempotency.idle_actor_timeout",
                i.idle_actor_timeout.as_deref(),
                "250ms",
            )?,
            sweep_interval: match i.sweep_interval.as_deref() {
                Some(text) => duration("idempotency.sweep_interval", Some(text), "")?,
                None => (key_ttl / 10).clamp(Duration::from_millis(200), Duration::from_secs(60)),
            },
            max_live_actors: usize::try_from(i.max_live_actors.unwrap_or(100_000))
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| invalid("idempotency.max_live_actors", "must be at least 1"))?,
            max_wait: duration("idempotency.max_wait", i.max_wait.as_deref(), "10s")?,
            max_waiters: usize::try_from(i.max_waiters.unwrap_or(64))
                .ok()
                .filter(|n| (1..=100_000).contains(n))
                .ok_or_else(|| {
                    invalid("idempotency.max_waiters", "must be between 1 and 100000")
                })?,
        };

        let d = raw.delivery;
        let schedule = match d.schedule {
            Some(_) if d.retry_interval.is_some() || d.max_retries.is_some() => {
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
                .map(|step| duration("delivery.schedule", Some(step), ""))
                .collect::<Result<Vec<_>, _>>()?,
            None => {
                let retries = u32::try_from(d.max_retries.unwrap_or(3))
                    .ok()
                    .filter(|n| *n <= 100)
                    .ok_or_else(|| invalid("delivery.max_retries", "must be between 0 and 100"))?;
                let interval =
                    duration("delivery.retry_interval", d.retry_interval.as_deref(), "5m")?;
                vec![interval; retries as usize]
            }
        };
        let delivery = Delivery {
            inline_timeout: duration("delivery.inline_timeout", d.inline_timeout.as_deref(), "5s")?,
            schedule,
            breaker_threshold: u32::try_from(d.breaker_threshold.unwrap_or(5))
                .ok()
                .filter(|n| (1..=10_000).contains(n))
                .ok_or_else(|| {
                    invalid("delivery.breaker_threshold", "must be between 1 and 10000")
                })?,
            breaker_cooldown: duration(
                "delivery.breaker_cooldown",
                d.breaker_cooldown.as_deref(),
                "1m",
            )?,
            max_in_flight_per_endpoint: usize::try_from(d.max_in_flight_per_endpoint.unwrap_or(8))
                .ok()
                .filter(|n| (1..=10_000).contains(n))
                .ok_or_else(|| {
                    invalid(
                        "delivery.max_in_flight_per_endpoint",
                        "must be between 1 and 10000",
                    )
                })?,
        };
        let signatures = Signatures {
            tolerance: duration(
                "signatures.tolerance",
                raw.signatures.tolerance.as_deref(),
                "5m",
            )?,
        };

        let http = Http {
            read_timeout: duration("http.read_timeout", raw.http.read_timeout.as_deref(), "10s")?,
        };
        let decisions = Decisions {
            retention: duration(
                "decisions.retention",
                raw.decisions.retention.as_deref(),
                "30d",
            )?,
        };

        if raw.tenants.is_empty() {
            return Err(invalid("tenants", "at least one tenant is required"));
        }
        let mut tenants = HashMap::new();
        let mut api_keys = HashMap::new();
        for (name, t) in raw.tenants {
            let key = format!("tenants.{name}");
            if name.is_empty()
                || name.len() > 64
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                return Err(invalid(&key, "a tenant name is 1 to 64 of [A-Za-z0-9_-]"));
            }
            let api_key = t
                .api_key
                .filter(|k| !k.is_empty())
                .ok_or_else(|| invalid(format!("{key}.api_key"), "is required"))?;
            if api_key.chars().count() < MIN_API_KEY {
                return Err(invalid(
                    format!("{key}.api_key"),
                    format!("is shorter than {MIN_API_KEY} characters: use a long random token"),
                ));
            }
            if let Some(other) = api_keys.insert(api_key.clone(), name.clone()) {
                return Err(invalid(
                    format!("{key}.api_key"),
                    format!("is the same as tenants.{other}.api_key"),
                ));
            }
            let rate_limit = match t.rate_limit {
                None => None,
                Some(n) => Some(u32::try_from(n).ok().filter(|n| *n > 0).ok_or_else(|| {
                    invalid(
                        format!("{key}.rate_limit"),
                        "must be a positive number of signals per second",
                    )
                })?),
            };
            let signing_secrets = secrets(&format!("{key}.signing_secret"), t.signing_secret)?;
            let callback_secrets = secrets(&format!("{key}.callback_secret"), t.callback_secret)?;
            let mut playbooks = HashMap::new();
            for (signal_type, p) in t.playbooks {
                let pkey = format!("{key}.playbooks.{signal_type}");
                let decision = match p.decision.as_deref() {
                    Some("allow") => Verdict::Allow,
                    Some("deny") => Verdict::Deny,
                    Some("step_up") => Verdict::StepUp,
                    Some("review") => Verdict::Review,
                    Some(other) => {
                        return Err(invalid(
                            format!("{pkey}.decision"),
                            format!("{other:?} is not one of allow, deny, step_up, review"),
                        ))
                    }
                    None => return Err(invalid(format!("{pkey}.decision"), "is required")),
                };
                if p.actions.len() > MAX_ACTIONS {
                    return Err(invalid(
                        format!("{pkey}.actions"),
                        format!("at most {MAX_ACTIONS} actions"),
                    ));
                }
                for (n, action) in p.actions.iter().enumerate() {
                    let akey = format!("{pkey}.actions[{n}]");
                    if action.name.is_empty() {
                        return Err(invalid(format!("{akey}.name"), "must not be empty"));
                    }
                    if p.actions[..n].iter().any(|a| a.name == action.name) {
                        return Err(invalid(
                            format!("{akey}.name"),
                            format!("{:?} is used twice in this playbook", action.name),
                        ));
                    }
                    if !callback_url(&action.url) {
                        return Err(invalid(
                            format!("{akey}.url"),
                            format!("{:?} is not an http(s) URL with a host", action.url),
                        ));
                    }
                }
                if !p.actions.is_empty() && callback_secrets.is_empty() {
                    return Err(invalid(
                        format!("{key}.callback_secret"),
                        "is required when a playbook has actions (callbacks are signed)",
                    ));
                }
                let once_per_subject = match p.once_per_subject.as_deref() {
                    None => None,
                    Some(text) => Some(duration(
                        &format!("{pkey}.once_per_subject"),
                        Some(text),
                        "",
                    )?),
                };
                playbooks.insert(
                    signal_type,
                    Playbook {
                        decision,
                        actions: p.actions,
                        once_per_subject,
                    },
                );
            }
            let mut sources = HashMap::new();
            for (source, raw) in t.sources {
                let skey = format!("{key}.sources.{source}");
                let source = crate::source::validate(&skey, source, raw, &playbooks)?;
                sources.insert(source.name.clone(), source);
            }
            tenants.insert(
                name.clone(),
                Tenant {
                    name,
                    api_key,
                    signing_secrets,
                    callback_secrets,
                    playbooks,
                    rate_limit,
                    sources,
                },
            );
        }
        Ok(Config {
            listen,
            data_dir,
            store,
            idempotency,
            delivery,
            signatures,
            http,
            decisions,
            tenants,
        })
    }
}

/// The longest duration any key may have.
const MAX_DURATION: Duration = Duration::from_secs(3650 * 24 * 3600);

/// The most connections one node may hold to the database.
const MAX_POOL: u32 = 1024;

/// The fewest bytes a `key_secret` may have: it is the HMAC key of every stored digest.
const MIN_KEY_SECRET: usize = 32;

/// The fewest characters an `api_key` may have.
const MIN_API_KEY: usize = 16;

/// An http(s) URL with its host where the host goes: the URL parser reads `http:///x` (no
/// host) as host `x`, and every callback to it would fail until dead.
fn callback_url(raw: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(raw) else {
        return false;
    };
    let authority = raw.split_once("://").map_or("", |(_, rest)| rest);
    matches!(url.scheme(), "http" | "https")
        && url.host_str().is_some_and(|h| !h.is_empty())
        && !authority.is_empty()
        && !authority.starts_with(['/', '\\', '?', '#'])
}

/// `[store]`: sled in `data_dir` (the default), or PostgreSQL at `url`. Checked without
/// connecting.
fn store(raw: RawStore, data_dir: &Path) -> Result<Backend, ConfigError> {
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
            let url = raw.url.ok_or_else(|| {
                invalid(
                    "store.url",
                    "is required with backend = \"postgres\", e.g. \"postgres://postgres@127.0.0.1:5432/idem\"",
                )
            })?;
            idem_actors::store::postgres::check_url(&url)
                .map_err(|why| invalid("store.url", why))?;
            let pool_size = raw.pool_size.unwrap_or(16);
            if !(1..=MAX_POOL).contains(&pool_size) {
                return Err(invalid(
                    "store.pool_size",
                    format!("must be 1 to {MAX_POOL} connections"),
                ));
            }
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

/// The parser's message with its line number, on one line.
fn one_line(text: &str, e: &toml::de::Error) -> String {
    let line = e
        .span()
        .map(|s| text[..s.start.min(text.len())].lines().count().max(1));
    let message = e.message().replace('\n', " ");
    match line {
        Some(l) => format!("line {l}: {message}"),
        None => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
[idempotency]
key_secret = "0123456789abcdef0123456789abcdef"

[tenants.acme]
api_key = "sk_test_0123456789"
callback_secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

[tenants.acme.playbooks.sim_swap]
decision = "deny"
actions = [{ name = "lock_account", url = "http://127.0.0.1:9000/lock" }]
"#;

    fn err(text: &str) -> String {
        Config::parse(text)
            .expect_err("must be refused")
            .to_string()
    }

    #[test]
    fn defaults_fill_every_optional_key() {
        let c = Config::parse(MINIMAL).expect("valid");
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.data_dir, PathBuf::from("data"));
        assert_eq!(c.idempotency.key_ttl, Duration::from_secs(86_400));
        assert_eq!(c.idempotency.in_flight_timeout, Duration::from_secs(30));
        assert_eq!(c.delivery.inline_timeout, Duration::from_secs(5));
        assert_eq!(c.delivery.schedule, vec![Duration::from_secs(300); 3]);
        assert_eq!(c.delivery.breaker_threshold, 5);
        assert_eq!(c.delivery.breaker_cooldown, Duration::from_secs(60));
        assert_eq!(c.delivery.max_in_flight_per_endpoint, 8);
        assert_eq!(c.signatures.tolerance, Duration::from_secs(300));
        let acme = &c.tenants["acme"];
        assert!(acme.signing_secrets.is_empty());
        assert_eq!(acme.playbooks["sim_swap"].decision, Verdict::Deny);
    }

    #[test]
    fn a_schedule_replaces_the_interval_and_count_but_not_beside_them() {
        let with = |delivery: &str| format!("{MINIMAL}\n[delivery]\n{delivery}\n");
        let c = Config::parse(&with(r#"schedule = ["5s", "5m", "2h"]"#)).expect("valid");
        assert_eq!(
            c.delivery.schedule,
            vec![
                Duration::from_secs(5),
                Duration::from_secs(300),
                Duration::from_secs(7200)
            ]
        );
        let c = Config::parse(&with("retry_interval = \"1s\"\nmax_retries = 2")).expect("valid");
        assert_eq!(c.delivery.schedule, vec![Duration::from_secs(1); 2]);
        for both in [
            "schedule = [\"5s\"]\nmax_retries = 2",
            "schedule = [\"5s\"]\nretry_interval = \"1s\"",
        ] {
            assert!(err(&with(both)).contains("delivery.schedule"), "{both}");
        }
        assert!(err(&with(r#"schedule = ["soon"]"#)).contains("delivery.schedule"));
        assert!(err(&with("breaker_threshold = 0")).contains("delivery.breaker_threshold"));
        assert!(err(&with("max_in_flight_per_endpoint = 0"))
            .contains("delivery.max_in_flight_per_endpoint"));
    }

    #[test]
    fn waiting_once_per_subject_and_decisions_have_defaults_and_bounds() {
        let c = Config::parse(MINIMAL).expect("valid");
        assert_eq!(c.idempotency.max_wait, Duration::from_secs(10));
        assert_eq!(c.idempotency.max_waiters, 64);
        assert_eq!(c.decisions.retention, Duration::from_secs(30 * 86_400));
        assert_eq!(
            c.tenants["acme"].playbooks["sim_swap"].once_per_subject,
            None
        );
        let c = Config::parse(&MINIMAL.replace(
            "decision = \"deny\"",
            "decision = \"deny\"\nonce_per_subject = \"24h\"",
        ))
        .expect("valid");
        assert_eq!(
            c.tenants["acme"].playbooks["sim_swap"].once_per_subject,
            Some(Duration::from_secs(86_400))
        );
        let refused = [
            (
                "[idempotency]",
                "[idempotency]\nmax_waiters = 0",
                "idempotency.max_waiters",
            ),
            (
                "[idempotency]",
                "[idempotency]\nmax_wait = \"0s\"",
                "idempotency.max_wait",
            ),
            (
                "decision = \"deny\"",
                "decision = \"deny\"\nonce_per_subject = \"soon\"",
                "tenants.acme.playbooks.sim_swap.once_per_subject",
            ),
            (
                "[idempotency]",
                "[decisions]\nretention = \"4000d\"\n[idempotency]",
                "decisions.retention",
            ),
        ];
        for (from, to, key) in refused {
            let e = err(&MINIMAL.replace(from, to));
            assert!(e.contains(key), "{to:?}: {e}");
        }
    }

    #[test]
    fn the_store_is_sled_in_data_dir_unless_postgres_is_named() {
        let c = Config::parse(MINIMAL).expect("valid");
        assert_eq!(
            c.store,
            Backend::Sled {
                data_dir: PathBuf::from("data")
            }
        );
        let url = "postgres://postgres@127.0.0.1:5432/idem";
        let pg = |section: &str| format!("[store]\n{section}\n{MINIMAL}");
        let c =
            Config::parse(&pg(&format!("backend = \"postgres\"\nurl = \"{url}\""))).expect("valid");
        assert_eq!(
            c.store,
            Backend::Postgres {
                url: url.into(),
                pool_size: 16
            }
        );
        assert!(
            !format!("{:?}", c.store).contains("postgres@"),
            "the URL is not printed"
        );
        let refused = [
            ("backend = \"postgres\"", "store.url"),
            ("backend = \"postgres\"\nurl = \"mysql://x\"", "store.url"),
            (
                &format!("backend = \"postgres\"\nurl = \"{url}\"\npool_size = 0"),
                "store.pool_size",
            ),
            ("backend = \"redis\"", "store.backend"),
            (&format!("url = \"{url}\""), "store.url"),
            ("pool = 3", "pool"),
        ];
        for (section, key) in refused {
            let e = err(&pg(section));
            assert!(e.contains(key), "{section:?}: {e}");
        }
    }

    #[test]
    fn refusals_name_the_key() {
        assert!(err("").contains("idempotency.key_secret"));
        let unknown = format!("{MINIMAL}\n[delivery]\nretries = 3\n");
        let e = err(&unknown);
        assert!(
            e.contains("unknown field `retries`") && e.contains("line "),
            "{e}"
        );
        let e = err(&MINIMAL.replace("\"deny\"", "\"maybe\""));
        assert!(
            e.contains("tenants.acme.playbooks.sim_swap.decision"),
            "{e}"
        );
        let e = err(&MINIMAL.replace("http://127.0.0.1:9000/lock", "ftp://x"));
        assert!(e.contains("actions[0].url"), "{e}");
        assert!(!e.contains('\n'), "one line: {e}");
        let e = err(&format!("listen = \"nowhere\"\n{MINIMAL}"));
        assert!(e.starts_with("config: listen:"), "{e}");
        let e = err(&MINIMAL.replace("[idempotency]", "[idempotency]\nkey_ttl = \"soon\""));
        assert!(e.contains("idempotency.key_ttl"), "{e}");
        let e = err(&MINIMAL.replace(
            "callback_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"",
            "",
        ));
        assert!(e.contains("tenants.acme.callback_secret"), "{e}");
        assert!(!e.contains('\n'));
    }

    #[test]
    fn weak_or_unusable_values_are_refused_by_name() {
        let weak = [
            (
                MINIMAL.replace("0123456789abcdef0123456789abcdef", "abc"),
                "idempotency.key_secret",
            ),
            (
                MINIMAL.replace("0123456789abcdef0123456789abcdef", &"k".repeat(31)),
                "idempotency.key_secret",
            ),
            (
                MINIMAL.replace("sk_test_0123456789", "sk_short"),
                "tenants.acme.api_key",
            ),
            (
                MINIMAL.replace("http://127.0.0.1:9000/lock", "http:///lock"),
                "actions[0].url",
            ),
            (
                MINIMAL.replace("http://127.0.0.1:9000/lock", "http:lock"),
                "actions[0].url",
            ),
            (
                MINIMAL.replace("http://127.0.0.1:9000/lock", "https://"),
                "actions[0].url",
            ),
        ];
        for (text, key) in weak {
            let e = err(&text);
            assert!(e.contains(key) && !e.contains('\n'), "{key}: {e}");
        }
        let at_the_limits = MINIMAL
            .replace("0123456789abcdef0123456789abcdef", &"k".repeat(32))
            .replace("sk_test_0123456789", &"a".repeat(16))
            .replace("http://127.0.0.1:9000/lock", "https://hooks.example/lock");
        Config::parse(&at_the_limits).expect("32-byte secret, 16-character key, a host");
    }

    #[test]
    fn debug_output_carries_no_secret() {
        let c = Config::parse(MINIMAL).expect("valid");
        let shown = format!("{c:?}");
        assert!(shown.contains("sim_swap"), "{shown}");
        for secret in [
            "sk_test_0123456789",
            "0123456789abcdef",
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        ] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
    }

    #[test]
    fn secrets_may_be_lists() {
        let text = MINIMAL.replace(
            "callback_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"",
            "callback_secret = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\", \"whsec_b3RoZXI=\"]\nsigning_secret = \"whsec_b3RoZXI=\"",
        );
        let c = Config::parse(&text).expect("valid");
        assert_eq!(c.tenants["acme"].callback_secrets.len(), 2);
        assert_eq!(c.tenants["acme"].signing_secrets.len(), 1);
    }
}
