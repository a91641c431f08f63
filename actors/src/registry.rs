//! Finding the claim actor of a key. Actors are named in ractor's registry after their key
//! (`<instance>/claim/<tenant>/<digest>`), started on demand under one supervisor, and stop when
//! idle. Two requests that race to start the same actor are settled by the registry itself: the
//! loser's spawn is refused as already registered and it sends to the winner instead.

use std::sync::Arc;

use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, SpawnErr, SupervisionEvent};

use crate::claim::{ClaimActor, ClaimArgs, ClaimContext, ClaimMsg, Reply, Submission};
use crate::store::ClaimId;

/// How often a request may find its actor stopping under it before giving up (each round is a
/// fresh lookup or spawn; the race only happens while an idle actor is stopping).
const MAX_ROUNDS: usize = 64;

/// Why a submission got no answer from a claim actor.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The actor could not be started (its log could not be read).
    #[error("cannot start the claim actor: {0}")]
    Spawn(String),
    /// The actor failed while handling the request; its state is on disk.
    #[error("the claim actor failed while handling the request")]
    ActorFailed,
    /// The actor kept stopping under the request.
    #[error("no claim actor could take the request")]
    Unavailable,
}

/// Supervises every claim actor. Overrides ractor's default, which would stop the supervisor
/// when a child fails: a failed claim actor is simply started again by the next request.
struct ClaimSupervisor;

impl Actor for ClaimSupervisor {
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
        if let SupervisionEvent::ActorFailed(who, error) = event {
            tracing::warn!(actor = ?who.get_name(), %error, "claim actor failed; the next request restarts it");
        }
        Ok(())
    }
}

/// The way to a key's claim actor.
pub struct ClaimRegistry {
    instance: String,
    supervisor: ActorRef<()>,
    ctx: Arc<ClaimContext>,
}

impl ClaimRegistry {
    /// Starts the supervisor. `instance` makes actor names unique when several registries share
    /// a process (ractor's registry is process-wide).
    pub async fn start(instance: String, ctx: Arc<ClaimContext>) -> Result<Self, RegistryError> {
        let (supervisor, _) = Actor::spawn(Some(format!("{instance}/claims")), ClaimSupervisor, ())
            .await
            .map_err(|e| RegistryError::Spawn(e.to_string()))?;
        Ok(ClaimRegistry {
            instance,
            supervisor,
            ctx,
        })
    }

    fn name(&self, id: &ClaimId) -> String {
        format!(
            "{}/claim/{}/{}",
            self.instance,
            id.tenant,
            hex::encode(id.digest)
        )
    }

    /// Hands `sub` to the key's actor, starting it if needed, and waits for its answer.
    pub async fn submit(&self, id: &ClaimId, sub: Submission) -> Result<Reply, RegistryError> {
        let sub = Arc::new(sub);
        let name = self.name(id);
        for _ in 0..MAX_ROUNDS {
            let actor = match ActorRef::<ClaimMsg>::where_is(name.clone()) {
                Some(actor) => actor,
                None => {
                    let args = ClaimArgs {
                        id: id.clone(),
                        ctx: self.ctx.clone(),
                    };
                    match Actor::spawn_linked(
                        Some(name.clone()),
                        ClaimActor,
                        args,
                        self.supervisor.get_cell(),
                    )
                    .await
                    {
                        Ok((actor, _)) => actor,
                        Err(SpawnErr::ActorAlreadyRegistered(_)) => {
                            tokio::task::yield_now().await;
                            continue;
                        }
                        Err(e) => return Err(RegistryError::Spawn(e.to_string())),
                    }
                }
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

    /// How many claim actors are alive.
    pub fn live_actors(&self) -> usize {
        self.supervisor.get_children().len()
    }

    /// The supervisor's cell (to link other actors under it, or watch it).
    pub fn supervisor(&self) -> ActorCell {
        self.supervisor.get_cell()
    }

    /// The shared context.
    pub fn context(&self) -> &Arc<ClaimContext> {
        &self.ctx
    }

    /// Stops every claim actor and the supervisor.
    pub async fn shutdown(&self) {
        self.supervisor.stop_children_and_wait(None, None).await;
        self.supervisor.stop(None);
    }
}
