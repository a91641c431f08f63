//! RFC 8936 poll clients: one task per `ssf` source with `poll`, started and stopped as the
//! configuration in force names them. Each long-polls its transmitter, takes every SET it is
//! given exactly as a pushed one (`ssf::take`), and acknowledges a `jti` in its next request
//! only once that SET's claims are durable; a refused SET is reported in `setErrs`, and one that
//! could not be taken now (the store, the JWK Set) is neither, so the transmitter gives it again.
//! An answer is read up to a bound ([`MAX_ANSWER`]) and taken at most [`MAX_EVENTS`] SETs at a
//! time, each judged on its own: a member that is no SET is reported in `setErrs`, beside the
//! SETs taken, and the members over what was asked for are left for the transmitter to give
//! again.
//! A crash between a claim and its ack loses nothing: the SET comes again, is a duplicate, and is
//! acknowledged then. Errors back off, doubling up to a cap. On several nodes one node at a
//! time polls a source: the one holding its lease in the store, which passes to another node
//! once the holder's heartbeat has expired (the claims keep a SET one decision even while a
//! node that lost the lease finishes its last poll).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use idem_schemas::SetError;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ssf::{self, NotTaken};
use crate::http::App;
use crate::source::upstream::Access;
use crate::source::{Delivery, Poll, Source, SourceKind};

/// The most SETs asked for in one poll.
pub const MAX_EVENTS: u32 = 64;

/// How long one poll may take: the transmitter's long poll, and then some.
const POLL_TIMEOUT: Duration = Duration::from_secs(60);

/// The first wait after a failed poll, and the longest.
const BACKOFF_FIRST: Duration = Duration::from_millis(500);
const BACKOFF_CAP: Duration = Duration::from_secs(30);

/// How often the set of polled sources is compared with the configuration in force.
const RECONCILE: Duration = Duration::from_secs(1);

/// The most bytes of a poll's answer read (`MAX_EVENTS` SETs of up to 64 KiB each).
const MAX_ANSWER: usize = (MAX_EVENTS as usize + 1) * crate::source::set::MAX_SET;

/// A poll request (RFC 8936 §2.4).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PollRequest<'a> {
    max_events: u32,
    return_immediately: bool,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    ack: &'a [String],
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    set_errs: &'a BTreeMap<String, SetError>,
}

/// A poll answer (RFC 8936 §2.5), its `sets` not judged yet: each member is judged on its own
/// ([`judge`]).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PollAnswer {
    sets: serde_json::Map<String, Value>,
    #[serde(default)]
    more_available: bool,
}

/// A poll answer's `sets`, judged member by member.
#[derive(Debug, PartialEq)]
struct Judged {
    /// The SETs to take, by `jti`.
    tokens: Vec<(String, String)>,
    /// The members that are no SET (not a string), by `jti`: each reported in `setErrs`.
    unusable: Vec<String>,
    /// How many members were left over `max`: neither acknowledged nor reported, so the
    /// transmitter gives them again.
    left: usize,
}

/// The first `max` members of `sets` (in the order of their `jti`s), each judged on its own: a
/// string is a SET to take, anything else unusable; the members over `max` (a transmitter
/// giving more than it was asked for) are left for it to give again.
fn judge(sets: serde_json::Map<String, Value>, max: usize) -> Judged {
    let left = sets.len().saturating_sub(max);
    let mut judged = Judged {
        tokens: Vec::new(),
        unusable: Vec::new(),
        left,
    };
    for (jti, member) in sets.into_iter().take(max) {
        match member {
            Value::String(token) => judged.tokens.push((jti, token)),
            _ => judged.unusable.push(jti),
        }
    }
    judged
}

/// Runs until aborted: starts a poll client for each polled source in force, stops one whose
/// source is gone or polls elsewhere now.
pub async fn run(app: Arc<App>, client: reqwest::Client) {
    let mut running: HashMap<(String, String, Poll), tokio::task::JoinHandle<()>> = HashMap::new();
    loop {
        let live = app.live.load_full();
        let mut wanted = Vec::new();
        for tenant in live.config.tenants.values() {
            for source in tenant.sources.values() {
                if source.kind != SourceKind::Ssf {
                    continue;
                }
                if let Some(poll) = source.ssf.as_ref().and_then(|s| s.poll.clone()) {
                    wanted.push((tenant.name.clone(), source.name.clone(), poll));
                } else if let Some(poll) = subscribed_poll(&app, &tenant.name, source).await {
                    wanted.push((tenant.name.clone(), source.name.clone(), poll));
                }
            }
        }
        running.retain(|key, task| {
            let keep = wanted.contains(key) && !task.is_finished();
            if !keep {
                task.abort();
            }
            keep
        });
        for key in wanted {
            if let std::collections::hash_map::Entry::Vacant(slot) = running.entry(key) {
                let (tenant, source, poll) = slot.key().clone();
                slot.insert(tokio::spawn(poll_source(
                    app.clone(),
                    client.clone(),
                    tenant,
                    source,
                    poll,
                )));
            }
        }
        tokio::time::sleep(RECONCILE).await;
    }
}

