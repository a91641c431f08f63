//! The claim core input by input: for a claim in a given state, this input gives these
//! effects, each written the way a reader says it ("commit start [claimed]", "reply 1 first
//! dec_a"). A table per input; the model checker (`model/`) covers what the inputs do together.

use std::sync::Arc;
use std::time::Duration;

use idem_schemas::stored::STREAM_SCHEME;
use idem_schemas::{
    ActionOutcome, ActionStatus, AttemptRecord, Claim, ClaimEvent, Decision, PlannedDelivery,
    StoredResponse, SubjectLink, Verdict,
};

use super::{ClaimSabotage, Context, Core, Heard};
use crate::claim::effect::{Effect, Effects};
use crate::claim::{Answer, ClaimError, Reply, Request, ANY_PAYLOAD};
use crate::playbook::DecideError;
use crate::settings::Settings;
use crate::store::{ClaimId, ClaimLog, ClaimWrite, LogHead, Written};

const EPOCH: u64 = 7;
const T: u64 = 1_000_000;
const TTL: Duration = Duration::from_secs(60);
const BODY: [u8; 32] = [1; 32];
const OTHER_BODY: [u8; 32] = [2; 32];

fn cx(sabotage: Option<ClaimSabotage>) -> Context {
    let mut settings = Settings::default();
    settings.idempotency.key_ttl = TTL;
    settings.idempotency.max_waiters = 2;
    Context {
        settings: Arc::new(settings),
        holder: EPOCH,
        sabotage,
    }
}

fn id() -> ClaimId {
    ClaimId {
        tenant: "acme".into(),
        digest: [9; 32],
    }
}

fn head(generation: u64, next: u32) -> LogHead {
    LogHead {
        id: id(),
        generation,
        expires_at_ms: generation + TTL.as_millis() as u64,
        next,
    }
}

/// Decision `name`, with a callback for each of `callbacks` and a SET for each of `sets`.
fn decision(name: &str, callbacks: &[&str], sets: &[&str]) -> Decision {
    let planned = |action: &str, url: String| PlannedDelivery {
        id: format!("msg_{name}_{action}"),
        action: action.into(),
        key: url.starts_with(STREAM_SCHEME).then(|| vec![5; 16]),
        token: None,
        url,
        body: b"{}".to_vec(),
    };
    let mut deliveries: Vec<_> = callbacks
        .iter()
        .map(|a| planned(a, format!("http://127.0.0.1:9/{a}")))
        .collect();
    deliveries.extend(
        sets.iter()
            .map(|a| planned(a, format!("{STREAM_SCHEME}stream-{a}"))),
    );
    Decision {
        id: format!("dec_{name}"),
        tenant: "acme".into(),
        signal_type: "sim_swap".into(),
        source: None,
        verdict: Verdict::Deny,
        subject_hash: String::new(),
        created_at_ms: T,
        deliveries,
        trace: None,
        rule: None,
        rule_errors: Vec::new(),
    }
}

fn claim(decision: Decision, subject: Option<SubjectLink>) -> Claim {
    Claim {
        fingerprint: BODY,
        holder: EPOCH,
        claimed_at_ms: T,
        expires_at_ms: T + TTL.as_millis() as u64,
        decision,
        subject,
    }
}

fn response(name: &str) -> StoredResponse {
    StoredResponse {
        status: 201,
        body: format!("{{\"decision_id\":\"dec_{name}\"}}").into_bytes(),
        trace: None,
    }
}

fn answer(name: &str) -> Answer {
    Answer {
        response: response(name),
        decision_id: format!("dec_{name}"),
    }
}

fn outcome(delivery: &str, status: ActionStatus) -> ActionOutcome {
    ActionOutcome {
        delivery_id: delivery.into(),
        status,
        attempt: AttemptRecord {
            at_ms: T,
            code: Some(200),
            error: None,
            latency_ms: 3,
            retry_after_ms: None,
        },
    }
}

/// A core whose log is `events` (none: a key never claimed).
fn core(events: Vec<ClaimEvent>) -> Core<u32> {
    let log = (!events.is_empty()).then(|| ClaimLog {
        head: head(T, events.len() as u32),
        events,
    });
    Core::new(id(), log).expect("the log folds")
}

