//! `[tenants.<name>]`: each tenant's API key, secrets, rate limit, playbooks (read into the
//! engine's `Playbook`) and sources (see `sources`). API keys are unique across tenants; a
//! playbook with actions needs a callback secret, since every callback is signed.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use idem_actors::playbook::{Action, Playbook, Playbooks, Target, MAX_ACTIONS};
use idem_actors::set::{SetAction, SubjectFormat, EVENTS_SUPPORTED};
use idem_schemas::signature::Secret;
use idem_schemas::Verdict;
use serde::Deserialize;

use super::bounded::{duration, invalid, is_name, number, secrets, OneOrMany, SecretText};
use super::sources::{self, RawSource};
use super::ssf::RawSsf;
use super::ConfigError;
use crate::source::Source;
use crate::transmitter::Transmitter;

/// The fewest characters an `api_key` may have.
const MIN_API_KEY: usize = 16;

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
    pub callback_secrets: Arc<[Secret]>,
    /// Playbooks by signal type.
    pub playbooks: Playbooks,
    /// Signals per second this tenant may post (bursts up to one second's worth); none = no limit.
    pub rate_limit: Option<u32>,
    /// Providers' webhooks taken as they are sent, by source name.
    pub sources: HashMap<String, Source>,
    /// The tenant as a Shared Signals transmitter, if it is one.
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

/// `[tenants.<name>]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTenant {
    api_key: Option<SecretText>,
    signing_secret: Option<OneOrMany>,
    callback_secret: Option<OneOrMany>,
    rate_limit: Option<i64>,
    #[serde(default)]
    playbooks: BTreeMap<String, RawPlaybook>,
    #[serde(default)]
    sources: BTreeMap<String, RawSource>,
    ssf: Option<RawSsf>,
}

/// A playbook as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlaybook {
    decision: Option<String>,
    #[serde(default)]
    actions: Vec<RawAction>,
    once_per_subject: Option<String>,
}

/// An action as written: a callback (`url`) or a SET (`set`, with its `subject_format`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAction {
    name: String,
    url: Option<String>,
    set: Option<String>,
    subject_format: Option<String>,
}

/// The tenants, by name: at least one.
pub(super) fn tenants(
    raw: BTreeMap<String, RawTenant>,
) -> Result<HashMap<String, Tenant>, ConfigError> {
    if raw.is_empty() {
        return Err(invalid("tenants", "at least one tenant is required"));
    }
    let mut tenants = HashMap::new();
    let mut api_keys = HashMap::new();
    // Where each source secret is used: a secret two sources share lets a delivery meant for
    // one be taken by the other (another tenant's, another playbook's).
    let mut source_secrets: HashMap<String, String> = HashMap::new();
    for (name, t) in raw {
        let key = format!("tenants.{name}");
        if !is_name(&name) {
            return Err(invalid(&key, "a tenant name is 1 to 64 of [A-Za-z0-9_-]"));
        }
        let api_key = t
            .api_key
            .map(|k| k.resolve(&format!("{key}.api_key")))
            .transpose()?
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
            Some(n) => Some(number(
                &format!("{key}.rate_limit"),
                Some(n),
                1,
                1..,
                "signals per second",
            )?),
        };
        let signing_secrets = secrets(&format!("{key}.signing_secret"), t.signing_secret)?;
        let callback_secrets = secrets(&format!("{key}.callback_secret"), t.callback_secret)?;
        let ssf = t
            .ssf
            .map(|raw| super::ssf::transmitter(&format!("{key}.ssf"), raw))
            .transpose()?;
        let mut playbooks = Playbooks::new();
        for (signal_type, p) in t.playbooks {
            let pkey = format!("{key}.playbooks.{signal_type}");
            let playbook = self::playbook(&pkey, p)?;
            let calls_back = playbook.actions.iter().any(|a| a.url().is_some());
            if calls_back && callback_secrets.is_empty() {
                return Err(invalid(
                    format!("{key}.callback_secret"),
                    "is required when a playbook has callback actions (callbacks are signed)",
                ));
            }
            if playbook.sends_sets() && ssf.is_none() {
                return Err(invalid(
                    format!("{key}.ssf"),
                    "is required when a playbook has set actions (SETs are signed by its keys)",
                ));
            }
            playbooks.insert(signal_type, Arc::new(playbook));
        }
        let mut sources = HashMap::new();
        for (source, raw) in t.sources {
            let skey = format!("{key}.sources.{source}");
            let source = sources::source(&skey, source, raw, &playbooks)?;
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
            sources.insert(source.name.clone(), source);
        }
        tenants.insert(
            name.clone(),
            Tenant {
                name,
                api_key,
                signing_secrets,
                callback_secrets: callback_secrets.into(),
                playbooks,
                rate_limit,
                sources,
                ssf,
            },
        );
    }
    Ok(tenants)
}

/// The playbook written under `key`.
fn playbook(key: &str, p: RawPlaybook) -> Result<Playbook, ConfigError> {
    let decision = match p.decision.as_deref() {
        Some("allow") => Verdict::Allow,
        Some("deny") => Verdict::Deny,
        Some("step_up") => Verdict::StepUp,
        Some("review") => Verdict::Review,
        Some(other) => {
            return Err(invalid(
                format!("{key}.decision"),
                format!("{other:?} is not one of allow, deny, step_up, review"),
            ))
        }
        None => return Err(invalid(format!("{key}.decision"), "is required")),
    };
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
    let once_per_subject = match p.once_per_subject.as_deref() {
        None => None,
        Some(text) => Some(duration(
            &format!("{key}.once_per_subject"),
            Some(text),
            Default::default(),
        )?),
    };
    Ok(Playbook {
        decision,
        actions,
        once_per_subject,
    })
}

/// The action written under `key`.
fn action(key: &str, raw: RawAction) -> Result<Action, ConfigError> {
    if raw.name.is_empty() {
        return Err(invalid(format!("{key}.name"), "must not be empty"));
    }
    let target = match (raw.url, raw.set) {
        (Some(url), None) => {
            if raw.subject_format.is_some() {
                return Err(invalid(
                    format!("{key}.subject_format"),
                    "is for set actions only",
                ));
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
            if !EVENTS_SUPPORTED.contains(&event.as_str()) {
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
            Target::Set(SetAction {
                event,
                subject_format,
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
