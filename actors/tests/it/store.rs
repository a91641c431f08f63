//! One store conformance suite, below the HTTP layer: each case runs against sled on a temp dir
//! and against PostgreSQL on a fresh database of the local server (which must answer: the
//! suite never skips), through the store's public seam. Who holds a claim, a stale writer
//! fenced, a refused start writing nothing of its unit, a take-over, completion, deliveries,
//! decisions, endpoint health, the leases of jobs run by one node at a time, Shared Signals
//! streams written over their version and SET keys kept until their delivery ends: the rules of `store::rule` as both backends apply them.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use idem_actors::breaker::{Circuit, EndpointEvent};
use idem_actors::settings::Backend;
use idem_actors::store::{
    self, ClaimId, ClaimLog, DeliveryWrite, LogHead, Placement, Process, SetKey, Store, Unit,
    Written,
};
use idem_actors::Settings;
use idem_schemas::timefmt::now_ms;
use idem_schemas::{
    Claim, ClaimEvent, Decision, DecisionRecord, DeliveryEvent, DeliveryRecord, DeliveryStatus,
    StoredResponse, Stream, StreamMethod, StreamState, Verdict,
};

/// This node's epoch; claims made under another epoch have a holder that is gone.
const EPOCH: u64 = 7;

/// A time in the past of every clock here, so a claim's window is set by the case, not by now.
const T: u64 = 1_000_000;

/// A store of each backend, with what keeps it alive (the temp dir).
async fn stores() -> Vec<(&'static str, Arc<dyn Store>, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().expect("temp dir");
    let sled = open(Backend::Sled {
        data_dir: dir.path().to_path_buf(),
    })
    .await;
    let url = devtools::postgres::fresh_database(devtools::postgres::LOCAL, "idem_test")
        .unwrap_or_else(|e| panic!("PostgreSQL must answer for the store suite: {e}"));
    let postgres = open(Backend::Postgres {
        url,
        pool_size: 2,
        connect_timeout: std::time::Duration::from_secs(10),
    })
    .await;
    vec![("sled", sled, Some(dir)), ("postgres", postgres, None)]
}

async fn open(backend: Backend) -> Arc<dyn Store> {
    open_as(backend, EPOCH).await
}

/// A store for the node of `epoch`.
async fn open_as(backend: Backend, epoch: u64) -> Arc<dyn Store> {
    let settings = Settings {
        store: backend,
        ..Settings::default()
    };
    let node = Process {
        epoch,
        settings: Arc::new(settings),
    };
    store::open(node).await.expect("the store opens")
}

