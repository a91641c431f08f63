//! The decisions handle: a tenant's kept decisions as the API shows them, each with its
//! actions' delivery statuses now: one by id, or a subject's (digested here, never stored in
//! clear) newest first, a page at a time. Another tenant's decision is as missing as a missing
//! one. And what a playbook would decide for a signal now ([`Decisions::evaluate`]), which
//! claims, stores and sends nothing.

use std::sync::Arc;

use idem_schemas::timefmt::now_ms;
use idem_schemas::{DecidedAction, DecisionRecord, DecisionView};

use crate::deliveries::DeliveriesError;
use crate::delivery::DeliveryActors;
use crate::digest::Digester;
use crate::playbook::Playbook;
use crate::rules::Input;
use crate::store::{Store, StoreError};

/// What a playbook would decide for a signal now: its verdict, the rule that decides it (none:
/// the playbook's default), its actions' names, and the rules whose evaluation failed.
#[derive(Debug)]
pub struct Evaluated {
    /// The verdict.
    pub verdict: idem_schemas::Verdict,
    /// The rule that decides; `None`: the playbook's default.
    pub rule: Option<String>,
    /// The actions' names, in order.
    pub actions: Vec<String>,
    /// The rules whose evaluation failed.
    pub errors: Vec<idem_schemas::RuleError>,
}

/// A page of a subject's decisions, newest first.
#[derive(Debug)]
pub struct DecisionList {
    /// The decisions.
    pub data: Vec<DecisionView>,
    /// Where the next page starts (the last decision's id), if there is one.
    pub next_after: Option<String>,
}

/// The decisions handle: cheap to clone.
#[derive(Clone)]
pub struct Decisions {
    store: Arc<dyn Store>,
    deliveries: Arc<DeliveryActors>,
    digester: Digester,
}

impl Decisions {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        deliveries: Arc<DeliveryActors>,
        digester: Digester,
    ) -> Self {
        Decisions {
            store,
            deliveries,
            digester,
        }
    }

    /// `tenant`'s decision `id`.
    pub async fn show(
        &self,
        tenant: &str,
        id: &str,
    ) -> Result<Option<DecisionView>, DeliveriesError> {
        let Some(record) = self.store.load_decision(tenant, id, now_ms()).await? else {
            return Ok(None);
        };
        let view = self.view(record).await?;
        self.store.settle().await?;
        Ok(view)
    }

    /// A page of `tenant`'s decisions (about `subject` only, and of `signal_type` only, if
    /// given), newest first, after the cursor `after`, at most `limit`.
    pub async fn list(
        &self,
        tenant: &str,
        subject: Option<&str>,
        signal_type: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<DecisionList, DeliveriesError> {
        let subject_hash = subject.map(|s| self.digester.subject(tenant, s));
        let records = self
            .store
            .decisions_about(
                tenant,
                subject_hash.as_deref(),
                signal_type,
                after,
                limit + 1,
                now_ms(),
            )
            .await?;
        let has_more = records.len() > limit;
        let mut data = Vec::with_capacity(limit);
        for record in records.into_iter().take(limit) {
            data.extend(self.view(record).await?);
        }
        self.store.settle().await?;
        let next_after = data
            .last()
            .filter(|_| has_more)
            .map(|d| d.decision_id.clone());
        Ok(DecisionList { data, next_after })
    }

    /// What `tenant`'s `playbook` would decide for `signal` now, its subject's history read
    /// from the kept decisions: nothing is claimed, stored, counted or sent.
    pub async fn evaluate(
        &self,
        tenant: &str,
        playbook: &Playbook,
        signal: &idem_schemas::SignalRequest,
    ) -> Result<Evaluated, StoreError> {
        let now = now_ms();
        let subject_hash = self.digester.subject(tenant, &signal.subject);
        let calls = playbook.history();
        let counts = crate::history::read(&*self.store, tenant, &subject_hash, calls, now).await?;
        self.store.settle().await?;
        let metadata = signal.metadata.clone().unwrap_or_default();
        let input = Input {
            signal_type: &signal.signal_type,
            subject: &signal.subject,
            metadata: &metadata,
            source: None,
            now_ms: now,
        };
        let choice = playbook.choose(input, &counts);
        Ok(Evaluated {
            verdict: choice.verdict,
            rule: choice.rule.map(str::to_string),
            actions: choice.actions.iter().map(|a| a.name.clone()).collect(),
            errors: choice.errors,
        })
    }

    /// A kept decision as the API shows it, with its deliveries' statuses now. A delivery is
    /// kept as long as its decision: one already forgotten (its node's clock ahead of this
    /// one's) means the decision is past its retention too.
    async fn view(&self, record: DecisionRecord) -> Result<Option<DecisionView>, DeliveriesError> {
        let mut actions = Vec::with_capacity(record.actions.len());
        for action in record.actions {
            let Some(delivery) = self.deliveries.load(&action.delivery_id).await? else {
                return Ok(None);
            };
            let status = delivery.placement.status;
            actions.push(DecidedAction {
                name: action.name,
                stream_id: idem_schemas::stored::stream_of(&delivery.record.url)
                    .map(str::to_string),
                delivery_id: action.delivery_id,
                status,
            });
        }
        Ok(Some(DecisionView {
            decision_id: record.id,
            signal_type: record.signal_type,
            decision: record.verdict,
            rule: record.rule,
            rule_errors: record.rule_errors,
            subject_hash: record.subject_hash,
            source: record.source,
            actions,
            created_at: idem_schemas::timefmt::rfc3339_millis(record.created_at_ms),
            trace_id: record.trace.map(|t| t.trace_id_hex()),
        }))
    }
}
