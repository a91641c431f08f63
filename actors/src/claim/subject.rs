//! A keyed claim of a playbook decided once per subject runs its decision through the subject's
//! claim, an ordinary claim whose key is a keyed digest of (tenant, signal type, subject) and
//! whose window is the playbook's. The key's claim fixes its decision first (durable, as any
//! claim), then submits that decision to the subject's claim as its "dispatch": the subject's
//! claim takes it as its own if no decision holds the subject (and runs its actions), or
//! answers with the decision that does. Either answer is recorded as the key's recovery point,
//! so the key's retries replay it. After a crash the key's claim is taken over and submits the
//! same fixed decision again, which the subject's claim either holds already or takes.

use std::sync::Arc;
use std::time::Duration;

use idem_schemas::{Decision, StoredResponse, SubjectLink};
use ractor::ActorRef;

use super::{submit, ClaimContext, ClaimMsg, Reply, Submission, ANY_PAYLOAD};
use crate::store::ClaimId;
use crate::supervise::Family;

/// A key's claim's decision, as it offers it to its subject's claim.
pub(super) struct Offer {
    /// The decision, fixed in the key's claim.
    pub decision: Decision,
    /// The subject's claim.
    pub link: SubjectLink,
    /// The key's claim was taken over: the decision may have run before.
    pub taken_over: bool,
    /// Its callbacks are queued rather than attempted inline ([`Submission::queued`]).
    pub queued: bool,
}

/// Runs a keyed claim's decision through its subject's claim, and reports what the subject's
/// claim answered to the key's actor `me` ([`ClaimMsg::Dispatched`]). The subject's claim
/// takes the decision as its own if no other decision holds it (and runs its actions, with the
/// same ids and bytes whoever asks again after a crash), or answers with the decision that
/// does. While another request holds it, the key's first request is answered 409 and this
/// waits, at most `in_flight_timeout` at a time (a subject's claim in flight is answered within
/// an attempt's deadline, or taken over after that). If the subject's claim cannot answer, the
/// key's actor hears so ([`ClaimMsg::SubjectFailed`]).
pub(super) async fn through_subject(
    ctx: Arc<ClaimContext>,
    family: Arc<Family>,
    me: ActorRef<ClaimMsg>,
    generation: u64,
    offer: Offer,
) {
    let Offer {
        decision,
        link,
        taken_over,
        queued,
    } = offer;
    let failed = |error: String| {
        let _ = me.cast(ClaimMsg::SubjectFailed { generation, error });
    };
    let id = ClaimId {
        tenant: decision.tenant.clone(),
        digest: link.digest,
    };
    let mut wait = None;
    loop {
        let offered = decision.clone();
        let mut sub = Submission::new(ANY_PAYLOAD, move |_| Ok(offered))
            .lasting(Duration::from_millis(link.window_ms))
            .waiting(wait)
            .sent_by_a_claim(taken_over);
        if queued {
            sub = sub.queued();
        }
        let response = match submit(&family, &ctx, &id, sub).await {
            Ok(Reply::First(response) | Reply::Replayed(response) | Reply::Awaited(response)) => {
                response
            }
            Ok(Reply::InFlight) => {
                if wait.is_none() && me.cast(ClaimMsg::SubjectInFlight { generation }).is_err() {
                    return;
                }
                // Waits on; still in flight after `in_flight_timeout`, asking again takes the
                // subject's claim over if its holder is gone.
                wait = Some(ctx.settings.in_flight_timeout);
                continue;
            }
            Ok(other) => return failed(format!("{other:?}")),
            Err(e) => return failed(e.to_string()),
        };
        // Another decision's response, or this one's (made before a crash, or just now).
        let deduplicated = decision_id(&response).is_some_and(|id| id != decision.id);
        let _ = me.cast(ClaimMsg::Dispatched {
            generation,
            outcomes: Vec::new(),
            taken_over,
            subject: Some((response, deduplicated)),
        });
        return;
    }
}

/// The decision id a stored `201` response names.
fn decision_id(response: &StoredResponse) -> Option<String> {
    let body: serde_json::Value = serde_json::from_slice(&response.body).ok()?;
    Some(body.get("decision_id")?.as_str()?.to_owned())
}
