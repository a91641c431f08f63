//! `idem_store_state{state}`: whether the store can make a write durable, probed at each scrape
//! of `/metrics` through the same path as `/healthz` (a small write, made durable). One of
//! `writable`, `read_only` (the database takes no writes: a standby, `default_transaction_read_only`;
//! or a read-only file system) and `failing` (any other error, or no answer in time) is 1, the
//! others 0, so an alert on one of them holds from the first scrape.

use std::sync::LazyLock;

use idem_actors::{Engine, StoreError};
use prometheus::{register_int_gauge_vec, IntGaugeVec};

static STORE_STATE: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register_int_gauge_vec!(
        "idem_store_state",
        "Whether the store made a probe durable at this scrape: writable, read_only or failing (1 for the one that holds)",
        &["state"]
    )
    .expect("metric registers once")
});

const STATES: [&str; 3] = ["writable", "read_only", "failing"];

/// The state a probe's result tells.
pub fn state_of(probe: &Result<(), StoreError>) -> &'static str {
    match probe {
        Ok(()) => "writable",
        Err(e) if e.is_read_only() => "read_only",
        Err(_) => "failing",
    }
}

/// Probes the store and sets the gauge.
pub async fn probe(engine: &Engine) {
    let state = state_of(&engine.node().health().await);
    for s in STATES {
        STORE_STATE
            .with_label_values(&[s])
            .set(i64::from(s == state));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_only_file_system_is_read_only_and_other_errors_are_failing() {
        let io = |kind| Err(StoreError::from(std::io::Error::from(kind)));
        assert_eq!(state_of(&Ok(())), "writable");
        assert_eq!(
            state_of(&io(std::io::ErrorKind::ReadOnlyFilesystem)),
            "read_only"
        );
        let halted = Err(StoreError::Halted(std::sync::Arc::new(StoreError::from(
            std::io::Error::from(std::io::ErrorKind::ReadOnlyFilesystem),
        ))));
        assert_eq!(state_of(&halted), "read_only");
        assert_eq!(state_of(&io(std::io::ErrorKind::StorageFull)), "failing");
        assert_eq!(
            state_of(&Err(StoreError::Unresponsive(
                std::time::Duration::from_secs(5)
            ))),
            "failing"
        );
    }
}