/// Runs `case` against each backend.
async fn on_each_store<F, Fut>(case: F)
where
    F: Fn(&'static str, Arc<dyn Store>) -> Fut,
    Fut: Future<Output = ()>,
{
    for (name, store, _dir) in stores().await {
        case(name, store).await;
    }
}

fn id(byte: u8) -> ClaimId {
    ClaimId {
        tenant: "acme".into(),
        digest: [byte; 32],
    }
}

fn decision(at: u64) -> Decision {
    Decision {
        id: format!("dec_{at:032x}"),
        tenant: "acme".into(),
        signal_type: "sim_swap".into(),
        source: None,
        verdict: Verdict::Deny,
        subject_hash: "ab".repeat(32),
        created_at_ms: at,
        deliveries: vec![],
        trace: traced(),
        rule: None,
        rule_errors: Vec::new(),
    }
}

/// A trace context, so every record read back shows it kept.
fn traced() -> Option<idem_schemas::TraceContext> {
    idem_schemas::TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
}

/// A claim made at `at` for `ttl` by the process of epoch `holder`.
fn claimed(at: u64, ttl: u64, holder: u64) -> ClaimEvent {
    ClaimEvent::Claimed(Claim {
        fingerprint: [7; 32],
        holder,
        claimed_at_ms: at,
        expires_at_ms: at + ttl,
        decision: decision(at),
        subject: None,
    })
}

fn dispatched() -> ClaimEvent {
    ClaimEvent::Dispatched {
        outcomes: vec![],
        response: StoredResponse {
            status: 201,
            body: b"{}".to_vec(),
            trace: traced(),
        },
    }
}

/// The endpoint of [`delivery`]'s callbacks.
const LOCK: &str = "http://127.0.0.1:9/lock";

/// A new delivery log of `id`, queued, due at `due`.
fn delivery(id: &str, due: u64) -> DeliveryWrite {
    delivery_to(id, due, LOCK)
}

/// A new delivery log of `id` to `url`, queued, due at `due`.
fn delivery_to(id: &str, due: u64, url: &str) -> DeliveryWrite {
    DeliveryWrite {
        tenant: "acme".into(),
        id: id.into(),
        url: url.into(),
        lease: None,
        first_seq: 0,
        events: vec![DeliveryEvent::Created(DeliveryRecord {
            id: id.into(),
            tenant: "acme".into(),
            decision_id: "dec_1".into(),
            action: "lock".into(),
            url: url.into(),
            body: b"{}".to_vec(),
            created_at_ms: due,
            expires_at_ms: now_ms() + 3_600_000,
            trace: traced(),
        })],
        from: None,
        to: Placement {
            status: DeliveryStatus::Queued,
            due_ms: Some(due),
        },
    }
}

fn record(at: u64) -> DecisionRecord {
    DecisionRecord::kept_for(&decision(at), Duration::from_secs(3600))
}

async fn commit(store: &Arc<dyn Store>, unit: Unit) -> Written {
    store.commit(unit).await.expect("the commit is durable")
}

/// The current generation of `id`'s claim, which must have one.
async fn current(store: &Arc<dyn Store>, id: &ClaimId) -> ClaimLog {
    let log = store.load_claim(id, now_ms()).await.expect("read");
    log.expect("a claim")
}

/// Starts `event`'s generation of `id`; its head.
async fn start(store: &Arc<dyn Store>, id: &ClaimId, event: ClaimEvent) -> LogHead {
    match commit(store, Unit::new().start_claim(id.clone(), vec![event])).await {
        Written::Claimed(head, _) => head,
        other => panic!("the start was not granted: {other:?}"),
    }
}

#[tokio::test]
async fn a_key_is_held_by_its_generation_until_it_expires() {
    on_each_store(|name, store| async move {
        let key = id(1);
        let head = start(&store, &key, claimed(T, 1_000, EPOCH)).await;
        // Another start within the window loses to it, and is answered with its log.
        let held = commit(
            &store,
            Unit::new().start_claim(key.clone(), vec![claimed(T + 500, 1_000, EPOCH)]),
        )
        .await;
        let Written::Held(ClaimLog { events, head: at }) = held else {
            panic!("{name}: a start within the window was granted: {held:?}");
        };
        assert_eq!(events, vec![claimed(T, 1_000, EPOCH)], "{name}");
        assert_eq!(at.generation, head.generation, "{name}");
        // Expired while its decision still runs (a window shorter than `in_flight_timeout`),
        // it still holds the key: a new start would fence the running decision's records.
        let held = commit(
            &store,
            Unit::new().start_claim(key.clone(), vec![claimed(T + 1_000, 1_000, EPOCH)]),
        )
        .await;
        assert!(
            matches!(held, Written::Held(ref log) if log.head.generation == head.generation),
            "{name}: an expired claim still in flight was replaced: {held:?}"
        );
        let log = store.load_claim(&key, T + 1_000).await.expect("read");
        assert_eq!(
            log.map(|l| l.head.generation),
            Some(head.generation),
            "{name}"
        );
        // Completed, it is free once expired: a new generation starts.
        let Written::Appended(done, _) = commit(
            &store,
            Unit::new().append_claim(head.clone(), vec![dispatched()]),
        )
        .await
        else {
            panic!("{name}: the recovery point was refused");
        };
        store.complete_claim(&done).expect("complete");
        commit(&store, Unit::new()).await;
        let next = start(&store, &key, claimed(T + 1_000, 1_000, EPOCH)).await;
        assert!(next.generation > head.generation, "{name}");
        let log = store.load_claim(&key, T + 1_500).await.expect("read");
        assert_eq!(log.map(|l| l.head.generation), Some(T + 1_000), "{name}");
        // An expired generation in flight for `in_flight_timeout` reads as no claim at all,
        // completed or not, and a new one replaces it.
        let late = T
            + 1_000
            + Settings::default()
                .idempotency
                .in_flight_timeout
                .as_millis() as u64;
        assert_eq!(store.load_claim(&key, late).await.expect("read"), None);
        start(&store, &key, claimed(late, 1_000, EPOCH)).await;
    })
    .await;
}

#[tokio::test]
async fn a_stale_writer_is_fenced_and_writes_nothing_of_its_unit() {
    on_each_store(|name, store| async move {
        let key = id(2);
        let ttl = 3_600_000;
        let at = now_ms();
        let head = start(&store, &key, claimed(at, ttl, EPOCH)).await;
        let appended = commit(
            &store,
            Unit::new().append_claim(head.clone(), vec![dispatched()]),
        )
        .await;
        assert!(
            matches!(appended, Written::Appended(ref h, _) if h.next == 2),
            "{name}: {appended:?}"
        );
        // The same head again: the log has moved past it. Its delivery and decision stay out.
        let stale = Unit::new()
            .write_deliveries(vec![delivery("msg_stale", at)])
            .record_decision(record(at))
            .append_claim(head, vec![dispatched()]);
        assert_eq!(commit(&store, stale).await, Written::Fenced, "{name}");
        assert_eq!(
            store.load_delivery("msg_stale").await.expect("read"),
            None,
            "{name}"
        );
        let kept = store
            .load_decision("acme", &decision(at).id, now_ms())
            .await;
        assert_eq!(
            kept.expect("read"),
            None,
            "{name}: a fenced unit kept its decision"
        );
        let log = current(&store, &key).await;
        assert_eq!(log.events.len(), 2, "{name}: one recovery point");
    })
    .await;
}

#[tokio::test]
async fn a_start_that_loses_writes_none_of_its_queued_deliveries() {
    on_each_store(|name, store| async move {
        let key = id(3);
        let at = now_ms();
        start(&store, &key, claimed(at, 3_600_000, EPOCH)).await;
        let loser = Unit::new()
            .write_deliveries(vec![delivery("msg_loser", at)])
            .start_claim(
                key.clone(),
                vec![
                    claimed(at + 1, 3_600_000, EPOCH),
                    dispatched(),
                    ClaimEvent::Completed,
                ],
            )
            .record_decision(record(at + 1));
        let written = commit(&store, loser).await;
        assert!(matches!(written, Written::Held(_)), "{name}: {written:?}");
        assert_eq!(
            store.load_delivery("msg_loser").await.expect("read"),
            None,
            "{name}"
        );
        let kept = store
            .load_decision("acme", &decision(at + 1).id, now_ms())
            .await;
        assert_eq!(kept.expect("read"), None, "{name}");
        // The same unit on a free key is written whole: the claim, its delivery, its decision.
        let winner = Unit::new()
            .write_deliveries(vec![delivery("msg_winner", at)])
            .start_claim(
                id(4),
                vec![
                    claimed(at, 3_600_000, EPOCH),
                    dispatched(),
                    ClaimEvent::Completed,
                ],
            )
            .record_decision(record(at));
        assert!(
            matches!(commit(&store, winner).await, Written::Claimed(..)),
            "{name}"
        );
        assert!(
            store
                .load_delivery("msg_winner")
                .await
                .expect("read")
                .is_some(),
            "{name}"
        );
        let kept = store
            .load_decision("acme", &decision(at).id, now_ms())
            .await;
        assert!(kept.expect("read").is_some(), "{name}");
        let log = current(&store, &id(4)).await;
        assert_eq!(log.events.last(), Some(&ClaimEvent::Completed), "{name}");
    })
    .await;
}

#[tokio::test]
async fn a_claim_whose_holder_is_gone_is_taken_over_and_its_old_head_fenced() {
    on_each_store(|name, store| async move {
        let key = id(5);
        // Held by a process that is gone (no node of its epoch lives).
        let old = start(&store, &key, claimed(now_ms(), 3_600_000, 999)).await;
        let taken = commit(&store, Unit::new().take_over_claim(old.clone())).await;
        let Written::TakenOver(new) = taken else {
            panic!("{name}: the take-over was refused: {taken:?}");
        };
        // The old holder's late recovery point is fenced; the new holder's is written.
        if name == "postgres" {
            assert!(
                new.generation > old.generation,
                "{name}: a new fencing token"
            );
            let late = commit(&store, Unit::new().append_claim(old, vec![dispatched()])).await;
            assert_eq!(late, Written::Fenced, "{name}");
        }
        let mine = commit(&store, Unit::new().append_claim(new, vec![dispatched()])).await;
        assert!(matches!(mine, Written::Appended(..)), "{name}: {mine:?}");
    })
    .await;
}

#[tokio::test]
async fn completion_is_recorded_on_the_current_generation_where_it_frees_the_key_sooner() {
    on_each_store(|name, store| async move {
        let in_flight = Settings::default()
            .idempotency
            .in_flight_timeout
            .as_millis() as u64;
        let recovered = |key: ClaimId, ttl: u64| {
            let store = store.clone();
            async move {
                let head = start(&store, &key, claimed(now_ms(), ttl, EPOCH)).await;
                let Written::Appended(head, _) =
                    commit(&store, Unit::new().append_claim(head, vec![dispatched()])).await
                else {
                    panic!("{name}: the recovery point was not written");
                };
                store.complete_claim(&head).expect("complete");
                // `completed` is durable with the next commit.
                commit(&store, Unit::new()).await;
                head
            }
        };
        // A window shorter than `in_flight_timeout`: completion frees the key at its expiry.
        let short = recovered(id(6), 1_000).await;
        let log = current(&store, &short.id).await;
        assert_eq!(log.events.last(), Some(&ClaimEvent::Completed), "{name}");
        // A longer one is free at its expiry either way: its completion may be left out.
        let long = recovered(id(16), in_flight + 1_000).await;
        let log = current(&store, &long.id).await;
        assert!(
            matches!(
                log.events.last(),
                Some(ClaimEvent::Completed | ClaimEvent::Dispatched { .. })
            ),
            "{name}: {:?}",
            log.events
        );
        let freed = store.load_claim(&long.id, long.expires_at_ms).await;
        assert_eq!(freed.expect("read"), None, "{name}");
    })
    .await;
}

#[tokio::test]
async fn deliveries_are_listed_leased_when_due_and_fenced_when_stale() {
    on_each_store(|name, store| async move {
        let at = now_ms() - 1_000;
        let unit = Unit::new().write_deliveries(vec![delivery("msg_a", at)]);
        assert_eq!(commit(&store, unit).await, Written::Nothing, "{name}");
        let log = store
            .load_delivery("msg_a")
            .await
            .expect("read")
            .expect("a delivery");
        assert_eq!(log.len(), 1, "{name}");
        let due = store.due(now_ms(), 10).await.expect("due");
        assert_eq!(
            due.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(),
            ["msg_a"],
            "{name}"
        );
        let listed = store
            .list_deliveries("acme", Some(DeliveryStatus::Queued), None, 10)
            .await
            .expect("list");
        assert_eq!(
            listed,
            vec![(DeliveryStatus::Queued, "msg_a".to_string())],
            "{name}"
        );
        let counted = store
            .count_deliveries("acme", DeliveryStatus::Queued, 10)
            .await;
        assert_eq!(counted.expect("count"), 1, "{name}");
        // A record written where the log does not end is fenced, and changes nothing.
        let stale = DeliveryWrite {
            first_seq: 5,
            lease: due[0].lease,
            events: vec![DeliveryEvent::Held { until_ms: at + 1 }],
            from: Some(delivery("msg_a", at).to),
            ..delivery("msg_a", at)
        };
        let written = commit(&store, Unit::new().write_deliveries(vec![stale])).await;
        assert_eq!(written, Written::Fenced, "{name}");
        let log = store
            .load_delivery("msg_a")
            .await
            .expect("read")
            .expect("a delivery");
        assert_eq!(log.len(), 1, "{name}");
    })
    .await;
}

#[tokio::test]
async fn a_held_delivery_moves_in_the_queue_without_a_record() {
    on_each_store(|name, store| async move {
        let at = now_ms() - 1_000;
        let unit = Unit::new().write_deliveries(vec![delivery("msg_h", at)]);
        commit(&store, unit).await;
        let due = store.due(now_ms(), 10).await.expect("due");
        assert_eq!(due.len(), 1, "{name}");
        let later = now_ms() + 60_000;
        store.move_due(&due[0], later).await.expect("move");
        // Not due now, due then, and its log as it was.
        assert!(
            store.due(now_ms(), 10).await.expect("due").is_empty(),
            "{name}"
        );
        let then = store.due(later, 10).await.expect("due");
        assert_eq!(
            then.iter()
                .map(|d| (d.id.as_str(), d.at_ms))
                .collect::<Vec<_>>(),
            [("msg_h", later)],
            "{name}"
        );
        let log = store.load_delivery("msg_h").await.expect("read");
        assert_eq!(log.map(|l| l.len()), Some(1), "{name}: no record");
        // A move to the time it is at already keeps it there.
        store.move_due(&then[0], later).await.expect("move");
        let still = store.due(later, 10).await.expect("due");
        assert_eq!(still.len(), 1, "{name}: still queued once");
    })
    .await;
}

/// The tenant's queued deliveries by endpoint, as `GET /v1/endpoints` counts them.
async fn queued(store: &Arc<dyn Store>) -> Vec<(String, u64)> {
    let counts = store.queued_by_endpoint("acme").await.expect("count");
    let mut counts: Vec<_> = counts.into_iter().collect();
    counts.sort();
    counts
}

#[tokio::test]
async fn queued_deliveries_are_counted_by_endpoint_while_they_are_queued() {
    const CASE: &str = "http://127.0.0.1:9/case";
    on_each_store(|name, store| async move {
        let at = now_ms() - 1_000;
        let delivered = DeliveryWrite {
            to: Placement {
                status: DeliveryStatus::Delivered,
                due_ms: None,
            },
            ..delivery_to("msg_d", at, LOCK)
        };
        let elsewhere = DeliveryWrite {
            tenant: "globex".into(),
            ..delivery_to("msg_g", at, LOCK)
        };
        let unit = Unit::new().write_deliveries(vec![
            delivery_to("msg_1", at, LOCK),
            delivery_to("msg_2", at, LOCK),
            delivery_to("msg_3", at, CASE),
            delivered,
            elsewhere,
        ]);
        commit(&store, unit).await;
        let both = vec![(CASE.to_string(), 1), (LOCK.to_string(), 2)];
        assert_eq!(queued(&store).await, both, "{name}");

        // Dead: no longer counted; redelivered: counted again.
        let due = store.due(now_ms(), 10).await.expect("due");
        let lease = due.iter().find(|d| d.id == "msg_1").expect("due").lease;
        let queued_at = delivery("msg_1", at).to;
        let dead = Placement {
            status: DeliveryStatus::Dead,
            due_ms: None,
        };
        let died = DeliveryWrite {
            first_seq: 1,
            lease,
            events: vec![DeliveryEvent::HeldTooLong { at_ms: at }],
            from: Some(queued_at),
            to: dead,
            ..delivery_to("msg_1", at, LOCK)
        };
        commit(&store, Unit::new().write_deliveries(vec![died])).await;
        let one_each = vec![(CASE.to_string(), 1), (LOCK.to_string(), 1)];
        assert_eq!(queued(&store).await, one_each, "{name}");
        let redelivered = DeliveryWrite {
            first_seq: 2,
            events: vec![DeliveryEvent::Redelivered { at_ms: at }],
            from: Some(dead),
            to: queued_at,
            ..delivery_to("msg_1", at, LOCK)
        };
        commit(&store, Unit::new().write_deliveries(vec![redelivered])).await;
        assert_eq!(queued(&store).await, both, "{name}");
    })
    .await;
}

/// A schema-5 database (its delivery rows without URLs) migrated: each row's URL comes from its
/// log, and the queued count by endpoint reads them.
#[tokio::test]
async fn a_schema_5_database_gets_each_deliverys_url_from_its_log() {
    let url = devtools::postgres::fresh_database(devtools::postgres::LOCAL, "idem_test")
        .expect("PostgreSQL must answer");
    let backend = || Backend::Postgres {
        url: url.clone(),
        pool_size: 2,
        connect_timeout: std::time::Duration::from_secs(10),
    };
    let at = now_ms() - 1_000;
    {
        let store = open(backend()).await;
        let unit = Unit::new().write_deliveries(vec![
            delivery_to("msg_1", at, LOCK),
            delivery_to("msg_2", at, "http://127.0.0.1:9/case"),
        ]);
        commit(&store, unit).await;
    }
    devtools::postgres::with_postgres(&url, |client| async move {
        client
            .batch_execute(
                "ALTER TABLE idem_deliveries DROP COLUMN url; \
                 UPDATE idem_schema SET version = 5",
            )
            .await
            .expect("back to schema 5");
    })
    .expect("PostgreSQL");
    let store = open(backend()).await;
    assert_eq!(
        queued(&store).await,
        vec![
            ("http://127.0.0.1:9/case".to_string(), 1),
            (LOCK.to_string(), 1)
        ]
    );
    // Every row has its URL, as the column requires, and the count is read from the index.
    let (missing, plan) = devtools::postgres::with_postgres(&url, |client| async move {
        let row = client
            .query_one(
                "SELECT count(*) FROM idem_deliveries WHERE url IS NULL",
                &[],
            )
            .await
            .expect("count");
        client
            .batch_execute("SET enable_seqscan = off")
            .await
            .expect("set");
        let plan = client
            .query(
                "EXPLAIN SELECT url, count(*) FROM idem_deliveries \
                 WHERE tenant = 'acme' AND status = 0 GROUP BY url",
                &[],
            )
            .await
            .expect("explain");
        let plan: Vec<String> = plan.iter().map(|row| row.get(0)).collect();
        (row.get::<_, i64>(0), plan.join("\n"))
    })
    .expect("PostgreSQL");
    assert_eq!(missing, 0);
    assert!(plan.contains("idem_deliveries_queued"), "{plan}");
}

#[tokio::test]
async fn decisions_are_kept_with_their_claim_and_found_by_subject() {
    on_each_store(|name, store| async move {
        let at = now_ms();
        let unit = Unit::new()
            .start_claim(id(7), vec![claimed(at, 3_600_000, EPOCH)])
            .record_decision(record(at));
        commit(&store, unit).await;
        let kept = store
            .load_decision("acme", &decision(at).id, now_ms())
            .await;
        assert_eq!(kept.expect("read"), Some(record(at)), "{name}");
        let subject = "ab".repeat(32);
        let found = store
            .decisions_about("acme", Some(&subject), None, None, 10, now_ms())
            .await
            .expect("listing");
        assert_eq!(found, vec![record(at)], "{name}");
        let other = store
            .decisions_about("acme", Some(&"cd".repeat(32)), None, None, 10, now_ms())
            .await
            .expect("listing");
        assert!(other.is_empty(), "{name}");
    })
    .await;
}

#[tokio::test]
async fn an_endpoint_opens_after_its_threshold_of_failures_for_every_reader() {
    on_each_store(|name, store| async move {
        let settings = Settings::default().delivery;
        let url = "http://127.0.0.1:9/lock";
        let mut last = None;
        for n in 0..settings.breaker_threshold {
            let at_ms = now_ms() + u64::from(n);
            let event = EndpointEvent::Failed { at_ms };
            last = Some(
                store
                    .note_endpoint("acme", url, event, &settings)
                    .await
                    .expect("noted"),
            );
        }
        let noted = last.expect("noted once");
        assert!(
            matches!(noted.health.circuit, Circuit::Open { .. }),
            "{name}: {noted:?}"
        );
        let listed = store.endpoints(Some("acme")).await.expect("endpoints");
        assert_eq!(listed.len(), 1, "{name}");
        assert_eq!(listed[0].0.url, url, "{name}");
        assert_eq!(listed[0].1, noted.health, "{name}");
    })
    .await;
}

#[tokio::test]
async fn a_job_is_leased_to_one_live_node_and_passes_once_it_is_gone() {
    // One process owns a sled directory: it holds every job.
    let dir = tempfile::tempdir().expect("temp dir");
    let sled = open(Backend::Sled {
        data_dir: dir.path().to_path_buf(),
    })
    .await;
    assert!(sled.lease("poll:t/s").await.expect("lease").is_some());

    // Two nodes on one database: the first to ask holds the job while it lives.
    let url = devtools::postgres::fresh_database(devtools::postgres::LOCAL, "idem_test")
        .unwrap_or_else(|e| panic!("PostgreSQL must answer for the store suite: {e}"));
    let backend = || Backend::Postgres {
        url: url.clone(),
        pool_size: 2,
        connect_timeout: std::time::Duration::from_secs(10),
    };
    let a = open_as(backend(), EPOCH).await;
    let b = open_as(backend(), EPOCH + 1).await;
    let token = a
        .lease("poll:t/s")
        .await
        .expect("lease")
        .expect("a takes it");
    assert_eq!(
        b.lease("poll:t/s").await.expect("lease"),
        None,
        "held by a live node"
    );
    assert_eq!(
        a.lease("poll:t/s").await.expect("lease"),
        Some(token),
        "kept, under its token"
    );
    assert!(
        b.lease("poll:t/other").await.expect("lease").is_some(),
        "another job is free"
    );
    // a's node is gone (its heartbeat stops with it): the job passes to b, under a new token.
    drop(a);
    devtools::postgres::with_postgres(&url, |client| async move {
        client
            .execute(
                "DELETE FROM idem_nodes WHERE epoch = $1",
                &[&(EPOCH as i64)],
            )
            .await
            .expect("delete the heartbeat");
    })
    .expect("the database");
    let taken = b
        .lease("poll:t/s")
        .await
        .expect("lease")
        .expect("b takes it over");
    assert!(taken > token, "a new fencing token: {taken} after {token}");
}

#[tokio::test]
async fn a_stream_is_written_only_over_the_version_it_was_made_from() {
    on_each_store(|name, store| async move {
        let made = Stream {
            id: "st_1".into(),
            receiver: "okta".into(),
            version: 1,
            created_at_ms: T,
            method: StreamMethod::Push,
            endpoint_url: Some("https://rx.example/ssf".into()),
            authorization: None,
            events_requested: vec!["urn:example:event".into()],
            description: None,
            state: StreamState::Enabled,
            reason: None,
            removed_subjects: Vec::new(),
            verified_at_ms: None,
        };
        assert!(
            store.put_stream("acme", &made).await.expect("put"),
            "{name}: made"
        );
        assert!(
            !store.put_stream("acme", &made).await.expect("put"),
            "{name}: a second stream under the same id"
        );
        let paused = Stream {
            version: 2,
            state: StreamState::Paused,
            ..made.clone()
        };
        let renamed = Stream {
            version: 2,
            description: Some("renamed".into()),
            ..made.clone()
        };
        assert!(
            store.put_stream("acme", &paused).await.expect("put"),
            "{name}"
        );
        assert!(
            !store.put_stream("acme", &renamed).await.expect("put"),
            "{name}: a change made from version 1 after version 2 was written"
        );
        assert_eq!(
            store.stream("acme", "st_1").await.expect("read"),
            Some(paused.clone()),
            "{name}"
        );
        assert_eq!(
            store.stream("beta", "st_1").await.expect("read"),
            None,
            "{name}: another tenant's"
        );
        assert_eq!(
            store.streams("acme").await.expect("list"),
            vec![paused],
            "{name}"
        );
        assert!(
            store.delete_stream("acme", "st_1").await.expect("delete"),
            "{name}"
        );
        assert!(
            !store.delete_stream("acme", "st_1").await.expect("delete"),
            "{name}: gone"
        );
        assert!(
            store.streams("acme").await.expect("list").is_empty(),
            "{name}"
        );
    })
    .await;
}

fn new_stream(id: &str, receiver: &str) -> Stream {
    Stream {
        id: id.into(),
        receiver: receiver.into(),
        version: 1,
        created_at_ms: T,
        method: StreamMethod::Poll,
        endpoint_url: None,
        authorization: None,
        events_requested: vec!["urn:example:event".into()],
        description: None,
        state: StreamState::Enabled,
        reason: None,
        removed_subjects: Vec::new(),
        verified_at_ms: None,
    }
}

/// 32 creates of the receiver `okta`'s, let go at once over `nodes` in turn: how many were
/// made. Every one not made must be refused as full.
async fn racing_creates(nodes: &[Arc<dyn Store>]) -> usize {
    const CREATES: usize = 32;
    let start = Arc::new(tokio::sync::Barrier::new(CREATES));
    let mut tasks = Vec::new();
    for i in 0..CREATES {
        let store = nodes[i % nodes.len()].clone();
        let start = start.clone();
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let stream = new_stream(&format!("st_{i}"), "okta");
            store.create_stream("acme", &stream).await.expect("create")
        }));
    }
    let mut made = 0;
    for task in tasks {
        match task.await.expect("the create runs") {
            store::Created::Made => made += 1,
            store::Created::Full => {}
            store::Created::Taken => panic!("every id is new"),
        }
    }
    made
}

