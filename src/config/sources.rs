//! `[tenants.<t>.sources.<name>]`: a source's kind, its secrets (any one is accepted, for
//! rotation), for `ssf` its transmitter (issuer, audience, JWK Set, algorithms, the age a SET may
//! have, poll endpoint),
//! and its `map` from the sender's event types to the tenant's signal types, each of which must
//! name one of the tenant's playbooks (checked with the tenant's, [`check_types`]).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use idem_actors::playbook::Playbooks;
use idem_actors::settings::read::{Dur, Resolved};
use serde::{Deserialize, Deserializer};

use super::secrets::{webhook_secret, SecretList};
use super::{invalid, is_name, refused, ConfigError};
use crate::source::jwks::JwksAt;
use crate::source::upstream::{well_known, Auth};
use crate::source::{set, Delivery, Pattern, Poll, Route, Source, SourceKind, Ssf, Subscribe};

/// An `ssf` source's subject pointer when its `map` entry names none.
pub const SSF_SUBJECT: &str = "/sub_id";

/// The fewest characters a source's secret has: one anybody could guess authenticates nothing.
pub const MIN_SECRET: usize = 16;

/// How often a subscribed stream is verified again, unless `verify_every` says otherwise.
const VERIFY_EVERY: Duration = Duration::from_secs(24 * 3600);

/// The least time between two fetches of a JWK Set, unless `jwks_refetch` says otherwise.
const JWKS_REFETCH: Duration = Duration::from_secs(60);

/// `[tenants.<t>.sources.<name>]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    kind: Option<String>,
    secret: Option<SecretList>,
    issuer: Option<String>,
    audience: Option<String>,
    jwks: Option<String>,
    algorithms: Option<Vec<String>>,
    jwks_refetch: Option<Dur>,
    max_age: Option<Dur>,
    poll: Option<RawPoll>,
    transmitter: Option<String>,
    auth: Option<RawAuth>,
    delivery: Option<String>,
    verify_every: Option<Dur>,
    #[serde(default)]
    map: Vec<RawRoute>,
}

/// An `ssf` source's `auth` as written: OAuth client credentials, or a static `bearer`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    client_id: Option<String>,
    client_secret: Option<Resolved>,
    token_url: Option<String>,
    scope: Option<String>,
    bearer: Option<Resolved>,
}

/// An `ssf` source's `poll` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPoll {
    url: Option<String>,
    token: Option<Resolved>,
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

/// A tenant's `sources`, each read into a `Source`.
pub(super) fn read<'de, D: Deserializer<'de>>(d: D) -> Result<HashMap<String, Source>, D::Error> {
    let written = BTreeMap::<String, RawSource>::deserialize(d)?;
    written
        .into_iter()
        .map(|(name, raw)| {
            let source = source(&format!(".{name}"), name, raw).map_err(refused)?;
            Ok((source.name.clone(), source))
        })
        .collect()
}

/// Whether the signal types of `source`, written under `key`, each name one of its tenant's
/// `playbooks`.
pub(super) fn check_types(
    key: &str,
    source: &Source,
    playbooks: &Playbooks,
) -> Result<(), ConfigError> {
    let unknown = source.routes.iter().enumerate();
    let mut unknown = unknown.filter(|(_, r)| !playbooks.contains_key(&r.signal_type));
    match unknown.next() {
        Some((n, r)) => Err(invalid(
            format!("{key}.map[{n}].type"),
            format!("{:?} has no playbook in this tenant", r.signal_type),
        )),
        None => Ok(()),
    }
}

/// Source `name` of a tenant, written under `key` (the rest of its key beneath the table being
/// read).
fn source(key: &str, name: String, raw: RawSource) -> Result<Source, ConfigError> {
    if !is_name(&name) {
        return Err(invalid(key, "a source name is 1 to 64 of [A-Za-z0-9_-]"));
    }
    let kind_text = raw
        .kind
        .clone()
        .ok_or_else(|| invalid(format!("{key}.kind"), "is required"))?;
    let kind = SourceKind::parse(&kind_text).ok_or_else(|| {
        invalid(
            format!("{key}.kind"),
            format!(
                "{kind_text:?} is not one of okta, auth0, twilio, stripe, github, standard, ssf, cloudevents"
            ),
        )
    })?;
    let ssf = match kind {
        SourceKind::Ssf => Some(ssf(key, &raw)?),
        _ => {
            for (name, written) in [
                ("issuer", raw.issuer.is_some()),
                ("audience", raw.audience.is_some()),
                ("jwks", raw.jwks.is_some()),
                ("algorithms", raw.algorithms.is_some()),
                ("jwks_refetch", raw.jwks_refetch.is_some()),
                ("max_age", raw.max_age.is_some()),
                ("poll", raw.poll.is_some()),
                ("transmitter", raw.transmitter.is_some()),
                ("auth", raw.auth.is_some()),
                ("delivery", raw.delivery.is_some()),
                ("verify_every", raw.verify_every.is_some()),
            ] {
                if written {
                    return Err(invalid(
                        format!("{key}.{name}"),
                        "is for an ssf source only",
                    ));
                }
            }
            None
        }
    };
    // An SSF transmitter's SETs are signed: a push credential is optional.
    let secrets = match (raw.secret, kind) {
        (Some(SecretList(secrets)), _) => secrets,
        (None, SourceKind::Ssf) => Vec::new(),
        (None, _) => return Err(invalid(format!("{key}.secret"), "is required")),
    };
    if (kind != SourceKind::Ssf && secrets.is_empty()) || secrets.iter().any(|s| s.is_empty()) {
        return Err(invalid(
            format!("{key}.secret"),
            "must be a non-empty string or a list of them",
        ));
    }
    if secrets.iter().any(|s| s.chars().count() < MIN_SECRET) {
        return Err(invalid(
            format!("{key}.secret"),
            format!(
                "is shorter than {MIN_SECRET} characters: a sender's secret is a long random value"
            ),
        ));
    }
    let standard_secrets = match kind {
        SourceKind::Standard => secrets
            .iter()
            .map(|s| webhook_secret(s).map_err(|why| invalid(format!("{key}.secret"), why)))
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
        let subject = match (r.subject, kind) {
            (Some(subject), _) => subject,
            (None, SourceKind::Ssf) => SSF_SUBJECT.to_string(),
            (None, _) => return Err(invalid(format!("{rkey}.subject"), "is required")),
        };
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
        ssf,
    })
}

