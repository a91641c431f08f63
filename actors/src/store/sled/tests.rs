//! The sled store against a real data directory: who holds a claim, fencing, completion,
//! sweeping, damage, and the format check.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use idem_schemas::timefmt::now_ms;
use idem_schemas::{
    Claim, ClaimEvent, Decision, DecisionRecord, DeliveryEvent, DeliveryRecord, DeliveryStatus,
    StoredResponse, Verdict,
};

use super::format::{FORMAT_KEY, SEGMENT_BYTES};
use super::keys::{claim_key, log_key, log_prefix, status_key};
use super::{SledStore, FORMAT};
use crate::store::{
    ClaimId, ClaimStore, DecisionStore, DeliveryWrite, LogHead, Placement, Store, StoreError, Unit,
    Written,
};

/// How long a claim here may be in flight: shorter than the windows the cases use, so an
/// expired generation is replaceable whether or not it completed (the store suite in
/// `tests/it/store.rs` has the case where it is not).
const IN_FLIGHT_TIMEOUT: Duration = Duration::from_millis(100);

/// The sweep's time for generations that expired before `at`: it leaves what expired within
/// `IN_FLIGHT_TIMEOUT` before its time.
fn sweep_at(at: u64) -> u64 {
    at + IN_FLIGHT_TIMEOUT.as_millis() as u64
}

/// A claim id of `tenant` whose digest is `byte` repeated.
fn claim_id(tenant: &str, byte: u8) -> ClaimId {
    ClaimId {
        tenant: tenant.into(),
        digest: [byte; 32],
    }
}

fn claimed(at: u64, ttl: u64) -> ClaimEvent {
    ClaimEvent::Claimed(Claim {
        fingerprint: [7; 32],
        holder: 1,
        claimed_at_ms: at,
        expires_at_ms: at + ttl,
        decision: Decision {
            id: format!("dec_{at}"),
            tenant: "acme".into(),
            signal_type: "sim_swap".into(),
            source: None,
            verdict: Verdict::Deny,
            subject_hash: "ab".into(),
            created_at_ms: at,
            deliveries: vec![],
            trace: None,
            rule: None,
            rule_errors: Vec::new(),
        },
        subject: None,
    })
}

fn done() -> ClaimEvent {
    ClaimEvent::Dispatched {
        outcomes: vec![],
        response: StoredResponse {
            status: 201,
            body: b"{}".to_vec(),
            trace: None,
        },
    }
}

fn open(dir: &Path) -> Arc<SledStore> {
    reopened(|| SledStore::open(dir, IN_FLIGHT_TIMEOUT)).expect("open")
}

/// `open()`, once the directory is free: a store dropped a moment ago may still hold sled's
/// lock on it until sled's own I/O threads let go of its files (under load, a while).
fn reopened<T, E: std::fmt::Debug>(open: impl Fn() -> Result<T, E>) -> Result<T, E> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match open() {
            Err(e)
                if format!("{e:?}").contains("could not acquire lock")
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::yield_now()
            }
            other => return other,
        }
    }
}

async fn commit(store: &Arc<SledStore>, unit: Unit) -> Written {
    let store: Arc<dyn Store> = store.clone();
    store.commit(unit).await.expect("commit")
}

/// Starts a generation and returns its head, which must be granted.
async fn start(store: &Arc<SledStore>, id: &ClaimId, event: ClaimEvent) -> LogHead {
    match commit(store, Unit::new().start_claim(id.clone(), vec![event])).await {
        Written::Claimed(head, _) => head,
        other => panic!("claim refused: {other:?}"),
    }
}

async fn append(store: &Arc<SledStore>, head: &LogHead, event: ClaimEvent) -> Written {
    commit(store, Unit::new().append_claim(head.clone(), vec![event])).await
}