async fn streams_of(store: &Arc<dyn Store>, receiver: &str) -> usize {
    let streams = store.streams("acme").await.expect("list");
    streams.iter().filter(|s| s.receiver == receiver).count()
}

/// The store of `backend`, once its directory is free: a sled store dropped a moment ago may
/// hold its lock until sled's own threads let go of its files.
async fn reopened(backend: impl Fn() -> Backend) -> Arc<dyn Store> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let node = Process {
            epoch: EPOCH + 10,
            settings: Arc::new(Settings {
                store: backend(),
                ..Settings::default()
            }),
        };
        match store::open(node).await {
            Ok(store) => return store,
            Err(e)
                if format!("{e:?}").contains("could not acquire lock")
                    && std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => panic!("the store reopens: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn racing_creates_leave_a_receiver_no_more_streams_than_the_limit() {
    let limit = store::STREAMS_PER_RECEIVER;
    // One process on a sled directory.
    let dir = tempfile::tempdir().expect("temp dir");
    let sled = || Backend::Sled {
        data_dir: dir.path().to_path_buf(),
    };
    let store = open(sled()).await;
    assert_eq!(
        racing_creates(std::slice::from_ref(&store)).await,
        limit,
        "sled"
    );
    assert_eq!(streams_of(&store, "okta").await, limit, "sled");
    let other = new_stream("st_other", "ping");
    assert_eq!(
        store.create_stream("acme", &other).await.expect("create"),
        store::Created::Made,
        "sled: another receiver's limit is its own"
    );
    drop(store);
    let store = reopened(sled).await;
    assert_eq!(streams_of(&store, "okta").await, limit, "sled, reopened");

    // Two nodes on one database.
    let url = devtools::postgres::fresh_database(devtools::postgres::LOCAL, "idem_test")
        .unwrap_or_else(|e| panic!("PostgreSQL must answer for the store suite: {e}"));
    let postgres = || Backend::Postgres {
        url: url.clone(),
        pool_size: 8,
        connect_timeout: std::time::Duration::from_secs(10),
    };
    let a = open_as(postgres(), EPOCH).await;
    let b = open_as(postgres(), EPOCH + 1).await;
    assert_eq!(
        racing_creates(&[a.clone(), b.clone()]).await,
        limit,
        "postgres"
    );
    assert_eq!(
        a.create_stream("acme", &other).await.expect("create"),
        store::Created::Made,
        "postgres: another receiver's limit is its own"
    );
    drop((a, b));
    let store = reopened(postgres).await;
    assert_eq!(
        streams_of(&store, "okta").await,
        limit,
        "postgres, reopened"
    );
    assert_eq!(
        store
            .create_stream("acme", &new_stream("st_late", "okta"))
            .await
            .expect("create"),
        store::Created::Full,
        "postgres, reopened"
    );
}

fn set_key(delivery: &str) -> SetKey {
    SetKey {
        delivery: delivery.into(),
        wrapped: format!("key of {delivery}").into_bytes(),
    }
}

async fn key_of(store: &Arc<dyn Store>, delivery: &str) -> Option<Vec<u8>> {
    store.set_key(delivery).await.expect("read")
}

#[tokio::test]
async fn a_sets_key_is_kept_with_its_claim_and_erased_when_its_delivery_ends() {
    const STREAM: &str = "ssf:st_1";
    on_each_store(|name, store| async move {
        let at = now_ms() - 1_000;
        // Kept by the start that claims the decision, inline (no delivery yet) or queued.
        let inline = Unit::new()
            .start_claim(id(20), vec![claimed(at, 3_600_000, EPOCH)])
            .keep_set_keys(vec![set_key("msg_a"), set_key("msg_b")]);
        assert!(matches!(commit(&store, inline).await, Written::Claimed(..)));
        let queued = Unit::new()
            .write_deliveries(vec![delivery_to("msg_c", at, STREAM)])
            .start_claim(id(21), vec![claimed(at, 3_600_000, EPOCH)])
            .keep_set_keys(vec![set_key("msg_c")]);
        assert!(matches!(commit(&store, queued).await, Written::Claimed(..)));
        for delivery in ["msg_a", "msg_b", "msg_c"] {
            let wrapped = format!("key of {delivery}").into_bytes();
            assert_eq!(key_of(&store, delivery).await, Some(wrapped), "{name}");
        }
        // A start that loses keeps none, inline or with its queued deliveries.
        for unit in [
            Unit::new().start_claim(id(20), vec![claimed(at + 1, 3_600_000, EPOCH)]),
            Unit::new()
                .write_deliveries(vec![delivery_to("msg_lost", at, STREAM)])
                .start_claim(id(20), vec![claimed(at + 1, 3_600_000, EPOCH)]),
        ] {
            let written = commit(&store, unit.keep_set_keys(vec![set_key("msg_lost")])).await;
            assert!(matches!(written, Written::Held(_)), "{name}: {written:?}");
            assert_eq!(key_of(&store, "msg_lost").await, None, "{name}");
        }

        // Delivered inline at once: its new log ends it. Still queued: kept.
        let delivered = DeliveryWrite {
            to: Placement {
                status: DeliveryStatus::Delivered,
                due_ms: None,
            },
            ..delivery_to("msg_a", at, STREAM)
        };
        let head = current(&store, &id(20)).await.head;
        let recovery_point = Unit::new()
            .write_deliveries(vec![delivered, delivery_to("msg_b", at, STREAM)])
            .append_claim(head, vec![dispatched()]);
        assert!(matches!(
            commit(&store, recovery_point).await,
            Written::Appended(..)
        ));
        assert_eq!(key_of(&store, "msg_a").await, None, "{name}: delivered");
        assert!(key_of(&store, "msg_b").await.is_some(), "{name}: queued");

        // Dead after a retry: erased; a callback's dead delivery has no key to erase.
        let due = store.due(now_ms(), 10).await.expect("due");
        let lease = due.iter().find(|d| d.id == "msg_b").expect("due").lease;
        let dead = DeliveryWrite {
            first_seq: 1,
            lease,
            events: vec![DeliveryEvent::HeldTooLong { at_ms: at }],
            from: Some(delivery("msg_b", at).to),
            to: Placement {
                status: DeliveryStatus::Dead,
                due_ms: None,
            },
            ..delivery_to("msg_b", at, STREAM)
        };
        commit(&store, Unit::new().write_deliveries(vec![dead])).await;
        assert_eq!(key_of(&store, "msg_b").await, None, "{name}: dead");
        assert!(key_of(&store, "msg_c").await.is_some(), "{name}");

        // A decision whose SETs will never be sent (another one's actions ran): erased with its
        // recovery point, unless that append is fenced.
        let stale = current(&store, &id(21)).await.head;
        let head = match commit(
            &store,
            Unit::new().append_claim(stale.clone(), vec![dispatched()]),
        )
        .await
        {
            Written::Appended(head, _) => head,
            other => panic!("{name}: {other:?}"),
        };
        let fenced = Unit::new()
            .append_claim(stale, vec![dispatched()])
            .erase_set_keys(vec!["msg_c".into()]);
        assert_eq!(commit(&store, fenced).await, Written::Fenced, "{name}");
        assert!(key_of(&store, "msg_c").await.is_some(), "{name}: fenced");
        let erased = Unit::new()
            .append_claim(head, vec![ClaimEvent::Completed])
            .erase_set_keys(vec!["msg_c".into()]);
        assert!(matches!(
            commit(&store, erased).await,
            Written::Appended(..)
        ));
        assert_eq!(key_of(&store, "msg_c").await, None, "{name}: erased");
    })
    .await;
}
