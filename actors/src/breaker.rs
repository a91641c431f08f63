//! An endpoint's health, the circuit breaker's state machine, with no store or clock in it: an
//! endpoint (one action URL of one tenant) is `closed` while its receiver answers; after
//! `threshold` consecutive retryable failures it is `open` and gets no attempts; once `cooldown`
//! has passed one attempt probes it (`half_open`), whose success closes it and whose failure
//! opens it again. `EndpointHealth::apply` is the one transition function; the store applies it
//! atomically, by its own clock, so nodes sharing a store share one breaker. Its policy is
//! `[delivery]`'s `breaker_threshold` and `breaker_cooldown`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::settings::DeliverySettings;

/// An endpoint: one action URL of one tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointId {
    /// The tenant.
    pub tenant: String,
    /// The action's URL.
    pub url: String,
}

/// What the store answers to a noted event: the health after it, and whether it changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Noted {
    /// The endpoint's health now.
    pub health: EndpointHealth,
    /// Whether the event changed it (for a probe: whether this caller makes it).
    pub changed: bool,
    /// The breaker before the event, as the store had it.
    pub was: Circuit,
}

/// Whether attempts go to an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Circuit {
    /// Attempts go to it.
    Closed,
    /// No attempts go to it; a probe may start at `since_ms` plus the cooldown.
    Open {
        /// When it opened (unix milliseconds).
        since_ms: u64,
    },
    /// One probe is running.
    HalfOpen {
        /// When the probe started (unix milliseconds).
        since_ms: u64,
    },
}

impl Circuit {
    /// As the API names it.
    pub fn name(&self) -> &'static str {
        match self {
            Circuit::Closed => "closed",
            Circuit::Open { .. } => "open",
            Circuit::HalfOpen { .. } => "half_open",
        }
    }
}

/// What is known of an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointHealth {
    /// The breaker.
    pub circuit: Circuit,
    /// Retryable failures since its last live answer.
    pub consecutive_failures: u32,
    /// When it last answered 2xx (the attempt's start, unix milliseconds).
    pub last_success_ms: Option<u64>,
    /// When an attempt last failed, retryable or not (unix milliseconds).
    pub last_failure_ms: Option<u64>,
    /// How many changes made it: of two copies, the higher is the newer.
    pub version: u64,
}

impl Default for EndpointHealth {
    fn default() -> Self {
        EndpointHealth {
            circuit: Circuit::Closed,
            consecutive_failures: 0,
            last_success_ms: None,
            last_failure_ms: None,
            version: 0,
        }
    }
}

/// What happened at an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointEvent {
    /// An attempt started at `at_ms` was answered 2xx.
    Succeeded {
        /// When the attempt started.
        at_ms: u64,
    },
    /// An attempt started at `at_ms` was answered with a terminal status (a live receiver's
    /// verdict: it resets the count like a success).
    Refused {
        /// When the attempt started.
        at_ms: u64,
    },
    /// An attempt started at `at_ms` failed in a way that is retried (5xx, 429, network error,
    /// deadline).
    Failed {
        /// When the attempt started.
        at_ms: u64,
    },
    /// A node asks to probe the endpoint now.
    ProbeStarted,
}

/// Whether an attempt may go to an endpoint now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Closed: attempts go.
    Pass,
    /// A probe may start: whoever the store lets start it makes it.
    Probe,
    /// Not before this time (unix milliseconds).
    WaitUntil(u64),
}

impl EndpointHealth {
    /// Whether an attempt may go to the endpoint at `now_ms`.
    pub fn gate(&self, now_ms: u64, s: &DeliverySettings) -> Gate {
        let after = |since: u64, wait: Duration| since.saturating_add(wait.as_millis() as u64);
        let (cooldown, probe_timeout) = (s.breaker_cooldown, s.probe_timeout());
        match self.circuit {
            Circuit::Closed => Gate::Pass,
            Circuit::Open { since_ms } if now_ms >= after(since_ms, cooldown) => Gate::Probe,
            Circuit::Open { since_ms } => Gate::WaitUntil(after(since_ms, cooldown)),
            Circuit::HalfOpen { since_ms } if now_ms >= after(since_ms, probe_timeout) => {
                Gate::Probe
            }
            Circuit::HalfOpen { since_ms } => Gate::WaitUntil(after(since_ms, probe_timeout)),
        }
    }