/// A core whose first request (port 1) claimed the key at `T` with `decision` (whose subject's
/// claim is `subject`), its claim durable.
fn claimed(decision: Decision, subject: Option<SubjectLink>, cx: &Context) -> Core<u32> {
    let mut core = core(Vec::new());
    let mut out = Vec::new();
    let request = Request {
        subject,
        ..Request::new(BODY)
    };
    core.submit(cx, &request, 1, T, &mut out);
    core.decided(cx, T, Ok(decision.clone()), &mut out);
    let events = vec![ClaimEvent::Claimed(claim(decision, subject))];
    core.committed(cx, T, Ok(Written::Claimed(head(T, 1), events)), T, &mut out);
    core
}

/// `out`, each effect as a reader says it; counts and failpoints left out.
fn said(out: &Effects<u32>) -> Vec<String> {
    out.iter().filter_map(say).collect()
}

fn say(effect: &Effect<u32>) -> Option<String> {
    Some(match effect {
        Effect::Decide { generation } => format!("decide {generation}"),
        Effect::Commit { unit, .. } => {
            let write = match unit.claim_write() {
                Some(ClaimWrite::Start(_, events)) => format!("start {}", names(events)),
                Some(ClaimWrite::Append(_, events)) => format!("append {}", names(events)),
                Some(ClaimWrite::TakeOver(_)) => "take over".into(),
                None => "nothing".into(),
            };
            let mut parts = vec![format!("commit {write}")];
            let deliveries = unit.delivery_writes().len();
            if deliveries > 0 {
                parts.push(format!("{deliveries} deliveries"));
            }
            if !unit.decisions().is_empty() {
                parts.push("record".into());
            }
            if !unit.set_keys().is_empty() {
                parts.push(format!("{} keys", unit.set_keys().len()));
            }
            if !unit.erased_set_keys().is_empty() {
                parts.push(format!("erase {} keys", unit.erased_set_keys().len()));
            }
            if unit.skips_existing() {
                parts.push("skipping existing".into());
            }
            parts.join(", ")
        }
        Effect::Complete(_) => "complete".into(),
        Effect::RunActions {
            decision,
            taken_over,
            ..
        } => format!(
            "run {}{}",
            decision.id,
            if *taken_over { " taken over" } else { "" }
        ),
        Effect::Offer { offer, .. } => format!(
            "offer {} waiting {:?}",
            offer.decision.id,
            offer.request.wait.map(|w| w.as_secs())
        ),
        Effect::Reply(port, reply) => format!("reply {port} {}", reply_said(reply)),
        Effect::StartTimer { waiter, wait } => format!("timer {waiter} {}s", wait.as_secs()),
        Effect::AskHolder(holder) => format!("ask holder {holder}"),
        Effect::AnnounceAnswer => "announce".into(),
        Effect::Reread => "reread".into(),
        Effect::WakeRetries => "wake retries".into(),
        Effect::StartQueued => "start queued".into(),
        Effect::TookOver => "took over".into(),
        Effect::Stop(_) => "stop".into(),
        Effect::Count(_) | Effect::Failpoint(_) => return None,
    })
}

fn names(events: &[ClaimEvent]) -> String {
    let names: Vec<_> = events.iter().map(ClaimEvent::name).collect();
    format!("[{}]", names.join(", "))
}

fn reply_said(reply: &Reply) -> String {
    match reply {
        Reply::First(a) => format!("first {}", a.decision_id),
        Reply::Replayed(a) => format!("replayed {}", a.decision_id),
        Reply::Awaited(a) => format!("awaited {}", a.decision_id),
        Reply::Deduplicated(a) => format!("deduplicated {}", a.decision_id),
        Reply::InFlight => "in flight".into(),
        Reply::Mismatch => "mismatch".into(),
        Reply::Failed(_) => "failed".into(),
    }
}