/// An `ssf` source's transmitter settings.
fn ssf(key: &str, raw: &RawSource) -> Result<Ssf, ConfigError> {
    let required = |name: &str, value: &Option<String>| {
        value
            .clone()
            .filter(|v| !v.is_empty())
            .ok_or_else(|| invalid(format!("{key}.{name}"), "is required for an ssf source"))
    };
    let transmitter = transmitter(key, raw)?;
    // A subscribed source's SETs are its transmitter's.
    let issuer = match (&transmitter, &raw.issuer) {
        (Some(t), None) => t.issuer.clone(),
        _ => required("issuer", &raw.issuer)?,
    };
    // A subscribed source's audience is its stream's `aud`, its keys its transmitter's
    // `jwks_uri`, unless written.
    let (audience, jwks) = match &transmitter {
        Some(t) => (
            raw.audience.clone().filter(|a| !a.is_empty()),
            match raw.jwks.as_deref().filter(|j| !j.is_empty()) {
                Some(written) => JwksAt::parse(written),
                None => JwksAt::Metadata(t.issuer.clone()),
            },
        ),
        None => (
            Some(required("audience", &raw.audience)?),
            JwksAt::parse(&required("jwks", &raw.jwks)?),
        ),
    };
    let algorithms = raw
        .algorithms
        .clone()
        .unwrap_or_else(|| vec!["RS256".to_string(), "ES256".to_string()]);
    if algorithms.is_empty() {
        return Err(invalid(
            format!("{key}.algorithms"),
            "an empty list; omit it for RS256 and ES256",
        ));
    }
    if let Some(refused) = algorithms.iter().find(|a| set::algorithm(a).is_none()) {
        return Err(invalid(
            format!("{key}.algorithms"),
            format!(
                "{refused:?} is not allowed: one of RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, EdDSA (none and HS* never)"
            ),
        ));
    }
    let jwks_refetch = raw.jwks_refetch.as_ref().map_or(JWKS_REFETCH, |d| d.0);
    if jwks_refetch < Duration::from_secs(1) {
        return Err(invalid(
            format!("{key}.jwks_refetch"),
            "must be at least 1s (an unknown kid must not make idem fetch at will)",
        ));
    }
    let max_age = raw.max_age.as_ref().map(|d| d.0);
    if max_age.is_some_and(|m| m < Duration::from_secs(1)) {
        return Err(invalid(
            format!("{key}.max_age"),
            "must be at least 1s (how old a SET's iat may be)",
        ));
    }
    let poll =
        match &raw.poll {
            None => None,
            Some(p) => {
                let url =
                    p.url.clone().filter(|u| is_http(u)).ok_or_else(|| {
                        invalid(format!("{key}.poll.url"), "must be an http(s) URL")
                    })?;
                let token = p.token.as_ref().map(|t| t.0.clone());
                let auth =
                    match (token, &transmitter) {
                        (Some(token), None) if !token.is_empty() => Auth::Bearer(token),
                        (Some(_), Some(_)) => return Err(invalid(
                            format!("{key}.poll.token"),
                            "the poll client calls with the source's auth: give one or the other",
                        )),
                        (None, Some(t)) => t.auth.clone(),
                        _ => return Err(invalid(format!("{key}.poll.token"), "is required")),
                    };
                let issuer = transmitter
                    .as_ref()
                    .map_or_else(|| issuer.clone(), |t| t.issuer.clone());
                Some(Poll { url, issuer, auth })
            }
        };
    Ok(Ssf {
        issuer,
        audience,
        jwks,
        algorithms,
        jwks_refetch,
        max_age,
        poll,
        transmitter,
    })
}

