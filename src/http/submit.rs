//! The one way a signal routed to its tenant, posted (`ingest`) or a source's event
//! (`sources`), goes to the engine: with the tenant's transmitter (where its `set` actions go),
//! through the signals handle, counted once (the tenant's tally; decisions made, by verdict).
//! Its callers only map the outcome to their answer.

use idem_actors::{By, Outcome, Routed, SignalError};
use idem_schemas::SignalRequest;

use crate::config::Tenant;
use crate::http::metrics::DECISIONS;
use crate::http::{App, Live};

/// Decides `tenant`'s `signal`, which came `by`, under the configuration `live`.
pub async fn submit(
    app: &App,
    live: &Live,
    tenant: &Tenant,
    signal: SignalRequest,
    by: By<'_>,
) -> Result<Outcome, SignalError> {
    let routed = Routed {
        tenant: &tenant.name,
        playbooks: &tenant.playbooks,
        signal,
        by,
        transmitter: crate::http::transmitter::of(app, live, &tenant.name),
    };
    let outcome = app.engine.signals().decide(routed).await;
    if !matches!(outcome, Err(SignalError::NoPlaybook(_))) {
        app.stats.signal(&tenant.name);
    }
    if let Some(verdict) = outcome.as_ref().ok().and_then(Outcome::new_decision) {
        DECISIONS.with_label_values(&[verdict.as_str()]).inc();
        app.stats.decision(&tenant.name);
    }
    outcome
}
