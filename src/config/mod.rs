//! The configuration file (TOML), read and validated into typed settings before anything runs.
//! Every key but `idempotency.key_secret` and the tenants has a default; unknown keys are refused
//! with the line they are on. An error names the key and the reason in one line.
//!
//! Each setting is declared once, by the type it is read into, with its default and bounds: the
//! engine's sections are the engine's own settings (`idem_actors::settings`, whose `read` has
//! the readers every table uses), the front's are here, and a tenant (`tenants`) is read with its
//! playbooks, sources (`sources`) and transmitter (`ssf`), each of those from its written form
//! through one parse step. A value refused while the file is read is named by the key it was
//! read under; what spans keys is checked once the file is read (`Config::from_file`). `store`
//! reads `[store]`, `secrets` the lists of secrets, and `reload` names the keys that a reload
//! cannot change: a configuration serialized is what it cannot, since a setting read from the
//! configuration in force is skipped where it is declared.

mod actions;
mod reload;
mod rules;
mod secrets;
mod sources;
mod ssf;
mod store;
mod tenants;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use idem_actors::settings::{read, DecisionSettings, DeliverySettings, IdempotencySettings};
use idem_actors::Settings;
use serde::{Deserialize, Deserializer, Serialize};

pub use tenants::Tenant;

/// A validated configuration. Serialized, it is what a reload cannot change (see
/// [`Config::restart_only`]): what is read from the configuration in force is skipped.
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    /// Address to listen on; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Where the embedded store lives (the sled backend).
    pub data_dir: PathBuf,
    /// How senders reach idem (`public_url`, with no trailing `/`), when it is set: then a URL a
    /// sender signs (Twilio's) is taken to be this one's, never what a request's headers say.
    /// Read per request from the configuration in force: a reload applies it at once.
    #[serde(skip)]
    pub public_url: Option<String>,
    /// The engine's sections: `[store]`, `[idempotency]`, `[delivery]`, `[decisions]`.
    #[serde(flatten)]
    pub engine: Settings,
    /// Inbound signature checks.
    pub signatures: Signatures,
    /// The HTTP front's limits.
    pub http: Http,
    /// Tenants by name. Read per request from the configuration in force: a reload applies
    /// them at once.
    #[serde(skip)]
    pub tenants: HashMap<String, Tenant>,
    /// Where traces go (`[telemetry]`).
    pub telemetry: Telemetry,
}

/// `[telemetry]`: traces exported over OTLP/HTTP, off unless an endpoint is named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Telemetry {
    /// Where spans are POSTed (the traces URL, `…/v1/traces`): from `otlp_endpoint`, else the
    /// standard `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (as is) or `OTEL_EXPORTER_OTLP_ENDPOINT`
    /// (a base URL); `None`: tracing is off. Serialized under the key it follows.
    #[serde(rename = "otlp_endpoint")]
    pub traces_url: Option<String>,
    /// The service name traces carry: `OTEL_SERVICE_NAME`, else `idem` (the environment, which
    /// a reload does not change).
    #[serde(skip)]
    pub service_name: String,
}

/// `[http]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Http {
    /// How long a client may take to send a request's headers, and then its body.
    #[serde(deserialize_with = "read::duration")]
    pub read_timeout: Duration,
}

impl Default for Http {
    fn default() -> Self {
        Http {
            read_timeout: Duration::from_secs(10),
        }
    }
}

/// `[signatures]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Signatures {
    /// Accepted clock skew of `webhook-timestamp`, both ways. Read per request from the
    /// configuration in force: a reload applies it at once.
    #[serde(deserialize_with = "read::duration", skip_serializing)]
    pub tolerance: Duration,
}

impl Default for Signatures {
    fn default() -> Self {
        Signatures {
            tolerance: Duration::from_secs(300),
        }
    }
}

/// A configuration that cannot be used.
#[derive(Debug, PartialEq, thiserror::Error)]
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

impl From<read::Refusal> for ConfigError {
    fn from(r: read::Refusal) -> Self {
        invalid(r.key, r.reason)
    }
}

