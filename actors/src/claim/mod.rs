//! Claims: one per (tenant, key digest), the only thing that decides what a request carrying
//! that key gets. The decisions are the claim core's (`core`, a plain state machine over the
//! fold of the claim's log, `phase`, with its waiters, `waiters`); the claim actor (`actor`)
//! carries out what the core asks for (commits, actions, answers, timers) and feeds the results
//! back. Every request for a key passes through its actor's mailbox, so concurrent duplicates
//! are serialised without a lock. `Claims` is the way to these actors.
//!
//! A first request claims the key (its decision made then, fixed and on disk), then the
//! callbacks run in a task of their own while the actor keeps answering duplicates (409 while in
//! flight, 422 for another payload). The task reports back; the core records the `dispatched`
//! recovery point (the outcomes and the response built from them, with the delivery logs), then
//! `completed`, and answers the first request. A request that may wait (`Prefer: wait`) is kept
//! as a waiter and answered with the first request. A keyed claim of a playbook decided once per
//! subject offers its decision to the subject's claim instead of running its actions: an
//! ordinary claim whose key is a keyed digest of (tenant, signal type, subject), which takes the
//! decision as its own or answers with the one that holds the subject. An actor idle for a while
//! stops; the next request rebuilds it from the log.

mod actor;
pub(crate) use actor::read_and_decide;
pub mod core;
pub mod effect;
pub mod phase;
mod waiters;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_schemas::{Decision, StoredResponse, SubjectLink};
use ractor::ActorRef;

use crate::attempt::Attempts;
use crate::digest::Digester;
use crate::playbook::{DecideError, Decider};
use crate::retry_worker::Retries;
use crate::seal::Sealer;
use crate::settings::Settings;
use crate::store::{ClaimId, ClaimNews, Store, StoreError};
use crate::supervise::{Family, RegistryError};
use phase::{InvalidTransition, Invariant};

use actor::{ClaimActor, ClaimArgs, ClaimMsg};

/// What claim actors share.
pub(crate) struct ClaimContext {
    /// The claim and delivery logs.
    pub store: Arc<dyn Store>,
    /// Makes the callback attempts.
    pub attempts: Arc<Attempts>,
    /// The keyed digests a decision names its subject by.
    pub digester: Digester,
    /// Seals a decision's SETs at rest.
    pub sealer: Arc<Sealer>,
    /// What the claim core reads: the settings and this process's epoch.
    pub core: core::Context,
    /// The retry worker, woken (or handed the logs written) when a queued decision's callbacks
    /// are due.
    pub retries: Retries,
}

impl ClaimContext {
    /// The context of the claims of the process of epoch `holder`.
    pub fn new(
        store: Arc<dyn Store>,
        attempts: Arc<Attempts>,
        (digester, sealer): (Digester, Arc<Sealer>),
        settings: Arc<Settings>,
        holder: u64,
        retries: Retries,
    ) -> Self {
        ClaimContext {
            store,
            attempts,
            digester,
            sealer,
            core: core::Context {
                settings,
                holder,
                sabotage: None,
            },
            retries,
        }
    }
}

/// The fingerprint of every submission to a subject's claim: any signal for the subject is the
/// same "payload" there, so none is refused as another one. (Body fingerprints are keyed
/// digests, never this value.)
pub(crate) const ANY_PAYLOAD: [u8; 32] = [0; 32];

/// One request for a key, as the protocol reads it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Request {
    /// Keyed digest of the request's canonical body ([`ANY_PAYLOAD`] at a subject's claim).
    pub fingerprint: [u8; 32],
    /// How long it may wait for an in-flight first request's answer (`Prefer: wait`).
    pub wait: Option<Duration>,
    /// How long a claim it wins holds (the key's `key_ttl` when `None`).
    pub lasts: Option<Duration>,
    /// The subject's claim its decision goes through, for a playbook decided once per subject.
    pub subject: Option<SubjectLink>,
    /// Sent by a key's claim to its subject's: it waits without counting against
    /// `max_waiters`, which bounds clients' requests (the claims that wait are bounded by the
    /// live actors).
    pub from_a_claim: bool,
    /// Its decision may have run before (a key's claim taken over offers its fixed decision
    /// again): delivery logs of it that exist are left as they are.
    pub may_have_run: bool,
    /// Its callbacks go to the retry queue instead of being attempted inside the request.
    pub queued: bool,
}

