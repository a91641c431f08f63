//! What the actors count, in Prometheus' default registry (rendered by the HTTP front at
//! `GET /metrics`): claim transitions, delivery attempts by outcome, breaker transitions, actor
//! failures, rule failures, the group
//! commit's latency, and deliveries by status (gauges counted once from the store at start,
//! then moved with each delivery write). The sans-IO cores do not count: they say what to count
//! as a [`Metric`], and whoever carries out their effects counts it.

use std::sync::LazyLock;

use idem_schemas::DeliveryStatus;

use prometheus::{
    register_histogram, register_int_counter_vec, register_int_gauge, register_int_gauge_vec,
    Histogram, IntCounterVec, IntGauge, IntGaugeVec,
};

/// Claim transitions: `claimed`, `dispatched`, `completed`, `taken_over`.
pub static CLAIM_TRANSITIONS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "idem_claim_transitions_total",
        "Claim state transitions recorded durably",
        &["state"]
    )
    .expect("metric registers once")
});

/// Writes the store refused to a writer that was fenced out (a claim taken over or started
/// anew, a delivery leased or recorded by another), by what they were for: `claim`, `delivery`.
pub static FENCED_WRITES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "idem_fenced_writes_total",
        "Writes refused to a writer that was fenced out",
        &["what"]
    )
    .expect("metric registers once")
});

/// Delivery attempts by attempt number (`1` is inline) and outcome.
pub static DELIVERY_ATTEMPTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "idem_delivery_attempts_total",
        "Callback attempts by attempt number and outcome",
        &["attempt", "outcome"]
    )
    .expect("metric registers once")
});

/// Breaker transitions this node made, by the state entered (`open`, `half_open`, `closed`).
pub static ENDPOINT_TRANSITIONS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "idem_endpoint_transitions_total",
        "Endpoint breaker transitions made by this node, by the state entered",
        &["to"]
    )
    .expect("metric registers once")
});

/// This node's part of `max_in_flight_per_endpoint` (the limit split between the live nodes).
pub static ENDPOINT_SHARE: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "idem_endpoint_in_flight_share",
        "Attempts at once this node may make to one endpoint (its part of the limit)"
    )
    .expect("metric registers once")
});

/// Deliveries by status.
pub static DELIVERIES: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register_int_gauge_vec!(
        "idem_deliveries",
        "Deliveries on disk by status",
        &["status"]
    )
    .expect("metric registers once")
});

/// Actor failures (panics or errors), by family; the next message restarts the actor.
pub static ACTOR_FAILURES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "idem_actor_failures_total",
        "Actors that failed and were restarted on demand",
        &["family"]
    )
    .expect("metric registers once")
});

/// Rules whose evaluation failed (they did not match), by tenant, playbook and rule: the
/// configured rules are few, and each is named by the configuration.
pub static RULE_ERRORS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "idem_rule_errors_total",
        "Rule evaluations that failed (the rule did not match)",
        &["tenant", "playbook", "rule"]
    )
    .expect("metric registers once")
});

/// Counts a failed evaluation of `rule` of `tenant`'s `playbook`.
pub fn rule_failed(tenant: &str, playbook: &str, rule: &str) {
    RULE_ERRORS
        .with_label_values(&[tenant, playbook, rule])
        .inc();
}

/// Group commit latency (sled flush + fdatasync), per batch.
pub static FLUSH_SECONDS: LazyLock<Histogram> = LazyLock::new(|| {
    register_histogram!(
        "idem_store_flush_seconds",
        "Latency of one group commit",
        vec![0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5]
    )
    .expect("metric registers once")
});

/// A count a core asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Metric {
    /// A claim transition recorded durably: `claimed`, `dispatched`, `completed`, `taken_over`.
    Transition(&'static str),
    /// A delivery attempt, by its number in the delivery's life (1 is the inline one) and the
    /// outcome that follows it.
    Attempt {
        /// The attempt's number.
        number: usize,
        /// `retry`, `delivered`, `failed` or `dead`.
        outcome: &'static str,
    },
    /// A delivery moved between statuses (`None`: created, or forgotten).
    Moved {
        /// Its status before.
        from: Option<DeliveryStatus>,
        /// Its status after.
        to: Option<DeliveryStatus>,
    },
    /// A write refused because its writer was fenced out: `claim` or `delivery`.
    Fenced(&'static str),
}

impl Metric {
    /// Counts it.
    pub fn count(self) {
        match self {
            Metric::Transition(state) => CLAIM_TRANSITIONS.with_label_values(&[state]).inc(),
            Metric::Attempt { number, outcome } => DELIVERY_ATTEMPTS
                .with_label_values(&[attempt_label(number), outcome])
                .inc(),
            Metric::Moved { from, to } => delivery_moved(from, to),
            Metric::Fenced(what) => FENCED_WRITES.with_label_values(&[what]).inc(),
        }
    }
}

/// Sets the delivery gauges from the store's counts, in [`DeliveryStatus::ALL`] order.
pub fn count_deliveries(counts: [u64; DeliveryStatus::ALL.len()]) {
    for (status, count) in DeliveryStatus::ALL.iter().zip(counts) {
        DELIVERIES
            .with_label_values(&[status.as_str()])
            .set(count as i64);
    }
}

/// Moves a delivery between statuses in the gauges (`None`: created, or forgotten).
pub fn delivery_moved(from: Option<DeliveryStatus>, to: Option<DeliveryStatus>) {
    if from == to {
        return;
    }
    if let Some(from) = from {
        DELIVERIES.with_label_values(&[from.as_str()]).dec();
    }
    if let Some(to) = to {
        DELIVERIES.with_label_values(&[to.as_str()]).inc();
    }
}

/// The attempt-number label: `1` … `4`, then `5+`.
pub fn attempt_label(n: usize) -> &'static str {
    match n {
        0 | 1 => "1",
        2 => "2",
        3 => "3",
        4 => "4",
        _ => "5+",
    }
}