/// The poll endpoint of the stream idem made for `tenant`'s `source`, if it polls one that is
/// usable (its `iss` the transmitter's).
async fn subscribed_poll(app: &App, tenant: &str, source: &Source) -> Option<Poll> {
    let subscribe = source.ssf.as_ref()?.transmitter.as_ref()?;
    if subscribe.delivery != Delivery::Poll {
        return None;
    }
    let record = match app
        .engine
        .streams()
        .subscription(tenant, &source.name)
        .await
    {
        Ok(record) => record?,
        Err(e) => {
            tracing::warn!(tenant, source = %source.name, error = %e, "the subscription could not be read");
            return None;
        }
    };
    let usable = record.stream_id.is_some()
        && record.transmitter == subscribe.issuer
        && record.iss.as_deref() == Some(subscribe.issuer.as_str());
    Some(Poll {
        url: record.poll_url.filter(|_| usable)?,
        issuer: subscribe.issuer.clone(),
        auth: subscribe.auth.clone(),
    })
}

/// What one poll came to.
struct Answered {
    acks: Vec<String>,
    set_errs: BTreeMap<String, SetError>,
    more: bool,
}

/// Polls `tenant`'s `source` at `poll` for as long as it is configured so.
async fn poll_source(
    app: Arc<App>,
    client: reqwest::Client,
    tenant: String,
    source: String,
    poll: Poll,
) {
    let mut acks: Vec<String> = Vec::new();
    let mut set_errs: BTreeMap<String, SetError> = BTreeMap::new();
    let mut backoff = BACKOFF_FIRST;
    let mut immediately = true;
    let job = format!("poll:{tenant}/{source}");
    let mut held: Option<u64> = None;
    let access = Access::new(poll.issuer.clone(), poll.auth.clone(), client);
    loop {
        match app.engine.node().turn_at(&job).await {
            Ok(Some(token)) => {
                if held != Some(token) {
                    tracing::info!(tenant, source, url = %poll.url, token, "polling an SSF transmitter");
                    held = Some(token);
                }
            }
            Ok(None) => {
                if held.take().is_some() {
                    tracing::info!(tenant, source, "another node polls this source now");
                    // What was to be acked is given to that node again: duplicates there.
                    acks.clear();
                    set_errs.clear();
                }
                tokio::time::sleep(RECONCILE).await;
                continue;
            }
            Err(e) => {
                tracing::warn!(tenant, source, error = %e, "the poll lease could not be read");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(BACKOFF_CAP);
                continue;
            }
        }
        let request = PollRequest {
            max_events: MAX_EVENTS,
            return_immediately: immediately,
            ack: &acks,
            set_errs: &set_errs,
        };
        let live = app.live.load_full();
        let Some((tenant_config, source_config)) = live
            .config
            .tenants
            .get(&tenant)
            .and_then(|t| t.sources.get(&source).map(|s| (t, s)))
        else {
            return;
        };
        let state = app.sources.of(&tenant, source_config);
        let answer = ask(
            state.access.as_deref().unwrap_or(&access),
            &poll.url,
            &request,
        )
        .await;
        let answer = match answer {
            Ok(answer) => answer,
            Err(e) => {
                tracing::warn!(tenant, source, error = %e, "an SSF poll failed");
                state.polled(Err(&e));
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(BACKOFF_CAP);
                continue;
            }
        };
        // The acks and errors just sent were received: the transmitter forgets those SETs.
        let sent = acks.len() as u64;
        acks.clear();
        set_errs.clear();
        backoff = BACKOFF_FIRST;
        let judged = judge(answer.sets, MAX_EVENTS as usize);
        if judged.left > 0 {
            tracing::warn!(
                tenant,
                source,
                asked = MAX_EVENTS,
                left = judged.left,
                "a poll answer held more SETs than asked for; the rest are not acknowledged and come again"
            );
        }
        let mut next = Answered {
            acks: Vec::new(),
            set_errs: BTreeMap::new(),
            more: answer.more_available || judged.left > 0,
        };
        for jti in judged.unusable {
            state.count(crate::source::runtime::Fate::Refused);
            crate::http::metrics::SOURCE_EVENTS
                .with_label_values(&["ssf", "refused"])
                .inc();
            next.set_errs.insert(
                jti,
                SetError {
                    err: crate::source::set::Err::InvalidRequest.as_str().to_string(),
                    description: "not a SET: a member of sets must be a string (a compact JWS)"
                        .to_string(),
                },
            );
        }
        let app = &app;
        let takes = judged.tokens.iter().map(|(jti, token)| {
            let state = state.clone();
            async move {
                let taken = ssf::take(app, tenant_config, source_config, &state, token).await;
                (jti, taken)
            }
        });
        // The longest wait a SET not taken now asked for (the tenant's rate limit).
        let mut wait = None;
        for (jti, taken) in futures::future::join_all(takes).await {
            match taken {
                // Every event of the SET is durably claimed: only now may its jti be acked.
                Ok(_) => next.acks.push(jti.clone()),
                Err(NotTaken::Refused(refusal)) => {
                    state.count(crate::source::runtime::Fate::Refused);
                    crate::http::metrics::SOURCE_EVENTS
                        .with_label_values(&["ssf", "refused"])
                        .inc();
                    next.set_errs.insert(
                        jti.clone(),
                        SetError {
                            err: refusal.err.as_str().to_string(),
                            description: refusal.description,
                        },
                    );
                }
                Err(NotTaken::Later(problem)) => {
                    wait = wait.max(problem.retry_after_secs());
                    tracing::warn!(
                        tenant,
                        source,
                        jti,
                        detail = problem.detail(),
                        "a polled SET was not taken now; it comes again"
                    );
                }
            }
        }
        state.polled(Ok(sent));
        acks = next.acks;
        set_errs = next.set_errs;
        // With acks to send or more waiting, ask again at once; else wait in a long poll. Over
        // the tenant's rate limit, not before it allows more.
        immediately = next.more || !acks.is_empty() || !set_errs.is_empty();
        if let Some(seconds) = wait {
            tokio::time::sleep(Duration::from_secs(seconds)).await;
        }
    }
}

