//! The series `/metrics` shows from the start, at zero: every label value known before anything
//! happens (how a signal can end, the verdicts, claim transitions, delivery attempts, breaker
//! moves, fenced writes, actor families, each configured source kind's outcomes, and the
//! refusals at the senders' surfaces), so that a
//! rate, a dashboard's panel or an alert reads 0 rather than nothing until a first event, as
//! Prometheus advises. [`export`] runs when the service starts and after each reload (a source
//! of a kind not configured before). Metrics carry no tenant or source name (a tenant's own
//! figures are `GET /v1/stats`, a source's `GET /v1/sources/{tenant}/{source}/status`), but for
//! rule failures, which name the rule the configuration names (tenant, playbook, rule).

use std::sync::LazyLock;

use idem_actors::metrics as actors;
use idem_schemas::Verdict;

use crate::config::Config;
use crate::http::metrics::{DECISIONS, REQUEST_SECONDS, SIGNALS, SOURCE_DELIVERIES, SOURCE_EVENTS};
use crate::http::problem::Kind;
use crate::http::refusals::{self, REFUSALS};
use crate::source::runtime::Fate;
use crate::source::set::Err as SetErr;
use crate::source::SourceKind;
use idem_actors::Outcome;

/// The refusals `POST /v1/signals` answers, by their problem's slug.
const REFUSED: [Kind; 18] = [
    Kind::InvalidIdempotencyKey,
    Kind::RepeatedHeader,
    Kind::UnsupportedMediaType,
    Kind::PayloadTooLarge,
    Kind::RequestTimeout,
    Kind::MalformedJson,
    Kind::InvalidSignal,
    Kind::Unauthorized,
    Kind::SignatureRequired,
    Kind::InvalidSignature,
    Kind::StaleTimestamp,
    Kind::WebhookIdMismatch,
    Kind::UnknownSignalType,
    Kind::KeyInFlight,
    Kind::KeyReused,
    Kind::RateLimited,
    Kind::Unavailable,
    Kind::Internal,
];

const VERDICTS: [Verdict; 4] = [
    Verdict::Allow,
    Verdict::Deny,
    Verdict::StepUp,
    Verdict::Review,
];

/// How a pushed SET is refused (RFC 8935's `err`).
const SET_REFUSALS: [SetErr; 6] = [
    SetErr::InvalidRequest,
    SetErr::InvalidKey,
    SetErr::InvalidIssuer,
    SetErr::InvalidAudience,
    SetErr::AuthenticationFailed,
    SetErr::AccessDenied,
];

/// How another source's delivery is refused once it is routed to its source.
const DELIVERY_REFUSALS: [Kind; 2] = [Kind::SourceUnauthenticated, Kind::InvalidEvents];

/// Every way a request to the senders' surfaces is refused, as `idem_refusals_total` names it
/// (besides `unknown-source`, and for `ssf` RFC 8935's codes).
const SURFACE_REFUSALS: [Kind; 8] = [
    Kind::SourceUnauthenticated,
    Kind::StaleTimestamp,
    Kind::RepeatedHeader,
    Kind::PayloadTooLarge,
    Kind::RequestTimeout,
    Kind::MalformedJson,
    Kind::InvalidEvents,
    Kind::RateLimited,
];

const CLAIM_TRANSITIONS: [&str; 4] = ["claimed", "dispatched", "completed", "taken_over"];
const ATTEMPT_OUTCOMES: [&str; 4] = ["retry", "delivered", "failed", "dead"];
const BREAKER_STATES: [&str; 3] = ["open", "half_open", "closed"];
const FENCED: [&str; 2] = ["claim", "delivery"];
const ACTOR_FAMILIES: [&str; 2] = ["claim", "delivery"];

/// The routes senders post to, whose latency is shown before the first request.
const ROUTES: [&str; 2] = ["/v1/signals", "/v1/sources/{tenant}/{source}"];

/// Makes every series whose labels `config` tells exist, at zero where nothing was counted yet.
pub fn export(config: &Config) {
    for outcome in Outcome::LABELS {
        SIGNALS.with_label_values(&[outcome]);
    }
    for kind in REFUSED {
        SIGNALS.with_label_values(&[kind.describe().1]);
    }
    for verdict in VERDICTS {
        DECISIONS.with_label_values(&[verdict.as_str()]);
    }
    for route in ROUTES {
        REQUEST_SECONDS.with_label_values(&[route, "POST"]);
    }
    let kinds = config
        .tenants
        .values()
        .flat_map(|tenant| tenant.sources.values().map(|source| source.kind));
    for kind in kinds {
        source_kind(kind);
    }
    for state in CLAIM_TRANSITIONS {
        actors::CLAIM_TRANSITIONS.with_label_values(&[state]);
    }
    for n in 1..=5 {
        for outcome in ATTEMPT_OUTCOMES {
            actors::DELIVERY_ATTEMPTS.with_label_values(&[actors::attempt_label(n), outcome]);
        }
    }
    for state in BREAKER_STATES {
        actors::ENDPOINT_TRANSITIONS.with_label_values(&[state]);
    }
    for what in FENCED {
        actors::FENCED_WRITES.with_label_values(&[what]);
    }
    for family in ACTOR_FAMILIES {
        actors::ACTOR_FAILURES.with_label_values(&[family]);
    }
    for (name, tenant) in &config.tenants {
        for (signal_type, playbook) in &tenant.playbooks {
            for rule in &playbook.rules {
                actors::RULE_ERRORS.with_label_values(&[name, signal_type, &rule.name]);
            }
        }
    }
    LazyLock::force(&actors::FLUSH_SECONDS);
    for surface in [refusals::SOURCES, refusals::SSF] {
        REFUSALS.with_label_values(&[surface, refusals::UNKNOWN_SOURCE]);
        for kind in SURFACE_REFUSALS {
            REFUSALS.with_label_values(&[surface, kind.describe().1]);
        }
    }
    for err in SET_REFUSALS {
        REFUSALS.with_label_values(&[refusals::SSF, err.as_str()]);
    }
    crate::telemetry::export_metrics();
}

/// The series of one kind of source: its events' outcomes, and its deliveries' (`ok`, or how
/// one is refused).
fn source_kind(kind: SourceKind) {
    let kind_label = kind.as_str();
    // Besides `failed`: not durable, answered 5xx.
    for outcome in Fate::LABELS.into_iter().chain(["failed"]) {
        SOURCE_EVENTS.with_label_values(&[kind_label, outcome]);
    }
    SOURCE_DELIVERIES.with_label_values(&[kind_label, "ok"]);
    if kind == SourceKind::Ssf {
        for err in SET_REFUSALS {
            SOURCE_DELIVERIES.with_label_values(&[kind_label, err.as_str()]);
        }
    } else {
        for refusal in DELIVERY_REFUSALS {
            SOURCE_DELIVERIES.with_label_values(&[kind_label, refusal.describe().1]);
        }
    }
}
