//! Bulk recovery: every failed or dead delivery of a tenant that matches a filter gets a new
//! series of attempts, as a single redelivery gives one; the retry worker then makes them,
//! paced by each endpoint's limit of attempts at once. With an idempotency key the request is
//! claimed like a signal (a claim whose decision has no actions, under a digest of its own
//! domain) and answered by the claim protocol's own rule (`phase::step`), so a retried bulk
//! request gets the first answer and redelivers nothing again. Its matches are fixed in its
//! claim (as its decision's deliveries): a holder that takes it over after a crash redelivers
//! those, skipping any redelivered since the claim, rather than what matches by then.

use futures::StreamExt;
use idem_schemas::timefmt::now_ms;
use idem_schemas::{
    Claim, ClaimEvent, Decision, DeliveryStatus, PlannedDelivery, Redelivered, StoredResponse,
    Verdict,
};

use crate::claim::phase::{self, Holder, Phase, Step};
use crate::delivery::RedeliverError;
use crate::engine::{Engine, EngineError};
use crate::failpoint;
use crate::store::{ClaimId, ClaimLog, Unit, Written};

/// Which deliveries a bulk redelivery takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedeliverFilter {
    /// Failed or dead.
    pub status: DeliveryStatus,
    /// Created at or after this (unix milliseconds).
    pub since_ms: Option<u64>,
    /// Created at or before this (unix milliseconds).
    pub until_ms: Option<u64>,
    /// Of this playbook action only.
    pub action: Option<String>,
}

/// What a bulk request with an idempotency key gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BulkReply {
    /// The first processing: its answer.
    First(StoredResponse),
    /// The answer of an earlier request with the same key and body.
    Replayed(StoredResponse),
    /// An earlier request with the same key is still running.
    InFlight,
    /// The key was used with another body.
    Mismatch,
}

/// Deliveries redelivered at once (their writes share group commits).
const CONCURRENCY: usize = 32;
/// Listing page size while gathering matches.
const PAGE: usize = 500;