#[tokio::test]
async fn the_key_is_held_until_its_generation_expires() {
    let dir = tempfile::tempdir().expect("tempdir");
    let id = claim_id("acme", 1);
    let other = claim_id("acme2", 1);
    let t = now_ms();
    {
        let store = open(dir.path());
        assert_eq!(store.read_claim(&id, t).expect("load"), None);
        let head = start(&store, &id, claimed(t, 1_000)).await;
        let Written::Appended(appended, _) = append(&store, &head, done()).await else {
            panic!("append refused");
        };
        // While it holds the key, a new generation is refused with the log that holds it.
        let held = commit(
            &store,
            Unit::new().start_claim(id.clone(), vec![claimed(t + 10, 60_000)]),
        )
        .await;
        let Written::Held(log) = held else {
            panic!("a held key was claimed again: {held:?}");
        };
        assert_eq!(log.events, vec![claimed(t, 1_000), done()]);
        assert_eq!(log.head, appended);
        // A refused start writes none of the queued deliveries it carries: they belong to a
        // decision that never holds the key.
        let queued = Unit::new()
            .write_deliveries(vec![delivery("msg_lost_start", t)])
            .start_claim(id.clone(), vec![claimed(t + 20, 60_000)]);
        assert!(matches!(commit(&store, queued).await, Written::Held(_)));
        assert!(!store.exists("msg_lost_start").expect("exists"));
        assert_eq!(store.read_due(t + 1, 10).expect("due"), vec![]);
        // Once it has expired, the key is free for a new generation.
        start(&store, &id, claimed(t + 1_000, 60_000)).await;
        start(&store, &other, claimed(t + 20, 60_000)).await;
    }
    let store = open(dir.path());
    let log = store
        .read_claim(&id, t + 1_000)
        .expect("load")
        .expect("present");
    assert_eq!(log.head.generation, t + 1_000);
    assert_eq!(log.events, vec![claimed(t + 1_000, 60_000)]);

    // Once only the first generation has expired, the sweep removes its two entries and
    // nothing else; the key's index entry names the newer generation and stays.
    assert_eq!(
        store.sweep_claims(sweep_at(t + 1_001), 100).expect("sweep"),
        2
    );
    assert_eq!(store.claim_count(), 2);
    assert!(store.read_claim(&id, t + 1_001).expect("load").is_some());
    assert_eq!(
        store
            .sweep_claims(sweep_at(t + 100_000), 100)
            .expect("sweep"),
        2
    );
    assert_eq!(store.claim_count(), 0);
    assert!(store.claim_logs.is_empty());
    assert_eq!(store.read_claim(&other, t).expect("load"), None);
}

#[tokio::test]
async fn completion_flags_the_index_entry_of_its_own_log_only_where_it_frees_the_key_sooner() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (id, long, open_one) = (
        claim_id("acme", 4),
        claim_id("acme", 7),
        claim_id("acme", 8),
    );
    let t = now_ms();
    // Windows shorter than the in-flight timeout (50 < 100 ms), one completed and one not, and
    // a longer one completed.
    let recovered = |store: Arc<SledStore>, id: ClaimId, window: u64| async move {
        let head = start(&store, &id, claimed(t, window)).await;
        let Written::Appended(head, _) = append(&store, &head, done()).await else {
            panic!("append refused");
        };
        head
    };
    let first = {
        let store = open(dir.path());
        let head = recovered(store.clone(), id.clone(), 50).await;
        store.complete_claim(&head).expect("complete");
        recovered(store.clone(), open_one.clone(), 50).await;
        let long_head = recovered(store.clone(), long.clone(), 1_000).await;
        store.complete_claim(&long_head).expect("complete");
        commit(&store, Unit::new()).await;
        head
    };
    let store = open(dir.path());
    let events = |id: &ClaimId, at: u64| store.read_claim(id, at).expect("load").map(|l| l.events);
    assert_eq!(
        events(&id, t),
        Some(vec![claimed(t, 50), done(), ClaimEvent::Completed])
    );
    // Completed, a short window's key is free at its expiry; one not completed holds its key
    // until it has been in flight for the timeout.
    assert_eq!(events(&id, t + 50), None);
    assert_eq!(
        events(&open_one, t + 50),
        Some(vec![claimed(t, 50), done()])
    );
    assert_eq!(events(&open_one, t + 100), None);
    // A longer window's completion is not written: its log reads `dispatched`, and its key is
    // free at its expiry all the same.
    assert_eq!(events(&long, t), Some(vec![claimed(t, 1_000), done()]));
    assert_eq!(events(&long, t + 1_000), None);

    // A newer generation is not completed by the older log's completion.
    start(&store, &id, claimed(t + 60, 60_000)).await;
    store.complete_claim(&first).expect("stale complete");
    assert_eq!(events(&id, t + 60), Some(vec![claimed(t + 60, 60_000)]));

    // The sweep takes a completed log's index entry with it, and only that one.
    let other = claim_id("acme", 5);
    let head = start(&store, &other, claimed(t, 1_000)).await;
    let Written::Appended(head, _) = append(&store, &head, done()).await else {
        panic!("append refused");
    };
    store.complete_claim(&head).expect("complete");
    assert_eq!(store.claim_count(), 4);
    // The older generation of `id`, `open_one`, `long` and `other`: two log entries each.
    assert_eq!(
        store.sweep_claims(sweep_at(t + 1_001), 100).expect("sweep"),
        8
    );
    assert_eq!(store.claim_count(), 1);
    assert_eq!(store.read_claim(&other, t).expect("load"), None);
    assert!(store.read_claim(&id, t + 1_001).expect("load").is_some());
}

