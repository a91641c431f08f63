//! Bulk redelivery's claim: every failed or dead delivery of a tenant that matches a filter gets a new
//! series of attempts, as a single redelivery gives one; the retry worker then makes them,
//! paced by each endpoint's limit of attempts at once. With an idempotency key the request is
//! claimed like a signal (a claim whose decision has no actions, under a digest of its own
//! domain) and answered by the claim protocol's own rule (`phase::step`), so a retried bulk
//! request gets the first answer and redelivers nothing again. Its matches are fixed in its
//! claim (as its decision's deliveries): a holder that takes it over after a crash redelivers
//! those, skipping any redelivered since the claim, rather than what matches by then. Each
//! delivery's actor asks that of its log and writes the redelivery after it, so a holder that
//! stalls and the one that took over from it redeliver a delivery once between them.
//!
//! The rule is sans-IO, the engine's and the model checker's (`model/src/bulk.rs`) alike: which
//! deliveries the filter matches ([`RedeliverFilter::matches`]), the claim that fixes them
//! ([`claim`]), what its holder redelivers ([`plan`]; each delivery's actor then follows
//! `DeliveryState::redelivery`), the answer it records (`record::writes`), and what a request
//! gets from the claim that holds its key ([`answer`]). [`BulkSabotage`] switches one of its
//! rules off, for the checker only.

use std::time::Duration;

use futures::StreamExt;
use idem_schemas::timefmt::now_ms;
use idem_schemas::{
    Claim, ClaimEvent, Decision, DeliveryRecord, DeliveryStatus, PlannedDelivery, StoredResponse,
    Verdict,
};

use super::Signals;
use crate::claim::phase::{self, Holder, InvalidTransition, Invariant, Phase, Step};
use crate::claim::ClaimError;
use crate::delivery::{DeliveryError, RedeliverError};
use crate::failpoint;
use crate::record::{self, Decided};
use crate::store::{ClaimId, StoreError, Unit, Written};
use crate::supervise::RegistryError;

