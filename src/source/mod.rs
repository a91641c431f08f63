//! Sources: identity providers' own webhooks, taken as they send them. A tenant names each
//! sender under `[tenants.<t>.sources.<name>]` with its `kind` (okta, auth0, twilio, stripe,
//! github, standard), the secret it authenticates with and a `map` from the provider's event
//! types to the tenant's signal types. A delivery is authenticated by the provider's own scheme
//! over its raw bytes (`verify`), split into its events (`events`), and each mapped event becomes
//! one signal claimed under the provider's event id, so a provider's retry is a replay. This
//! module holds a configured source (read by `config::sources`) and picks the route of an
//! event type.

pub mod events;
pub mod verify;

use idem_schemas::signature::Secret;

/// The largest delivery a source accepts (a batch of events).
pub const MAX_SOURCE_BODY: usize = 1024 * 1024;

/// The longest event id claimed; a longer one is refused.
pub const MAX_EVENT_ID: usize = 256;

/// The longest event type kept in a source signal's metadata; a longer one is refused.
pub const MAX_EVENT_TYPE: usize = 256;

/// What sends to a source, and so how it authenticates and where its events are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    /// Okta event hooks: the configured `Authorization` value; a batch in `data.events`.
    Okta,
    /// Auth0 log streams (custom webhook): `Authorization: Bearer <secret>`; a JSON array.
    Auth0,
    /// Twilio Event Streams webhook sinks: `X-Twilio-Signature`; an array of CloudEvents.
    Twilio,
    /// Stripe: `Stripe-Signature`; one event.
    Stripe,
    /// GitHub: `X-Hub-Signature-256`; one event, its id and type in headers.
    Github,
    /// Any Standard Webhooks sender: `webhook-id`, `webhook-timestamp`, `webhook-signature`.
    Standard,
}

impl SourceKind {
    /// Every kind, in the order the docs list them.
    pub const ALL: [SourceKind; 6] = [
        SourceKind::Okta,
        SourceKind::Auth0,
        SourceKind::Twilio,
        SourceKind::Stripe,
        SourceKind::Github,
        SourceKind::Standard,
    ];

    /// The name used in the config and the metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Okta => "okta",
            SourceKind::Auth0 => "auth0",
            SourceKind::Twilio => "twilio",
            SourceKind::Stripe => "stripe",
            SourceKind::Github => "github",
            SourceKind::Standard => "standard",
        }
    }

    /// The kind named `name` in the config.
    pub fn parse(name: &str) -> Option<SourceKind> {
        SourceKind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

/// A configured source. Its `Debug` leaves the secrets out.
#[derive(Clone)]
pub struct Source {
    /// Its name (the key under `sources`).
    pub name: String,
    /// What sends to it.
    pub kind: SourceKind,
    /// What the provider authenticates with; any one of them is accepted (rotation).
    pub secrets: Vec<String>,
    /// For `standard`, the same secrets decoded.
    pub standard_secrets: Vec<Secret>,
    /// Event types to signals, in the file's order.
    pub routes: Vec<Route>,
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Source")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("secrets", &"..")
            .field("routes", &self.routes)
            .finish()
    }
}

/// One `map` entry: which events become which signal, and where their subject is.
#[derive(Debug, Clone)]
pub struct Route {
    /// The provider's event type, or a prefix of it (written with a trailing `*`).
    pub event: Pattern,
    /// The tenant's signal type (a playbook of the tenant).
    pub signal_type: String,
    /// A JSON pointer (RFC 6901) into the event, to the subject.
    pub subject: String,
}

/// An event type pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// This type only.
    Exact(String),
    /// Every type that starts with this (`*` alone: every type).
    Prefix(String),
}

impl Source {
    /// The route of `event_type`: the entry naming it exactly, else the longest prefix that
    /// matches, else none (the event is ignored).
    pub fn route(&self, event_type: &str) -> Option<&Route> {
        let exact = self
            .routes
            .iter()
            .find(|r| matches!(&r.event, Pattern::Exact(e) if e == event_type));
        exact.or_else(|| {
            self.routes
                .iter()
                .filter_map(|r| match &r.event {
                    Pattern::Prefix(p) if event_type.starts_with(p.as_str()) => Some((p.len(), r)),
                    _ => None,
                })
                .max_by_key(|(len, _)| *len)
                .map(|(_, r)| r)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(events: &[&str]) -> Source {
        Source {
            name: "s".into(),
            kind: SourceKind::Okta,
            secrets: vec!["x".into()],
            standard_secrets: Vec::new(),
            routes: events
                .iter()
                .map(|e| Route {
                    event: match e.strip_suffix('*') {
                        Some(p) => Pattern::Prefix(p.into()),
                        None => Pattern::Exact((*e).into()),
                    },
                    signal_type: (*e).into(),
                    subject: "/s".into(),
                })
                .collect(),
        }
    }

    #[test]
    fn an_exact_entry_wins_then_the_longest_prefix() {
        let s = source(&["*", "user.*", "user.mfa.*", "user.mfa.factor.deactivate"]);
        let route = |t: &str| s.route(t).map(|r| r.signal_type.as_str());
        assert_eq!(
            route("user.mfa.factor.deactivate"),
            Some("user.mfa.factor.deactivate")
        );
        assert_eq!(route("user.mfa.factor.activate"), Some("user.mfa.*"));
        assert_eq!(route("user.session.start"), Some("user.*"));
        assert_eq!(route("group.user_membership.add"), Some("*"));
        let narrow = source(&["user.*"]);
        assert!(narrow.route("group.x").is_none());
        assert!(narrow.route("user").is_none());
    }
}
