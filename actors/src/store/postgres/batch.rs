//! Group commit on PostgreSQL: one task per node takes every unit queued so far and writes the
//! batch in one transaction, each kind of write as one multi-row statement (`unnest` of arrays),
//! then tells each unit what it came to. The transaction's commit is the durable point
//! (`synchronous_commit` on, the server's default): a claim or recovery point is on the
//! database's disk before the waiter hears of it, so before any callback or answer it guards.
//! The database decides every write: a start inserts the key's row or replaces an expired one
//! (`ON CONFLICT … DO UPDATE … WHERE` expired), otherwise the unit is answered with the row that
//! holds the key; an append updates the row only where its generation and count of writes are
//! the writer's (zero rows: fenced, and none of the unit is written). These are the rules of
//! `store::rule`, stated in SQL; which parts of a unit follow its claim write is `rule`'s answer.

use std::collections::{HashMap, HashSet};

use deadpool_postgres::Pool;
use idem_schemas::DeliveryEvent;
use tokio::sync::mpsc;

use super::claims::{claim_log, COLUMNS};
use super::set_keys;
use crate::codec;
use crate::store::rule::{self, Fencing};
use crate::store::{
    status_number, ClaimId, ClaimWrite, DeliveryWrite, LogHead, Process, StoreError, Then, Unit,
    Written,
};

/// The most units one transaction takes.
const MAX_BATCH: usize = 512;

/// What the group commit is asked to do.
pub(super) enum Job {
    /// Write a unit and say what it came to.
    Unit(Unit, Then),
    /// Mark a generation completed; no one waits for it.
    Complete(LogHead),
}

/// How many batches are written at once: while they are, the next units queue up into a
/// larger batch. Each is a transaction of its own; a unit's writer waits for its commit, so no
/// two batches of a node write the same claim or delivery.
const IN_FLIGHT: usize = 2;

/// How often a batch is written again when the database aborted it for a deadlock (batches of
/// several nodes can lock the same rows in another order).
const DEADLOCK_RETRIES: usize = 3;

/// The group commit task: runs until every sender is gone.
pub(super) async fn run(pool: Pool, node: Process, mut jobs: mpsc::UnboundedReceiver<Job>) {
    let in_flight = std::sync::Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    while let Some((permit, batch)) = super::next_batch(&mut jobs, &in_flight, MAX_BATCH).await {
        let mut units = Vec::new();
        let mut thens = Vec::new();
        let mut completions = Vec::new();
        for job in batch {
            match job {
                Job::Unit(unit, then) => {
                    units.push(unit);
                    thens.push(then);
                }
                Job::Complete(head) => completions.push(head),
            }
        }
        let (pool, node) = (pool.clone(), node.clone());
        tokio::spawn(async move {
            let timer = crate::metrics::FLUSH_SECONDS.start_timer();
            let mut outcome = commit(&pool, &node, &units, &completions).await;
            for _ in 0..DEADLOCK_RETRIES {
                match &outcome {
                    Err(StoreError::Postgres(e))
                        if e.code()
                            == Some(&tokio_postgres::error::SqlState::T_R_DEADLOCK_DETECTED) =>
                    {
                        outcome = commit(&pool, &node, &units, &completions).await;
                    }
                    _ => break,
                }
            }
            timer.observe_duration();
            drop(permit);
            match outcome {
                Ok(written) => {
                    for (then, written) in thens.into_iter().zip(written) {
                        then(Ok(written));
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "group commit failed");
                    for then in thens {
                        then(Err(e.clone()));
                    }
                }
            }
        });
    }
}

/// A claim row's key.
type Key = (String, Vec<u8>);

fn key(id: &ClaimId) -> Key {
    (id.tenant.clone(), id.digest.to_vec())
}