fn completed(name: &str) -> Vec<ClaimEvent> {
    vec![
        ClaimEvent::Claimed(claim(decision(name, &["lock"], &[]), None)),
        ClaimEvent::Dispatched {
            outcomes: Vec::new(),
            response: response(name),
        },
        ClaimEvent::Completed,
    ]
}

#[test]
fn submit() {
    let cx = cx(None);
    let wait = |secs| Request {
        wait: Some(Duration::from_secs(secs)),
        ..Request::new(BODY)
    };
    type Case = (&'static str, Core<u32>, Request, u64, Vec<&'static str>);
    let cases: Vec<Case> = vec![
        (
            "a free key asks for its decision",
            core(Vec::new()),
            Request::new(BODY),
            T,
            vec!["decide 1000000"],
        ),
        (
            "a completed key replays its response",
            core(completed("a")),
            Request::new(BODY),
            T + 1,
            vec!["reply 1 replayed dec_a"],
        ),
        (
            "a completed key refuses another payload",
            core(completed("a")),
            Request::new(OTHER_BODY),
            T + 1,
            vec!["reply 1 mismatch"],
        ),
        (
            "an expired completed key is claimed again",
            core(completed("a")),
            Request::new(BODY),
            T + TTL.as_millis() as u64 + 1,
            vec!["decide 1060001"],
        ),
        (
            "a recovery point found is completed and replayed",
            core(completed("a")[..2].to_vec()),
            Request::new(BODY),
            T + 1,
            vec!["complete", "reply 1 replayed dec_a"],
        ),
        (
            "a claim in flight here answers 409",
            core(completed("a")[..1].to_vec()),
            Request::new(BODY),
            T + 1,
            vec!["reply 1 in flight"],
        ),
        (
            "a claim in flight here keeps a request that may wait",
            core(completed("a")[..1].to_vec()),
            wait(5),
            T + 1,
            vec!["timer 0 5s"],
        ),
        (
            "a claim in flight past in_flight_timeout is taken over",
            core(completed("a")[..1].to_vec()),
            Request::new(BODY),
            T + 30_000,
            vec!["commit take over"],
        ),
    ];
    for (name, mut core, request, now, expected) in cases {
        let mut out = Vec::new();
        core.submit(&cx, &request, 1, now, &mut out);
        assert_eq!(said(&out), expected, "{name}");
    }
}

#[test]
fn submit_while_the_first_request_waits() {
    let cx = cx(None);
    let mut core = core(Vec::new());
    let mut out = Vec::new();
    core.submit(&cx, &Request::new(BODY), 1, T, &mut out);
    out.clear();
    let waiting = Request {
        wait: Some(Duration::from_secs(3)),
        ..Request::new(BODY)
    };
    let cases = [
        (Request::new(BODY), vec!["reply 2 in flight"]),
        (Request::new(OTHER_BODY), vec!["reply 2 mismatch"]),
        (waiting.clone(), vec!["timer 0 3s"]),
        (waiting.clone(), vec!["timer 1 3s"]),
        // max_waiters is 2.
        (waiting, vec!["reply 2 in flight"]),
    ];
    for (request, expected) in cases {
        core.submit(&cx, &request, 2, T, &mut out);
        assert_eq!(said(&out), expected);
        out.clear();
    }
}

