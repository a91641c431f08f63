//! Exhaustive checks of idem's protocols across nodes, with stateright: every interleaving, up
//! to a bound, of what clients, nodes, the store and the receiver do, each step the real code.
//! `claims` checks the claim protocol: each node's claims are the claim core
//! (`claim::core::Core`), fed every input the claim actor feeds it, its effects carried out as
//! the actor carries them out; the claim a signal is decided under is the engine's own choice
//! (`signal::claimed`); the store takes the core's real units and answers with real `Written`s,
//! decided by `store::rule` as sled and PostgreSQL decide them. The model holds only the
//! plumbing: which message carries what, and the store's bookkeeping. A sabotage is the same
//! code with one rule switched off: fencing in the store rule, the core's answer after the
//! recovery point, or (in the node's plumbing) the stored decision kept when a node starts a
//! claim's actor from the store, where a sabotaged node evaluates the rules again.
//!
//! Each `claims::ClaimScenario` is a path of the service: signals with callbacks attempted inline;
//! copies that wait for the first request's answer (`Prefer: wait`); keys decided once per
//! subject, through the subject's claim; and source events, whose decision and queued callbacks
//! are one write, the retry worker making the callbacks. `delivery` checks the delivery lease
//! protocol the same way, and `bulk` a bulk redelivery with an idempotency key: what its claim
//! fixes, and what a holder that takes it over after a crash redelivers. The models share how
//! a state is put in one form and how a claim's row in the store reads as its log's head.

pub mod bulk;
pub mod claims;
pub mod delivery;

use std::hash::{Hash, Hasher};

use idem_actors::store::rule::Current;
use idem_actors::store::{ClaimId, LogHead};

/// A fixed order for values without one (the hasher's keys are fixed): what is a set or a
/// multiset in a state is sorted by it, so that states differing only in order are one.
fn hash_of<T: Hash>(value: &T) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

/// The head of claim `id`'s log as its row in the store stands (`current`): its generation,
/// expiry and next write.
fn head_of(id: &ClaimId, current: &Current) -> LogHead {
    LogHead {
        id: id.clone(),
        generation: current.generation,
        expires_at_ms: current.expires_at_ms,
        next: current.writes,
    }
}
