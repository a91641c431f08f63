//! `[tenants.<t>.sources.<name>]`: a source's kind, its secrets (any one is accepted, for
//! rotation) and its `map` from the provider's event types to the tenant's signal types, each of
//! which must name one of the tenant's playbooks.

use idem_actors::playbook::Playbooks;
use idem_schemas::signature::Secret;
use serde::Deserialize;

use super::bounded::{invalid, is_name, OneOrMany};
use super::ConfigError;
use crate::source::{Pattern, Route, Source, SourceKind};

/// `[tenants.<t>.sources.<name>]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSource {
    kind: Option<String>,
    secret: Option<OneOrMany>,
    #[serde(default)]
    map: Vec<RawRoute>,
}

/// A `map` entry as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    event: Option<String>,
    #[serde(rename = "type")]
    signal_type: Option<String>,
    subject: Option<String>,
}

/// Source `name` of a tenant, written under `key`, whose types name the tenant's `playbooks`.
pub(super) fn source(
    key: &str,
    name: String,
    raw: RawSource,
    playbooks: &Playbooks,
) -> Result<Source, ConfigError> {
    if !is_name(&name) {
        return Err(invalid(key, "a source name is 1 to 64 of [A-Za-z0-9_-]"));
    }
    let kind_text = raw
        .kind
        .ok_or_else(|| invalid(format!("{key}.kind"), "is required"))?;
    let kind = SourceKind::parse(&kind_text).ok_or_else(|| {
        invalid(
            format!("{key}.kind"),
            format!("{kind_text:?} is not one of okta, auth0, twilio, stripe, github, standard"),
        )
    })?;
    let secrets = raw
        .secret
        .ok_or_else(|| invalid(format!("{key}.secret"), "is required"))?
        .into_vec();
    if secrets.is_empty() || secrets.iter().any(|s| s.is_empty()) {
        return Err(invalid(
            format!("{key}.secret"),
            "must be a non-empty string or a list of them",
        ));
    }
    let standard_secrets = match kind {
        SourceKind::Standard => secrets
            .iter()
            .map(|s| {
                Secret::parse(s)
                    .map_err(|e| invalid(format!("{key}.secret"), format!("a secret {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?,
        _ => Vec::new(),
    };
    let mut routes: Vec<Route> = Vec::with_capacity(raw.map.len());
    for (n, r) in raw.map.into_iter().enumerate() {
        let rkey = format!("{key}.map[{n}]");
        let event = r
            .event
            .filter(|e| !e.is_empty())
            .ok_or_else(|| invalid(format!("{rkey}.event"), "is required"))?;
        let event = match event.strip_suffix('*') {
            Some(prefix) => Pattern::Prefix(prefix.to_string()),
            None => Pattern::Exact(event),
        };
        let (Pattern::Exact(text) | Pattern::Prefix(text)) = &event;
        if text.contains('*') {
            return Err(invalid(
                format!("{rkey}.event"),
                "a * may only end the event type",
            ));
        }
        if routes.iter().any(|other| other.event == event) {
            return Err(invalid(
                format!("{rkey}.event"),
                "is mapped twice in this source",
            ));
        }
        let signal_type = r
            .signal_type
            .ok_or_else(|| invalid(format!("{rkey}.type"), "is required"))?;
        if !playbooks.contains_key(&signal_type) {
            return Err(invalid(
                format!("{rkey}.type"),
                format!("{signal_type:?} has no playbook in this tenant"),
            ));
        }
        let subject = r
            .subject
            .ok_or_else(|| invalid(format!("{rkey}.subject"), "is required"))?;
        if !subject.starts_with('/') {
            return Err(invalid(
                format!("{rkey}.subject"),
                format!("{subject:?} is not a JSON pointer like \"/data/user_id\""),
            ));
        }
        routes.push(Route {
            event,
            signal_type,
            subject,
        });
    }
    Ok(Source {
        name,
        kind,
        secrets,
        standard_secrets,
        routes,
    })
}