#[test]
fn decided() {
    let cx = cx(None);
    let queued = Request {
        queued: true,
        ..Request::new(BODY)
    };
    let subject = SubjectLink {
        digest: [3; 32],
        window_ms: 60_000,
    };
    let through_subject = Request {
        subject: Some(subject),
        ..Request::new(BODY)
    };
    let taken_over_offer = Request {
        may_have_run: true,
        ..Request::new(ANY_PAYLOAD)
    };
    type Case = (
        &'static str,
        Request,
        Result<Decision, ClaimError>,
        Vec<&'static str>,
    );
    let cases: Vec<Case> = vec![
        (
            "callbacks: the claim alone, durable before they run",
            Request::new(BODY),
            Ok(decision("a", &["lock", "case"], &[])),
            vec!["commit start [claimed]"],
        ),
        (
            "a SET: its key is kept with the claim",
            Request::new(BODY),
            Ok(decision("a", &[], &["revoke"])),
            vec!["commit start [claimed], 1 keys"],
        ),
        (
            "no actions: claimed, recorded and completed at once",
            Request::new(BODY),
            Ok(decision("a", &[], &[])),
            vec!["commit start [claimed, dispatched, completed], record"],
        ),
        (
            "queued callbacks: at once, with their deliveries",
            queued,
            Ok(decision("a", &["lock"], &[])),
            vec!["commit start [claimed, dispatched, completed], 1 deliveries, record"],
        ),
        (
            "through the subject's claim: the claim alone",
            through_subject,
            Ok(decision("a", &[], &[])),
            vec!["commit start [claimed]"],
        ),
        (
            "an offer that may have run leaves existing logs alone",
            taken_over_offer,
            Ok(decision("a", &[], &[])),
            vec!["commit start [claimed, dispatched, completed], record, skipping existing"],
        ),
        (
            "no decision: nothing claimed, the request fails",
            Request::new(BODY),
            Err(ClaimError::from(DecideError::NoTransmitter)),
            vec!["reply 1 failed"],
        ),
    ];
    for (name, request, decision, expected) in cases {
        let mut core = core(Vec::new());
        let mut out = Vec::new();
        core.submit(&cx, &request, 1, T, &mut out);
        out.clear();
        core.decided(&cx, T, decision, &mut out);
        assert_eq!(said(&out), expected, "{name}");
    }
}

#[test]
fn a_decision_that_failed_leaves_the_key_free() {
    let cx = cx(None);
    let mut core = core(Vec::new());
    let mut out = Vec::new();
    core.submit(&cx, &Request::new(BODY), 1, T, &mut out);
    core.decided(&cx, T, Err(DecideError::NoTransmitter.into()), &mut out);
    out.clear();
    core.submit(&cx, &Request::new(BODY), 2, T + 1, &mut out);
    assert_eq!(said(&out), ["decide 1000001"]);
    // A decision for a generation no longer asked for changes nothing.
    out.clear();
    core.decided(&cx, T, Ok(decision("late", &[], &[])), &mut out);
    assert_eq!(said(&out), Vec::<String>::new());
}

#[test]
fn committed() {
    let cx = cx(None);
    let inline = decision("a", &["lock"], &[]);
    let recovery_point = vec![ClaimEvent::Dispatched {
        outcomes: Vec::new(),
        response: response("a"),
    }];
    let held_by = |events: Vec<ClaimEvent>| {
        Written::Held(ClaimLog {
            head: head(T - 5, events.len() as u32),
            events,
        })
    };
    let cases: Vec<(&str, Written, Vec<&str>)> = vec![
        (
            "the claim is durable: the actions run",
            Written::Claimed(
                head(T, 1),
                vec![ClaimEvent::Claimed(claim(inline.clone(), None))],
            ),
            vec!["run dec_a"],
        ),
        (
            "one write of claim, recovery point and completion: answered",
            Written::Claimed(head(T, 1), completed("a")),
            vec!["reply 1 first dec_a"],
        ),
        (
            "a completed key holds it: replayed",
            held_by(completed("b")),
            vec!["reply 1 replayed dec_b"],
        ),
        (
            "a recovery point holds it: replayed from it",
            held_by(completed("b")[..2].to_vec()),
            vec!["reply 1 replayed dec_b"],
        ),
        (
            "a claim in flight holds it: 409",
            held_by(completed("b")[..1].to_vec()),
            vec!["reply 1 in flight"],
        ),
        (
            "fenced out: the request fails and the core stops",
            Written::Fenced,
            vec!["reply 1 failed", "stop"],
        ),
    ];
    for (name, written, expected) in cases {
        let mut core = core(Vec::new());
        let mut out = Vec::new();
        let decision = match &written {
            Written::Claimed(_, events) => match &events[0] {
                ClaimEvent::Claimed(c) => c.decision.clone(),
                _ => inline.clone(),
            },
            _ => inline.clone(),
        };
        core.submit(&cx, &Request::new(BODY), 1, T, &mut out);
        core.decided(&cx, T, Ok(decision), &mut out);
        out.clear();
        core.committed(&cx, T, Ok(written), T, &mut out);
        assert_eq!(said(&out), expected, "{name}");
    }
    // A take-over granted: the stored decision runs again, its holder's writes fenced.
    let mut core = core(vec![ClaimEvent::Claimed(claim(inline.clone(), None))]);
    let mut out = Vec::new();
    core.submit(&cx, &Request::new(BODY), 1, T + 30_000, &mut out);
    assert_eq!(said(&out), ["commit take over"]);
    out.clear();
    core.committed(&cx, T, Ok(Written::TakenOver(head(T, 2))), T, &mut out);
    assert_eq!(said(&out), ["took over", "run dec_a taken over"]);
    // Once the actions ran and their recovery point is durable: completed, then answered.
    let mut core = claimed(inline, None, &cx);
    let mut out = Vec::new();
    core.dispatched(&cx, T, Vec::new(), false, &mut out);
    out.clear();
    let appended = Written::Appended(head(T, 2), recovery_point);
    core.committed(&cx, T, Ok(appended), T, &mut out);
    assert_eq!(said(&out), ["complete", "reply 1 first dec_a"]);
    // A commit for another generation changes nothing.
    out.clear();
    core.committed(&cx, T - 1, Ok(Written::Fenced), T, &mut out);
    assert_eq!(said(&out), Vec::<String>::new());
}