    /// The one transition function: the health after `event` at `now_ms`, or `None` when the
    /// event changes nothing (a probe asked for when none may start is refused so).
    pub fn apply(
        &self,
        event: EndpointEvent,
        now_ms: u64,
        s: &DeliverySettings,
    ) -> Option<EndpointHealth> {
        let mut next = *self;
        match event {
            EndpointEvent::Succeeded { at_ms } | EndpointEvent::Refused { at_ms } => {
                if matches!(event, EndpointEvent::Succeeded { .. }) {
                    next.last_success_ms = self.last_success_ms.max(Some(at_ms));
                } else {
                    next.last_failure_ms = self.last_failure_ms.max(Some(at_ms));
                }
                // An answer to an attempt older than a failure seen since says nothing of now.
                if self.last_failure_ms.is_none_or(|failed| at_ms >= failed) {
                    next.circuit = Circuit::Closed;
                    next.consecutive_failures = 0;
                }
            }
            EndpointEvent::Failed { at_ms } => {
                next.last_failure_ms = self.last_failure_ms.max(Some(at_ms));
                next.consecutive_failures = self.consecutive_failures.saturating_add(1);
                next.circuit = match self.circuit {
                    Circuit::Closed if next.consecutive_failures < s.breaker_threshold => {
                        Circuit::Closed
                    }
                    // Only the probe's own failure ends a probe: one started before it says
                    // nothing of now.
                    probing @ Circuit::HalfOpen { since_ms } if at_ms < since_ms => probing,
                    Circuit::Closed | Circuit::HalfOpen { .. } => {
                        Circuit::Open { since_ms: now_ms }
                    }
                    open @ Circuit::Open { .. } => open,
                };
            }
            EndpointEvent::ProbeStarted => match self.gate(now_ms, s) {
                Gate::Probe => next.circuit = Circuit::HalfOpen { since_ms: now_ms },
                Gate::Pass | Gate::WaitUntil(_) => return None,
            },
        }
        (next != *self).then(|| EndpointHealth {
            version: self.version + 1,
            ..next
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three failures open it, for ten seconds; a probe has two (its deadline and a second).
    static S: std::sync::LazyLock<DeliverySettings> =
        std::sync::LazyLock::new(|| DeliverySettings {
            breaker_threshold: 3,
            breaker_cooldown: Duration::from_secs(10),
            inline_timeout: Duration::from_secs(1),
            ..DeliverySettings::default()
        });

    fn run(events: &[(EndpointEvent, u64)]) -> EndpointHealth {
        events
            .iter()
            .fold(EndpointHealth::default(), |h, (e, now)| {
                h.apply(*e, *now, &S).unwrap_or(h)
            })
    }

    fn failed(at_ms: u64) -> (EndpointEvent, u64) {
        (EndpointEvent::Failed { at_ms }, at_ms)
    }

    #[test]
    fn consecutive_failures_open_it_and_a_live_answer_resets_the_count() {
        let two = run(&[failed(1), failed(2)]);
        assert_eq!(
            (two.circuit, two.consecutive_failures),
            (Circuit::Closed, 2)
        );
        let refused = run(&[
            failed(1),
            failed(2),
            (EndpointEvent::Refused { at_ms: 3 }, 3),
        ]);
        assert_eq!(refused.consecutive_failures, 0);
        assert_eq!(refused.last_failure_ms, Some(3));
        let open = run(&[failed(1), failed(2), failed(5)]);
        assert_eq!(open.circuit, Circuit::Open { since_ms: 5 });
        assert_eq!(open.gate(9_999, &S), Gate::WaitUntil(10_005));
        assert_eq!(open.gate(10_005, &S), Gate::Probe);
    }

    #[test]
    fn one_probe_at_a_time_whose_answer_closes_or_reopens() {
        let open = run(&[failed(1), failed(2), failed(3)]);
        assert_eq!(open.apply(EndpointEvent::ProbeStarted, 5_000, &S), None);
        let probing = open
            .apply(EndpointEvent::ProbeStarted, 10_003, &S)
            .expect("the cooldown is over");
        assert_eq!(probing.circuit, Circuit::HalfOpen { since_ms: 10_003 });
        assert_eq!(probing.apply(EndpointEvent::ProbeStarted, 10_004, &S), None);
        assert_eq!(probing.gate(10_004, &S), Gate::WaitUntil(12_003));
        // A probe whose node died is followed by another once it has had its time.
        assert!(probing
            .apply(EndpointEvent::ProbeStarted, 12_003, &S)
            .is_some());
        // An attempt started before the probe does not end it.
        let late = probing
            .apply(EndpointEvent::Failed { at_ms: 10_000 }, 10_050, &S)
            .expect("counted");
        assert_eq!(late.circuit, Circuit::HalfOpen { since_ms: 10_003 });
        assert!(late.version > probing.version);
        let reopened = probing
            .apply(EndpointEvent::Failed { at_ms: 10_003 }, 10_100, &S)
            .expect("reopens");
        assert_eq!(reopened.circuit, Circuit::Open { since_ms: 10_100 });
        let closed = probing
            .apply(EndpointEvent::Succeeded { at_ms: 10_003 }, 10_050, &S)
            .expect("closes");
        assert_eq!(closed.circuit, Circuit::Closed);
        assert_eq!(closed.consecutive_failures, 0);
        assert_eq!(closed.last_success_ms, Some(10_003));
    }

    #[test]
    fn an_answer_older_than_a_failure_does_not_close_it() {
        let open = run(&[failed(1), failed(2), failed(3)]);
        let late = open
            .apply(EndpointEvent::Succeeded { at_ms: 2 }, 4, &S)
            .expect("the success is noted");
        assert_eq!(late.circuit, Circuit::Open { since_ms: 3 });
        assert_eq!(late.last_success_ms, Some(2));
        // A failure while open keeps the cooldown running from the opening.
        let again = open
            .apply(EndpointEvent::Failed { at_ms: 4 }, 4, &S)
            .expect("counted");
        assert_eq!(again.circuit, Circuit::Open { since_ms: 3 });
        assert_eq!(again.consecutive_failures, 4);
    }
}
