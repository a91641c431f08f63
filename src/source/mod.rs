//! Sources: identity providers' own webhooks and the identity field's own standards, taken as
//! they are sent. A tenant names each sender under `[tenants.<t>.sources.<name>]` with its `kind`
//! (okta, auth0, twilio, stripe, github, standard, ssf, cloudevents), the secret it authenticates
//! with and a `map` from the sender's event types to the tenant's signal types. A delivery is
//! authenticated by the sender's own scheme over its raw bytes (`verify`; a Security Event
//! Token's signature by `set` with keys from `jwks`), split into its events (`events`), and each
//! mapped event becomes one signal claimed under the sender's event id, so a retry is a replay;
//! its subject is read by `subject`. `runtime` keeps what a source holds while idem runs (its
//! keys, its status). This module holds a configured source
//! (read by `config::sources`) and picks the route of an event type.

pub mod events;
pub mod jwks;
pub mod runtime;
pub mod set;
pub mod subject;
pub mod subscription;
pub mod upstream;
pub mod verify;

use std::time::Duration;

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
    /// An OpenID Shared Signals transmitter: signed SETs, pushed (RFC 8935) or polled (RFC 8936).
    Ssf,
    /// CloudEvents 1.0 over HTTP (CAMARA's notifications): `Authorization: Bearer <secret>`.
    Cloudevents,
}

impl SourceKind {
    /// Every kind, in the order the docs list them.
    pub const ALL: [SourceKind; 8] = [
        SourceKind::Okta,
        SourceKind::Auth0,
        SourceKind::Twilio,
        SourceKind::Stripe,
        SourceKind::Github,
        SourceKind::Standard,
        SourceKind::Ssf,
        SourceKind::Cloudevents,
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
            SourceKind::Ssf => "ssf",
            SourceKind::Cloudevents => "cloudevents",
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
    /// What the provider authenticates with; any one of them is accepted (rotation). Empty for
    /// an `ssf` source that pushes with no `Authorization` (its SETs are signed).
    pub secrets: Vec<String>,
    /// For `standard`, the same secrets decoded.
    pub standard_secrets: Vec<Secret>,
    /// Event types to signals, in the file's order.
    pub routes: Vec<Route>,
    /// For `ssf`, its transmitter.
    pub ssf: Option<Ssf>,
}

/// An `ssf` source's transmitter: what its SETs are checked against, and where it is polled.
#[derive(Clone, PartialEq, Eq)]
pub struct Ssf {
    /// The SETs' `iss`.
    pub issuer: String,
    /// What must be among their `aud`; none (a subscribed source): its stream's `aud`.
    pub audience: Option<String>,
    /// Its JWK Set (a subscribed source's default: its transmitter's `jwks_uri`).
    pub jwks: jwks::JwksAt,
    /// The algorithms allowed (public-key ones only).
    pub algorithms: Vec<String>,
    /// The least time between two fetches of the JWK Set.
    pub jwks_refetch: Duration,
    /// How old a SET's `iat` may be, as written; unwritten, see [`Ssf::max_age`].
    pub max_age: Option<Duration>,
    /// Where idem polls it (RFC 8936), if it does.
    pub poll: Option<Poll>,
    /// The transmitter idem subscribes itself at, if it manages its stream there.
    pub transmitter: Option<Subscribe>,
}

/// How idem subscribes an `ssf` source at its transmitter.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Subscribe {
    /// The transmitter's issuer.
    pub issuer: String,
    /// How idem authenticates there.
    pub auth: upstream::Auth,
    /// How the stream delivers.
    pub delivery: Delivery,
    /// How often the stream is verified again.
    pub verify_every: Duration,
}

/// How a stream idem makes delivers its SETs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Delivery {
    /// Pushed to idem (RFC 8935), with an `authorization_header` idem makes.
    Push,
    /// Polled by idem (RFC 8936).
    Poll,
}

/// An SSF poll endpoint. Its `Debug` leaves the token out.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Poll {
    /// The endpoint.
    pub url: String,
    /// The transmitter's issuer, whose OAuth metadata names the token endpoint.
    pub issuer: String,
    /// How idem authenticates to it: `poll.token`, or the source's `auth`.
    pub auth: upstream::Auth,
}

impl Ssf {
    /// How old a SET's `iat` may be: as written, else as long as a SET's claim is kept
    /// (`claim_life`) less the clock skew allowed ahead (`skew`), so that a SET sent again after
    /// its claim has ended is refused rather than decided again.
    pub fn max_age(&self, claim_life: Duration, skew: Duration) -> Duration {
        self.max_age
            .unwrap_or_else(|| claim_life.saturating_sub(skew))
    }
}

impl std::fmt::Debug for Ssf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ssf")
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .field("jwks", &self.jwks)
            .field("algorithms", &self.algorithms)
            .field("max_age", &self.max_age)
            .field("poll", &self.poll.as_ref().map(|p| &p.url))
            .field("transmitter", &self.transmitter)
            .finish()
    }
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Source")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("secrets", &"..")
            .field("routes", &self.routes)
            .field("ssf", &self.ssf)
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
            ssf: None,
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