impl Engine {
    /// The deliveries of `tenant` that `filter` matches now.
    async fn matching(
        &self,
        tenant: &str,
        filter: &RedeliverFilter,
    ) -> Result<Vec<String>, EngineError> {
        let mut matching = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = self
                .store()
                .list_deliveries(
                    tenant,
                    Some(filter.status),
                    after.as_deref().map(|id| (filter.status, id)),
                    PAGE,
                )
                .await?;
            let Some((_, last)) = page.last() else { break };
            after = Some(last.clone());
            for (_, id) in page {
                let Some(d) = self.deliveries().load(&id).await? else {
                    continue;
                };
                let r = &d.record;
                let wanted = r.tenant == tenant
                    && filter.since_ms.is_none_or(|t| r.created_at_ms >= t)
                    && filter.until_ms.is_none_or(|t| r.created_at_ms <= t)
                    && filter.action.as_deref().is_none_or(|a| r.action == a);
                if wanted {
                    matching.push(id);
                }
            }
        }
        Ok(matching)
    }

    /// Redelivers `ids`; how many. With `since_ms` (the time of the bulk claim that fixed
    /// them), one redelivered since then was redelivered by that claim's earlier holder, which
    /// crashed part-way: it counts, and is not redelivered again.
    async fn redeliver_each(
        &self,
        ids: Vec<String>,
        since_ms: Option<u64>,
    ) -> Result<u64, EngineError> {
        let deliveries = self.deliveries();
        let mut done = futures::stream::iter(ids)
            .map(|id| async move {
                if let Some(since) = since_ms {
                    let earlier = deliveries.load(&id).await?;
                    if earlier.is_some_and(|d| d.redelivered_at_ms.is_some_and(|at| at >= since)) {
                        return Ok(true);
                    }
                }
                let redelivered = deliveries.redeliver(&id).await;
                failpoint::hit("bulk.part_way");
                match redelivered {
                    Ok(_) => Ok(true),
                    // Moved on meanwhile (redelivered by another request, or expired).
                    Err(RedeliverError::NotFinal(_) | RedeliverError::NotFound) => Ok(false),
                    Err(RedeliverError::Store(e)) => Err(EngineError::from(e)),
                    Err(RedeliverError::Actor(e)) => Err(e.into()),
                }
            })
            .buffer_unordered(CONCURRENCY);
        let mut redelivered = 0;
        while let Some(outcome) = done.next().await {
            if outcome? {
                redelivered += 1;
            }
        }
        Ok(redelivered)
    }

    /// A bulk redelivery's answer: with `key` (its idempotency key and its body, whose
    /// fingerprint a retry must match), once per key.
    pub async fn redeliver_bulk(
        &self,
        tenant: &str,
        filter: &RedeliverFilter,
        key: Option<(&str, &serde_json::Value)>,
    ) -> Result<BulkReply, EngineError> {
        let Some((key, body)) = key else {
            let ids = self.matching(tenant, filter).await?;
            return Ok(BulkReply::First(self.redelivered(ids, None).await?));
        };
        let id = ClaimId {
            tenant: tenant.to_string(),
            digest: self.digester().bulk_key(tenant, key),
        };
        let fingerprint = self.digester().fingerprint(tenant, body);
        // A retry of a request answered (or running) is answered without a scan of the backlog.
        if let Some(log) = self.store().load_claim(&id, now_ms()).await? {
            if let Some(reply) = self.step(&log, fingerprint, now_ms())? {
                return Ok(reply);
            }
        }
        // The matches are fixed when the request is claimed, in its claim: a holder that takes
        // the request over after a crash redelivers those, not what matches by then.
        let ids = self.matching(tenant, filter).await?;
        let now = now_ms();
        let claim = Claim {
            fingerprint,
            holder: self.epoch(),
            claimed_at_ms: now,
            expires_at_ms: now + self.settings().idempotency.key_ttl.as_millis() as u64,
            decision: Decision {
                id: format!("bulk_{now:x}"),
                tenant: id.tenant.clone(),
                signal_type: "deliveries.redeliver".into(),
                source: None,
                verdict: Verdict::Allow,
                subject_hash: String::new(),
                created_at_ms: now,
                // What the request redelivers, by delivery id (a bulk claim has no callbacks).
                deliveries: ids
                    .iter()
                    .map(|id| PlannedDelivery {
                        id: id.clone(),
                        action: "redeliver".into(),
                        url: String::new(),
                        body: Vec::new(),
                    })
                    .collect(),
            },
            subject: None,
        };
        let started = self
            .store()
            .commit(Unit::new().start_claim(id.clone(), vec![ClaimEvent::Claimed(claim)]))
            .await?;
        let (head, ids, since) = match started {
            Written::Claimed(head, _) => (head, ids, now),
            Written::Held(log) => match self.step(&log, fingerprint, now)? {
                Some(reply) => return Ok(reply),
                // Its holder looks gone; the store has the last word.
                None => match self
                    .store()
                    .commit(Unit::new().take_over_claim(log.head.clone()))
                    .await?
                {
                    Written::TakenOver(head) => {
                        let (ids, since) = fixed(&log)?;
                        (head, ids, since)
                    }
                    Written::Held(log) => {
                        return Ok(self
                            .step(&log, fingerprint, now)?
                            .unwrap_or(BulkReply::InFlight))
                    }
                    _ => return Ok(BulkReply::InFlight),
                },
            },
            _ => return Ok(BulkReply::InFlight),
        };
        let response = self.redelivered(ids, Some(since)).await?;
        // Once durable, a retry answers these bytes and redelivers nothing.
        let events = vec![
            ClaimEvent::Dispatched {
                outcomes: Vec::new(),
                response: response.clone(),
            },
            ClaimEvent::Completed,
        ];
        let recorded = self
            .store()
            .commit(Unit::new().append_claim(head, events))
            .await?;
        if matches!(recorded, Written::Appended(..)) {
            return Ok(BulkReply::First(response));
        }
        // Another request took the key over meanwhile: its answer, once it has one, is the key's.
        let answer = match self.store().load_claim(&id, now_ms()).await? {
            Some(log) => self.step(&log, fingerprint, now_ms())?,
            None => None,
        };
        Ok(answer
            .filter(|reply| *reply != BulkReply::InFlight)
            .unwrap_or(BulkReply::First(response)))
    }

    /// Redelivers `ids` (see [`Engine::redeliver_each`]); the `202` saying how many.
    async fn redelivered(
        &self,
        ids: Vec<String>,
        since_ms: Option<u64>,
    ) -> Result<StoredResponse, EngineError> {
        let redelivered = self.redeliver_each(ids, since_ms).await?;
        let body = serde_json::to_vec(&Redelivered { redelivered })?;
        Ok(StoredResponse { status: 202, body })
    }

    /// What a request with `fingerprint` gets from the claim that holds its key, by the claim
    /// protocol's own rule ([`phase::step`]); `None` when the claim's holder looks gone and the
    /// request may take it over.
    fn step(
        &self,
        log: &ClaimLog,
        fingerprint: [u8; 32],
        now: u64,
    ) -> Result<Option<BulkReply>, EngineError> {
        let phase = log
            .events
            .iter()
            .cloned()
            .try_fold(Phase::Free, Phase::apply)?;
        let holder = Holder::of(self.epoch(), &self.settings().idempotency);
        Ok(match phase::step(&phase, None, &fingerprint, now, holder) {
            Step::Replay(response) => Some(BulkReply::Replayed(response)),
            Step::Finish => Some(
                phase
                    .response()
                    .cloned()
                    .map_or(BulkReply::InFlight, BulkReply::Replayed),
            ),
            Step::Mismatch => Some(BulkReply::Mismatch),
            Step::TakeOver => None,
            Step::InFlight | Step::Expiring | Step::Claim => Some(BulkReply::InFlight),
        })
    }
}

/// The deliveries a bulk claim's log fixed, and when it was claimed.
fn fixed(log: &ClaimLog) -> Result<(Vec<String>, u64), EngineError> {
    match log.events.first() {
        Some(ClaimEvent::Claimed(claim)) => Ok((
            claim
                .decision
                .deliveries
                .iter()
                .map(|d| d.id.clone())
                .collect(),
            claim.claimed_at_ms,
        )),
        _ => Err(
            crate::claim::ClaimError::from(crate::claim::phase::Invariant::NoClaim(
                "bulk take-over",
            ))
            .into(),
        ),
    }
}