/// The file: its top-level keys and its tables, each read by the type it is read into.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default = "File::listen", deserialize_with = "File::read_listen")]
    listen: SocketAddr,
    #[serde(default, deserialize_with = "File::read_public_url")]
    public_url: Option<String>,
    #[serde(default = "File::data_dir", deserialize_with = "File::read_data_dir")]
    data_dir: PathBuf,
    #[serde(default)]
    idempotency: IdempotencySettings,
    #[serde(default)]
    delivery: DeliverySettings,
    #[serde(default)]
    signatures: Signatures,
    #[serde(default)]
    http: Http,
    #[serde(default)]
    store: store::StoreSection,
    #[serde(default)]
    decisions: DecisionSettings,
    #[serde(default)]
    tenants: BTreeMap<String, Tenant>,
    #[serde(default)]
    telemetry: RawTelemetry,
}

impl File {
    fn listen() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 8080))
    }

    fn data_dir() -> PathBuf {
        PathBuf::from("data")
    }

    /// `listen`: an address and port.
    fn read_listen<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(|_| {
            read::refuse(format_args!(
                "{text:?} is not an address like \"127.0.0.1:8080\""
            ))
        })
    }

    /// `data_dir`: not empty.
    fn read_data_dir<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
        match PathBuf::deserialize(d)? {
            dir if dir.as_os_str().is_empty() => Err(read::refuse("must not be empty")),
            dir => Ok(dir),
        }
    }

    /// `public_url`: an http(s) URL with a host and nothing after its path, kept without its
    /// trailing `/`.
    fn read_public_url<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        let url = String::deserialize(d)?;
        let base = url.trim_end_matches('/');
        let bare = reqwest::Url::parse(base).is_ok_and(|u| {
            u.query().is_none() && u.fragment().is_none() && u.username().is_empty()
        });
        if !actions::callback_url(base) || !bare {
            return Err(read::refuse(format_args!(
                "{url:?} is not an http(s) URL like \"https://idem.example.com\""
            )));
        }
        Ok(Some(base.to_string()))
    }
}

/// `[telemetry]` as written: where its traces go is worked out with the environment's.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawTelemetry {
    otlp_endpoint: Option<String>,
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

    /// Parses and validates TOML text: a value refused as it is read is named by the key it
    /// was read under; any other error of the file (its syntax, a wrong type, an unknown key)
    /// by its line.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let file: File =
            serde_path_to_error::deserialize(toml::Deserializer::new(text)).map_err(|e| {
                let key = e.path().to_string();
                let e = e.into_inner();
                match read::refusal(e.message()) {
                    Some((rest, reason)) => invalid(key + rest, reason),
                    None => ConfigError::Syntax {
                        path: String::new(),
                        reason: one_line(text, &e),
                    },
                }
            })?;
        Self::from_file(file)
    }

    /// The configuration the file says, once what spans its keys is checked.
    fn from_file(file: File) -> Result<Config, ConfigError> {
        let engine = Settings {
            store: file.store.backend(&file.data_dir)?,
            idempotency: file.idempotency.checked()?,
            delivery: file.delivery,
            decisions: file.decisions,
        };
        let claim_life = engine
            .idempotency
            .key_ttl
            .max(idem_actors::signals::EVENT_CLAIM_MIN);
        let tenants = tenants::checked(file.tenants)?;
        let mut names: Vec<_> = tenants
            .values()
            .flat_map(|t| t.sources.values().map(move |s| (t, s)))
            .collect();
        names.sort_by(|a, b| (&a.0.name, &a.1.name).cmp(&(&b.0.name, &b.1.name)));
        for (tenant, source) in names {
            {
                sources::check_max_age(
                    &format!("tenants.{}.sources.{}", tenant.name, source.name),
                    source,
                    claim_life,
                    file.signatures.tolerance,
                )?;
            }
        }
        Config {
            listen: file.listen,
            data_dir: file.data_dir,
            public_url: file.public_url,
            engine,
            signatures: file.signatures,
            http: file.http,
            tenants,
            telemetry: telemetry(file.telemetry, |name| std::env::var(name).ok())?,
        }
        .with_issuers()
    }

    /// The configuration, if a transmitter's issuer (`{public_url}/ssf/{tenant}`) is one name
    /// for every node and every receiver: `public_url` is required unless idem listens on a
    /// loopback address (one machine), and has no path (SSF's metadata is found at the
    /// URL's root).
    fn with_issuers(self) -> Result<Config, ConfigError> {
        // Twilio signs the URL it posts to: idem takes it from `public_url`, never from what a
        // request's headers say, so off loopback a twilio source needs it.
        let twilio = self.tenants.values().flat_map(|t| t.sources.values());
        let twilio = twilio
            .filter(|s| s.kind == crate::source::SourceKind::Twilio)
            .count();
        if twilio > 0 && self.public_url.is_none() && !self.listen.ip().is_loopback() {
            return Err(invalid(
                "public_url",
                "is required when a source is of kind twilio: Twilio signs the URL it posts to, and idem takes it from public_url, never from the request's Host",
            ));
        }
        if !self.tenants.values().any(|t| t.ssf.is_some()) {
            return Ok(self);
        }
        match &self.public_url {
            None if !self.listen.ip().is_loopback() => Err(invalid(
                "public_url",
                "is required when a tenant is a Shared Signals transmitter: it names the issuer",
            )),
            Some(url) if reqwest::Url::parse(url).is_ok_and(|u| u.path() != "/") => Err(invalid(
                "public_url",
                "has a path: a Shared Signals transmitter's metadata is found at the URL's root",
            )),
            _ => Ok(self),
        }
    }
}