/// A decision whose callbacks are queued is answered once its one write is durable, and then
/// their first attempts start: from the logs that write made new, or from the retry queue when
/// it may have left the logs of an earlier run as they were.
#[test]
fn queued_callbacks_start_after_the_answer() {
    let cx = cx(None);
    for (may_have_run, start) in [(false, "start queued"), (true, "wake retries")] {
        let request = Request {
            queued: true,
            may_have_run,
            ..Request::new(BODY)
        };
        let mut core = core(Vec::new());
        let mut out = Vec::new();
        core.submit(&cx, &request, 1, T, &mut out);
        core.decided(&cx, T, Ok(decision("a", &["lock"], &[])), &mut out);
        out.clear();
        let written = Written::Claimed(head(T, 3), completed("a"));
        core.committed(&cx, T, Ok(written), T, &mut out);
        let expected = ["reply 1 first dec_a", start];
        assert_eq!(said(&out), expected, "may have run: {may_have_run}");
    }
}

#[test]
fn dispatched() {
    let decision = decision("a", &["lock", "case"], &["revoke"]);
    let delivered = outcome("msg_a_lock", ActionStatus::Delivered);
    let cases: Vec<(&str, Option<ClaimSabotage>, bool, Vec<&str>)> = vec![
        (
            "the recovery point: the outcomes, every delivery's log and the record",
            None,
            false,
            vec!["commit append [dispatched], 3 deliveries, record"],
        ),
        (
            "after a take-over, logs written before it are left alone",
            None,
            true,
            vec!["commit append [dispatched], 3 deliveries, record, skipping existing"],
        ),
        (
            "sabotaged: answered before the recovery point is durable",
            Some(ClaimSabotage::AnswerBeforeRecoveryPoint),
            false,
            vec![
                "reply 1 first dec_a",
                "commit append [dispatched], 3 deliveries, record",
            ],
        ),
    ];
    for (name, sabotage, taken_over, expected) in cases {
        let cx = cx(sabotage);
        let mut core = claimed(decision.clone(), None, &cx);
        let mut out = Vec::new();
        core.dispatched(&cx, T, vec![delivered.clone()], taken_over, &mut out);
        assert_eq!(said(&out), expected, "{name}");
    }
}

