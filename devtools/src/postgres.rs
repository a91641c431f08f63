//! PostgreSQL for the tests, the bench and the simulations: a client of a database for a piece
//! of work, on a thread and runtime of its own so that sync and async callers alike can use it,
//! and a fresh empty database on a server, named by the caller's prefix (`idem_test`,
//! `idem_sim_<seed>`, `idem_bench`) so that `scripts/test` and the bench can drop those of
//! earlier runs by that prefix (the bench with [`drop_databases`]).

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// This machine's PostgreSQL server (trust auth, user `postgres`).
pub const LOCAL: &str = "postgres://postgres@127.0.0.1:5432";

/// Runs `work` with a client of the database at `url`, on a thread and current-thread runtime
/// of its own (the caller may be inside another runtime, or in none); what `work` returned, or
/// why the database could not be reached.
pub fn with_postgres<T, F, Fut>(url: &str, work: F) -> Result<T, String>
where
    T: Send + 'static,
    F: FnOnce(tokio_postgres::Client) -> Fut + Send + 'static,
    Fut: Future<Output = T>,
{
    let url = url.to_string();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("a runtime for PostgreSQL: {e}"))?;
        runtime.block_on(async {
            let (client, connection) =
                tokio_postgres::connect(&url, tokio_postgres::NoTls)
                    .await
                    .map_err(|e| format!("PostgreSQL at {url} does not answer: {e}"))?;
            tokio::spawn(connection);
            Ok(work(client).await)
        })
    })
    .join()
    .map_err(|_| "the database work panicked".to_string())?
}

/// Creates an empty database on `server` (a URL without a database), named `prefix`, this
/// process's id, a count and the time (unique across processes and runs); its URL.
pub fn fresh_database(server: &str, prefix: &str) -> Result<String, String> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let server = server.trim_end_matches('/');
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let name = format!(
        "{prefix}_{}_{}_{now_ms}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
    );
    let url = format!("{server}/{name}");
    with_postgres(&format!("{server}/postgres"), |client| async move {
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .map_err(|e| format!("cannot create database {name}: {e}"))
    })??;
    Ok(url)
}

/// Drops the databases on `server` (a URL without a database) that [`fresh_database`] made with
/// `prefix`, but for those still in use (by another run), which are left.
pub fn drop_databases(server: &str, prefix: &str) -> Result<(), String> {
    let server = server.trim_end_matches('/').to_string();
    // `_` matches any character in LIKE: the prefix's own are escaped.
    let pattern = format!("{}\\_%", prefix.replace('_', "\\_"));
    with_postgres(&format!("{server}/postgres"), |client| async move {
        let old = client
            .query(
                "SELECT datname FROM pg_database WHERE datname LIKE $1",
                &[&pattern],
            )
            .await
            .map_err(|e| format!("PostgreSQL at {server}: {e}"))?;
        for row in old {
            let name: String = row.get(0);
            let _ = client
                .batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\""))
                .await;
        }
        Ok(())
    })?
}
