//! What the claim core asks to be done, in the order it is to be done: the effects its inputs
//! come to, which the claim actor (or the model checker) carries out, feeding each result back
//! to the core as an input of its own.

use std::sync::Arc;
use std::time::Duration;

use idem_schemas::Decision;

use super::{ClaimError, Reply, Request};
use crate::metrics::Metric;
use crate::store::{ClaimId, LogHead, Unit};

/// What a key's claim offers its subject's claim: its fixed decision, to be taken as the
/// subject's own if no decision holds the subject (which then runs its actions), or answered
/// with the decision that does.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Offer {
    /// The subject's claim.
    pub to: ClaimId,
    /// The request the subject's claim gets.
    pub request: Request,
    /// The decision, fixed in the key's claim.
    pub decision: Decision,
}

/// What the protocol asks to be done, in order.
#[derive(Debug)]
pub enum Effect<P> {
    /// Make the decision of the request that won the claim, as generation `generation`, and
    /// hand it back ([`Core::decided`]).
    Decide {
        /// The generation the claim will be.
        generation: u64,
    },
    /// Commit `unit` and say what it came to ([`Core::committed`], with `generation`).
    Commit {
        /// The generation the unit is written for.
        generation: u64,
        /// The unit.
        unit: Unit,
    },
    /// Mark the generation at the head completed (written now, durable with a later commit:
    /// losing it leaves the recovery point, which answers the same bytes); a failure is told
    /// back ([`Core::failed`]).
    Complete(LogHead),
    /// Run the decision's actions (its callbacks, attempted inline) and say what they gave
    /// ([`Core::dispatched`]).
    RunActions {
        /// The generation they run for.
        generation: u64,
        /// The decision.
        decision: Box<Decision>,
        /// The run takes over a claim whose holder is gone (which may have written some of
        /// the delivery logs before it died).
        taken_over: bool,
    },
    /// Submit `offer` to the subject's claim and say what it answered ([`Core::offered`]).
    Offer {
        /// The generation offering.
        generation: u64,
        /// The offer.
        offer: Box<Offer>,
    },
    /// Answer the request waiting on this port.
    Reply(P, Reply),
    /// Tell the core when waiter `waiter`'s wait is over ([`Core::wait_over`]).
    StartTimer {
        /// The waiter.
        waiter: u64,
        /// How long it waits.
        wait: Duration,
    },
    /// Ask the node of epoch `holder`, which holds the claim, to say when it is answered.
    AskHolder(u64),
    /// Tell the other nodes that the claim has a durable answer.
    AnnounceAnswer,
    /// Read the claim again from the store and hand it back ([`Core::reread`]).
    Reread,
    /// Wake the retry worker: queued callbacks are due now.
    WakeRetries,
    /// Start the first attempts of the claim's queued callbacks, due now, whose logs the unit
    /// just made durable wrote new: the retry worker is handed those logs, and starts each
    /// delivery's actor from its log as written, reading neither the retry queue nor the log.
    StartQueued,
    /// Count this.
    Count(Metric),
    /// Say that a claim whose holder is gone was taken over.
    TookOver,
    /// A failpoint (failpoints builds only): where the process may be crashed in a test.
    Failpoint(&'static str),
    /// The core's memory may now differ from the store: stop, and let the next request
    /// rebuild it from the store.
    Stop(Arc<ClaimError>),
}

/// Where the effects of one input go.
pub type Effects<P> = Vec<Effect<P>>;
