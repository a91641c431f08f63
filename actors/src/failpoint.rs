//! Fault injection at the named recovery points (docs/ARCHITECTURE.md), compiled in only with
//! the `failpoints` feature (a normal build carries no trace of it). Configured with the `fail`
//! crate: from the `FAILPOINTS` environment variable (`name=action;…`) at start, or at run time
//! with `fail::cfg`. The `return` action kills the whole process on the spot, as SIGKILL would
//! (no flush, no cleanup); `panic` panics in the actor running the step; `sleep(ms)` pauses.
//! `bulk.part_way` kills a bulk redelivery once one of its redeliveries is durable;
//! `store.start_part_way` kills sled's store part-way through a start with queued deliveries,
//! once those are written to its files and before its claim record is;
//! `subscribe.after_create` kills a subscribed source's reconciler once the transmitter answered
//! the stream it made, before the stream is recorded; `held.after_send` kills a push stream's
//! walk through what it held once one held SET's answer is recorded. Two switches
//! are not crash points: `store.sync` makes sled's group commit fail its sync with
//! an I/O error, as a failing disk would, and `sabotage` (below).

/// The points, in the order a keyed signal passes them.
pub const POINTS: [&str; 5] = [
    "claim.after_persist",
    "dispatch.before_recovery_point",
    "dispatch.after_recovery_point",
    "complete.before_persist",
    "delivery.after_attempt",
];

/// Evaluates the failpoint `name` (nothing, without the `failpoints` feature).
#[inline(always)]
pub fn hit(name: &'static str) {
    hit_after(name, || ());
}

/// Evaluates the failpoint `name`, and should it kill, runs `first` just before (nothing,
/// without the `failpoints` feature).
#[inline(always)]
pub fn hit_after(name: &'static str, first: impl FnOnce()) {
    #[cfg(feature = "failpoints")]
    if fail::eval(name, |_| ()).is_some() {
        first();
        tracing::warn!(point = name, "failpoint: killing the process");
        // SAFETY: kill(2) on our own pid; SIGKILL cannot be caught, nothing runs after it.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
    #[cfg(not(feature = "failpoints"))]
    let _ = (name, first);
}

/// True when the switch `name` is set to `return` (always false without the feature). Used by
/// the one deliberate sabotage, `sabotage`: every request gets a fresh claim actor that ignores
/// the claim on disk — neither serialised nor durable — so a simulation can show that its
/// checker catches a broken system.
pub fn switched_on(name: &'static str) -> bool {
    #[cfg(feature = "failpoints")]
    return fail::eval(name, |_| ()).is_some();
    #[cfg(not(feature = "failpoints"))]
    {
        let _ = name;
        false
    }
}

/// Reads `FAILPOINTS` (a no-op without the `failpoints` feature). Call once at start.
pub fn setup_from_env() {
    #[cfg(feature = "failpoints")]
    {
        // The scenario only guards against concurrent setups; the configuration stays in force.
        std::mem::forget(fail::FailScenario::setup());
    }
}