#[test]
fn offered() {
    let cx = cx(None);
    let subject = Some(SubjectLink {
        digest: [3; 32],
        window_ms: 60_000,
    });
    let own = decision("a", &["lock"], &["revoke"]);
    let cases: Vec<(&str, Reply, Vec<&str>)> = vec![
        (
            "the subject's claim took this decision: its response recorded",
            Reply::First(answer("a")),
            vec!["commit append [dispatched]"],
        ),
        (
            "this decision, made there before a crash: recorded as its own",
            Reply::Replayed(answer("a")),
            vec!["commit append [dispatched]"],
        ),
        (
            "another decision holds the subject: its response, and this one's SETs erased",
            Reply::Replayed(answer("b")),
            vec!["commit append [dispatched], erase 1 keys"],
        ),
        (
            "the subject's claim is in flight: 409 now, and the offer made again, waiting",
            Reply::InFlight,
            vec!["reply 1 in flight", "offer dec_a waiting Some(30)"],
        ),
        (
            "the subject's claim failed: so does this request, and the core stops",
            Reply::Mismatch,
            vec!["reply 1 failed", "stop"],
        ),
    ];
    for (name, reply, expected) in cases {
        let mut core = claimed(own.clone(), subject, &cx);
        let mut out = Vec::new();
        core.offered(&cx, T, Ok(reply), &mut out);
        assert_eq!(said(&out), expected, "{name}");
    }
    // Answered with another decision's response once it is durable.
    let mut core = claimed(own, subject, &cx);
    let mut out = Vec::new();
    core.offered(&cx, T, Ok(Reply::Replayed(answer("b"))), &mut out);
    out.clear();
    let recorded = vec![ClaimEvent::Dispatched {
        outcomes: Vec::new(),
        response: response("b"),
    }];
    core.committed(
        &cx,
        T,
        Ok(Written::Appended(head(T, 2), recorded)),
        T,
        &mut out,
    );
    assert_eq!(said(&out), ["complete", "reply 1 deduplicated dec_a"]);
}

#[test]
fn news_and_deadlines() {
    let cx = cx(None);
    let waiting = Request {
        wait: Some(Duration::from_secs(5)),
        ..Request::new(BODY)
    };
    // A claim of another epoch's: its holder looks gone from here, but the store says it
    // lives. The request waits, and asks that node to tell when it is answered.
    let waiter = || {
        let mut c = claim(decision("a", &["lock"], &[]), None);
        c.holder = EPOCH + 1;
        let log = ClaimLog {
            head: head(T, 1),
            events: vec![ClaimEvent::Claimed(c)],
        };
        let mut core = Core::new(id(), Some(log.clone())).expect("the log folds");
        let mut out = Vec::new();
        core.submit(&cx, &waiting, 1, T + 1, &mut out);
        assert_eq!(said(&out), ["commit take over"]);
        out.clear();
        core.committed(&cx, T, Ok(Written::Held(log)), T + 1, &mut out);
        assert_eq!(said(&out), ["timer 0 5s", "ask holder 8"]);
        core
    };
    // Its deadline passes: 409.
    let mut core = waiter();
    let mut out = Vec::new();
    core.wait_over(0, &mut out);
    assert_eq!(said(&out), ["reply 1 in flight"]);
    // The other node answered: read again, and the waiter gets the response.
    let mut core = waiter();
    out.clear();
    core.hear(Heard::Answered, &mut out);
    assert_eq!(said(&out), ["reread"]);
    out.clear();
    let log = ClaimLog {
        head: head(T, 3),
        events: completed("a"),
    };
    core.reread(log, &mut out);
    assert_eq!(said(&out), ["reply 1 awaited dec_a"]);
    // Asked by another node: told at once when nothing is in flight here, once answered
    // otherwise.
    out.clear();
    core.hear(Heard::Asked, &mut out);
    assert_eq!(said(&out), ["announce"]);
    let mut busy = claimed(decision("a", &["lock"], &[]), None, &cx);
    out.clear();
    busy.hear(Heard::Asked, &mut out);
    assert_eq!(said(&out), Vec::<String>::new());
    busy.dispatched(&cx, T, Vec::new(), false, &mut out);
    out.clear();
    let recorded = vec![ClaimEvent::Dispatched {
        outcomes: Vec::new(),
        response: response("a"),
    }];
    busy.committed(
        &cx,
        T,
        Ok(Written::Appended(head(T, 2), recorded)),
        T,
        &mut out,
    );
    assert_eq!(said(&out), ["complete", "announce", "reply 1 first dec_a"]);
}