/// A delivery log that a recovery point's unit creates.
fn delivery(id: &str, at: u64) -> DeliveryWrite {
    DeliveryWrite {
        tenant: "acme".into(),
        id: id.into(),
        url: "http://127.0.0.1:9/".into(),
        lease: None,
        first_seq: 0,
        events: vec![DeliveryEvent::Created(DeliveryRecord {
            id: id.into(),
            tenant: "acme".into(),
            decision_id: "dec_1".into(),
            action: "lock_account".into(),
            url: "http://127.0.0.1:9/".into(),
            body: b"{}".to_vec(),
            created_at_ms: at,
            expires_at_ms: at + 60_000,
            trace: None,
        })],
        from: None,
        to: Placement {
            status: DeliveryStatus::Queued,
            due_ms: Some(at),
        },
    }
}

#[tokio::test]
async fn stale_writers_are_fenced_and_write_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let id = claim_id("acme", 2);
    let t = now_ms();
    let first = start(&store, &id, claimed(t, 1_000)).await;
    let Written::Appended(second, _) = append(&store, &first, done()).await else {
        panic!("append refused");
    };
    let log = store.read_claim(&id, t).expect("load").expect("present");
    assert_eq!(log.events, vec![claimed(t, 1_000), done()]);
    assert_eq!(log.head, second);

    // A stale head (the log moved on): fenced, nothing written.
    assert_eq!(append(&store, &first, done()).await, Written::Fenced);
    assert_eq!(
        store.read_claim(&id, t).expect("load").expect("present"),
        log
    );

    // A generation no longer the key's current one: fenced, and the unit's deliveries with it.
    start(&store, &id, claimed(t + 1_000, 60_000)).await;
    let stale = Unit::new()
        .write_deliveries(vec![delivery("msg_stale", t)])
        .append_claim(second.clone(), vec![ClaimEvent::Completed]);
    assert_eq!(commit(&store, stale).await, Written::Fenced);
    assert!(!store.exists("msg_stale").expect("exists"));
    assert_eq!(store.read_due(t + 1, 10).expect("due"), vec![]);

    // An expired generation reads as none before it is swept, and an append after the sweep
    // is fenced.
    let gone = claim_id("acme", 3);
    let head = start(&store, &gone, claimed(t - 100, 50)).await;
    assert_eq!(store.read_claim(&gone, t).expect("load"), None);
    assert_eq!(store.sweep_claims(sweep_at(t), 10).expect("sweep"), 1);
    assert_eq!(append(&store, &head, done()).await, Written::Fenced);
    assert_eq!(store.claim_count(), 1);
}

