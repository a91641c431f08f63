//! Passivation: an actor stops once it has had nothing to do for its idle timeout (or up to an
//! eighth less), and the next message for its name starts it again from its log, so memory
//! follows the keys in use. Each actor keeps its own one-shot timer, armed when it starts and
//! re-armed as it works, at most one at a time, so the checks are spread over time as the actors'
//! own activity is. (A family-wide ticker nudging every live actor at once made bursts of
//! thousands of messages that requests queued behind.)

use std::time::{Duration, Instant};

use ractor::{ActorRef, Message};

/// One actor's idle timer; `M` is the actor's message type.
pub struct IdleTimer<M> {
    timeout: Duration,
    last_active: Instant,
    armed: bool,
    check: fn() -> M,
}

impl<M: Message> IdleTimer<M> {
    /// A timer for an actor that stops after `timeout` without activity, which receives
    /// `check()` when it may have passed. Armed at once: an actor started for a request that
    /// never reaches it still stops.
    pub fn start(myself: &ActorRef<M>, timeout: Duration, check: fn() -> M) -> Self {
        let mut timer = IdleTimer {
            timeout,
            last_active: Instant::now(),
            armed: false,
            check,
        };
        timer.arm(myself, timeout);
        timer
    }

    /// Notes that the actor just handled something, and makes sure a check is due.
    pub fn touch(&mut self, myself: &ActorRef<M>) {
        self.last_active = Instant::now();
        if !self.armed {
            self.arm(myself, self.timeout);
        }
    }

    /// Handles a check: true when the actor has been idle for nearly the whole timeout (all but
    /// an eighth) and is not `busy` (waiting on work of its own), so it may stop; otherwise the
    /// next check is armed for when the timeout could have passed. The eighth spares most
    /// actors a second timer: the check armed at start comes a few milliseconds after the
    /// actor's last work, which an exact timeout would answer with one more check.
    pub fn expired(&mut self, myself: &ActorRef<M>, busy: bool) -> bool {
        self.armed = false;
        let idle = self.last_active.elapsed();
        if !busy && idle >= self.timeout - self.timeout / 8 {
            return true;
        }
        let wait = match busy {
            true => self.timeout,
            false => self.timeout - idle,
        };
        self.arm(myself, wait);
        false
    }

    fn arm(&mut self, myself: &ActorRef<M>, wait: Duration) {
        // The timer task holds only a handle: if the actor has stopped when it fires, the
        // message is dropped.
        myself.send_after(wait, self.check);
        self.armed = true;
    }
}
