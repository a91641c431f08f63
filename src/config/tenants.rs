//! `[tenants.<name>]`: each tenant's API key, secrets, rate limit, playbooks (read into the
//! engine's `Playbook`), sources (see `sources`) and transmitter (see `ssf`). A tenant is read as
//! it is written, each value checked as it is read; [`checked`] then checks what spans its
//! tables: its name, API keys unique across tenants, a playbook with callbacks needs a callback
//! secret (every callback is signed) and one with SETs a transmitter, a source's types name
//! playbooks, and no two sources share a secret. A playbook's rules and tests are read by
//! `rules`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use idem_actors::playbook::{Action, Playbook, Playbooks, Target, MAX_ACTIONS};
use idem_actors::set::{check_members, event_type, SetAction, SubjectFormat};
use idem_actors::settings::read::{self, Dur};
use idem_schemas::signature::Secret;
use idem_schemas::Verdict;
use serde::{Deserialize, Deserializer};

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

/// An action as written: a callback (`url`) or a SET (`set`, with its `subject_format` and
/// the event's own members, `event`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAction {
    name: String,
    url: Option<String>,
    set: Option<String>,
    subject_format: Option<String>,
    event: Option<toml::Table>,
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
    if p.actions.len() > MAX_ACTIONS {
        return Err(invalid(
            format!("{key}.actions"),
            format!("at most {MAX_ACTIONS} actions"),
        ));
    }
    let mut actions = Vec::with_capacity(p.actions.len());
    for (n, raw) in p.actions.into_iter().enumerate() {
        let akey = format!("{key}.actions[{n}]");
        let action = self::action(&akey, raw)?;
        if actions.iter().any(|a: &Action| a.name == action.name) {
            return Err(invalid(
                format!("{akey}.name"),
                format!("{:?} is used twice in this playbook", action.name),
            ));
        }
        actions.push(action);
    }
    Ok(Playbook {
        decision,
        actions,
        once_per_subject: p.once_per_subject.map(|d| d.0),
        rules: rules::read(&format!("{key}.rules"), p.rules)?,
    })
}

/// The verdict written as `decision` under `key`.
pub(super) fn verdict(key: &str, written: Option<&str>) -> Result<Verdict, ConfigError> {
    match written {
        Some("allow") => Ok(Verdict::Allow),
        Some("deny") => Ok(Verdict::Deny),
        Some("step_up") => Ok(Verdict::StepUp),
        Some("review") => Ok(Verdict::Review),
        Some(other) => Err(invalid(
            format!("{key}.decision"),
            format!("{other:?} is not one of allow, deny, step_up, review"),
        )),
        None => Err(invalid(format!("{key}.decision"), "is required")),
    }
}

/// The action written under `key`.
pub(super) fn action(key: &str, raw: RawAction) -> Result<Action, ConfigError> {
    if raw.name.is_empty() {
        return Err(invalid(format!("{key}.name"), "must not be empty"));
    }
    let target = match (raw.url, raw.set) {
        (Some(url), None) => {
            for (given, name) in [
                (raw.subject_format.is_some(), "subject_format"),
                (raw.event.is_some(), "event"),
            ] {
                if given {
                    return Err(invalid(format!("{key}.{name}"), "is for set actions only"));
                }
            }
            if !callback_url(&url) {
                return Err(invalid(
                    format!("{key}.url"),
                    format!("{url:?} is not an http(s) URL with a host"),
                ));
            }
            Target::Callback(url)
        }
        (None, Some(event)) => {
            if event_type(&event).is_none() {
                return Err(invalid(
                    format!("{key}.set"),
                    format!("{event:?} is not a CAEP or RISC event type idem sends"),
                ));
            }
            let subject_format = match raw.subject_format.as_deref() {
                None => SubjectFormat::Opaque,
                Some(name) => SubjectFormat::parse(name).ok_or_else(|| {
                    invalid(
                        format!("{key}.subject_format"),
                        format!("{name:?} is not one of email, phone_number, opaque"),
                    )
                })?,
            };
            let members = match raw.event.map(serde_json::to_value).transpose() {
                Ok(Some(serde_json::Value::Object(members))) => members,
                Ok(_) => serde_json::Map::new(),
                Err(e) => return Err(invalid(format!("{key}.event"), e.to_string())),
            };
            check_members(&event, &members)
                .map_err(|e| invalid(format!("{key}.event.{}", e.member), e.reason))?;
            Target::Set(SetAction {
                event,
                subject_format,
                members,
            })
        }
        _ => {
            return Err(invalid(
                key,
                "an action has either a url (a callback) or a set (a Security Event Token)",
            ))
        }
    };
    Ok(Action {
        name: raw.name,
        target,
    })
}

/// An http(s) URL with its host where the host goes: the URL parser reads `http:///x` (no
/// host) as host `x`, and every callback to it would fail until dead.
pub(super) fn callback_url(raw: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(raw) else {
        return false;
    };
    let authority = raw.split_once("://").map_or("", |(_, rest)| rest);
    matches!(url.scheme(), "http" | "https")
        && url.host_str().is_some_and(|h| !h.is_empty())
        && !authority.is_empty()
        && !authority.starts_with(['/', '\\', '?', '#'])
}