#[tokio::test]
async fn damage_is_reported_never_decoded_into_a_wrong_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let id = claim_id("acme", 6);
    let t = now_ms();
    let head = start(&store, &id, claimed(t, 60_000)).await;
    append(&store, &head, done()).await;
    let prefix = log_prefix(&head);
    let entry_key = |seq| log_key(&prefix, seq);
    let malformed = |table| matches!(store.read_claim(&id, t), Err(StoreError::Malformed(found)) if found == table);
    // An entry cut short.
    let value = store
        .claim_logs
        .get(entry_key(1))
        .expect("get")
        .expect("entry");
    store
        .claim_logs
        .insert(entry_key(1), &value[..value.len() - 3])
        .expect("insert");
    assert!(malformed("claim_logs"));
    // A gap in the entries.
    store.claim_logs.remove(entry_key(1)).expect("remove");
    store
        .claim_logs
        .insert(entry_key(2), value)
        .expect("insert");
    assert!(malformed("claim_logs"));
    // An index entry of the wrong size.
    let index = store
        .claims
        .get(claim_key(&id))
        .expect("get")
        .expect("index");
    store
        .claims
        .insert(claim_key(&id), &[1, 2])
        .expect("insert");
    assert!(malformed("claims"));
    // An index naming a missing log.
    store.claims.insert(claim_key(&id), index).expect("insert");
    for seq in 0..3 {
        store.claim_logs.remove(entry_key(seq)).expect("remove");
    }
    assert!(malformed("claims"));
}

/// sled itself on `path`, with `segment`-byte segments, as an older idem would open it.
fn sled_at(path: &Path, segment: usize) -> ::sled::Db {
    reopened(|| {
        ::sled::Config::new()
            .path(path)
            .segment_size(segment)
            .open()
    })
    .expect("sled")
}

#[test]
fn a_data_directory_of_another_format_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    drop(open(dir.path()));
    drop(open(dir.path()));

    let refusal = |path: &Path| {
        let Err(StoreError::Format(found)) = reopened(|| SledStore::open(path, IN_FLIGHT_TIMEOUT))
        else {
            panic!("{} is not refused as another format", path.display());
        };
        found
    };

    // Written with sled's default segment size, as formats 2 and before were.
    let older = tempfile::tempdir().expect("tempdir");
    {
        let db = sled_at(older.path(), 512 * 1024);
        db.insert(FORMAT_KEY, &[2]).expect("insert");
        db.flush().expect("flush");
    }
    assert!(refusal(older.path()).starts_with("an older format"));

    // Written before formats were marked: trees, no mark.
    let old = tempfile::tempdir().expect("tempdir");
    {
        let db = sled_at(old.path(), SEGMENT_BYTES);
        db.open_tree("claims")
            .expect("tree")
            .insert(b"k", b"v")
            .expect("insert");
        db.flush().expect("flush");
    }
    assert!(refusal(old.path()).starts_with("an unmarked store"));

    // Marked with another format.
    let other = tempfile::tempdir().expect("tempdir");
    {
        let db = sled_at(other.path(), SEGMENT_BYTES);
        db.insert(FORMAT_KEY, &[FORMAT + 1]).expect("insert");
        db.flush().expect("flush");
    }
    assert_eq!(refusal(other.path()), format!("format {}", FORMAT + 1));
    let refused = SledStore::open(other.path(), IN_FLIGHT_TIMEOUT)
        .err()
        .expect("refused");
    assert!(refused.to_string().contains("empty data_dir"), "{refused}");

    // Format 6 is refused too; only format 7 is upgraded (next test).
    let six = tempfile::tempdir().expect("tempdir");
    {
        let db = sled_at(six.path(), SEGMENT_BYTES);
        db.insert(FORMAT_KEY, &[6]).expect("insert");
        db.flush().expect("flush");
    }
    assert_eq!(refusal(six.path()), "format 6");
}

/// The store in `dir`, opened and marked with this format.
fn upgraded(dir: &Path) -> Arc<SledStore> {
    let store = open(dir);
    assert_eq!(
        store.db.get(FORMAT_KEY).expect("get").as_deref(),
        Some(&[FORMAT][..])
    );
    store
}

