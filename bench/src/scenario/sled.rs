//! `sled`, the store's own ceiling for a durable claim: the writes a `claim` request makes, straight
//! into sled from the bench's workers, with no HTTP, signature, playbook or actor in the way.
//! sled is opened with the data directory's settings (16 MiB cache, 16 MiB segments), and each
//! request writes what a claim of a playbook without actions writes — the claim's log entry (in
//! expiry order), its index entry (at a random key digest), the decision kept for lookup (in id
//! order) and its subject's listing (at a random subject digest) — then waits for a group commit
//! like idem's (one thread: sled's `flush`, then `fdatasync` of its log) to make it durable. Its
//! rate bounds `claim`'s on this store: whatever idem does above the store only adds to it.

use std::fs::File;
use std::sync::mpsc;

use tokio::sync::oneshot;

use super::ScenarioContext;
use crate::report::ScenarioRow;

/// Bytes of a `noop` claim's log entry (its claim with the decision, the recovery point with the
/// response's bytes, completed) and of its decision record, as idem writes them.
const LOG_BYTES: usize = 450;
const DECISION_BYTES: usize = 110;

/// The scenario.
pub async fn run(ctx: &ScenarioContext<'_>) -> Result<ScenarioRow, String> {
    let dir = ctx.dir.join("sled");
    let db = ::sled::Config::new()
        .path(&dir)
        .cache_capacity(16 * 1024 * 1024)
        .segment_size(16 * 1024 * 1024)
        .open()
        .map_err(|e| format!("sled on {}: {e}", dir.display()))?;
    let tree = |name: &str| db.open_tree(name).map_err(|e| e.to_string());
    let trees = [
        tree("claim_logs")?,
        tree("claims")?,
        tree("decisions")?,
        tree("decisions_by_subject")?,
    ];
    let log = File::open(dir.join("db")).map_err(|e| e.to_string())?;
    let commits = group_commit(db.clone(), log)?;
    let started = idem_schemas::timefmt::now_ms();
    let entries = ctx.args.sled_entries;
    let stats = ctx
        .drive(move |n| {
            let (trees, commits) = (trees.clone(), commits.clone());
            async move {
                if claim(&trees, entries, started, n).is_err() {
                    return 500;
                }
                let (done, durable) = oneshot::channel();
                if commits.send(done).is_err() {
                    return 500;
                }
                match durable.await {
                    Ok(true) => 201,
                    _ => 500,
                }
            }
        })
        .await;
    let disk = db.size_on_disk().unwrap_or(0);
    Ok(ScenarioRow {
        name: "sled".into(),
        rss: 0,
        disk,
        stats,
        note: format!(
            "sled alone: {entries} of a claim's 4 entries per request, a group commit (flush, fdatasync)"
        ),
        floor_p99: None,
    })
}

/// Writes the first `entries` of request `n`'s entries (sled's memory until the next commit).
fn claim(
    trees: &[::sled::Tree; 4],
    entries: usize,
    started: u64,
    n: u64,
) -> Result<(), ::sled::Error> {
    let [logs, claims, decisions, by_subject] = trees;
    let tenant = b"\x04acme";
    let digest = |salt: u64| -> Vec<u8> { (0..4).flat_map(|i| mix(n ^ salt, i)).collect() };
    let key = [&tenant[..], &digest(1)].concat();
    let at = started + n;
    let expires = (at + 86_400_000).to_be_bytes();
    let log_key = [&expires[..], &key, &at.to_be_bytes(), &0u32.to_be_bytes()].concat();
    let _ = logs.compare_and_swap(log_key, None as Option<&[u8]>, Some(vec![7; LOG_BYTES]))?;
    if entries >= 2 {
        let index = [&expires[..], &at.to_be_bytes()].concat();
        let _ = claims.compare_and_swap(key, None as Option<&[u8]>, Some(index))?;
    }
    // A decision id as idem writes it: `dec_` and 32 hex digits, time first.
    let id = format!("dec_{at:016x}{:016x}", u64::from_be_bytes(mix(n, 9))).into_bytes();
    if entries >= 3 {
        let decision_key = [&tenant[..], &id].concat();
        let _ = decisions.compare_and_swap(
            decision_key,
            None as Option<&[u8]>,
            Some(vec![9; DECISION_BYTES]),
        )?;
    }
    if entries >= 4 {
        by_subject.insert([&tenant[..], &[32], &digest(2), &id].concat(), &[])?;
    }
    Ok(())
}

/// Eight bytes that look random, from `n` and `i` (splitmix64).
fn mix(n: u64, i: u64) -> [u8; 8] {
    let mut z = n.wrapping_add(i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)).to_be_bytes()
}

/// The group commit: a thread that takes every waiter queued so far, makes what was written
/// before them durable once, and tells them all.
fn group_commit(db: ::sled::Db, log: File) -> Result<mpsc::Sender<oneshot::Sender<bool>>, String> {
    let (requests, queue) = mpsc::channel::<oneshot::Sender<bool>>();
    std::thread::Builder::new()
        .name("bench-sled-commit".into())
        .spawn(move || {
            while let Ok(first) = queue.recv() {
                let mut batch = vec![first];
                batch.extend(queue.try_iter());
                let durable = db.flush().is_ok() && log.sync_data().is_ok();
                for waiter in batch {
                    let _ = waiter.send(durable);
                }
            }
        })
        .map_err(|e| e.to_string())?;
    Ok(requests)
}
