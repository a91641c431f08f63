//! Finding actors by name. Claim and delivery actors are named in ractor's registry after what
//! they own (`<instance>/claim/<tenant>/<digest>`, `<instance>/delivery/<id>`), started on demand
//! under a supervisor, and stop when idle (each by its own timer, see `idle`). Two requests
//! racing to start the same actor are settled by the registry itself: the loser's spawn is
//! refused as already registered, and it sends to the winner instead. `ClaimRegistry` is the
//! claim side of this.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, SpawnErr, SupervisionEvent};

use crate::claim::{ClaimActor, ClaimArgs, ClaimContext, ClaimMsg, Reply, Submission};
use crate::store::ClaimId;

/// How often a request may find its actor stopping under it before giving up (each round is a
/// fresh lookup or spawn; the race only happens while an idle actor is stopping).
const MAX_ROUNDS: usize = 64;

/// Why a message got no answer from its actor.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The actor could not be started (its log could not be read).
    #[error("cannot start the actor: {0}")]
    Spawn(String),
    /// The actor failed while handling the request; its state is on disk.
    #[error("the actor failed while handling the request")]
    ActorFailed,
    /// The actor kept stopping under the request.
    #[error("no actor could take the request")]
    Unavailable,
    /// As many actors as allowed are alive; a new one would exceed the bound.
    #[error("too many live actors")]
    Overloaded,
}

/// Supervises a family of actors. Overrides ractor's default, which would stop the supervisor
/// when a child fails: a failed child is simply started again by the next message for it. It
/// counts its live children, for the bound on them.
pub struct Supervisor {
    kind: &'static str,
    live: Arc<AtomicUsize>,
}

impl Actor for Supervisor {
    type Msg = ();
    type State = ();
    type Arguments = ();

    async fn pre_start(&self, _: ActorRef<()>, _: ()) -> Result<(), ActorProcessingErr> {
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _: ActorRef<()>,
        event: SupervisionEvent,
        _: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        match &event {
            SupervisionEvent::ActorStarted(_) => {
                self.live.fetch_add(1, Ordering::Relaxed);
            }
            SupervisionEvent::ActorTerminated(..) | SupervisionEvent::ActorFailed(..) => {
                self.live.fetch_sub(1, Ordering::Relaxed);
            }
            _ => {}
        }
        if let SupervisionEvent::ActorFailed(who, error) = event {
            crate::metrics::ACTOR_FAILURES
                .with_label_values(&[self.kind])
                .inc();
            tracing::warn!(actor = ?who.get_name(), %error, "actor failed; the next message for it restarts it");
        }
        Ok(())
    }
}

/// A supervisor and the names of the actors under it.
pub struct Family {
    prefix: String,
    supervisor: ActorRef<()>,
    live: Arc<AtomicUsize>,
    max_live: usize,
}

impl Family {
    /// Starts the supervisor of the `kind` actors named `<instance>/<kind>/…`; at most
    /// `max_live` of them run at once.
    pub async fn start(
        instance: &str,
        kind: &'static str,
        max_live: usize,
    ) -> Result<Self, RegistryError> {
        let prefix = format!("{instance}/{kind}");
        let live = Arc::new(AtomicUsize::new(0));
        let supervisor = Supervisor {
            kind,
            live: live.clone(),
        };
        let (supervisor, _) = Actor::spawn(Some(format!("{prefix}/supervisor")), supervisor, ())
            .await
            .map_err(|e| RegistryError::Spawn(e.to_string()))?;
        Ok(Family {
            prefix,
            supervisor,
            live,
            max_live,
        })
    }

    /// The full name of the actor owning `what`.
    pub fn name(&self, what: &str) -> String {
        format!("{}/{what}", self.prefix)
    }

    /// The full name of the claim actor of `id`: `…/<tenant>/<digest in hex>`.
    fn claim_name(&self, id: &ClaimId) -> String {
        format!("{}/{}/{}", self.prefix, id.tenant, hex::encode(id.digest))
    }

    /// The running actor called `name`, or a new one started with `args()` under the
    /// supervisor. `None` when the name is taken by an actor that is stopping (try again).
    pub async fn find_or_spawn<A: Actor>(
        &self,
        name: &str,
        actor: A,
        args: A::Arguments,
    ) -> Result<Option<ActorRef<A::Msg>>, RegistryError> {
        if let Some(found) = ActorRef::<A::Msg>::where_is(name) {
            return Ok(Some(found));
        }
        if self.live.load(Ordering::Relaxed) >= self.max_live {
            return Err(RegistryError::Overloaded);
        }
        match Actor::spawn_linked(
            Some(name.to_string()),
            actor,
            args,
            self.supervisor.get_cell(),
        )
        .await
        {
            Ok((actor, _)) => Ok(Some(actor)),
            Err(SpawnErr::ActorAlreadyRegistered(_)) => {
                tokio::task::yield_now().await;
                Ok(None)
            }
            Err(e) => Err(RegistryError::Spawn(e.to_string())),
        }
    }

    /// How many actors of this family are alive.
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// Stops every actor of the family and the supervisor.
    pub async fn shutdown(&self) {
        self.supervisor.stop_children_and_wait(None, None).await;
        self.supervisor.stop(None);
    }
}

/// The way to a key's claim actor.
pub struct ClaimRegistry {
    family: Family,
    ctx: Arc<ClaimContext>,
}

impl ClaimRegistry {
    /// Starts the claim supervisor. `instance` makes actor names unique when several servers
    /// share a process (ractor's registry is process-wide).
    pub async fn start(instance: &str, ctx: Arc<ClaimContext>) -> Result<Self, RegistryError> {
        Ok(ClaimRegistry {
            family: Family::start(instance, "claim", ctx.settings.max_live_actors).await?,
            ctx,
        })
    }

    /// Hands `sub` to the key's actor, starting it if needed, and waits for its answer.
    pub async fn submit(&self, id: &ClaimId, sub: Submission) -> Result<Reply, RegistryError> {
        let sub = Arc::new(sub);
        let name = self.family.claim_name(id);
        for _ in 0..MAX_ROUNDS {
            let args = ClaimArgs {
                id: id.clone(),
                ctx: self.ctx.clone(),
            };
            // Sabotage (failpoints builds only): an actor per request, nothing serialised.
            #[cfg(feature = "failpoints")]
            let name = match crate::failpoint::switched_on("sabotage") {
                true => format!("{name}/{:p}", Arc::as_ptr(&sub)),
                false => name.clone(),
            };
            let Some(actor) = self.family.find_or_spawn(&name, ClaimActor, args).await? else {
                continue;
            };
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

    /// The claim actors' family (liveness, failures).
    pub fn family(&self) -> &Family {
        &self.family
    }

    /// Stops every claim actor and the supervisor.
    pub async fn shutdown(&self) {
        self.family.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn claim_names_are_the_tenant_and_the_digest_in_lowercase_hex() {
        let family = Family::start("registry-test", "claim", 1)
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
            family.claim_name(&id),
            format!("registry-test/claim/acme/ab{}0f", "0".repeat(60))
        );
        family.shutdown().await;
    }
}
