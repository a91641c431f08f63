//! The PostgreSQL store: claims and deliveries in two tables (see `schema`), so that several
//! idem nodes can share one database. A claim's load is batched with the loads asked for
//! meanwhile (`claims`), other reads take a pooled connection each; every write goes through the
//! group commit (`batch`), one task per node that gathers the units queued so far
//! and writes them as multi-row statements in one transaction: the database's commit is the
//! durable point, many requests' records per commit. A claim row holds a key's current
//! generation and its log (the log's entries concatenated, with their count); a delivery row its
//! log, its due time while queued, and its status.

mod batch;
mod claims;
mod decisions;
mod deliveries;
mod endpoints;
mod leases;
mod news;
pub mod schema;
mod set_keys;
mod streams;
mod subscriptions;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use deadpool_postgres::{GenericClient, Manager, ManagerConfig, Pool, RecyclingMethod};
use idem_schemas::timefmt;
use tokio::sync::mpsc;
use tokio_postgres::types::ToSql;
use tokio_postgres::NoTls;
use tokio_postgres::Row;

use crate::store::{Halted, LogHead, Process, Read, Store, StoreError, Then, Unit};
use batch::Job;

/// The PostgreSQL store of one node.
pub struct PgStore {
    pool: Pool,
    /// Who this node is, and its time windows.
    node: Process,
    /// The group commit's queue.
    jobs: mpsc::UnboundedSender<Job>,
    /// The claim loads' queue.
    loads: mpsc::UnboundedSender<claims::Load>,
    /// The runtime the blocking calls (the sweeps) run their queries on.
    runtime: tokio::runtime::Handle,
    /// What this node tells the others of claims, and hears from them.
    news: Arc<news::News>,
    /// Never set: the database keeps its own durability, so a failed commit leaves nothing in
    /// this process to distrust, and the store goes on once the database answers again.
    halt: tokio::sync::watch::Sender<Option<StoreError>>,
}

impl PgStore {
    /// Connects to `url` with up to `pool_size` connections, migrates the schema, says this
    /// node is alive, and starts the group commit and the heartbeat. A database that does not
    /// connect and answer within `connect_timeout` is [`StoreError::NoAnswerAtStart`] (one that
    /// takes the connection and never answers would otherwise hold the start for ever); every
    /// later connection's TCP connect has the same deadline, unless the URL sets its own.
    pub async fn open(
        url: &str,
        pool_size: usize,
        connect_timeout: std::time::Duration,
        node: Process,
    ) -> Result<Arc<Self>, StoreError> {
        let mut config: tokio_postgres::Config = url.parse()?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(connect_timeout);
        }
        let news_config = config.clone();
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(pool_size)
            .build()
            .map_err(|e| StoreError::Pool(e.to_string()))?;
        {
            // A claim is answered once its commit returns: only a commit that is on disk then
            // (any setting but `off`) keeps that answer through the database's own crash.
            let first_answer = async {
                let client = pool.get().await?;
                let commits: String = client
                    .query_one("SHOW synchronous_commit", &[])
                    .await?
                    .try_get(0)?;
                Ok::<_, StoreError>((client, commits))
            };
            let (mut client, commits) = tokio::time::timeout(connect_timeout, first_answer)
                .await
                .map_err(|_| StoreError::NoAnswerAtStart(connect_timeout))??;
            if commits == "off" {
                return Err(StoreError::NotDurable(commits));
            }
            schema::migrate(&mut client).await?;
            heartbeat(&client, node.epoch).await?;
        }
        let news = news::News::start(news_config);
        let (jobs, queue) = mpsc::unbounded_channel();
        tokio::spawn(batch::run(pool.clone(), node.clone(), queue));
        let (loads, asked) = mpsc::unbounded_channel();
        let in_flight_timeout_ms = node.settings.idempotency.in_flight_timeout_ms();
        tokio::spawn(claims::run_loads(pool.clone(), asked, in_flight_timeout_ms));
        let store = Arc::new(PgStore {
            pool,
            node,
            jobs,
            loads,
            runtime: tokio::runtime::Handle::current(),
            news,
            halt: tokio::sync::watch::channel(None).0,
        });
        tokio::spawn(beat(Arc::downgrade(&store)));
        Ok(store)
    }

    /// How long a node's heartbeat stays fresh: past it, the node is gone and its in-flight
    /// claims may be taken over at once.
    pub(super) fn node_timeout(&self) -> std::time::Duration {
        liveness(self.node.settings.idempotency.in_flight_timeout)
    }

    /// How long a lease on a due delivery lasts: past the attempt's deadline, with room to
    /// record its answer.
    pub(super) fn lease(&self) -> std::time::Duration {
        self.node.settings.delivery.inline_timeout * 2 + std::time::Duration::from_secs(1)
    }

    /// A pooled connection.
    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        Ok(self.pool.get().await?)
    }

    /// Queues the completion of the generation at `head`, with no one waiting for it.
    fn queue_completion(&self, head: &LogHead) -> Result<(), StoreError> {
        self.jobs
            .send(Job::Complete(head.clone()))
            .map_err(|_| StoreError::Stopped)
    }
}

