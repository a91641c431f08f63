//! The signal path: one entry for a signal routed to its tenant, whether it was posted
//! (`POST /v1/signals`) or came as a source's event. It finds the playbook of the signal's type,
//! picks the claim its decision is made under (none for a keyless signal, decided every time; the
//! subject's for a keyless one of a playbook decided once per subject; otherwise the key's, an
//! idempotency key or a source's event id, which goes through the subject's claim when the
//! playbook says so), names that claim by keyed digests, hands it a submission whose decision the
//! playbook makes only if it wins, and says what came of it. The HTTP front maps the outcome to
//! its answer; it decides nothing about claims.

use std::sync::Arc;
use std::time::Duration;

use idem_schemas::timefmt::now_ms;
use idem_schemas::{Decision, SignalRequest, StoredResponse, SubjectLink, TraceContext, Verdict};
use serde_json::Value;
use tracing::Instrument;

use crate::claim::{ClaimError, DecideError, Reply, Request, Submission, ANY_PAYLOAD};
use crate::digest::Digester;
use crate::engine::{Engine, EngineError};
use crate::playbook::{self, Playbook, Playbooks};
use crate::set::{SetContext, Transmitter};
use crate::settings::Settings;
use crate::store::{ClaimId, StoreError};
use crate::supervise::RegistryError;
use crate::trace;

/// The least a source event's claim lasts (`idempotency.key_ttl` when longer): Stripe retries an
/// event for up to three days, and a retry after its claim expired would be a new decision.
pub const EVENT_CLAIM_MIN: Duration = Duration::from_secs(3 * 24 * 3600);

/// How long an event waits for a delivery of it that is being claimed right now (a provider
/// sending the same event twice at once) before it is answered as still in flight.
const CONCURRENT_WAIT: Duration = Duration::from_secs(2);

/// A signal routed to its tenant: what the front knows of it once it is authenticated.
pub struct Routed<'a> {
    /// The tenant's name.
    pub tenant: &'a str,
    /// The tenant's playbooks, as configured when the signal arrived.
    pub playbooks: &'a Playbooks,
    /// The signal: its type, subject and metadata.
    pub signal: SignalRequest,
    /// How it came, and so what it is claimed by.
    pub by: By<'a>,
    /// The tenant's Shared Signals transmitter, if it has one: where its `set` actions go.
    pub transmitter: Option<Transmitter>,
}

/// How a signal came.
#[derive(Debug, Clone, Copy)]
pub enum By<'a> {
    /// Posted to `POST /v1/signals`: claimed under its key (the `Idempotency-Key`, or a signed
    /// request's `webhook-id`) if it has one, with the fingerprint of its `body` (as parsed),
    /// which a retry must match. It may wait up to `wait` for an in-flight first request.
    Request {
        /// The idempotency key.
        key: Option<&'a str>,
        /// The body.
        body: &'a Value,
        /// How long it may wait (`Prefer: wait`, as applied).
        wait: Option<Duration>,
    },
    /// A source's event: claimed under its id at the source, for at least [`EVENT_CLAIM_MIN`],
    /// any delivery of it the same payload (providers re-serialise their retries), its
    /// callbacks queued (providers time out in seconds).
    Event {
        /// The source's name.
        source: &'a str,
        /// The provider's event id.
        id: &'a str,
    },
}

/// What came of a signal.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// This signal made a new decision (a keyless one, every time): its response, durable.
    Decided {
        /// The response.
        response: StoredResponse,
        /// The playbook's verdict.
        verdict: Verdict,
        /// It was decided under no claim at all.
        keyless: bool,
    },
    /// The signal's claim is new, but its subject had a decision within the playbook's window:
    /// that decision's response, now this signal's too.
    Deduplicated {
        /// The response.
        response: StoredResponse,
        /// It waited for that decision's first request (`Prefer: wait`).
        waited: bool,
    },
    /// The signal's key was decided before: the stored response.
    Replayed {
        /// The response.
        response: StoredResponse,
        /// It waited for the key's first request (`Prefer: wait`).
        waited: bool,
    },
    /// Another request holds the key right now.
    InFlight,
    /// The key was used with another payload.
    Mismatch,
}

