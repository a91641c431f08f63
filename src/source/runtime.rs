//! What each source keeps while idem runs, by (tenant, source): an `ssf` source's cached JWK
//! Set, and every source's status as this node saw it (what became of its events, and for `ssf`
//! what its transmitter last announced and how polling goes). A cheap handle over a shared map;
//! an entry is made again when a reload changes the source's transmitter, so a new JWK Set
//! location starts with an empty cache.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use idem_actors::Outcome;
use idem_schemas::timefmt::{now_ms, rfc3339_millis};
use idem_schemas::{PollStatus, SourceStatus, StreamStatus, VerificationStatus};

use super::jwks::KeyCache;
use super::upstream::Access;
use super::{Delivery, Source, SourceKind, Ssf};

/// The longest text kept of what a transmitter announces (a state, a status, a reason).
const MAX_ANNOUNCED: usize = 256;

/// What became of one event, as a source's status counts it: its signal's [`Outcome`], or why
/// it was not claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Claimed: what happened to its signal, by its outcome's label, and whether it was taken
    /// now (decided, or answered with its subject's decision) rather than a replay.
    Claimed {
        /// The outcome's label.
        label: &'static str,
        /// Taken now (the status counts it accepted; otherwise a duplicate).
        taken_now: bool,
    },
    /// Its type matches no `map` entry, or it is SSF's own.
    Ignored,
    /// No usable event id, a type over the limit, no subject where the map says, or a refused
    /// SET.
    Refused,
}

impl Fate {
    /// What became of an event whose signal's outcome is `outcome`.
    pub fn of(outcome: &Outcome) -> Fate {
        Fate::Claimed {
            label: outcome.label(),
            taken_now: outcome.taken_now(),
        }
    }

    /// An event repeated within its delivery: a replay of its first copy's.
    pub const REPEATED: Fate = Fate::Claimed {
        label: "replayed",
        taken_now: false,
    };

    /// Every fate's label: the outcomes a source's event can have (it is never keyless, and
    /// never waits), `ignored` and `refused`.
    pub const LABELS: [&'static str; 5] =
        ["first", "deduplicated", "replayed", "ignored", "refused"];

    /// Its name in the metrics: its outcome's label, `ignored` or `refused`.
    pub fn label(self) -> &'static str {
        match self {
            Fate::Claimed { label, .. } => label,
            Fate::Ignored => "ignored",
            Fate::Refused => "refused",
        }
    }
}

/// A source's status: counts and announcements.
#[derive(Debug, Default)]
struct Status {
    accepted: u64,
    duplicates: u64,
    ignored: u64,
    refused: u64,
    last_event_ms: Option<u64>,
    verification: Option<(Option<String>, u64)>,
    stream: Option<(Option<String>, Option<String>, u64)>,
    poll_last_ms: Option<u64>,
    poll_error: Option<String>,
    acked: u64,
}

/// One source's state on this node.
pub struct SourceState {
    /// The transmitter it was made for (`ssf`).
    ssf: Option<Ssf>,
    /// Its keys (`ssf`).
    pub keys: Option<KeyCache>,
    /// What it calls its transmitter with (`ssf` with `transmitter`), shared by the stream's
    /// management and the poll client so both use one token.
    pub access: Option<Arc<Access>>,
    /// A subscribed source's stream's `aud` when no `audience` is written, and when it was
    /// read from the transmitter.
    audience: Mutex<Option<(Arc<[String]>, std::time::Instant)>>,
    status: Mutex<Status>,
}

fn cut(text: Option<&str>) -> Option<String> {
    text.map(|t| t.chars().take(MAX_ANNOUNCED).collect())
}

