//! Supervision and finding actors by name, for any family of actors (it knows nothing of what
//! they own). An actor is named in ractor's registry after what it owns
//! (`<instance>/<kind>/<what>`), started on demand under its family's supervisor, and stops when
//! idle (each by its own timer, see `idle`). Two requests racing to start the same actor are
//! settled by the registry itself: the loser's spawn is refused as already registered, and it
//! sends to the winner instead. A family bounds how many of its actors live at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, SpawnErr, SupervisionEvent};

/// How often a lookup may find its actor stopping under it before giving up (each round is a
/// fresh lookup or spawn; the race only happens while an idle actor is stopping).
const MAX_ROUNDS: usize = 64;

/// Why a message got no answer from its actor.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The actor could not be started (its log could not be read).
    #[error("cannot start the actor: {0}")]
    Spawn(#[source] SpawnErr),
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
            .map_err(RegistryError::Spawn)?;
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

    /// The running actor called `name`, or a new one started with `actor()` and `args()`
    /// under the supervisor (trying again while the name is held by an actor that is stopping).
    pub async fn actor<A: Actor>(
        &self,
        name: &str,
        actor: impl Fn() -> A,
        args: impl Fn() -> A::Arguments,
    ) -> Result<ActorRef<A::Msg>, RegistryError> {
        for _ in 0..MAX_ROUNDS {
            if let Some(found) = self.find_or_spawn(name, actor(), args()).await? {
                return Ok(found);
            }
        }
        Err(RegistryError::Unavailable)
    }

    /// The running actor called `name`, or a new one started with `args` under the
    /// supervisor. `None` when the name is taken by an actor that is stopping (try again).
    async fn find_or_spawn<A: Actor>(
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
            Err(e) => Err(RegistryError::Spawn(e)),
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