#[tokio::test]
async fn a_format_8_directory_is_upgraded_in_place_and_counts_its_queued_deliveries() {
    let dir = tempfile::tempdir().expect("tempdir");
    let at = now_ms();
    let queued = delivery("msg_dead", at).to;
    let died = DeliveryWrite {
        first_seq: 1,
        events: vec![DeliveryEvent::HeldTooLong { at_ms: at }],
        from: Some(queued),
        to: Placement {
            status: DeliveryStatus::Dead,
            due_ms: None,
        },
        ..delivery("msg_dead", at)
    };
    let elsewhere = DeliveryWrite {
        tenant: "globex".into(),
        ..delivery("msg_g", at)
    };
    {
        let store = open(dir.path());
        let deliveries = vec![
            delivery("msg_1", at),
            delivery("msg_2", at),
            delivery("msg_dead", at),
            elsewhere,
        ];
        store
            .apply(Unit::new().write_deliveries(deliveries))
            .expect("apply");
        store
            .apply(Unit::new().write_deliveries(vec![died]))
            .expect("apply");
        store.db.flush().expect("flush");
    }
    // Marked 8, without the queued index format 8 did not have, and with the stale listing
    // entry a crash could leave of a delivery that has moved on.
    {
        let db = sled_at(dir.path(), SEGMENT_BYTES);
        db.insert(FORMAT_KEY, &[8]).expect("mark");
        assert!(db.drop_tree("delivery_queued").expect("drop"));
        db.open_tree("delivery_status")
            .expect("tree")
            .insert(status_key("acme", DeliveryStatus::Queued, "msg_dead"), &[])
            .expect("insert");
        db.flush().expect("flush");
    }
    let store = upgraded(dir.path());
    let counts = store.read_queued_by_endpoint("acme").expect("count");
    assert_eq!(counts.get("http://127.0.0.1:9/"), Some(&2), "{counts:?}");
    assert_eq!(counts.len(), 1, "{counts:?}");
    let theirs = store.read_queued_by_endpoint("globex").expect("count");
    assert_eq!(theirs.get("http://127.0.0.1:9/"), Some(&1), "{theirs:?}");
}

#[tokio::test]
async fn a_format_7_directory_is_upgraded_in_place_and_keeps_its_claims() {
    let dir = tempfile::tempdir().expect("tempdir");
    let id = claim_id("acme", 7);
    let at = now_ms();
    {
        let store = open(dir.path());
        start(&store, &id, claimed(at, 60_000)).await;
    }
    // Marked 7 and holding the expiry index format 7 wrote.
    {
        let db = sled_at(dir.path(), SEGMENT_BYTES);
        db.insert(FORMAT_KEY, &[7]).expect("mark");
        db.open_tree("decision_expiry")
            .expect("tree")
            .insert(b"expiry", b"")
            .expect("insert");
        db.flush().expect("flush");
    }
    let store = upgraded(dir.path());
    assert!(!store
        .db
        .tree_names()
        .iter()
        .any(|t| &t[..] == b"decision_expiry"));
    // The claim made before the upgrade still holds its key.
    let log = store.read_claim(&id, at + 1).expect("read").expect("kept");
    assert_eq!(log.head.generation, at);
}

