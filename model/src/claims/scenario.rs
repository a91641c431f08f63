//! The scenarios the claim model runs and how far it goes in each: the paths of the service it
//! checks ([`ClaimScenario`]), the bounds on nodes, keys, copies, crashes and stalls
//! ([`Bounds`], each scenario's own by default), the rules a sabotage switches off
//! ([`Sabotage`]), and the fixed times and windows every run shares.

use std::time::Duration;

/// The clock's start (unix milliseconds); the model's time moves only when claims are made and
/// when `in_flight_timeout` expires.
pub(super) const T0: u64 = 1_000_000;
/// `in_flight_timeout`.
pub(super) const IN_FLIGHT_TIMEOUT: Duration = Duration::from_secs(30);
/// `key_ttl` and the once-per-subject window: longer than any run of the model (expiry is
/// outside it).
pub(super) const WINDOW: Duration = Duration::from_secs(86_400);
/// `key_ttl` in [`ClaimScenario::Expiring`]: a claim has expired by the next one made.
pub(super) const EXPIRES_AT_ONCE: Duration = Duration::from_millis(1);
/// How long a waiting copy may wait (its deadline comes whenever the checker says).
pub(super) const WAIT: Duration = Duration::from_secs(10);
/// Final retries per key (see [`super::State::wants_final_retry`]).
pub(super) const FINAL_RETRIES: u8 = 2;

/// A path of the service the checker runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClaimScenario {
    /// Keyed signals whose callbacks are attempted inside the request.
    Inline,
    /// The same, every copy waiting for the first request's answer (`Prefer: wait`).
    Waiting,
    /// Keys of a playbook decided once per subject, all about one subject: each key's claim
    /// offers its decision to the subject's claim.
    Subject,
    /// A source's events: claim, recovery point, completion and queued deliveries in one write,
    /// the callbacks made by the retry worker from the store.
    Queued,
    /// Keyed signals whose `key_ttl` ends before their callbacks do: a key's claim expires while
    /// its decision runs, and holds the key until it completes or `in_flight_timeout` passes.
    Expiring,
}

impl ClaimScenario {
    /// Every scenario, in the order they are checked.
    pub const ALL: [ClaimScenario; 5] = [
        ClaimScenario::Inline,
        ClaimScenario::Waiting,
        ClaimScenario::Subject,
        ClaimScenario::Queued,
        ClaimScenario::Expiring,
    ];
}

/// How far the checker goes.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// idem nodes on the one store.
    pub nodes: usize,
    /// Keys, each sent by its client.
    pub keys: usize,
    /// Copies of each key the client sends (more after an error, as a retry).
    pub copies: u8,
    /// Node crashes in a run.
    pub crashes: u8,
    /// Node stalls in a run.
    pub stalls: u8,
}

impl Bounds {
    /// The bounds `scenario` is checked within by default: two nodes, and as much else as
    /// reaches the cases the scenario is for within a few minutes.
    pub fn default_for(scenario: ClaimScenario) -> Bounds {
        let base = Bounds {
            nodes: 2,
            keys: 1,
            copies: 2,
            crashes: 1,
            stalls: 1,
        };
        match scenario {
            ClaimScenario::Inline | ClaimScenario::Queued => base,
            // A crash is what leaves a holder gone; a stall adds little to waiting but states.
            ClaimScenario::Waiting => Bounds { stalls: 0, ..base },
            // Two keys about one subject on one node, each sent once (then retried as its
            // client does): the subject's claim is always on the offering key's node, and the
            // keys' contention for it is the same on one node as on two.
            ClaimScenario::Subject => Bounds {
                nodes: 1,
                keys: 2,
                copies: 1,
                crashes: 0,
                stalls: 0,
            },
            // With no crash or stall, only the expiry and `in_flight_timeout` end a claim: a
            // copy on the other node meets the expired claim still running.
            ClaimScenario::Expiring => Bounds {
                crashes: 0,
                stalls: 0,
                ..base
            },
        }
    }
}

/// A deliberately broken protocol, which the checker must catch: one rule of the real code
/// switched off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Sabotage {
    /// The store grants every start, append and take-over ([`Fencing::Off`]).
    NoFencing,
    /// The core answers before its recovery point is durable.
    AnswerBeforeRecoveryPoint,
    /// The core and the store replace an expired claim whether or not its decision still runs
    /// (`rule::replaceable` with no time kept).
    ReplaceOnExpiry,
    /// A node that starts a claim's actor from the store evaluates the playbook's rules again,
    /// as they are in force there now (reloaded since, or another node's), instead of keeping
    /// the decision its claim stored: a take-over runs and answers another decision than the
    /// one recorded.
    DecideAgainOnRecovery,
}
