//! The claim a signal is decided under, with no I/O: none for a keyless signal (decided every
//! time), the subject's for a keyless one of a playbook decided once per subject, the key's
//! otherwise (an idempotency key, or a source's event id), through the subject's claim when
//! the playbook says so; named by keyed digests. The engine and the model checker both run it.

use std::time::Duration;

use idem_schemas::{SignalRequest, SubjectLink};

use super::By;
use crate::claim::{Request, ANY_PAYLOAD};
use crate::digest::Digester;
use crate::playbook::Playbook;
use crate::settings::Settings;
use crate::store::ClaimId;

/// The least a source event's claim lasts (`idempotency.key_ttl` when longer): Stripe retries an
/// event for up to three days, and a retry after its claim expired would be a new decision.
pub const EVENT_CLAIM_MIN: Duration = Duration::from_secs(3 * 24 * 3600);

/// How long an event waits for a delivery of it that is being claimed right now (a provider
/// sending the same event twice at once) before it is answered as still in flight.
const CONCURRENT_WAIT: Duration = Duration::from_secs(2);

/// The claim a signal is decided under, and what that claim reads of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    /// The claim.
    pub id: ClaimId,
    /// What the claim reads of the signal.
    pub request: Request,
    /// The claim is the subject's: a decision it made before is the subject's.
    pub of_subject: bool,
}

/// The claim `tenant`'s `signal`, of `playbook`, that came `by` is decided under.
pub fn claimed(
    digester: &Digester,
    settings: &Settings,
    tenant: &str,
    signal: &SignalRequest,
    playbook: &Playbook,
    by: &By<'_>,
) -> Option<Claimed> {
    let subject = playbook.once_per_subject.map(|window| SubjectLink {
        digest: digester.subject_claim(tenant, &signal.signal_type, &signal.subject),
        window_ms: window.as_millis() as u64,
    });
    let claim = |digest, request, of_subject| {
        let id = ClaimId {
            tenant: tenant.to_string(),
            digest,
        };
        Some(Claimed {
            id,
            request,
            of_subject,
        })
    };
    match (*by, subject) {
        (By::Request { key: None, .. }, None) => None,
        // Keyless, once per subject: the subject's claim is the signal's key.
        (
            By::Request {
                key: None, wait, ..
            },
            Some(link),
        ) => {
            let request = Request {
                lasts: Some(Duration::from_millis(link.window_ms)),
                wait,
                ..Request::new(ANY_PAYLOAD)
            };
            claim(link.digest, request, true)
        }
        (
            By::Request {
                key: Some(key),
                body,
                wait,
            },
            subject,
        ) => {
            let request = Request {
                wait,
                subject,
                ..Request::new(digester.fingerprint(tenant, body))
            };
            claim(digester.key(tenant, key), request, false)
        }
        (By::Event { source, id, .. }, subject) => {
            let request = Request {
                lasts: Some(settings.idempotency.key_ttl.max(EVENT_CLAIM_MIN)),
                wait: Some(CONCURRENT_WAIT),
                subject,
                queued: true,
                ..Request::new(ANY_PAYLOAD)
            };
            claim(digester.source_event(tenant, source, id), request, false)
        }
    }
}