#[tokio::test]
async fn a_claim_with_queued_deliveries_is_written_whole_and_survives_a_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let id = claim_id("acme", 9);
    let t = now_ms();
    let ClaimEvent::Claimed(claim) = claimed(t, 60_000) else {
        unreachable!("claimed() makes a claim");
    };
    let record =
        idem_schemas::DecisionRecord::kept_for(&claim.decision, std::time::Duration::from_secs(60));
    {
        let store = open(dir.path());
        let unit = Unit::new()
            .write_deliveries(vec![delivery("msg_queued", t)])
            .start_claim(id.clone(), vec![claimed(t, 60_000), done()])
            .record_decision(record.clone());
        assert!(matches!(commit(&store, unit).await, Written::Claimed(..)));
        // Another start carrying deliveries while the key is held: nothing of it is written.
        let lost = Unit::new()
            .write_deliveries(vec![delivery("msg_other", t)])
            .start_claim(id.clone(), vec![claimed(t + 5, 60_000)]);
        assert!(matches!(commit(&store, lost).await, Written::Held(_)));
    }
    let store = open(dir.path());
    let log = store.read_claim(&id, t).expect("load").expect("present");
    assert_eq!(log.events, vec![claimed(t, 60_000), done()]);
    assert!(store.exists("msg_queued").expect("exists"));
    assert!(!store.exists("msg_other").expect("exists"));
    let due = store.read_due(t + 1, 10).expect("due");
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].id, "msg_queued");
    let queued = store.read_queued_by_endpoint("acme").expect("count");
    assert_eq!(queued.get("http://127.0.0.1:9/"), Some(&1), "{queued:?}");
    assert_eq!(queued.len(), 1, "{queued:?}");
    let kept = store
        .read_decision("acme", &record.id, t)
        .expect("decision");
    assert_eq!(kept, Some(record));
}

/// A decision record of `tenant` made at `at` (its id in that order), about subject `subject`,
/// kept until `expires_at`.
fn record(tenant: &str, at: u64, expires_at: u64, subject: &str) -> DecisionRecord {
    DecisionRecord {
        id: format!("dec_{at:032x}"),
        tenant: tenant.into(),
        signal_type: "sim_swap".into(),
        source: None,
        verdict: Verdict::Deny,
        subject_hash: subject.into(),
        created_at_ms: at,
        expires_at_ms: expires_at,
        actions: vec![],
        trace: None,
        rule: None,
        rule_errors: Vec::new(),
    }
}

#[tokio::test]
async fn decisions_are_swept_per_tenant_from_their_oldest_up_to_the_first_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let now = now_ms();
    let (past, later) = (now - 1, now + 60_000);
    let kept = [
        // acme: two expired, then one kept, then one expired behind it (made under a shorter
        // retention): it waits for the one before it.
        record("acme", 1, past, "aa"),
        record("acme", 2, past, "aa"),
        record("acme", 3, later, "aa"),
        record("acme", 4, past, "bb"),
        // Tenants with a name of acme's length and of another: each is swept on its own.
        record("acmf", 1, past, "aa"),
        record("bank", 5, later, "aa"),
        record("zeta-co", 1, past, "cc"),
        // Expiring this very millisecond: gone, as it reads.
        record("zeta-co", 2, now, "cc"),
    ];
    let mut unit = Unit::new();
    for r in &kept {
        unit = unit.record_decision(r.clone());
    }
    commit(&store, unit).await;

    // A batch stops at its limit, within a tenant or across them; the next sweep goes on where
    // decisions are still due.
    assert_eq!(store.expire_decisions(now, 1).expect("sweep"), 1);
    assert_eq!(store.expire_decisions(now, 2).expect("sweep"), 2);
    assert_eq!(store.expire_decisions(now, 100).expect("sweep"), 2);
    assert_eq!(store.expire_decisions(now, 100).expect("sweep"), 0);

    let left: Vec<(String, String)> = store
        .decisions
        .iter()
        .values()
        .map(|v| {
            let r: DecisionRecord = crate::codec::decode(&v.expect("value")).expect("record");
            (r.tenant, r.id)
        })
        .collect();
    let expected: Vec<(String, String)> = [("acme", 3), ("acme", 4), ("bank", 5)]
        .iter()
        .map(|(t, at)| (t.to_string(), format!("dec_{at:032x}")))
        .collect();
    assert_eq!(left, expected);
    // Each swept decision left its subject's listing too; the kept ones are still listed.
    assert_eq!(store.by_subject.len(), 3);
    // The expired one held back reads as gone; the kept one reads.
    let read = |at: u64| store.read_decision("acme", &format!("dec_{at:032x}"), now);
    assert!(read(4).expect("read").is_none());
    assert!(read(3).expect("read").is_some());
}