fn is_http(url: &str) -> bool {
    url.starts_with("https://") || url.starts_with("http://")
}

/// An `ssf` source's `transmitter`, `auth`, `delivery` and `verify_every`: the first three, or
/// none of them.
fn transmitter(key: &str, raw: &RawSource) -> Result<Option<Subscribe>, ConfigError> {
    if raw.transmitter.is_none() {
        for (name, written) in [
            ("delivery", raw.delivery.is_some()),
            ("verify_every", raw.verify_every.is_some()),
        ] {
            if written {
                return Err(invalid(
                    format!("{key}.{name}"),
                    "is for a source with a transmitter",
                ));
            }
        }
    }
    let (issuer, written) = match (&raw.transmitter, &raw.auth) {
        (None, None) => return Ok(None),
        (Some(issuer), Some(auth)) => (issuer, auth),
        (Some(_), None) => {
            return Err(invalid(
                format!("{key}.auth"),
                "is required with transmitter: { client_id, client_secret } or { bearer }",
            ))
        }
        (None, Some(_)) => {
            return Err(invalid(
                format!("{key}.transmitter"),
                "is required with auth: the transmitter's issuer",
            ))
        }
    };
    if well_known(issuer, "ssf-configuration").is_err() {
        return Err(invalid(
            format!("{key}.transmitter"),
            "must be the transmitter's issuer, an http(s) URL without query or fragment",
        ));
    }
    let nonempty = |value: &Option<Resolved>| {
        value
            .as_ref()
            .map(|v| v.0.clone())
            .filter(|v| !v.is_empty())
    };
    let auth = match (&written.bearer, &written.client_id) {
        (Some(_), None) => {
            if written.client_secret.is_some()
                || written.token_url.is_some()
                || written.scope.is_some()
            {
                return Err(invalid(
                    format!("{key}.auth"),
                    "a bearer goes alone, without client_secret, token_url or scope",
                ));
            }
            Auth::Bearer(
                nonempty(&written.bearer)
                    .ok_or_else(|| invalid(format!("{key}.auth.bearer"), "must not be empty"))?,
            )
        }
        (None, Some(client_id)) if !client_id.is_empty() => {
            let client_secret = nonempty(&written.client_secret).ok_or_else(|| {
                invalid(
                    format!("{key}.auth.client_secret"),
                    "is required with client_id",
                )
            })?;
            if let Some(url) = written.token_url.as_ref().filter(|u| !is_http(u)) {
                return Err(invalid(
                    format!("{key}.auth.token_url"),
                    format!("{url:?} is not an http(s) URL"),
                ));
            }
            Auth::Client {
                client_id: client_id.clone(),
                client_secret,
                token_url: written.token_url.clone(),
                scope: written.scope.clone().filter(|s| !s.is_empty()),
            }
        }
        _ => {
            return Err(invalid(
                format!("{key}.auth"),
                "is { client_id, client_secret } (OAuth client credentials) or { bearer }",
            ))
        }
    };
    let delivery = match raw.delivery.as_deref() {
        Some("push") => Delivery::Push,
        Some("poll") => Delivery::Poll,
        Some(other) => {
            return Err(invalid(
                format!("{key}.delivery"),
                format!("{other:?} is not push or poll"),
            ))
        }
        None => {
            return Err(invalid(
                format!("{key}.delivery"),
                "is required with transmitter: push or poll",
            ))
        }
    };
    let verify_every = raw.verify_every.as_ref().map_or(VERIFY_EVERY, |d| d.0);
    if verify_every < Duration::from_secs(1) {
        return Err(invalid(
            format!("{key}.verify_every"),
            "must be at least 1s",
        ));
    }
    Ok(Some(Subscribe {
        issuer: issuer.clone(),
        auth,
        delivery,
        verify_every,
    }))
}

/// Whether the `max_age` of `source`, written under `key`, lets no SET outlive its claim: a SET
/// may be `skew` ahead of this clock and is claimed for `claim_life`, so one sent again after
/// its claim has ended is refused only if `max_age` and `skew` together are within
/// `claim_life`.
pub(super) fn check_max_age(
    key: &str,
    source: &Source,
    claim_life: Duration,
    skew: Duration,
) -> Result<(), ConfigError> {
    let Some(ssf) = &source.ssf else {
        return Ok(());
    };
    if skew >= claim_life {
        return Err(invalid(
            "signatures.tolerance",
            format!(
                "is at least as long as a source event's claim is kept ({}s): an ssf source's SETs \
                 could be sent again once their claim has ended",
                claim_life.as_secs()
            ),
        ));
    }
    match ssf.max_age {
        Some(max_age) if max_age.checked_add(skew).is_none_or(|t| t > claim_life) => Err(invalid(
            format!("{key}.max_age"),
            format!(
                "with signatures.tolerance ({}s) is longer than a SET's claim is kept ({}s, the \
                 longer of idempotency.key_ttl and three days): a SET sent again after its claim \
                 ended would be decided again",
                skew.as_secs(),
                claim_life.as_secs()
            ),
        )),
        _ => Ok(()),
    }
}
