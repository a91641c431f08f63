//! The signals handle: the one way in for a signal routed to its tenant, whether it was posted
//! (`POST /v1/signals`) or came as a source's event, and for a bulk redelivery's claim
//! (`bulk`). It looks the signal's playbook up, picks the claim its decision is made under
//! (`claimed`: none for a keyless signal, decided every time; the subject's for a keyless one of
//! a playbook decided once per subject; otherwise the key's, an idempotency key or a source's
//! event id), hands that claim a submission whose decision the playbook makes only if it wins,
//! and says what came of it as an [`Outcome`]. The HTTP front maps the outcome to its answer;
//! it decides nothing about claims.

pub mod bulk;
pub mod claimed;

use std::sync::Arc;
use std::time::Duration;

use idem_schemas::{SignalRequest, TraceContext};
use serde_json::Value;
use tracing::Instrument;

use crate::claim::{
    read_and_decide, Answer, ClaimContext, ClaimError, Claims, Decide, Reply, Submission,
};
use crate::delivery::DeliveryActors;
use crate::metrics::Metric;
use crate::outcome::Outcome;
use crate::playbook::{DecideError, Decider, Playbooks};
use crate::record::{self, Decided};
use crate::rules::SourceOf;
use crate::set::SetIssuer;
use crate::store::StoreError;
use crate::supervise::RegistryError;
use crate::trace;
pub use claimed::{claimed, Claimed, EVENT_CLAIM_MIN};

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
    /// The tenant's Shared Signals transmitter, if it is one: where `set` actions go.
    pub transmitter: Option<Arc<SetIssuer>>,
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
        /// The source's kind.
        kind: &'a str,
        /// The provider's event type.
        event_type: &'a str,
        /// The provider's event id.
        id: &'a str,
    },
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
    Streams(String),
    /// The playbook's rules count the subject's history, and it could not be read (retry).
    #[error("the subject's history cannot be read: {0}")]
    History(String),
    /// A keyless signal's deliveries could not be stored.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// What the decision writes could not be serialised.
    #[error("cannot serialise the response: {0}")]
    Response(#[from] serde_json::Error),
    /// The claim could not be stored (retry with the same key).
    #[error(transparent)]
    Claim(Arc<ClaimError>),
    /// The claim's actor could not be reached.
    #[error(transparent)]
    Actors(#[from] RegistryError),
}

impl SignalError {
    /// Its name, as spans, metrics and the front say it: the slug of the problem document it
    /// is answered with.
    pub fn label(&self) -> &'static str {
        match self {
            SignalError::NoPlaybook(_) => "unknown-signal-type",
            SignalError::Streams(_)
            | SignalError::History(_)
            | SignalError::Actors(RegistryError::Unavailable | RegistryError::Overloaded) => {
                "unavailable"
            }
            SignalError::Decide(_)
            | SignalError::Store(_)
            | SignalError::Response(_)
            | SignalError::Claim(_)
            | SignalError::Actors(_) => "internal",
        }
    }
}

/// The signals handle: cheap to clone, shared by every request.
#[derive(Clone)]
pub struct Signals {
    claims: Arc<Claims>,
    deliveries: Arc<DeliveryActors>,
    epoch: u64,
}

impl Signals {
    pub(crate) fn new(claims: Arc<Claims>, deliveries: Arc<DeliveryActors>, epoch: u64) -> Self {
        Signals {
            claims,
            deliveries,
            epoch,
        }
    }

    fn ctx(&self) -> &ClaimContext {
        self.claims.context()
    }

    /// The keyed digest (hex) of `tenant`'s source event `event_id` at `source`: what a trace
    /// names the event by.
    pub fn event_digest(&self, tenant: &str, source: &str, event_id: &str) -> String {
        let digest = self.ctx().digester.source_event(tenant, source, event_id);
        idem_schemas::lower_hex(&digest)
    }