/// `sql`'s rows, its statement prepared once per connection: parsing and planning every query
/// again cost the database more than running it.
pub(super) async fn rows(
    client: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>, StoreError> {
    let statement = client.prepare_cached(sql).await?;
    Ok(client.query(&statement, params).await?)
}

/// `sql`'s row, if it has one (see [`rows`]).
pub(super) async fn row(
    client: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Option<Row>, StoreError> {
    let statement = client.prepare_cached(sql).await?;
    Ok(client.query_opt(&statement, params).await?)
}

/// Runs `sql`; how many rows it touched (see [`rows`]).
pub(super) async fn run(
    client: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<u64, StoreError> {
    let statement = client.prepare_cached(sql).await?;
    Ok(client.execute(&statement, params).await?)
}

/// The next batch of `queue` once one of `in_flight`'s permits is free: the first item to come
/// and every one queued behind it, up to `max`, with the permit to hold while it is written;
/// `None` once every sender is gone.
pub(super) async fn next_batch<T>(
    queue: &mut mpsc::UnboundedReceiver<T>,
    in_flight: &Arc<tokio::sync::Semaphore>,
    max: usize,
) -> Option<(tokio::sync::OwnedSemaphorePermit, Vec<T>)> {
    let permit = in_flight.clone().acquire_owned().await.ok()?;
    let mut batch = vec![queue.recv().await?];
    while batch.len() < max {
        match queue.try_recv() {
            Ok(item) => batch.push(item),
            Err(_) => break,
        }
    }
    Some((permit, batch))
}

/// A node's heartbeat lasts a quarter of `in_flight_timeout`, between a quarter of a second and
/// five seconds: a node gone is noticed well before its claims would time out.
pub(super) fn liveness(in_flight_timeout: std::time::Duration) -> std::time::Duration {
    (in_flight_timeout / 4).clamp(
        std::time::Duration::from_millis(250),
        std::time::Duration::from_secs(5),
    )
}

/// Says, by the database's clock, that node `epoch` is alive.
async fn heartbeat(client: &tokio_postgres::Client, epoch: u64) -> Result<(), StoreError> {
    let sent = timefmt::local_now_ms();
    let row = client
        .query_one(
            "INSERT INTO idem_nodes (epoch, heartbeat_at) VALUES ($1, clock_timestamp()) \
             ON CONFLICT (epoch) DO UPDATE SET heartbeat_at = clock_timestamp() \
             RETURNING (extract(epoch FROM heartbeat_at) * 1000)::int8",
            &[&(epoch as i64)],
        )
        .await?;
    let received = timefmt::local_now_ms();
    // Every time this node keeps is the database's: a claim's time and expiry, due times and
    // holds are compared across nodes (and in the database's own statements), so a node whose
    // clock is off would expire, schedule and hold by another clock than the others. The
    // database's clock as of halfway through the round trip; read again at every heartbeat.
    let database_ms: i64 = row.try_get(0)?;
    let ahead_ms = database_ms - (sent / 2 + received / 2) as i64;
    if ahead_ms.abs() > CLOCK_NOTED_MS
        && (ahead_ms - NOTED_AHEAD_MS.swap(ahead_ms, Ordering::Relaxed)).abs() > CLOCK_NOTED_MS
    {
        tracing::warn!(
            ahead_ms,
            "this node's clock is off the database's: idem keeps the database's time"
        );
    }
    timefmt::follow_store_clock(ahead_ms);
    Ok(())
}

/// How far this node's clock may be off the database's before it is logged (and logged again
/// when it moves by as much).
const CLOCK_NOTED_MS: i64 = 1_000;

/// How far the database's clock was ahead when that was last logged.
static NOTED_AHEAD_MS: AtomicI64 = AtomicI64::new(0);

/// Beats four times per heartbeat's life while the store is open; forgets nodes gone for an
/// hour.
async fn beat(store: std::sync::Weak<PgStore>) {
    let Some(period) = store.upgrade().map(|s| s.node_timeout() / 4) else {
        return;
    };
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(store) = store.upgrade() else {
            return;
        };
        let beaten = async {
            let client = store.client().await?;
            heartbeat(&client, store.node.epoch).await?;
            client
                .execute(
                    "DELETE FROM idem_nodes WHERE heartbeat_at < clock_timestamp() - interval '1 hour'",
                    &[],
                )
                .await?;
            Ok::<_, StoreError>(())
        };
        if let Err(e) = beaten.await {
            tracing::warn!(error = %e, "heartbeat failed");
        }
    }
}

impl Store for PgStore {
    fn ask_holder(&self, id: &crate::store::ClaimId, holder: u64) {
        self.news.ask(id, holder);
    }

    fn announce_answer(&self, id: &crate::store::ClaimId) {
        self.news.answered(id);
    }

    fn claim_news(&self) -> Option<mpsc::UnboundedReceiver<crate::store::ClaimNews>> {
        self.news.take()
    }

    fn commit_then(&self, unit: Unit, then: Then) {
        if let Err(refused) = self.jobs.send(Job::Unit(unit, then)) {
            if let Job::Unit(_, then) = refused.0 {
                then(Err(StoreError::Stopped));
            }
        }
    }

    fn probe(&self) -> Read<'_, ()> {
        // This node's heartbeat: a write to the database, committed.
        Box::pin(async move {
            let client = self.client().await?;
            heartbeat(&client, self.node.epoch).await
        })
    }

    fn halted(&self) -> Halted {
        self.halt.subscribe()
    }
}

impl From<deadpool_postgres::PoolError> for StoreError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(e) => e.into(),
            other => StoreError::Pool(other.to_string()),
        }
    }
}