/// The refusal of `key`'s value, for `reason`.
fn invalid(key: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        reason: reason.into(),
    }
}

/// A refusal made by a table's parse step while serde reads it, its key the rest beneath the
/// table's (see `read::refuse_at`).
fn refused<E: serde::de::Error>(e: ConfigError) -> E {
    match e {
        ConfigError::Invalid { key, reason } => read::refuse_at(&key, reason),
        other => E::custom(other),
    }
}

/// Whether `name` may name a tenant, a source or a receiver: 1 to 64 of `[A-Za-z0-9_-]`.
fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `[telemetry]`, with the standard OpenTelemetry variables `env` reads: the config's endpoint
/// wins over theirs. An endpoint is an OTLP/HTTP base URL, to which `/v1/traces` is added (as
/// OTEL_EXPORTER_OTLP_ENDPOINT's is); OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is the traces URL.
fn telemetry(
    raw: RawTelemetry,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Telemetry, ConfigError> {
    let base = |key: &str, url: &str| -> Result<String, ConfigError> {
        match reqwest::Url::parse(url) {
            // The URL is logged at start: a collector's credentials go in a header.
            Ok(u) if !u.username().is_empty() || u.password().is_some() => Err(invalid(
                key,
                "has credentials: put them in OTEL_EXPORTER_OTLP_HEADERS",
            )),
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => {
                Ok(format!("{}/v1/traces", url.trim_end_matches('/')))
            }
            _ => Err(invalid(
                key,
                format!("{url:?} is not an http(s) URL like \"http://127.0.0.1:4318\""),
            )),
        }
    };
    let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    let traces_url = match (
        raw.otlp_endpoint,
        set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
        set("OTEL_EXPORTER_OTLP_ENDPOINT"),
    ) {
        (Some(url), _, _) => Some(base("telemetry.otlp_endpoint", &url)?),
        (None, Some(url), _) => {
            // Checked as a base URL, used as it is.
            base("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &url)?;
            Some(url)
        }
        (None, None, Some(url)) => Some(base("OTEL_EXPORTER_OTLP_ENDPOINT", &url)?),
        (None, None, None) => None,
    };
    Ok(Telemetry {
        traces_url,
        service_name: set("OTEL_SERVICE_NAME").unwrap_or_else(|| "idem".to_string()),
    })
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
    use idem_actors::settings::Backend;
    use idem_schemas::Verdict;

    /// A small valid configuration.
    pub(super) const MINIMAL: &str = r#"
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
    fn an_ssf_sources_max_age_keeps_a_set_within_its_claim() {
        let with = |max_age: &str, more: &str| {
            format!(
                "{more}\n{MINIMAL}\n[tenants.acme.sources.tx]\nkind = \"ssf\"\n\
                 issuer = \"https://tx.example\"\naudience = \"https://rx.example\"\n\
                 jwks = \"/etc/jwks.json\"\n{max_age}\n"
            )
        };
        let max_age = |text: &str| {
            let c = Config::parse(text).expect("valid");
            let ssf = c.tenants["acme"].sources["tx"].ssf.clone().expect("ssf");
            let claim_life = c
                .engine
                .idempotency
                .key_ttl
                .max(idem_actors::signals::EVENT_CLAIM_MIN);
            ssf.max_age(claim_life, c.signatures.tolerance)
        };
        // Unwritten: a SET's claim life (three days unless key_ttl is longer) less the skew.
        let three_days = 3 * 86_400;
        assert_eq!(
            max_age(&with("", "")),
            Duration::from_secs(three_days - 300)
        );
        assert_eq!(
            max_age(&with("", "").replace("[idempotency]", "[idempotency]\nkey_ttl = \"5d\"")),
            Duration::from_secs(5 * 86_400 - 300)
        );
        assert_eq!(
            max_age(&with("max_age = \"1h\"", "")),
            Duration::from_secs(3600)
        );
        // Longer than the claim, with the skew: a SET could outlive its claim.
        let e = err(&with("max_age = \"3d\"", ""));
        assert!(e.contains("tenants.acme.sources.tx.max_age"), "{e}");
        assert!(
            Config::parse(&with("max_age = \"71h\"", "")).is_ok(),
            "71 h and 5 min are within 3 days"
        );
        let e = err(&with(
            "max_age = \"71h\"",
            "[signatures]\ntolerance = \"2h\"",
        ));
        assert!(e.contains("tenants.acme.sources.tx.max_age"), "{e}");
        let e = err(&with("max_age = \"18446744073709551615s\"", ""));
        assert!(e.contains("tenants.acme.sources.tx.max_age"), "{e}");
        let e = err(&with("max_age = \"0s\"", ""));
        assert!(e.contains("tenants.acme.sources.tx.max_age"), "{e}");
        let e = err(&with("", "[signatures]\ntolerance = \"3d\""));
        assert!(e.contains("signatures.tolerance"), "{e}");
    }

    #[test]
    fn defaults_fill_every_optional_key() {
        let c = Config::parse(MINIMAL).expect("valid");
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.data_dir, PathBuf::from("data"));
        assert_eq!(c.engine.idempotency.key_ttl, Duration::from_secs(86_400));
        assert_eq!(
            c.engine.idempotency.in_flight_timeout,
            Duration::from_secs(30)
        );
        assert_eq!(c.engine.idempotency.sweep_interval, Duration::from_secs(60));
        assert_eq!(c.engine.idempotency.max_live_actors, 100_000);
        assert_eq!(c.engine.delivery.inline_timeout, Duration::from_secs(5));
        assert_eq!(
            c.engine.delivery.schedule,
            vec![Duration::from_secs(300); 3]
        );
        assert_eq!(c.engine.delivery.breaker_threshold, 5);
        assert_eq!(c.engine.delivery.breaker_cooldown, Duration::from_secs(60));
        assert_eq!(c.engine.delivery.max_in_flight_per_endpoint, 8);
        assert_eq!(c.signatures.tolerance, Duration::from_secs(300));
        let acme = &c.tenants["acme"];
        assert!(acme.signing_secrets.is_empty());
        assert_eq!(acme.playbooks["sim_swap"].decision, Verdict::Deny);
    }

    #[test]
    fn an_unwritten_sweep_interval_follows_key_ttl() {
        let with =
            |lines: &str| MINIMAL.replace("[idempotency]", &format!("[idempotency]\n{lines}"));
        let sweep = |lines: &str| {
            let c = Config::parse(&with(lines)).expect("valid");
            c.engine.idempotency.sweep_interval
        };
        assert_eq!(sweep("key_ttl = \"10s\""), Duration::from_secs(1));
        assert_eq!(sweep("key_ttl = \"1s\""), Duration::from_millis(200));
        assert_eq!(
            sweep("key_ttl = \"10s\"\nsweep_interval = \"5m\""),
            Duration::from_secs(300)
        );
        assert!(err(&with("sweep_interval = \"0s\"")).contains("idempotency.sweep_interval"));
    }

    #[test]
    fn a_schedule_replaces_the_interval_and_count_but_not_beside_them() {
        let with = |delivery: &str| format!("{MINIMAL}\n[delivery]\n{delivery}\n");
        let c = Config::parse(&with(r#"schedule = ["5s", "5m", "2h"]"#)).expect("valid");
        assert_eq!(
            c.engine.delivery.schedule,
            vec![
                Duration::from_secs(5),
                Duration::from_secs(300),
                Duration::from_secs(7200)
            ]
        );
        assert_eq!(
            c.engine.delivery.max_hold(),
            Duration::from_secs(7505),
            "max_hold follows the schedule's total"
        );
        let c = Config::parse(&with("retry_interval = \"1s\"\nmax_retries = 2")).expect("valid");
        assert_eq!(c.engine.delivery.schedule, vec![Duration::from_secs(1); 2]);
        assert_eq!(
            c.engine.delivery.max_hold(),
            Duration::from_secs(60),
            "and lasts at least one cooldown"
        );
        let c = Config::parse(&with("max_hold = \"30m\"")).expect("valid");
        assert_eq!(c.engine.delivery.max_hold(), Duration::from_secs(1800));
        assert!(err(&with("max_hold = \"0s\"")).contains("delivery.max_hold"));
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
        assert_eq!(c.engine.idempotency.max_wait, Duration::from_secs(10));
        assert_eq!(c.engine.idempotency.max_waiters, 64);
        assert_eq!(
            c.engine.decisions.retention,
            Duration::from_secs(30 * 86_400)
        );
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
            c.engine.store,
            Backend::Sled {
                data_dir: PathBuf::from("data")
            }
        );
        let url = "postgres://postgres@127.0.0.1:5432/idem";
        let pg = |section: &str| format!("[store]\n{section}\n{MINIMAL}");
        let c =
            Config::parse(&pg(&format!("backend = \"postgres\"\nurl = \"{url}\""))).expect("valid");
        assert_eq!(
            c.engine.store,
            Backend::Postgres {
                url: url.into(),
                pool_size: 16,
                connect_timeout: Duration::from_secs(10),
            }
        );
        assert!(
            !format!("{:?}", c.engine.store).contains("postgres@"),
            "the URL is not printed"
        );
        let c = Config::parse(&pg(&format!(
            "backend = \"postgres\"\nurl = \"{url}\"\nconnect_timeout = \"750ms\""
        )))
        .expect("valid");
        assert!(matches!(
            c.engine.store,
            Backend::Postgres { connect_timeout, .. } if connect_timeout == Duration::from_millis(750)
        ));
        let refused = [
            ("backend = \"postgres\"", "store.url"),
            ("backend = \"postgres\"\nurl = \"mysql://x\"", "store.url"),
            (
                &format!("backend = \"postgres\"\nurl = \"{url}\"\npool_size = 0"),
                "store.pool_size",
            ),
            (
                &format!("backend = \"postgres\"\nurl = \"{url}\"\nconnect_timeout = \"0s\""),
                "store.connect_timeout",
            ),
            (
                &format!("backend = \"postgres\"\nurl = \"{url}\"\nconnect_timeout = \"soon\""),
                "store.connect_timeout",
            ),
            ("connect_timeout = \"5s\"", "store.url"),
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
    fn the_store_url_may_be_read_from_a_file_or_the_environment_and_is_never_echoed() {
        let url = "postgres://idem:s3cret-pw@db:5432/idem";
        let file = std::env::temp_dir().join(format!("idem-store-url-{}", std::process::id()));
        std::fs::write(&file, format!("{url}\n")).expect("write");
        let pg = |url: &str| format!("[store]\nbackend = \"postgres\"\nurl = {url}\n{MINIMAL}");
        let c = Config::parse(&pg(&format!("{{ file = \"{}\" }}", file.display()))).expect("valid");
        assert_eq!(
            c.engine.store,
            Backend::Postgres {
                url: url.into(),
                pool_size: 16,
                connect_timeout: Duration::from_secs(10),
            }
        );
        let var = "IDEM_TEST_CONFIG_STORE_URL";
        std::env::set_var(var, url);
        let c = Config::parse(&pg(&format!("{{ env = \"{var}\" }}"))).expect("valid");
        assert!(matches!(c.engine.store, Backend::Postgres { url: u, .. } if u == url));

        std::fs::write(&file, "mysql://idem:s3cret-pw@db/idem").expect("write");
        let e = err(&pg(&format!("{{ file = \"{}\" }}", file.display())));
        assert!(e.contains("store.url") && !e.contains("s3cret"), "{e}");
        std::fs::remove_file(&file).expect("remove");
        let e = err(&pg(&format!("{{ file = \"{}\" }}", file.display())));
        assert!(e.contains("store.url") && e.contains("cannot read"), "{e}");
        let e = err(&pg("{ env = \"IDEM_TEST_CONFIG_STORE_URL_UNSET\" }"));
        assert!(e.contains("store.url") && e.contains("not set"), "{e}");
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
    fn set_actions_need_a_transmitter_and_an_event_it_sends() {
        const REVOKED: &str = "https://schemas.openid.net/secevent/caep/event-type/session-revoked";
        let key = std::env::temp_dir().join(format!("idem-config-key-{}.pem", std::process::id()));
        std::fs::write(
            &key,
            include_str!("../../devtools/fixtures/transmitter-rsa.pem"),
        )
        .expect("write key");
        let ssf = format!(
            "\n[tenants.acme.ssf]\nsigning_keys = [{:?}]\n",
            key.display().to_string()
        );
        let with = |action: &str, ssf: &str| {
            MINIMAL.replace(
                r#"actions = [{ name = "lock_account", url = "http://127.0.0.1:9000/lock" }]"#,
                &format!("actions = [{action}]"),
            ) + ssf
        };
        let set =
            format!(r#"{{ name = "revoke", set = "{REVOKED}", subject_format = "phone_number" }}"#);
        let config = Config::parse(&with(&set, &ssf)).expect("valid");
        assert!(config.tenants["acme"].playbooks["sim_swap"].sends_sets());
        for (action, ssf, key) in [
            (set.clone(), "", "tenants.acme.ssf"),
            (
                set.replace(REVOKED, "urn:example:made-up"),
                ssf.as_str(),
                "actions[0].set",
            ),
            (
                set.replace("phone_number", "carrier_pigeon"),
                ssf.as_str(),
                "actions[0].subject_format",
            ),
            (
                r#"{ name = "both", url = "http://127.0.0.1:9000/x", set = "x" }"#.to_string(),
                ssf.as_str(),
                "actions[0]",
            ),
            (
                r#"{ name = "lock", url = "http://127.0.0.1:9000/x", subject_format = "email" }"#
                    .to_string(),
                ssf.as_str(),
                "actions[0].subject_format",
            ),
        ] {
            let e = err(&with(&action, ssf));
            assert!(e.contains(key) && !e.contains('\n'), "{key}: {e}");
        }
        // The issuer names one place: public_url, unless idem listens on loopback, at a root.
        let anywhere = format!("listen = \"0.0.0.0:8080\"\n{}", with(&set, &ssf));
        assert!(err(&anywhere).contains("public_url"));
        let named = format!("public_url = \"https://idem.example\"\n{anywhere}");
        Config::parse(&named).expect("a public_url names the issuer");
        let under = named.replace("https://idem.example", "https://idem.example/under");
        assert!(err(&under).contains("public_url"));
        let e = err(&(MINIMAL.to_string()
            + "\n[tenants.acme.ssf]\nsigning_keys = [\"/nonexistent/k.pem\"]\n"));
        assert!(
            e.contains("tenants.acme.ssf.signing_keys") && e.contains("/nonexistent/k.pem"),
            "{e}"
        );
        let _ = std::fs::remove_file(key);
    }

    #[test]
    fn token_failures_default_and_are_refused_by_name_when_unusable() {
        let key = std::env::temp_dir().join(format!("idem-config-tf-{}.pem", std::process::id()));
        std::fs::write(
            &key,
            include_str!("../../devtools/fixtures/transmitter-rsa.pem"),
        )
        .expect("write key");
        let with = |lines: &str| {
            format!(
                "{MINIMAL}\n[tenants.acme.ssf]\nsigning_keys = [{:?}]\n{lines}\n",
                key.display().to_string()
            )
        };
        let failures = |lines: &str| {
            let config = Config::parse(&with(lines)).expect("valid");
            config.tenants["acme"]
                .ssf
                .as_ref()
                .map(|s| s.token_failures)
        };
        let default = crate::transmitter::TokenFailures {
            per_client: 10,
            per_address: 20,
            every: Duration::from_secs(60),
        };
        assert_eq!(failures(""), Some(default));
        let set = failures("token_failures = { per_client = 3, every = \"5s\" }");
        assert_eq!(
            set,
            Some(crate::transmitter::TokenFailures {
                per_client: 3,
                every: Duration::from_secs(5),
                ..default
            })
        );
        for (lines, name) in [
            (
                "token_failures = { per_client = 0 }",
                "token_failures.per_client",
            ),
            (
                "token_failures = { per_address = 0 }",
                "token_failures.per_address",
            ),
            (
                "token_failures = { every = \"0s\" }",
                "token_failures.every",
            ),
            ("token_failures = { per_minute = 3 }", "per_minute"),
        ] {
            let e = err(&with(lines));
            assert!(e.contains(name), "{lines}: {e}");
        }
        let _ = std::fs::remove_file(key);
    }

    #[test]
    fn a_twilio_source_off_loopback_needs_public_url() {
        let twilio = format!(
            "{MINIMAL}\n[tenants.acme.sources.sms]\nkind = \"twilio\"\nsecret = \"twilio-auth-token-0123\"\n"
        );
        Config::parse(&twilio).expect("on loopback, idem's own address is the URL");
        let anywhere = format!("listen = \"0.0.0.0:8080\"\n{twilio}");
        let e = err(&anywhere);
        assert!(e.contains("public_url") && e.contains("twilio"), "{e}");
        Config::parse(&format!(
            "public_url = \"https://idem.example\"\n{anywhere}"
        ))
        .expect("public_url names the URL Twilio signs");
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
    fn public_url_is_an_http_url_kept_without_its_trailing_slash() {
        assert_eq!(Config::parse(MINIMAL).expect("valid").public_url, None);
        let with = |url: &str| format!("public_url = \"{url}\"\n{MINIMAL}");
        for (written, kept) in [
            ("https://idem.example.com", "https://idem.example.com"),
            ("https://idem.example.com/", "https://idem.example.com"),
            ("http://10.0.0.7:8080/idem/", "http://10.0.0.7:8080/idem"),
        ] {
            let c = Config::parse(&with(written)).expect("valid");
            assert_eq!(c.public_url.as_deref(), Some(kept), "{written}");
        }
        for refused in [
            "idem.example.com",
            "ftp://idem.example.com",
            "https://",
            "https://idem.example.com/?a=1",
            "https://user@idem.example.com",
        ] {
            assert!(err(&with(refused)).contains("public_url"), "{refused}");
        }
    }

    #[test]
    fn a_source_secret_is_long_and_its_own() {
        let source = |tenant: &str, name: &str, secret: &str| {
            format!(
                "[tenants.{tenant}.sources.{name}]\nkind = \"okta\"\nsecret = {secret}\n\
                 [[tenants.{tenant}.sources.{name}.map]]\nevent = \"user.*\"\n\
                 type = \"sim_swap\"\nsubject = \"/target/0/alternateId\"\n"
            )
        };
        let other_tenant = "[tenants.beta]\napi_key = \"sk_beta_0123456789\"\n\
                            callback_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n\
                            [tenants.beta.playbooks.sim_swap]\ndecision = \"deny\"\n";
        let long = "\"Basic b2t0YS1ob29rLXNlY3JldA==\"";
        let c = Config::parse(&format!("{MINIMAL}{}", source("acme", "okta", long)))
            .expect("a long secret");
        assert_eq!(c.tenants["acme"].sources["okta"].secrets.len(), 1);
        let refused = [
            (
                source("acme", "okta", "\"a\""),
                "tenants.acme.sources.okta.secret",
                "shorter than 16",
            ),
            (
                source("acme", "okta", &format!("[{long}, \"short-old-one\"]")),
                "tenants.acme.sources.okta.secret",
                "shorter than 16",
            ),
            (
                format!("{}{}", source("acme", "a", long), source("acme", "b", long)),
                "tenants.acme.sources.b.secret",
                "also tenants.acme.sources.a's",
            ),
            (
                format!(
                    "{}{other_tenant}{}",
                    source("acme", "a", long),
                    source("beta", "b", long)
                ),
                "tenants.beta.sources.b.secret",
                "also tenants.acme.sources.a's",
            ),
        ];
        for (sources, key, why) in refused {
            let e = err(&format!("{MINIMAL}{sources}"));
            assert!(e.contains(key) && e.contains(why), "{key}: {e}");
            assert!(!e.contains("b2t0YS1ob29r"), "the secret is not shown: {e}");
        }
    }

    #[test]
    fn a_secret_may_come_from_a_file_or_the_environment() {
        let dir = tempfile::tempdir().expect("tempdir");
        let key_file = dir.path().join("key_secret");
        std::fs::write(&key_file, "0123456789abcdef0123456789abcdef-from-a-file\n").expect("write");
        let callback_file = dir.path().join("callback");
        std::fs::write(&callback_file, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\r\n")
            .expect("write");
        // A name of this test's own: the environment is the process's.
        let var = "IDEM_CONFIG_TEST_API_KEY";
        std::env::set_var(var, "sk_from_the_environment");
        let text = MINIMAL
            .replace(
                "key_secret = \"0123456789abcdef0123456789abcdef\"",
                &format!("key_secret = {{ file = \"{}\" }}", key_file.display()),
            )
            .replace(
                "api_key = \"sk_test_0123456789\"",
                &format!("api_key = {{ env = \"{var}\" }}"),
            )
            .replace(
                "callback_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"",
                &format!(
                    "callback_secret = [{{ file = \"{}\" }}, \"whsec_b3RoZXI=\"]",
                    callback_file.display()
                ),
            );
        let c = Config::parse(&text).expect("valid");
        assert_eq!(
            c.engine.idempotency.key_secret,
            b"0123456789abcdef0123456789abcdef-from-a-file".to_vec(),
            "the file's content, its trailing newline dropped"
        );
        assert_eq!(c.tenants["acme"].api_key, "sk_from_the_environment");
        assert_eq!(c.tenants["acme"].callback_secrets.len(), 2);

        // What cannot be read is refused by the key it is for, and nothing of it is shown.
        let missing = text.replace(&key_file.display().to_string(), "/nonexistent/key");
        let e = err(&missing);
        assert!(
            e.contains("idempotency.key_secret") && e.contains("/nonexistent/key"),
            "{e}"
        );
        let unset = text.replace(var, "IDEM_CONFIG_TEST_UNSET");
        let e = err(&unset);
        assert!(
            e.contains("tenants.acme.api_key") && e.contains("IDEM_CONFIG_TEST_UNSET"),
            "{e}"
        );
        let both = text.replace(
            &format!("{{ env = \"{var}\" }}"),
            &format!("{{ env = \"{var}\", file = \"/etc/hostname\" }}"),
        );
        let e = err(&both);
        assert!(
            e.contains("a secret: a string") && e.contains("line "),
            "one source: {e}"
        );
        for e in [err(&missing), err(&unset)] {
            assert!(
                !e.contains("from-a-file") && !e.contains("sk_from_the"),
                "{e}"
            );
        }
    }

    #[test]
    fn traces_are_off_unless_an_endpoint_is_named_here_or_in_the_environment() {
        let none = |_: &str| None;
        let raw = |url: Option<&str>| RawTelemetry {
            otlp_endpoint: url.map(str::to_string),
        };
        let off = telemetry(raw(None), none).expect("valid");
        assert_eq!(off.traces_url, None);
        assert_eq!(off.service_name, "idem");
        let on = telemetry(raw(Some("http://127.0.0.1:4318/")), none).expect("valid");
        assert_eq!(
            on.traces_url.as_deref(),
            Some("http://127.0.0.1:4318/v1/traces")
        );
        let env = |name: &str| match name {
            "OTEL_EXPORTER_OTLP_ENDPOINT" => Some("http://collector:4318".to_string()),
            "OTEL_SERVICE_NAME" => Some("idem-eu-1".to_string()),
            _ => None,
        };
        let from_env = telemetry(raw(None), env).expect("valid");
        assert_eq!(
            from_env.traces_url.as_deref(),
            Some("http://collector:4318/v1/traces")
        );
        assert_eq!(from_env.service_name, "idem-eu-1");
        // The file's endpoint wins; the traces variable is taken as it is.
        let file = telemetry(raw(Some("https://otel.example")), env).expect("valid");
        assert_eq!(
            file.traces_url.as_deref(),
            Some("https://otel.example/v1/traces")
        );
        let traces = |name: &str| {
            (name == "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                .then(|| "http://collector:4318/custom/traces".to_string())
        };
        let exact = telemetry(raw(None), traces).expect("valid");
        assert_eq!(
            exact.traces_url.as_deref(),
            Some("http://collector:4318/custom/traces")
        );
        let e = telemetry(raw(Some("collector:4318")), none).expect_err("not a URL");
        assert!(e.to_string().contains("telemetry.otlp_endpoint"), "{e}");
        let e = telemetry(raw(Some("https://user:pw@otel.example")), none).expect_err("secret");
        assert!(
            e.to_string().contains("telemetry.otlp_endpoint") && !e.to_string().contains("pw"),
            "{e}"
        );
        let bad_env = |name: &str| (name == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| "x".into());
        let e = telemetry(raw(None), bad_env).expect_err("not a URL");
        assert!(e.to_string().contains("OTEL_EXPORTER_OTLP_ENDPOINT"), "{e}");
        // Through the file.
        let c = Config::parse(&format!(
            "{MINIMAL}\n[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318\"\n"
        ))
        .expect("valid");
        assert!(c.telemetry.traces_url.is_some());
        assert!(err(&format!("{MINIMAL}\n[telemetry]\nendpoint = \"x\"\n")).contains("endpoint"));
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