impl SourceState {
    fn status(&self) -> MutexGuard<'_, Status> {
        match self.status.lock() {
            Ok(status) => status,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// The stream's `aud` as last read, if it was.
    pub fn audience(&self) -> Option<Arc<[String]>> {
        let held = match self.audience.lock() {
            Ok(held) => held,
            Err(poisoned) => poisoned.into_inner(),
        };
        held.as_ref().map(|(aud, _)| aud.clone())
    }

    /// Whether the stream's `aud` was read at least `every` ago (or never): a SET for another
    /// audience may then read it again.
    pub fn audience_older_than(&self, every: std::time::Duration) -> bool {
        let held = match self.audience.lock() {
            Ok(held) => held,
            Err(poisoned) => poisoned.into_inner(),
        };
        held.as_ref().is_none_or(|(_, at)| at.elapsed() >= every)
    }

    /// Keeps `aud`, the stream's, as read now.
    pub fn set_audience(&self, aud: Arc<[String]>) {
        let mut held = match self.audience.lock() {
            Ok(held) => held,
            Err(poisoned) => poisoned.into_inner(),
        };
        *held = Some((aud, std::time::Instant::now()));
    }

    /// Counts an event.
    pub fn count(&self, fate: Fate) {
        let mut status = self.status();
        match fate {
            Fate::Claimed {
                taken_now: true, ..
            } => status.accepted += 1,
            Fate::Claimed { .. } => status.duplicates += 1,
            Fate::Ignored => status.ignored += 1,
            Fate::Refused => status.refused += 1,
        }
        status.last_event_ms = Some(now_ms());
    }

    /// Records a verification event's `state`.
    pub fn verified(&self, state: Option<&str>) {
        self.status().verification = Some((cut(state), now_ms()));
    }

    /// Records a stream-updated event's `status` and `reason`.
    pub fn stream_updated(&self, status: Option<&str>, reason: Option<&str>) {
        self.status().stream = Some((cut(status), cut(reason), now_ms()));
    }

    /// Records a poll's outcome: answered (with `acked` SETs acknowledged), or failed.
    pub fn polled(&self, outcome: Result<u64, &str>) {
        let mut status = self.status();
        match outcome {
            Ok(acked) => {
                status.poll_last_ms = Some(now_ms());
                status.poll_error = None;
                status.acked += acked;
            }
            Err(e) => status.poll_error = cut(Some(e)),
        }
    }

    /// The status as `GET …/status` answers it, for a source of `kind`.
    pub fn view(&self, kind: SourceKind) -> SourceStatus {
        let status = self.status();
        SourceStatus {
            kind: kind.as_str().to_string(),
            accepted: status.accepted,
            duplicates: status.duplicates,
            ignored: status.ignored,
            refused: status.refused,
            last_event_at: status.last_event_ms.map(rfc3339_millis),
            verification: status
                .verification
                .clone()
                .map(|(state, at)| VerificationStatus {
                    state,
                    at: rfc3339_millis(at),
                }),
            stream: status
                .stream
                .clone()
                .map(|(status, reason, at)| StreamStatus {
                    status,
                    reason,
                    at: rfc3339_millis(at),
                }),
            poll: self
                .ssf
                .as_ref()
                .filter(|s| {
                    s.poll.is_some()
                        || s.transmitter.as_ref().map(|t| t.delivery) == Some(Delivery::Poll)
                })
                .map(|_| PollStatus {
                    last_at: status.poll_last_ms.map(rfc3339_millis),
                    last_error: status.poll_error.clone(),
                    acked: status.acked,
                }),
            subscription: None,
        }
    }
}

/// Sources' states by (tenant, source).
type States = HashMap<(String, String), Arc<SourceState>>;

/// Every source's state on this node.
#[derive(Clone)]
pub struct Sources {
    states: Arc<Mutex<States>>,
    client: reqwest::Client,
}

impl Sources {
    /// No state yet; JWK Sets are fetched with `client`.
    pub fn new(client: reqwest::Client) -> Self {
        Sources {
            states: Arc::default(),
            client,
        }
    }

    /// The state of `tenant`'s `source`, made now if there is none for its transmitter as
    /// configured.
    pub fn of(&self, tenant: &str, source: &Source) -> Arc<SourceState> {
        let mut states = match self.states.lock() {
            Ok(states) => states,
            Err(poisoned) => poisoned.into_inner(),
        };
        let key = (tenant.to_string(), source.name.clone());
        if let Some(state) = states.get(&key) {
            if state.ssf == source.ssf {
                return state.clone();
            }
        }
        let state = Arc::new(SourceState {
            keys: source
                .ssf
                .as_ref()
                .map(|s| KeyCache::new(s.jwks.clone(), s.jwks_refetch, self.client.clone())),
            access: source
                .ssf
                .as_ref()
                .and_then(|s| s.transmitter.as_ref())
                .map(|t| {
                    Arc::new(Access::new(
                        t.issuer.clone(),
                        t.auth.clone(),
                        self.client.clone(),
                    ))
                }),
            ssf: source.ssf.clone(),
            audience: Mutex::default(),
            status: Mutex::default(),
        });
        states.insert(key, state.clone());
        state
    }
}
