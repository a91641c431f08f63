//! `pg`, the baseline: the seed's own design on PostgreSQL. Per request, the same three durable
//! writes idem makes — the claim (`INSERT … ON CONFLICT DO NOTHING RETURNING`), the recovery
//! point and the completion (two `UPDATE`s) — each its own transaction with
//! `synchronous_commit = on`, one connection per worker.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio_postgres::{Client, NoTls};

use super::ScenarioContext;
use crate::load::{drive, Stats};
use crate::report::ScenarioRow;

const DSN: &str = "host=127.0.0.1 user=postgres dbname=test";

async fn connect() -> Result<Client, String> {
    let (client, connection) = tokio_postgres::connect(DSN, NoTls)
        .await
        .map_err(|e| format!("PostgreSQL at {DSN}: {e:?}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// The scenario: the bench's concurrency, duration and rate against the local PostgreSQL.
pub async fn run(ctx: &ScenarioContext<'_>) -> Result<ScenarioRow, String> {
    let stats = claims(ctx.args.concurrency, ctx.args.duration, ctx.args.rate).await?;
    Ok(ScenarioRow {
        name: "pg".into(),
        rss: 0,
        disk: 0,
        stats,
        note: "PostgreSQL: INSERT ON CONFLICT + 2 UPDATEs, synchronous_commit on".into(),
        floor_p99: None,
    })
}

/// Runs the claim → recovery point → completion writes at `concurrency` for `duration`.
async fn claims(
    concurrency: usize,
    duration: Duration,
    rate: Option<f64>,
) -> Result<Stats, String> {
    let admin = connect().await?;
    admin
        .batch_execute(
            "DROP TABLE IF EXISTS idem_bench_claims;
             CREATE TABLE idem_bench_claims (
               tenant text NOT NULL, key_digest bytea NOT NULL, state text NOT NULL,
               fingerprint bytea NOT NULL, results bytea, response bytea,
               claimed_at timestamptz NOT NULL DEFAULT now(),
               PRIMARY KEY (tenant, key_digest));
             SET synchronous_commit = on;",
        )
        .await
        .map_err(|e| e.to_string())?;
    // PostgreSQL's default max_connections is 100: at most 64 connections, shared round-robin.
    let mut clients = Vec::new();
    for _ in 0..concurrency.min(64) {
        let c = connect().await?;
        c.batch_execute("SET synchronous_commit = on")
            .await
            .map_err(|e| e.to_string())?;
        clients.push(Mutex::new(c));
    }
    let clients = Arc::new(clients);
    let run_id = idem_schemas::timefmt::now_ms();
    let stats = drive(concurrency, duration, None, rate, move |n| {
        let clients = clients.clone();
        async move {
            let client = clients[(n as usize) % clients.len()].lock().await;
            let key = format!("{run_id}-{n}").into_bytes();
            let claimed = client
                .query_opt(
                    "INSERT INTO idem_bench_claims (tenant, key_digest, state, fingerprint)
                     VALUES ('acme', $1, 'in_flight', $2) ON CONFLICT DO NOTHING RETURNING 1",
                    &[&key, &vec![7u8; 32]],
                )
                .await;
            if !matches!(claimed, Ok(Some(_))) {
                return 409;
            }
            let results = vec![1u8; 120];
            let response = vec![2u8; 400];
            let dispatched = client
                .execute(
                    "UPDATE idem_bench_claims SET state = 'dispatched', results = $2 WHERE tenant = 'acme' AND key_digest = $1",
                    &[&key, &results],
                )
                .await;
            let completed = client
                .execute(
                    "UPDATE idem_bench_claims SET state = 'completed', response = $2 WHERE tenant = 'acme' AND key_digest = $1",
                    &[&key, &response],
                )
                .await;
            if dispatched.is_ok() && completed.is_ok() {
                201
            } else {
                500
            }
        }
    })
    .await;
    let _ = admin
        .batch_execute("DROP TABLE IF EXISTS idem_bench_claims")
        .await;
    Ok(stats)
}
