//! A decision's verdict and actions as written, for a playbook and for each of its rules
//! (`decision`, `actions = [...]`): a verdict is one of four words, an action a callback to an
//! http(s) URL or a SET of a CAEP or RISC event type with that event's members, and a list of
//! actions is at most `MAX_ACTIONS` with each name once.

use idem_actors::action::{Action, Target, MAX_ACTIONS};
use idem_actors::set::{check_members, event_type, SetAction, SubjectFormat};
use idem_schemas::Verdict;
use serde::Deserialize;

use super::{invalid, ConfigError};

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

/// The actions written under `key` (a playbook's or a rule's `actions`, for `whose` in an
/// error): at most `MAX_ACTIONS`, each named once.
pub(super) fn read(
    key: &str,
    written: Vec<RawAction>,
    whose: &str,
) -> Result<Vec<Action>, ConfigError> {
    if written.len() > MAX_ACTIONS {
        return Err(invalid(key, format!("at most {MAX_ACTIONS} actions")));
    }
    let mut actions: Vec<Action> = Vec::with_capacity(written.len());
    for (n, raw) in written.into_iter().enumerate() {
        let akey = format!("{key}[{n}]");
        let action = action(&akey, raw)?;
        if actions.iter().any(|a| a.name == action.name) {
            return Err(invalid(
                format!("{akey}.name"),
                format!("{:?} is used twice in this {whose}", action.name),
            ));
        }
        actions.push(action);
    }
    Ok(actions)
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
fn action(key: &str, raw: RawAction) -> Result<Action, ConfigError> {
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