/// Writes `units` and `completions` in one transaction; what each unit came to.
async fn commit(
    pool: &Pool,
    node: &Process,
    units: &[Unit],
    completions: &[LogHead],
) -> Result<Vec<Written>, StoreError> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let mut written: Vec<Option<Written>> = vec![None; units.len()];
    // Sabotage (failpoints builds only): fencing off, so that chaos across nodes can show its
    // checker catches what fencing prevents.
    let fencing = Fencing::in_force();
    let fenced = match fencing {
        Fencing::Off => "true",
        Fencing::On => "c.generation = u.generation AND c.writes = u.next",
    };

    // Appends first: a fenced unit writes nothing, its deliveries included.
    // Every statement takes its rows in key order, so batches of several nodes lock them in the
    // same order (and rarely deadlock; a batch aborted for one is written again).
    let mut appends: Vec<(usize, &LogHead, &Vec<idem_schemas::ClaimEvent>)> = units
        .iter()
        .enumerate()
        .filter_map(|(n, u)| match &u.claim {
            Some(ClaimWrite::Append(head, events)) => Some((n, head, events)),
            _ => None,
        })
        .collect();
    appends.sort_by_key(|a| key(&a.1.id));
    if !appends.is_empty() {
        let mut tenants = Vec::new();
        let mut digests = Vec::new();
        let mut generations = Vec::new();
        let mut nexts = Vec::new();
        let mut entries = Vec::new();
        for (_, head, events) in &appends {
            tenants.push(head.id.tenant.as_str());
            digests.push(&head.id.digest[..]);
            generations.push(head.generation as i64);
            nexts.push(head.next as i32);
            entries.push(codec::encode_entry(events)?);
        }
        let rows = super::rows(
            &tx,
            &format!(
                "UPDATE idem_claims c SET log = c.log || u.entry, writes = c.writes + 1 \
                     FROM unnest($1::text[], $2::bytea[], $3::int8[], $4::int4[], $5::bytea[]) \
                     AS u(tenant, digest, generation, next, entry) \
                     WHERE c.tenant = u.tenant AND c.digest = u.digest AND {fenced} \
                     RETURNING c.tenant, c.digest"
            ),
            &[&tenants, &digests, &generations, &nexts, &entries],
        )
        .await?;
        let done: HashSet<Key> = rows
            .iter()
            .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
            .collect::<Result<_, StoreError>>()?;
        for (n, head, events) in appends {
            written[n] = Some(match done.contains(&key(&head.id)) {
                true => Written::Appended(
                    LogHead {
                        next: head.next + 1,
                        ..head.clone()
                    },
                    events.clone(),
                ),
                false => Written::Fenced,
            });
        }
    }

    // Take-overs: granted by the database when the holder's node is gone or the claim has been
    // in flight too long, by its clock; a new generation fences every write of the old holder.
    for (n, unit) in units.iter().enumerate() {
        if let Some(ClaimWrite::TakeOver(head)) = &unit.claim {
            written[n] = Some(take_over(&tx, node, head, fencing).await?);
        }
    }

    // Starts, each key at most once per statement.
    let mut starts: Vec<(usize, &ClaimId, &Vec<idem_schemas::ClaimEvent>)> = units
        .iter()
        .enumerate()
        .filter_map(|(n, u)| match &u.claim {
            Some(ClaimWrite::Start(id, events)) => Some((n, id, events)),
            _ => None,
        })
        .collect();
    while !starts.is_empty() {
        let mut seen = HashSet::new();
        let (mut round, later): (Vec<_>, Vec<_>) = starts
            .into_iter()
            .partition(|(_, id, _)| seen.insert(key(id)));
        round.sort_by_key(|a| key(a.1));
        start_claims(&tx, node, &round, &mut written, fencing).await?;
        starts = later;
    }

    // The rest of each unit, as `rule::writes_with` says: a start that lost to another
    // generation (a decision whose callbacks are queued) or a fenced append writes none of it.
    let writes_rest =
        |written: &[Option<Written>], n: usize| written[n].as_ref().is_none_or(rule::writes_with);
    // Deliveries: one transaction, so their order against the claim records does not matter
    // for durability.
    let deliveries: Vec<(usize, &DeliveryWrite, bool)> = units
        .iter()
        .enumerate()
        .filter(|(n, _)| writes_rest(&written, *n))
        .flat_map(|(n, u)| u.deliveries.iter().map(move |d| (n, d, u.skip_existing)))
        .collect();
    let made = write_deliveries(&tx, &deliveries, &mut written).await?;
    let ended = deliveries
        .iter()
        .map(|d| d.1)
        .filter(|w| made.contains(&w.id));
    set_keys::end(&tx, ended).await?;
    let keys: Vec<&Unit> = units
        .iter()
        .enumerate()
        .filter(|(n, _)| writes_rest(&written, *n))
        .map(|(_, u)| u)
        .collect();
    set_keys::write(&tx, &keys).await?;

    // Decisions, kept once each.
    let mut decisions: Vec<&idem_schemas::DecisionRecord> = units
        .iter()
        .enumerate()
        .filter(|(n, _)| writes_rest(&written, *n))
        .flat_map(|(_, u)| u.decisions.iter())
        .collect();
    if !decisions.is_empty() {
        decisions.sort_by(|a, b| (&a.tenant, &a.id).cmp(&(&b.tenant, &b.id)));
        let mut tenants = Vec::new();
        let mut ids = Vec::new();
        let mut subjects = Vec::new();
        let mut types = Vec::new();
        let mut expiries = Vec::new();
        let mut records = Vec::new();
        for d in decisions {
            tenants.push(d.tenant.as_str());
            ids.push(d.id.as_str());
            subjects.push(crate::store::subject_bytes(&d.subject_hash));
            types.push(d.signal_type.as_str());
            expiries.push(d.expires_at_ms as i64);
            records.push(codec::encode(d)?);
        }
        super::run(
            &tx,
            "INSERT INTO idem_decisions (tenant, id, subject, signal_type, expires_at_ms, record) \
             SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::text[], $5::int8[], \
             $6::bytea[]) ON CONFLICT (tenant, id) DO NOTHING",
            &[&tenants, &ids, &subjects, &types, &expiries, &records],
        )
        .await?;
    }

    if !completions.is_empty() {
        let mut completions = completions.to_vec();
        completions.sort_by_key(|a| key(&a.id));
        let tenants: Vec<&str> = completions.iter().map(|h| h.id.tenant.as_str()).collect();
        let digests: Vec<&[u8]> = completions.iter().map(|h| &h.id.digest[..]).collect();
        let generations: Vec<i64> = completions.iter().map(|h| h.generation as i64).collect();
        super::run(
            &tx,
            "UPDATE idem_claims c SET completed = true \
             FROM unnest($1::text[], $2::bytea[], $3::int8[]) AS u(tenant, digest, generation) \
             WHERE c.tenant = u.tenant AND c.digest = u.digest AND c.generation = u.generation",
            &[&tenants, &digests, &generations],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(written
        .into_iter()
        .map(|w| w.unwrap_or(Written::Nothing))
        .collect())
}

/// New delivery logs (left alone where they exist: a take-over may meet an earlier process's),
/// and records appended to existing ones where their count is the writer's; the ids of the
/// deliveries written.
async fn write_deliveries(
    tx: &deadpool_postgres::Transaction<'_>,
    writes: &[(usize, &DeliveryWrite, bool)],
    written: &mut [Option<Written>],
) -> Result<HashSet<String>, StoreError> {
    let mut made = HashSet::new();
    type Write<'w> = &'w (usize, &'w DeliveryWrite, bool);
    let (mut new, mut appended): (Vec<Write>, Vec<Write>) =
        writes.iter().partition(|(_, w, _)| w.first_seq == 0);
    new.sort_by_key(|a| &a.1.id);
    appended.sort_by_key(|a| &a.1.id);
    if !new.is_empty() {
        let mut ids = Vec::new();
        let mut tenants = Vec::new();
        let mut urls = Vec::new();
        let mut statuses = Vec::new();
        let mut dues = Vec::new();
        let mut expiries = Vec::new();
        let mut logs = Vec::new();
        let mut records = Vec::new();
        for (_, w, _) in &new {
            let expires_at_ms = w.events.iter().find_map(|e| match e {
                DeliveryEvent::Created(record) => Some(record.expires_at_ms as i64),
                _ => None,
            });
            ids.push(w.id.as_str());
            tenants.push(w.tenant.as_str());
            urls.push(w.url.as_str());
            statuses.push(status_number(w.to.status) as i16);
            dues.push(w.to.due_ms.map(|d| d as i64));
            expiries.push(expires_at_ms.ok_or(StoreError::Malformed("idem_deliveries"))?);
            logs.push(codec::encode_entry(&w.events)?);
            records.push(w.events.len() as i32);
        }
        let rows = super::rows(
            tx,
            "INSERT INTO idem_deliveries \
             (id, tenant, url, status, due_ms, expires_at_ms, log, records) \
             SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int2[], $5::int8[], \
             $6::int8[], $7::bytea[], $8::int4[]) ON CONFLICT (id) DO NOTHING RETURNING id",
            &[
                &ids, &tenants, &urls, &statuses, &dues, &expiries, &logs, &records,
            ],
        )
        .await?;
        for row in rows {
            made.insert(row.try_get(0)?);
        }
    }
    if !appended.is_empty() {
        let mut ids = Vec::new();
        let mut firsts = Vec::new();
        let mut counts = Vec::new();
        let mut entries = Vec::new();
        let mut statuses = Vec::new();
        let mut dues = Vec::new();
        let mut leases = Vec::new();
        for (_, w, _) in &appended {
            ids.push(w.id.as_str());
            leases.push(w.lease.map(|l| l as i64));
            firsts.push(w.first_seq as i32);
            counts.push(w.events.len() as i32);
            entries.push(codec::encode_entry(&w.events)?);
            statuses.push(status_number(w.to.status) as i16);
            dues.push(w.to.due_ms.map(|d| d as i64));
        }
        let rows = super::rows(
            tx,
            "UPDATE idem_deliveries d SET log = d.log || u.entry, records = d.records + u.count, \
                 status = u.status, due_ms = u.due, lease_until = NULL \
                 FROM unnest($1::text[], $2::int4[], $3::int4[], $4::bytea[], $5::int2[], \
                 $6::int8[], $7::int8[]) AS u(id, first, count, entry, status, due, lease) \
                 WHERE d.id = u.id AND d.records = u.first \
                 AND (u.lease IS NULL OR d.lease_token = u.lease) RETURNING d.id",
            &[&ids, &firsts, &counts, &entries, &statuses, &dues, &leases],
        )
        .await?;
        let done: HashSet<String> = rows
            .iter()
            .map(|row| row.try_get(0))
            .collect::<Result<_, _>>()?;
        // A record whose delivery has moved on (another writer) is refused like a fenced claim.
        for (n, w, _) in appended {
            if !done.contains(&w.id) {
                written[*n] = Some(Written::Fenced);
            }
        }
        made.extend(done);
    }
    Ok(made)
}

/// Takes over the generation at `head` for `node`, if its holder's node is gone or it has been
/// in flight for `in_flight_timeout`, both by the database's clock; otherwise what holds it.
async fn take_over(
    tx: &deadpool_postgres::Transaction<'_>,
    node: &Process,
    head: &LogHead,
    fencing: Fencing,
) -> Result<Written, StoreError> {
    let in_flight_timeout = node.settings.idempotency.in_flight_timeout;
    let gone = match fencing {
        Fencing::Off => "($6::float8 IS NOT NULL OR $7::float8 IS NOT NULL)",
        Fencing::On => {
            "(c.held_since <= clock_timestamp() - $6::float8 * interval '1 millisecond' \
                  OR NOT EXISTS (SELECT 1 FROM idem_nodes n WHERE n.epoch = c.holder \
                  AND n.heartbeat_at > clock_timestamp() - $7::float8 * interval '1 millisecond'))"
        }
    };
    let row = super::row(
        tx,
        &format!(
            "UPDATE idem_claims c SET generation = c.generation + 1, holder = $5, \
             held_since = clock_timestamp() \
             WHERE c.tenant = $1 AND c.digest = $2 AND c.generation = $3 AND c.writes = $4 \
             AND {gone} RETURNING c.generation"
        ),
        &[
            &head.id.tenant,
            &&head.id.digest[..],
            &(head.generation as i64),
            &(head.next as i32),
            &(node.epoch as i64),
            &(in_flight_timeout.as_millis() as f64),
            &(super::liveness(in_flight_timeout).as_millis() as f64),
        ],
    )
    .await?;
    if let Some(row) = row {
        let generation: i64 = row.try_get(0)?;
        return Ok(Written::TakenOver(LogHead {
            generation: generation as u64,
            ..head.clone()
        }));
    }
    let row = super::row(
        tx,
        &format!("SELECT {COLUMNS} FROM idem_claims WHERE tenant = $1 AND digest = $2"),
        &[&head.id.tenant, &&head.id.digest[..]],
    )
    .await?;
    let log = match row {
        Some(row) => claim_log(
            &head.id,
            &row,
            idem_schemas::timefmt::now_ms(),
            node.settings.idempotency.in_flight_timeout_ms(),
        )?,
        None => None,
    };
    Ok(log.map_or(Written::Fenced, Written::Held))
}

/// Starts one generation per key of `round`: inserted, or replacing an expired one; the others
/// are answered with the row that holds the key.
async fn start_claims(
    tx: &deadpool_postgres::Transaction<'_>,
    node: &Process,
    round: &[(usize, &ClaimId, &Vec<idem_schemas::ClaimEvent>)],
    written: &mut [Option<Written>],
    fencing: Fencing,
) -> Result<(), StoreError> {
    let mut tenants = Vec::new();
    let mut digests = Vec::new();
    let mut generations = Vec::new();
    let mut expiries = Vec::new();
    let mut entries = Vec::new();
    let mut holders = Vec::new();
    let mut completions = Vec::new();
    let mut heads = HashMap::new();
    for (n, id, events) in round {
        let Some(idem_schemas::ClaimEvent::Claimed(claim)) = events.first() else {
            return Err(StoreError::NotAClaim);
        };
        tenants.push(id.tenant.as_str());
        digests.push(&id.digest[..]);
        generations.push(claim.claimed_at_ms as i64);
        expiries.push(claim.expires_at_ms as i64);
        entries.push(codec::encode_entry(events)?);
        holders.push(claim.holder as i64);
        completions.push(rule::completed_from_the_start(events));
        let head = LogHead {
            id: (*id).clone(),
            generation: claim.claimed_at_ms,
            expires_at_ms: claim.expires_at_ms,
            next: 1,
        };
        heads.insert(key(id), (*n, head, claim.claimed_at_ms, *events));
    }
    // `rule::may_start`: the generation is the claim's time, and the key is free when its row
    // is replaceable by then (expired, and completed or claimed `in_flight_timeout` before).
    let in_flight_timeout_ms = node.settings.idempotency.in_flight_timeout_ms();
    let held = match fencing {
        Fencing::Off => "$7::int8 IS NOT NULL",
        Fencing::On => {
            "idem_claims.expires_at_ms <= EXCLUDED.generation AND (idem_claims.completed \
             OR idem_claims.generation + $7::int8 <= EXCLUDED.generation)"
        }
    };
    let rows = super::rows(
        tx,
        &format!(
            "INSERT INTO idem_claims \
             (tenant, digest, generation, expires_at_ms, log, writes, holder, completed) \
             SELECT tenant, digest, generation, expires_at_ms, entry, 1, holder, completed \
             FROM unnest($1::text[], $2::bytea[], $3::int8[], $4::int8[], $5::bytea[], \
             $6::int8[], $8::bool[]) \
             AS u(tenant, digest, generation, expires_at_ms, entry, holder, completed) \
             ON CONFLICT (tenant, digest) DO UPDATE SET generation = EXCLUDED.generation, \
             expires_at_ms = EXCLUDED.expires_at_ms, log = EXCLUDED.log, writes = 1, \
             completed = EXCLUDED.completed, holder = EXCLUDED.holder, \
             held_since = clock_timestamp() \
             WHERE {held} RETURNING tenant, digest"
        ),
        &[
            &tenants,
            &digests,
            &generations,
            &expiries,
            &entries,
            &holders,
            &(in_flight_timeout_ms as i64),
            &completions,
        ],
    )
    .await?;
    for row in rows {
        let won: Key = (row.try_get(0)?, row.try_get(1)?);
        if let Some((n, head, _, events)) = heads.remove(&won) {
            written[n] = Some(Written::Claimed(head, events.clone()));
        }
    }
    // The rest lost to a generation that holds the key: answered from its row.
    for ((tenant, digest), (n, head, now_ms, _)) in heads {
        let row = super::row(
            tx,
            &format!("SELECT {COLUMNS} FROM idem_claims WHERE tenant = $1 AND digest = $2"),
            &[&tenant, &digest],
        )
        .await?;
        let log = match row {
            Some(row) => claim_log(&head.id, &row, now_ms, in_flight_timeout_ms)?,
            None => None,
        };
        written[n] = Some(log.map_or(Written::Fenced, Written::Held));
    }
    Ok(())
}