impl Request {
    /// A client's request for a body with `fingerprint`.
    pub fn new(fingerprint: [u8; 32]) -> Self {
        Request {
            fingerprint,
            wait: None,
            lasts: None,
            subject: None,
            from_a_claim: false,
            may_have_run: false,
            queued: false,
        }
    }
}

/// Why a claim could not answer a request.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// The store failed; what it holds is what counts.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The generation this claim writes to is no longer the key's current one.
    #[error("the claim was fenced out: another generation holds the key")]
    Fenced,
    /// The log on disk does not fold.
    #[error(transparent)]
    Log(#[from] InvalidTransition),
    /// The claim was asked to do what its phase does not allow.
    #[error(transparent)]
    Invariant(#[from] Invariant),
    /// The playbook could not decide.
    #[error(transparent)]
    Decide(#[from] DecideError),
    /// What the decision writes could not be serialised.
    #[error("cannot serialise the response: {0}")]
    Response(#[from] serde_json::Error),
    /// The subject's claim, which a once-per-subject decision goes through, did not answer.
    #[error("the subject's claim did not answer: {0}")]
    Subject(String),
}

/// What a request decides with, should it win its claim.
pub(crate) enum Decide {
    /// The tenant's playbook, applied to the signal.
    Playbook(Box<Decider>),
    /// A decision fixed already: a key's claim offering its own to the subject's claim.
    Fixed(Box<Decision>),
}

/// One request for a key, as handed to its actor: what the protocol reads of it, and what it
/// decides with if it wins the claim.
pub(crate) struct Submission {
    /// What the claim core reads.
    request: Request,
    /// What it decides with, taken only if this request wins the claim: a duplicate, a replay
    /// or a refused payload never pays for a decision.
    decide: Mutex<Option<Decide>>,
    /// Set when the actor starts handling the submission, so a caller whose call ends without a
    /// reply knows whether it may safely send it again (never handled) or not.
    accepted: AtomicBool,
}

impl Submission {
    /// A submission of `request`, which decides with `decide` if it wins the claim.
    pub(crate) fn of(request: Request, decide: Decide) -> Self {
        Submission {
            request,
            decide: Mutex::new(Some(decide)),
            accepted: AtomicBool::new(false),
        }
    }

    /// What this request decides with (once: a submission wins at most once).
    fn take_decide(&self) -> Option<Decide> {
        self.decide.lock().ok().and_then(|mut decide| decide.take())
    }

    /// True once an actor has started handling this submission.
    pub fn was_accepted(&self) -> bool {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// The key's durable response, and the decision its claim holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The response.
    pub response: StoredResponse,
    /// The id of the decision the claim holds (through its subject's claim, the response may
    /// be another decision's).
    pub decision_id: String,
}

/// A claim's answer to a request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// This request made the decision: the response it must send (already durable).
    First(Answer),
    /// The key completed earlier: the stored response, to send with `Idempotent-Replayed`.
    Replayed(Answer),
    /// The request waited for the key's first request, whose stored response this is (a
    /// replay too).
    Awaited(Answer),
    /// This request claimed the key, and its subject had a decision already: that decision's
    /// response, now this key's too (a replay of the subject's).
    Deduplicated(Answer),
    /// Another request holds the key right now.
    InFlight,
    /// The key was used with another payload.
    Mismatch,
    /// Nothing was answered for the key: why.
    Failed(Arc<ClaimError>),
}

/// How often a request may find its actor stopping under it before giving up (each round is a
/// fresh lookup or spawn; the race only happens while an idle actor is stopping).
const MAX_ROUNDS: usize = 64;

/// The registry name of the actor of `id`: `…/claim/<tenant>/<digest in hex>`.
fn actor_name(family: &Family, id: &ClaimId) -> String {
    let mut what = String::with_capacity(id.tenant.len() + 65);
    what.push_str(&id.tenant);
    what.push('/');
    idem_schemas::hex::push_lower_hex(&mut what, &id.digest);
    family.name(&what)
}

/// The way to claim actors: finds or starts a key's actor and hands it a request.
pub(crate) struct Claims {
    family: Arc<Family>,
    ctx: Arc<ClaimContext>,
}

impl Claims {
    /// Starts the claim supervisor. `instance` makes actor names unique when several servers
    /// share a process (ractor's registry is process-wide).
    pub async fn start(instance: &str, ctx: Arc<ClaimContext>) -> Result<Self, RegistryError> {
        let max_live = ctx.core.settings.idempotency.max_live_actors;
        let family = Arc::new(Family::start(instance, "claim", max_live).await?);
        Ok(Claims { family, ctx })
    }

    /// Hands `sub` to the key's actor, starting it if needed, and waits for its answer.
    pub async fn submit(&self, id: &ClaimId, sub: Submission) -> Result<Reply, RegistryError> {
        submit(&self.family, &self.ctx, id, sub).await
    }

    /// What the claims share.
    pub fn context(&self) -> &ClaimContext {
        &self.ctx
    }

    /// The claim actors' family (liveness, failures).
    pub fn family(&self) -> &Family {
        &self.family
    }

    /// Hands news from another node to the claim's actor here, or, with no actor of the claim
    /// running here, carries out what the core says the news leads to.
    pub fn hear(&self, news: ClaimNews) {
        let Some((id, heard)) = core::Heard::of(news, self.ctx.core.holder) else {
            return;
        };
        match ActorRef::<ClaimMsg>::where_is(actor_name(&self.family, &id)) {
            Some(actor) => {
                let _ = actor.cast(ClaimMsg::Heard(heard));
            }
            None => {
                if let Some(effect::Effect::<()>::AnnounceAnswer) = heard.without_actor() {
                    self.ctx.store.announce_answer(&id);
                }
            }
        }
    }

    /// Stops every claim actor and the supervisor.
    pub async fn shutdown(&self) {
        self.family.shutdown().await;
    }
}

/// Hands `sub` to the actor of `id` in `family`, starting it if needed, and waits for its
/// answer.
async fn submit(
    family: &Arc<Family>,
    ctx: &Arc<ClaimContext>,
    id: &ClaimId,
    sub: Submission,
) -> Result<Reply, RegistryError> {
    let sub = Arc::new(sub);
    let name = actor_name(family, id);
    // Sabotage (failpoints builds only): an actor per request, nothing serialised.
    let name = match crate::failpoint::switched_on("sabotage") {
        true => format!("{name}/{:p}", Arc::as_ptr(&sub)),
        false => name,
    };
    for _ in 0..MAX_ROUNDS {
        let args = || ClaimArgs {
            id: id.clone(),
            ctx: ctx.clone(),
            family: family.clone(),
        };
        let actor = family.actor(&name, || ClaimActor, args).await?;
        let outgoing = sub.clone();
        match actor
            .call(|port| ClaimMsg::Submit(outgoing, port), None)
            .await
        {
            Ok(ractor::rpc::CallResult::Success(reply)) => return Ok(reply),
            // The actor stopped before handling the request: safe to send it again.
            Ok(_) | Err(_) if !sub.was_accepted() => tokio::task::yield_now().await,
            Ok(_) | Err(_) => return Err(RegistryError::ActorFailed),
        }
    }
    Err(RegistryError::Unavailable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn actor_names_are_the_tenant_and_the_digest_in_lowercase_hex() {
        let family = Family::start("claim-name-test", "claim", 1)
            .await
            .expect("family");
        let mut digest = [0u8; 32];
        digest[0] = 0xab;
        digest[31] = 0x0f;
        let id = ClaimId {
            tenant: "acme".into(),
            digest,
        };
        assert_eq!(
            actor_name(&family, &id),
            format!("claim-name-test/claim/acme/ab{}0f", "0".repeat(60))
        );
        family.shutdown().await;
    }
}
