//! What the database holds once a run on PostgreSQL has settled, checked against the state
//! machines the actors run and against what the clients were answered. A write by a generation
//! or a lease that was fenced out would show here and nowhere else once the run is over: a
//! claim log that does not fold through `Phase::apply` (a second recovery point after a
//! take-over), a row whose decision or response is not the one the clients got, or a delivery
//! record after the delivery's final one.

use std::collections::BTreeMap;

use idem_actors::claim::phase::Phase;
use idem_actors::codec;
use idem_actors::delivery::state::{attempt_after_final, DeliveryState};
use idem_actors::store::status_number;
use idem_schemas::{ClaimEvent, DeliveryEvent};

use crate::clients::ClientOutcome;
use crate::report::Report;

/// Checks the claims and deliveries in the database at `url` (see the module's doc).
pub async fn check(url: &str, outcome: &ClientOutcome, report: &mut Report) {
    let client = match connect(url).await {
        Ok(client) => client,
        Err(e) => return report.expect(false, || format!("cannot read the database: {e}")),
    };
    let claims = match client
        .query("SELECT log, completed FROM idem_claims", &[])
        .await
    {
        Ok(rows) => rows,
        Err(e) => return report.expect(false, || format!("cannot read idem_claims: {e}")),
    };
    // Each decision the database holds, with the response its row would answer.
    let mut stored: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for row in claims {
        let log: Vec<u8> = row.get(0);
        let completed: bool = row.get(1);
        let events: Vec<ClaimEvent> = match codec::decode_entry(&log) {
            Ok(events) => events,
            Err(e) => {
                report.expect(false, || format!("a claim log does not decode: {e}"));
                continue;
            }
        };
        let folded = events
            .into_iter()
            .try_fold(Phase::Free, |phase, event| phase.apply(event));
        match folded {
            Ok(Phase::Dispatched(claim, _, response) | Phase::Completed(claim, response)) => {
                report.expect(true, String::new);
                stored.insert(claim.decision.id, response.body);
            }
            Ok(phase) => report.expect(!completed, || {
                format!("a claim marked completed is {} in its log", phase.name())
            }),
            Err(e) => report.expect(false, || {
                format!("a claim log written past its fencing: {e}")
            }),
        }
    }
    // Every answered key's row holds the decision and the bytes its clients got.
    let keyed: BTreeMap<&str, bool> = outcome
        .jobs
        .iter()
        .map(|j| (j.label.as_str(), j.key.is_some()))
        .collect();
    let mut seen = BTreeMap::new();
    for answer in &outcome.answers {
        if keyed.get(answer.label.as_str()) == Some(&true) {
            seen.entry(answer.label.as_str()).or_insert(&answer.body);
        }
    }
    for (label, body) in seen {
        let id = crate::check::decision_id(body);
        report.expect(stored.get(&id) == Some(body), || {
            format!("{label}: the database does not hold the answered decision {id}")
        });
    }

    let deliveries = match client
        .query("SELECT id, log, records, status FROM idem_deliveries", &[])
        .await
    {
        Ok(rows) => rows,
        Err(e) => return report.expect(false, || format!("cannot read idem_deliveries: {e}")),
    };
    for row in deliveries {
        let id: String = row.get(0);
        let log: Vec<u8> = row.get(1);
        let records: i32 = row.get(2);
        let status: i16 = row.get(3);
        let events: Vec<DeliveryEvent> = match codec::decode_entry(&log) {
            Ok(events) => events,
            Err(e) => {
                report.expect(false, || {
                    format!("delivery {id}: its log does not decode: {e}")
                });
                continue;
            }
        };
        report.expect(events.len() == records as usize, || {
            format!(
                "delivery {id}: {} records, its row counts {records}",
                events.len()
            )
        });
        report.expect(attempt_after_final(&events).is_none(), || {
            format!("delivery {id}: an attempt recorded after its final one (a fenced-out lease)")
        });
        match DeliveryState::fold(events) {
            Ok(state) => {
                let folded = state.view().status;
                report.expect(status_number(folded) as i16 == status, || {
                    format!("delivery {id}: its row says {status}, its log {folded:?}")
                })
            }
            Err(e) => report.expect(false, || format!("delivery {id}: {e}")),
        }
    }
}

async fn connect(url: &str) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}