    /// Decides `routed` exactly once per claim, and says what came of it, in a span of the
    /// claim (a child of the caller's) that names the outcome and whose context the decision
    /// keeps; a replay's links to the trace its decision was made in.
    pub async fn decide(&self, routed: Routed<'_>) -> Result<Outcome, SignalError> {
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
            let (label, decided_in) = match &outcome {
                Ok(
                    o @ (Outcome::Replayed { response, .. }
                    | Outcome::Deduplicated { response, .. }),
                ) => (o.label(), response.trace),
                Ok(o) => (o.label(), None),
                Err(e) => (e.label(), None),
            };
            span.record("idem.outcome", label);
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
        let ctx = self.ctx();
        let playbook = playbooks
            .get(&signal.signal_type)
            .ok_or_else(|| SignalError::NoPlaybook(signal.signal_type.clone()))?
            .clone();
        let verdict = playbook.decision;
        let claim = claimed(
            &ctx.digester,
            &ctx.core.settings,
            tenant,
            &signal,
            &playbook,
            &by,
        );
        let source = match by {
            By::Event {
                source,
                kind,
                event_type,
                ..
            } => Some(SourceOf {
                name: source.to_string(),
                kind: kind.to_string(),
                event_type: event_type.to_string(),
            }),
            By::Request { .. } => None,
        };
        let decider = Decider {
            playbook,
            tenant: tenant.to_string(),
            source,
            signal,
            transmitter,
            trace,
        };
        let Some(Claimed {
            id,
            request,
            of_subject,
        }) = claim
        else {
            let response = self.keyless(decider).await?;
            return Ok(Outcome::Decided {
                response,
                verdict,
                keyless: true,
            });
        };
        let submission = Submission::of(request, Decide::Playbook(Box::new(decider)));
        let deduplicated =
            |Answer { response, .. }, waited| Outcome::Deduplicated { response, waited };
        let outcome = match self.claims.submit(&id, submission).await? {
            Reply::First(answer) => Outcome::Decided {
                response: answer.response,
                verdict,
                keyless: false,
            },
            // At a subject's claim, a decision made before is the subject's.
            Reply::Replayed(answer) if of_subject => deduplicated(answer, false),
            Reply::Awaited(answer) if of_subject => deduplicated(answer, true),
            Reply::Deduplicated(answer) => deduplicated(answer, false),
            Reply::Replayed(answer) => Outcome::Replayed {
                response: answer.response,
                waited: false,
            },
            Reply::Awaited(answer) => Outcome::Replayed {
                response: answer.response,
                waited: true,
            },
            Reply::InFlight => Outcome::InFlight,
            Reply::Mismatch => Outcome::Mismatch,
            Reply::Failed(e) => return Err(failed(e)),
        };
        Ok(outcome)
    }

    /// A keyless signal's decision: made every time (at-least-once), its callbacks attempted
    /// through the same code as a keyed one's, its deliveries durable before the response that
    /// names them.
    async fn keyless(&self, decider: Decider) -> Result<idem_schemas::StoredResponse, SignalError> {
        let ctx = self.ctx();
        let decision = read_and_decide(ctx, decider).await.map_err(|e| match e {
            DecideError::Streams(why) => SignalError::Streams(why),
            DecideError::History(why) => SignalError::History(why),
            other => SignalError::Decide(other),
        })?;
        let outcomes = ctx.attempts.inline(&decision).await;
        let response = record::response(&decision, &outcomes)?;
        let decided = Decided::Keyless {
            decision: &decision,
            outcomes: &outcomes,
        };
        let writes = record::writes(decided, &ctx.core.settings)?;
        writes.counts.into_iter().for_each(Metric::count);
        ctx.store.commit(writes.unit).await?;
        Ok(response)
    }
}

/// A claim's failure as the signal's: a decision that could not read the tenant's streams is
/// one to retry.
fn failed(e: Arc<ClaimError>) -> SignalError {
    match &*e {
        ClaimError::Decide(DecideError::Streams(why)) => SignalError::Streams(why.clone()),
        ClaimError::Decide(DecideError::History(why)) => SignalError::History(why.clone()),
        _ => SignalError::Claim(e),
    }
}
