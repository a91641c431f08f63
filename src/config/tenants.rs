//! `[tenants.<name>]`: each tenant's API key, secrets, rate limit, playbooks (read into the
//! engine's `Playbook`), sources (see `sources`) and transmitter (see `ssf`). A tenant is read as
//! it is written, each value checked as it is read; [`checked`] then checks what spans its
//! tables: its name, API keys unique across tenants, a playbook with callbacks needs a callback
//! secret (every callback is signed) and one with SETs a transmitter, a source's types name
//! playbooks, and no two sources share a secret. A playbook's rules and tests are read by
//! `rules`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use idem_actors::playbook::{Playbook, Playbooks};
use idem_actors::settings::read::{self, Dur};
use idem_schemas::signature::Secret;
use serde::{Deserialize, Deserializer};

use super::actions::{self, verdict, RawAction};
use super::rules::{self, RawRule, RawTest};
use super::secrets::{shared_webhook_secrets, webhook_secrets};
use super::{invalid, is_name, refused, sources, ssf, ConfigError};
use crate::source::Source;
use crate::transmitter::Transmitter;

/// The fewest characters an `api_key` may have.
const MIN_API_KEY: usize = 16;

/// A tenant. Its `Debug` leaves the API key out (secrets print as `Secret(..)`). Read as part of
/// a `Config`, which checks what spans its tables ([`checked`]).
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tenant {
    /// Its name (the key under `[tenants]`).
    #[serde(skip)]
    pub name: String,
    /// Its Bearer token: required, at least [`MIN_API_KEY`] characters, its own.
    #[serde(default, deserialize_with = "Tenant::read_api_key")]
    pub api_key: String,
    /// Inbound signing secrets; empty means authenticated by API key alone.
    #[serde(
        rename = "signing_secret",
        default,
        deserialize_with = "webhook_secrets"
    )]
    pub signing_secrets: Vec<Secret>,
    /// Outbound signing secrets; every one signs each callback.
    #[serde(
        rename = "callback_secret",
        default,
        deserialize_with = "shared_webhook_secrets"
    )]
    pub callback_secrets: Arc<[Secret]>,
    /// Signals per second this tenant may post (bursts up to one second's worth); none = no limit.
    #[serde(default, deserialize_with = "Tenant::read_rate_limit")]
    pub rate_limit: Option<u32>,
    /// Playbooks by signal type.
    #[serde(default, deserialize_with = "Tenant::read_playbooks")]
    pub playbooks: Playbooks,
    /// Providers' webhooks taken as they are sent, by source name.
    #[serde(default, deserialize_with = "sources::read")]
    pub sources: HashMap<String, Source>,
    /// The tenant as a Shared Signals transmitter, if it is one.
    #[serde(default, deserialize_with = "ssf::read")]
    pub ssf: Option<Transmitter>,
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
            .field("ssf", &self.ssf)
            .finish()
    }
}

impl Tenant {
    /// `api_key`: a secret of at least [`MIN_API_KEY`] characters.
    fn read_api_key<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        match read::secret(d)? {
            k if k.is_empty() => Err(read::refuse("is required")),
            k if k.chars().count() < MIN_API_KEY => Err(read::refuse(format_args!(
                "is shorter than {MIN_API_KEY} characters: use a long random token"
            ))),
            k => Ok(k),
        }
    }

    /// `rate_limit`: at least one signal per second.
    fn read_rate_limit<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
        let n = i64::deserialize(d)?;
        read::bounded(n, 1, i64::MAX, "signals per second")
            .map(Some)
            .map_err(read::refuse)
    }

    /// `playbooks`, each read into the engine's `Playbook`.
    fn read_playbooks<'de, D: Deserializer<'de>>(d: D) -> Result<Playbooks, D::Error> {
        let written = BTreeMap::<String, RawPlaybook>::deserialize(d)?;
        written
            .into_iter()
            .map(|(signal_type, mut p)| {
                let key = format!(".{signal_type}");
                let tests = std::mem::take(&mut p.tests);
                let playbook = self::playbook(&key, p).map_err(refused)?;
                rules::run_tests(&format!("{key}.tests"), &signal_type, &playbook, tests)
                    .map_err(refused)?;
                Ok((signal_type, Arc::new(playbook)))
            })
            .collect()
    }
}

/// A playbook as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlaybook {
    decision: Option<String>,
    #[serde(default)]
    actions: Vec<RawAction>,
    once_per_subject: Option<Dur>,
    #[serde(default)]
    rules: Vec<RawRule>,
    #[serde(default)]
    tests: Vec<RawTest>,
}

/// The tenants as read, by name, once what spans their tables is checked: at least one.
pub(super) fn checked(
    written: BTreeMap<String, Tenant>,
) -> Result<HashMap<String, Tenant>, ConfigError> {
    if written.is_empty() {
        return Err(invalid("tenants", "at least one tenant is required"));
    }
    let mut tenants = HashMap::new();
    let mut api_keys = HashMap::new();
    // Where each source secret is used: a secret two sources share lets a delivery meant for
    // one be taken by the other (another tenant's, another playbook's).
    let mut source_secrets: HashMap<String, String> = HashMap::new();
    for (name, mut t) in written {
        let key = format!("tenants.{name}");
        if !is_name(&name) {
            return Err(invalid(&key, "a tenant name is 1 to 64 of [A-Za-z0-9_-]"));
        }
        if t.api_key.is_empty() {
            return Err(invalid(format!("{key}.api_key"), "is required"));
        }
        if let Some(other) = api_keys.insert(t.api_key.clone(), name.clone()) {
            return Err(invalid(
                format!("{key}.api_key"),
                format!("is the same as tenants.{other}.api_key"),
            ));
        }
        let actions = || t.playbooks.values().flat_map(|p| p.all_actions());
        if actions().any(|a| a.url().is_some()) && t.callback_secrets.is_empty() {
            return Err(invalid(
                format!("{key}.callback_secret"),
                "is required when a playbook has callback actions (callbacks are signed)",
            ));
        }
        if t.playbooks.values().any(|p| p.sends_sets()) && t.ssf.is_none() {
            return Err(invalid(
                format!("{key}.ssf"),
                "is required when a playbook has set actions (SETs are signed by its keys)",
            ));
        }
        let mut names: Vec<&String> = t.sources.keys().collect();
        names.sort();
        for source in names.into_iter().map(|name| &t.sources[name]) {
            let skey = format!("{key}.sources.{}", source.name);
            sources::check_types(&skey, source, &t.playbooks)?;
            for secret in &source.secrets {
                if let Some(other) = source_secrets.insert(secret.clone(), skey.clone()) {
                    if other != skey {
                        return Err(invalid(
                            format!("{skey}.secret"),
                            format!("is also {other}'s: give each source its own secret"),
                        ));
                    }
                }
            }
        }
        t.name = name.clone();
        tenants.insert(name, t);
    }
    Ok(tenants)
}

/// The playbook written under `key` (the rest of its key beneath the table being read).
fn playbook(key: &str, p: RawPlaybook) -> Result<Playbook, ConfigError> {
    let decision = verdict(key, p.decision.as_deref())?;
    let actions = actions::read(&format!("{key}.actions"), p.actions, "playbook")?;
    Ok(Playbook {
        decision,
        actions,
        once_per_subject: p.once_per_subject.map(|d| d.0),
        rules: rules::read(&format!("{key}.rules"), p.rules)?,
    })
}
