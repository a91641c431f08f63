//! Decisions kept for lookup, in sled. Two trees: `decisions` holds each record under its
//! tenant and id; `decisions_by_subject` names each decision under its tenant and subject
//! digest. Ids are time-ordered, so both are in the order decisions are made: a subject's
//! decisions newest first are one reverse scan of a prefix, and a tenant's decisions are in the
//! order they expire (one retention for all), so the sweeper walks each tenant's from its oldest
//! and needs no index of its own. A record is written once: writing a decision that is kept
//! already (a claim finished again after a take-over) leaves it as it is.

use std::future::ready;

use idem_schemas::DecisionRecord;

use super::keys::{decision_key, past_tenant, subject_listing, subject_prefix, tenant_prefix};
use super::SledStore;
use crate::codec;
use crate::store::{first_decision_id_at, DecisionStore, Read, StoreError};

impl DecisionStore for SledStore {
    fn load_decision<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
        now_ms: u64,
    ) -> Read<'a, Option<DecisionRecord>> {
        let read = self
            .commits
            .usable()
            .and_then(|()| self.read_decision(tenant, id, now_ms));
        Box::pin(ready(read))
    }

    fn decisions_about<'a>(
        &'a self,
        tenant: &'a str,
        subject_hash: Option<&'a str>,
        signal_type: Option<&'a str>,
        before: Option<&'a str>,
        limit: usize,
        now_ms: u64,
    ) -> Read<'a, Vec<DecisionRecord>> {
        let Some(subject_hash) = subject_hash else {
            let read = self
                .commits
                .usable()
                .and_then(|()| self.recent_decisions(tenant, signal_type, before, limit, now_ms));
            return Box::pin(ready(read));
        };
        let read = self.commits.usable().and_then(|()| {
            let prefix = subject_prefix(tenant, subject_hash);
            let end = match before {
                Some(id) => [&prefix[..], id.as_bytes()].concat(),
                // Past every id of the prefix: ids are ASCII.
                None => [&prefix[..], &[0xff]].concat(),
            };
            let mut found = Vec::new();
            for entry in self.by_subject.range(prefix.clone()..end).rev() {
                let (key, _) = entry?;
                let id = key
                    .get(prefix.len()..)
                    .and_then(|id| std::str::from_utf8(id).ok())
                    .ok_or(StoreError::Malformed("decisions_by_subject"))?;
                let record = self
                    .read_decision(tenant, id, now_ms)?
                    .filter(|r| signal_type.is_none_or(|t| r.signal_type == t));
                if let Some(record) = record {
                    found.push(record);
                    if found.len() == limit {
                        break;
                    }
                }
            }
            Ok(found)
        });
        Box::pin(ready(read))
    }

    fn count_decisions<'a>(
        &'a self,
        tenant: &'a str,
        subject_hash: &'a str,
        signal_type: Option<&'a str>,
        since_ms: u64,
        limit: u64,
        now_ms: u64,
    ) -> Read<'a, u64> {
        let read = self.commits.usable().and_then(|()| {
            // One range of the subject's listing from `since_ms` on, and a read of each record
            // in it (its type and its expiry), up to `limit` of them.
            let prefix = subject_prefix(tenant, subject_hash);
            let start = [&prefix[..], first_decision_id_at(since_ms).as_bytes()].concat();
            let end = [&prefix[..], &[0xff]].concat();
            let mut counted = 0;
            for entry in self.by_subject.range(start..end) {
                let (key, _) = entry?;
                let id = key
                    .get(prefix.len()..)
                    .and_then(|id| std::str::from_utf8(id).ok())
                    .ok_or(StoreError::Malformed("decisions_by_subject"))?;
                let record = self
                    .read_decision(tenant, id, now_ms)?
                    .filter(|r| signal_type.is_none_or(|t| r.signal_type == t));
                if record.is_some() {
                    counted += 1;
                    if counted >= limit {
                        break;
                    }
                }
            }
            Ok(counted)
        });
        Box::pin(ready(read))
    }

    fn expire_decisions(&self, now_ms: u64, limit: usize) -> Result<usize, StoreError> {
        // Each tenant's decisions from its oldest, up to the first that has not expired. Made
        // under a longer retention than today's, the oldest hold the newer ones behind them
        // back until they go too; an expired record reads as none meanwhile.
        let mut expired = 0;
        let mut from = Vec::new();
        while expired < limit {
            let Some(first) = self.decisions.range(from..).keys().next() else {
                break;
            };
            let first = first?;
            let next_tenant = past_tenant(&first)?;
            for entry in self.decisions.range(first.to_vec()..next_tenant.clone()) {
                let (key, value) = entry?;
                let record: DecisionRecord = codec::decode(&value)?;
                if record.expires_at_ms > now_ms {
                    break;
                }
                self.decisions.remove(&key)?;
                self.by_subject.remove(subject_listing(&record))?;
                expired += 1;
                if expired == limit {
                    break;
                }
            }
            from = next_tenant;
        }
        Ok(expired)
    }
}

impl SledStore {
    /// `tenant`'s decision `id`, unless it expired by `now_ms`.
    pub(super) fn read_decision(
        &self,
        tenant: &str,
        id: &str,
        now_ms: u64,
    ) -> Result<Option<DecisionRecord>, StoreError> {
        let Some(found) = self.decisions.get(decision_key(tenant, id))? else {
            return Ok(None);
        };
        let record: DecisionRecord = codec::decode(&found)?;
        Ok((record.expires_at_ms > now_ms).then_some(record))
    }

    /// Up to `limit` of `tenant`'s newest decisions (of `signal_type` only, if given), older than
    /// `before` if given: one backward scan of the tenant's records, keyed by time-ordered id.
    fn recent_decisions(
        &self,
        tenant: &str,
        signal_type: Option<&str>,
        before: Option<&str>,
        limit: usize,
        now_ms: u64,
    ) -> Result<Vec<DecisionRecord>, StoreError> {
        let prefix = tenant_prefix(tenant);
        let end = match before {
            Some(id) => [&prefix[..], id.as_bytes()].concat(),
            // Past every id of the prefix: ids are ASCII.
            None => [&prefix[..], &[0xff]].concat(),
        };
        let mut found = Vec::new();
        for entry in self.decisions.range(prefix..end).rev() {
            let (_, value) = entry?;
            let record: DecisionRecord = codec::decode(&value)?;
            if record.expires_at_ms <= now_ms
                || signal_type.is_some_and(|t| record.signal_type != t)
            {
                continue;
            }
            found.push(record);
            if found.len() == limit {
                break;
            }
        }
        Ok(found)
    }

    /// Keeps `record` (in sled's memory until the next commit), unless it is kept already.
    pub(super) fn keep_decision(&self, record: &DecisionRecord) -> Result<(), StoreError> {
        let key = decision_key(&record.tenant, &record.id);
        let kept = self.decisions.compare_and_swap(
            &key,
            None as Option<&[u8]>,
            Some(codec::encode(record)?),
        )?;
        if kept.is_err() {
            return Ok(());
        }
        self.by_subject.insert(subject_listing(record), &[])?;
        Ok(())
    }
}