#[test]
fn a_read_of_the_retry_queue_never_finds_a_delivery_part_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let writes = 5_000u64;
    let writer = {
        let store = store.clone();
        std::thread::spawn(move || {
            for n in 0..writes {
                let unit = Unit::new().write_deliveries(vec![delivery(&format!("msg_{n:06}"), n)]);
                store.apply(unit).expect("apply");
            }
        })
    };
    // Each entry the queue hands out has its delivery's records beside it, however the read
    // falls among the writes; an entry checked is taken out, so the reads stay short.
    let mut checked = 0;
    while checked < writes {
        for entry in store.read_due(u64::MAX, 100).expect("read") {
            let events = store.read_delivery(&entry.id).expect("read");
            assert!(
                events.is_some(),
                "{} is queued but its records are not there yet",
                entry.id
            );
            store.remove_due(&entry).expect("remove");
            checked += 1;
        }
    }
    writer.join().expect("writer");
}

#[tokio::test]
async fn a_start_cut_off_part_way_is_undone_on_reopening_unless_its_claim_record_is_there() {
    let dir = tempfile::tempdir().expect("tempdir");
    let t = now_ms();
    let (cut, whole) = (claim_id("acme", 10), claim_id("acme", 11));
    let start = |id: &ClaimId, delivery_id: &str| {
        Unit::new()
            .write_deliveries(vec![delivery(delivery_id, t)])
            .start_claim(id.clone(), vec![claimed(t, 60_000), done()])
    };
    {
        let store = open(dir.path());
        // Cut off after its delivery: marked, the delivery written, no claim record.
        let unit = start(&cut, "msg_cut");
        store.mark_start(&unit).expect("mark");
        for write in unit.delivery_writes() {
            store.write_delivery(write, false).expect("write");
        }
        // Cut off after its claim record, before its marker was removed.
        let unit = start(&whole, "msg_whole");
        store.mark_start(&unit).expect("mark");
        for write in unit.delivery_writes() {
            store.write_delivery(write, false).expect("write");
        }
        let written = store
            .start_claim(whole.clone(), vec![claimed(t, 60_000), done()])
            .expect("claim");
        assert!(matches!(written, Written::Claimed(..)));
        store.db.flush().expect("flush");
    }
    let store = open(dir.path());
    assert!(!store.exists("msg_cut").expect("exists"), "undone");
    assert!(store.exists("msg_whole").expect("exists"), "kept whole");
    let due = store.read_due(t + 1, 10).expect("due");
    let due: Vec<&str> = due.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(due, ["msg_whole"]);
    let queued = store.read_queued_by_endpoint("acme").expect("count");
    assert_eq!(queued.get("http://127.0.0.1:9/"), Some(&1), "{queued:?}");
    let listed = store
        .read_listing("acme", Some(DeliveryStatus::Queued), None, 10)
        .expect("listing");
    assert_eq!(listed, [(DeliveryStatus::Queued, "msg_whole".to_string())]);
    assert_eq!(store.pending_starts.len(), 0, "every marker settled");
}

#[tokio::test]
async fn a_start_refused_at_its_claim_record_undoes_its_deliveries_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let (id, t) = (claim_id("acme", 12), now_ms());
    // A log of the same generation is there already, which no index entry names: the start
    // finds the key free, writes its delivery, and loses at its claim record.
    let head = super::claims::first_head(id.clone(), &[claimed(t, 60_000)]).expect("head");
    store
        .claim_logs
        .insert(log_key(&log_prefix(&head), 0), b"another writer's".to_vec())
        .expect("insert");
    let unit = Unit::new()
        .write_deliveries(vec![delivery("msg_lost", t)])
        .start_claim(id.clone(), vec![claimed(t, 60_000), done()]);
    let written = commit(&store, unit).await;
    assert!(!super::rule::writes_with(&written), "refused: {written:?}");
    assert!(!store.exists("msg_lost").expect("exists"));
    assert!(store.read_due(t + 1, 10).expect("due").is_empty());
    let queued = store.read_queued_by_endpoint("acme").expect("count");
    assert!(queued.is_empty(), "{queued:?}");
    assert_eq!(store.pending_starts.len(), 0);
}