/// One poll request and its answer.
async fn ask(access: &Access, url: &str, request: &PollRequest<'_>) -> Result<PollAnswer, String> {
    let exchange = async {
        let body = serde_json::to_vec(request).map_err(|e| e.to_string())?;
        let mut response = access
            .send("the transmitter", |client| {
                client
                    .post(url)
                    .header("accept", "application/json")
                    .header("content-type", "application/json")
                    .body(body.clone())
            })
            .await
            .map_err(|e| e.to_string())?;
        if !response.status().is_success() {
            return Err(format!("the transmitter answered {}", response.status()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
            if body.len() + chunk.len() > MAX_ANSWER {
                return Err(format!("an answer over {MAX_ANSWER} bytes"));
            }
            body.extend_from_slice(&chunk);
        }
        idem_schemas::canonical::parse(&body)
            .map_err(|e| e.to_string())
            .and_then(|v| serde_json::from_value::<PollAnswer>(v).map_err(|e| e.to_string()))
            .map_err(|e| format!("not an RFC 8936 poll answer: {e}"))
    };
    tokio::time::timeout(POLL_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("no answer within {POLL_TIMEOUT:?}"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_cut_to_what_was_asked_and_judged_per_member() {
        let sets = |text: &str| match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(map)) => map,
            other => panic!("{text}: {other:?}"),
        };
        let judged = judge(
            sets(r#"{"a":"t.a.s","b":5,"c":null,"d":{"x":1},"e":"t.e.s","f":"t.f.s"}"#),
            4,
        );
        assert_eq!(
            judged,
            Judged {
                tokens: vec![("a".into(), "t.a.s".into())],
                unusable: vec!["b".into(), "c".into(), "d".into()],
                left: 2,
            }
        );
        let all = judge(sets(r#"{"a":"t","b":"u"}"#), 64);
        assert_eq!((all.tokens.len(), all.unusable.len(), all.left), (2, 0, 0));
        let none = judge(sets("{}"), 64);
        assert_eq!(none.left, 0);
    }
}