/// Why a bulk redelivery got no answer.
#[derive(Debug, thiserror::Error)]
pub enum BulkError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A delivery could not be read.
    #[error(transparent)]
    Delivery(#[from] DeliveryError),
    /// A delivery's actor could not be reached.
    #[error(transparent)]
    Actors(#[from] RegistryError),
    /// The claim's log does not fold, or breaks an invariant.
    #[error(transparent)]
    Claim(#[from] ClaimError),
    /// The answer could not be serialised.
    #[error("cannot serialise the answer: {0}")]
    Response(#[from] serde_json::Error),
}

impl From<InvalidTransition> for BulkError {
    fn from(e: InvalidTransition) -> Self {
        BulkError::Claim(e.into())
    }
}

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

impl RedeliverFilter {
    /// Whether it takes `record`, a delivery of `tenant`'s with the status it asks for.
    pub fn matches(&self, tenant: &str, record: &DeliveryRecord) -> bool {
        record.tenant == tenant
            && self.since_ms.is_none_or(|t| record.created_at_ms >= t)
            && self.until_ms.is_none_or(|t| record.created_at_ms <= t)
            && self.action.as_deref().is_none_or(|a| record.action == a)
    }
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

impl Signals {
    /// The deliveries of `tenant` that `filter` matches now.
    async fn matching(
        &self,
        tenant: &str,
        filter: &RedeliverFilter,
    ) -> Result<Vec<String>, BulkError> {
        let mut matching = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = self
                .ctx()
                .store
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
                let Some(d) = self.deliveries.load(&id).await? else {
                    continue;
                };
                if filter.matches(tenant, &d.record) {
                    matching.push(id);
                }
            }
        }
        Ok(matching)
    }

    /// Redelivers `ids`; how many. With `since_ms` (the time of the bulk claim that fixed
    /// them), one redelivered since counts and is not redelivered again
    /// (`DeliveryState::redelivery`, asked by its delivery actor).
    async fn redeliver_each(
        &self,
        ids: Vec<String>,
        since_ms: Option<u64>,
    ) -> Result<u64, BulkError> {
        let deliveries = &self.deliveries;
        let mut done = futures::stream::iter(ids)
            .map(|id| async move {
                let redelivered = deliveries.redeliver(&id, since_ms).await;
                failpoint::hit("bulk.part_way");
                match redelivered {
                    Ok(_) => Ok(true),
                    // Moved on meanwhile (redelivered by another request, or expired).
                    Err(
                        RedeliverError::NotFinal(_)
                        | RedeliverError::NotFound
                        | RedeliverError::Erased,
                    ) => Ok(false),
                    Err(RedeliverError::Store(e)) => Err(BulkError::from(e)),
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
    ) -> Result<BulkReply, BulkError> {
        let Some((key, body)) = key else {
            let ids = self.matching(tenant, filter).await?;
            let count = self.redeliver_each(ids, None).await?;
            return Ok(BulkReply::First(record::redelivered(count)?));
        };
        let ctx = self.ctx();
        let (store, digester) = (&ctx.store, &ctx.digester);
        let id = ClaimId {
            tenant: tenant.to_string(),
            digest: digester.bulk_key(tenant, key),
        };
        let fingerprint = digester.fingerprint(tenant, body);
        // A retry of a request answered (or running) is answered without a scan of the backlog.
        if let Some(log) = store.load_claim(&id, now_ms()).await? {
            if let Some(reply) = self.step(&log.events, fingerprint, now_ms())? {
                return Ok(reply);
            }
        }
        // The matches are fixed when the request is claimed, in its claim: a holder that takes
        // the request over after a crash redelivers those, not what matches by then.
        let ids = self.matching(tenant, filter).await?;
        let now = now_ms();
        let key_ttl = ctx.core.settings.idempotency.key_ttl;
        let claimed = claim(tenant, &ids, fingerprint, self.epoch, now, key_ttl);
        let started = store
            .commit(Unit::new().start_claim(id.clone(), vec![ClaimEvent::Claimed(claimed)]))
            .await?;
        let (head, planned) = match started {
            Written::Claimed(head, events) => (head, plan(&events, Held::Claimed, None)),
            Written::Held(log) => match self.step(&log.events, fingerprint, now)? {
                Some(reply) => return Ok(reply),
                // Its holder looks gone; the store has the last word.
                None => match store
                    .commit(Unit::new().take_over_claim(log.head.clone()))
                    .await?
                {
                    Written::TakenOver(head) => (head, plan(&log.events, Held::TakenOver, None)),
                    Written::Held(log) => {
                        return Ok(self
                            .step(&log.events, fingerprint, now)?
                            .unwrap_or(BulkReply::InFlight))
                    }
                    _ => return Ok(BulkReply::InFlight),
                },
            },
            _ => return Ok(BulkReply::InFlight),
        };
        let Plan { matches, since_ms } = planned.map_err(ClaimError::from)?;
        let ids = match matches {
            Matches::Fixed(ids) => ids,
            Matches::Rescan => self.matching(tenant, filter).await?,
        };
        let count = self.redeliver_each(ids, since_ms).await?;
        let response = record::redelivered(count)?;
        let decided = Decided::Redelivered {
            head,
            response: response.clone(),
        };
        let written = store
            .commit(record::writes(decided, &ctx.core.settings)?.unit)
            .await?;
        if matches!(written, Written::Appended(..)) {
            return Ok(BulkReply::First(response));
        }
        // Another request took the key over meanwhile: its answer, once it has one, is the key's.
        let theirs = match store.load_claim(&id, now_ms()).await? {
            Some(log) => self.step(&log.events, fingerprint, now_ms())?,
            None => None,
        };
        Ok(theirs
            .filter(|reply| *reply != BulkReply::InFlight)
            .unwrap_or(BulkReply::First(response)))
    }

    /// What a request with `fingerprint` gets at `now` from the claim whose log is `events`
    /// (see [`answer`]), as this process.
    fn step(
        &self,
        events: &[ClaimEvent],
        fingerprint: [u8; 32],
        now: u64,
    ) -> Result<Option<BulkReply>, BulkError> {
        let holder = Holder::of(self.epoch, &self.ctx().core.settings.idempotency);
        Ok(answer(events, &fingerprint, now, holder)?)
    }
}

/// The claim of a bulk request of `tenant` whose body has `fingerprint`, made at `now_ms` by
/// the process of epoch `holder`: it fixes what the request redelivers, `ids`, as its decision's
/// deliveries (a bulk claim has no callbacks).
pub fn claim(
    tenant: &str,
    ids: &[String],
    fingerprint: [u8; 32],
    holder: u64,
    now_ms: u64,
    key_ttl: Duration,
) -> Claim {
    Claim {
        fingerprint,
        holder,
        claimed_at_ms: now_ms,
        expires_at_ms: now_ms + key_ttl.as_millis() as u64,
        decision: Decision {
            id: format!("bulk_{now_ms:x}"),
            tenant: tenant.to_string(),
            signal_type: "deliveries.redeliver".into(),
            source: None,
            verdict: Verdict::Allow,
            subject_hash: String::new(),
            created_at_ms: now_ms,
            deliveries: ids
                .iter()
                .map(|id| PlannedDelivery {
                    id: id.clone(),
                    action: "redeliver".into(),
                    url: String::new(),
                    body: Vec::new(),
                    key: None,
                    token: None,
                })
                .collect(),
            trace: None,
            rule: None,
            rule_errors: Vec::new(),
        },
        subject: None,
    }
}

/// A rule of the bulk redelivery switched off, to show that the model checker catches it; none
/// in a real run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BulkSabotage {
    /// A holder that takes the request over redelivers what the filter matches by then, not what
    /// the claim fixed.
    RescanOnTakeOver,
    /// A holder redelivers each of its deliveries, one redelivered since the claim too (it asks
    /// without the claim's time).
    NoSkip,
}

/// What a holder of a bulk request redelivers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Which deliveries.
    pub matches: Matches,
    /// When the request was claimed, which each delivery is asked its redelivery with: one of
    /// them redelivered since counts as done (`DeliveryState::redelivery`).
    pub since_ms: Option<u64>,
}

/// Which deliveries a holder of a bulk request redelivers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Matches {
    /// Those its claim fixed, by id.
    Fixed(Vec<String>),
    /// What the filter matches now ([`BulkSabotage::RescanOnTakeOver`] only).
    Rescan,
}

/// How a holder came to hold a bulk request's claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// It made the claim.
    Claimed,
    /// It took the claim over from a holder that is gone.
    TakenOver,
}

/// What the holder of the bulk claim whose log is `events` redelivers: the deliveries the claim
/// fixed, however it came to hold it.
pub fn plan(
    events: &[ClaimEvent],
    held: Held,
    sabotage: Option<BulkSabotage>,
) -> Result<Plan, Invariant> {
    let Some(ClaimEvent::Claimed(claim)) = events.first() else {
        return Err(Invariant::NoClaim("bulk redelivery"));
    };
    let matches = match (held, sabotage) {
        (Held::TakenOver, Some(BulkSabotage::RescanOnTakeOver)) => Matches::Rescan,
        _ => Matches::Fixed(
            claim
                .decision
                .deliveries
                .iter()
                .map(|d| d.id.clone())
                .collect(),
        ),
    };
    let since_ms = match sabotage {
        Some(BulkSabotage::NoSkip) => None,
        _ => Some(claim.claimed_at_ms),
    };
    Ok(Plan { matches, since_ms })
}

/// What a bulk request whose body has `fingerprint` gets at `now` from the claim whose log is
/// `events`, the one that holds its key, as `holder`: by the claim protocol's own rule
/// ([`phase::step`]); `None` when the claim's holder looks gone and the request may take it
/// over (the store has the last word).
pub fn answer(
    events: &[ClaimEvent],
    fingerprint: &[u8; 32],
    now: u64,
    holder: Holder,
) -> Result<Option<BulkReply>, InvalidTransition> {
    let phase = events.iter().cloned().try_fold(Phase::Free, Phase::apply)?;
    Ok(match phase::step(&phase, None, fingerprint, now, holder) {
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

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = 1_000;

    #[test]
    fn a_holder_redelivers_what_the_claim_fixed_asking_with_the_claims_time() {
        let ids = vec!["msg_a".to_string(), "msg_b".to_string()];
        let events = [ClaimEvent::Claimed(claim(
            "acme",
            &ids,
            [7; 32],
            1,
            T,
            Duration::from_secs(60),
        ))];
        for held in [Held::Claimed, Held::TakenOver] {
            let fixed = plan(&events, held, None).expect("a claim");
            assert_eq!(fixed.matches, Matches::Fixed(ids.clone()));
            assert_eq!(fixed.since_ms, Some(T));
        }
        let rescan = plan(
            &events,
            Held::TakenOver,
            Some(BulkSabotage::RescanOnTakeOver),
        );
        assert_eq!(rescan.expect("a claim").matches, Matches::Rescan);
        let no_skip = plan(&events, Held::TakenOver, Some(BulkSabotage::NoSkip));
        assert_eq!(no_skip.expect("a claim").since_ms, None);
        assert!(
            plan(&[], Held::TakenOver, None).is_err(),
            "no claim, no plan"
        );
    }
}