/// Why a signal got no answer.
#[derive(Debug, thiserror::Error)]
pub enum SignalError {
    /// The tenant has no playbook for the signal's type.
    #[error("no playbook for signal type {0:?}")]
    NoPlaybook(String),
    /// The decision could not be made.
    #[error(transparent)]
    Decide(#[from] DecideError),
    /// The playbook sends SETs, and the tenant's streams could not be read (retry).
    #[error("the streams cannot be read: {0}")]
    Streams(#[source] StoreError),
    /// A keyless signal's deliveries could not be stored.
    #[error(transparent)]
    Keyless(#[from] EngineError),
    /// The claim could not be stored (retry with the same key).
    #[error(transparent)]
    Claim(Arc<ClaimError>),
    /// The claim's actor could not be reached.
    #[error(transparent)]
    Actors(#[from] RegistryError),
}

/// Everything a signal's decision needs, owned, so that a keyed signal can hand it to its
/// claim, which makes the decision only if the signal wins it.
struct Decider {
    playbook: Arc<Playbook>,
    digester: Digester,
    tenant: String,
    source: Option<String>,
    signal: SignalRequest,
    /// Where the playbook's `set` actions go, if it has any.
    sets: Option<SetContext>,
    /// The claim's span, the decision's trace (when tracing is on).
    trace: Option<TraceContext>,
}

impl Decider {
    /// The decision, made at `now_ms`, in a span of its own under the claim's (it runs in the
    /// claim's actor).
    fn decide(self, now_ms: u64) -> Result<Decision, DecideError> {
        let span = crate::trace_span!(
            "playbook",
            idem.signal_type = %self.signal.signal_type,
            idem.verdict = self.playbook.decision.as_str(),
            idem.decision_id = tracing::field::Empty,
            idem.deliveries = tracing::field::Empty,
        );
        trace::parent(&span, self.trace);
        let _in = span.enter();
        let signal = playbook::Signal {
            tenant: &self.tenant,
            signal_type: &self.signal.signal_type,
            source: self.source.as_deref(),
            subject: &self.signal.subject,
            digester: &self.digester,
            metadata: self.signal.metadata.unwrap_or_default(),
            trace: self.trace,
        };
        let decision = playbook::decide(&self.playbook, signal, self.sets.as_ref(), now_ms)
            .map_err(|e| DecideError(Box::new(e)))?;
        span.record("idem.decision_id", decision.id.as_str());
        span.record("idem.deliveries", decision.deliveries.len());
        Ok(decision)
    }
}

/// The claim a signal is decided under, and what that claim reads of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    /// The claim.
    pub id: ClaimId,
    /// What the claim reads of the signal.
    pub request: Request,
    /// The claim is the subject's: a decision it made before is the subject's.
    pub of_subject: bool,
}

/// The claim `tenant`'s `signal`, of `playbook`, that came `by` is decided under: none for a
/// keyless signal (decided every time), the subject's for a keyless one of a playbook decided
/// once per subject, the key's otherwise (through the subject's claim when the playbook says so).
pub fn claimed(
    digester: &Digester,
    settings: &Settings,
    tenant: &str,
    signal: &SignalRequest,
    playbook: &Playbook,
    by: &By<'_>,
) -> Option<Claimed> {
    let subject = playbook.once_per_subject.map(|window| SubjectLink {
        digest: digester.subject_claim(tenant, &signal.signal_type, &signal.subject),
        window_ms: window.as_millis() as u64,
    });
    let claim = |digest, request, of_subject| {
        let id = ClaimId {
            tenant: tenant.to_string(),
            digest,
        };
        Some(Claimed {
            id,
            request,
            of_subject,
        })
    };
    match (*by, subject) {
        (By::Request { key: None, .. }, None) => None,
        // Keyless, once per subject: the subject's claim is the signal's key.
        (
            By::Request {
                key: None, wait, ..
            },
            Some(link),
        ) => {
            let request = Request {
                lasts: Some(Duration::from_millis(link.window_ms)),
                wait,
                ..Request::new(ANY_PAYLOAD)
            };
            claim(link.digest, request, true)
        }
        (
            By::Request {
                key: Some(key),
                body,
                wait,
            },
            subject,
        ) => {
            let request = Request {
                wait,
                subject,
                ..Request::new(digester.fingerprint(tenant, body))
            };
            claim(digester.key(tenant, key), request, false)
        }
        (By::Event { source, id }, subject) => {
            let request = Request {
                lasts: Some(settings.idempotency.key_ttl.max(EVENT_CLAIM_MIN)),
                wait: Some(CONCURRENT_WAIT),
                subject,
                queued: true,
                ..Request::new(ANY_PAYLOAD)
            };
            claim(digester.source_event(tenant, source, id), request, false)
        }
    }
}

impl Engine {
    /// Decides `routed` exactly once per claim, and says what came of it, in a span of the
    /// claim (a child of the caller's) that names the outcome and whose context the decision
    /// keeps; a replay's links to the trace its decision was made in.
    pub async fn signal(&self, routed: Routed<'_>) -> Result<Outcome, SignalError> {
        let span = crate::trace_span!(
            "claim",
            idem.tenant = routed.tenant,
            idem.outcome = tracing::field::Empty,
        );
        let trace = trace::context_of(&span);
        let outcome = self
            .claim_and_decide(routed, trace)
            .instrument(span.clone())
            .await;
        if !span.is_disabled() {
            let (name, decided_in) = match &outcome {
                Ok(Outcome::Decided { keyless: true, .. }) => ("keyless", None),
                Ok(Outcome::Decided { .. }) => ("new", None),
                Ok(Outcome::Replayed { response, waited }) => {
                    (if *waited { "wait" } else { "replay" }, response.trace)
                }
                Ok(Outcome::Deduplicated { response, .. }) => ("deduplicated", response.trace),
                Ok(Outcome::InFlight) => ("conflict", None),
                Ok(Outcome::Mismatch) => ("mismatch", None),
                Err(_) => ("failed", None),
            };
            span.record("idem.outcome", name);
            trace::link(&span, decided_in);
        }
        outcome
    }

    async fn claim_and_decide(
        &self,
        routed: Routed<'_>,
        trace: Option<TraceContext>,
    ) -> Result<Outcome, SignalError> {
        let Routed {
            tenant,
            playbooks,
            signal,
            by,
            transmitter,
        } = routed;
        let playbook = playbooks
            .get(&signal.signal_type)
            .ok_or_else(|| SignalError::NoPlaybook(signal.signal_type.clone()))?
            .clone();
        let verdict = playbook.decision;
        let claim = claimed(
            self.digester(),
            self.settings(),
            tenant,
            &signal,
            &playbook,
            &by,
        );
        let source = match by {
            By::Event { source, .. } => Some(source.to_string()),
            By::Request { .. } => None,
        };
        // The streams as they are now: a stream made after this signal gets nothing of it.
        let sets = match transmitter {
            Some(transmitter) if playbook.sends_sets() => Some(SetContext {
                transmitter,
                streams: self.streams(tenant).await.map_err(SignalError::Streams)?,
                sealer: self.sealer().clone(),
            }),
            _ => None,
        };
        let decider = Decider {
            playbook,
            digester: self.digester().clone(),
            tenant: tenant.to_string(),
            source,
            signal,
            sets,
            trace,
        };
        let Some(Claimed {
            id,
            request,
            of_subject,
        }) = claim
        else {
            let decision = decider.decide(now_ms())?;
            let response = self.keyless(&decision).await?;
            return Ok(Outcome::Decided {
                response,
                verdict,
                keyless: true,
            });
        };
        let submission = Submission::of(request, Box::new(move |at| decider.decide(at)));
        let outcome = match self.submit(&id, submission).await? {
            Reply::First(response) => Outcome::Decided {
                response,
                verdict,
                keyless: false,
            },
            // At a subject's claim, a decision made before is the subject's.
            Reply::Replayed(response) if of_subject => Outcome::Deduplicated {
                response,
                waited: false,
            },
            Reply::Awaited(response) if of_subject => Outcome::Deduplicated {
                response,
                waited: true,
            },
            Reply::Replayed(response) => Outcome::Replayed {
                response,
                waited: false,
            },
            Reply::Awaited(response) => Outcome::Replayed {
                response,
                waited: true,
            },
            Reply::Deduplicated(response) => Outcome::Deduplicated {
                response,
                waited: false,
            },
            Reply::InFlight => Outcome::InFlight,
            Reply::Mismatch => Outcome::Mismatch,
            Reply::Failed(e) => return Err(SignalError::Claim(e)),
        };
        Ok(outcome)
    }
}
