//! The PostgreSQL store: claims and deliveries in two tables (see `schema`), so that several
//! idem nodes can share one database. Reads take a pooled connection each; every write goes
//! through the group commit (`batch`), one task per node that gathers the units queued so far
//! and writes them as multi-row statements in one transaction: the database's commit is the
//! durable point, many requests' records per commit. A claim row holds a key's current
//! generation and its log (the log's entries concatenated, with their count); a delivery row its
//! log, its due time while queued, and its status.

mod batch;
mod claims;
mod deliveries;
pub mod schema;

use std::sync::Arc;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio::sync::mpsc;
use tokio_postgres::NoTls;

use crate::store::{LogHead, Store, StoreError, Then, Unit};
use batch::Job;

/// Checks a connection URL without connecting: why it cannot be used, if it cannot.
pub fn check_url(url: &str) -> Result<(), String> {
    url.parse::<tokio_postgres::Config>()
        .map(drop)
        .map_err(|e| format!("{url:?} is not a PostgreSQL URL: {e}"))
}

/// The PostgreSQL store of one node.
pub struct PgStore {
    pool: Pool,
    /// The group commit's queue.
    jobs: mpsc::UnboundedSender<Job>,
    /// The runtime the blocking calls (the sweeps) run their queries on.
    runtime: tokio::runtime::Handle,
}

impl PgStore {
    /// Connects to `url` with up to `pool_size` connections, migrates the schema, and starts the
    /// group commit.
    pub async fn open(url: &str, pool_size: usize) -> Result<Arc<Self>, StoreError> {
        let config: tokio_postgres::Config = url.parse()?;
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
            let mut client = pool.get().await?;
            schema::migrate(&mut client).await?;
        }
        let (jobs, queue) = mpsc::unbounded_channel();
        tokio::spawn(batch::run(pool.clone(), queue));
        Ok(Arc::new(PgStore {
            pool,
            jobs,
            runtime: tokio::runtime::Handle::current(),
        }))
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

impl Store for PgStore {
    fn commit_then(&self, unit: Unit, then: Then) {
        if let Err(refused) = self.jobs.send(Job::Unit(unit, then)) {
            if let Job::Unit(_, then) = refused.0 {
                then(Err(StoreError::Stopped));
            }
        }
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
