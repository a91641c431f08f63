//! The store the tests run on: sled in the test's data directory (the default), or, with
//! `IDEM_TEST_STORE=postgres`, a fresh database of the PostgreSQL server at
//! `IDEM_TEST_POSTGRES_URL` (default: this machine's) for each config, so tests run in
//! parallel. Also reading back everything a store holds, and a client of a test database. A
//! server that does not answer fails the test.

use std::path::{Path, PathBuf};

/// The `[store]` section of a test's config: nothing on sled, a fresh database with
/// `IDEM_TEST_STORE=postgres`.
pub fn store_section() -> String {
    match std::env::var("IDEM_TEST_STORE").as_deref() {
        Err(_) | Ok("sled") => String::new(),
        Ok("postgres") => on_postgres(&fresh_database()),
        Ok(other) => panic!("IDEM_TEST_STORE={other:?}: use sled or postgres"),
    }
}

/// The `[store]` section of the database at `url`.
pub fn on_postgres(url: &str) -> String {
    format!("[store]\nbackend = \"postgres\"\nurl = \"{url}\"\npool_size = 4\n")
}

/// Runs `work` with a client of the database at `url` (see [`devtools::postgres::with_postgres`]).
pub fn with_postgres<T, F, Fut>(url: &str, work: F) -> T
where
    T: Send + 'static,
    F: FnOnce(tokio_postgres::Client) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T>,
{
    devtools::postgres::with_postgres(url, work).unwrap_or_else(|e| panic!("{e}"))
}

/// Creates an empty database (`idem_test_…`, which `scripts/test` drops) on the test server;
/// its URL.
pub fn fresh_database() -> String {
    let server = std::env::var("IDEM_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| devtools::postgres::LOCAL.into());
    devtools::postgres::fresh_database(&server, "idem_test")
        .unwrap_or_else(|e| panic!("the test database: {e}"))
}

/// Everything the store of the config at `config_path` holds, as (where, bytes): every file of
/// its data directory `data_dir` on sled, every row's columns on PostgreSQL.
pub fn stored(config_path: &Path, data_dir: &Path) -> Vec<(String, Vec<u8>)> {
    let Some(url) = postgres_url(config_path) else {
        return files_under(data_dir)
            .into_iter()
            .map(|(path, bytes)| (path.display().to_string(), bytes))
            .collect();
    };
    with_postgres(&url, |client| async move {
        let mut out = Vec::new();
        for (table, text, bytes) in [
            ("idem_claims", "tenant", "digest || log"),
            ("idem_deliveries", "id || ' ' || tenant", "log"),
            ("idem_ssf_streams", "id || ' ' || tenant", "record"),
        ] {
            let rows = client
                .query(&format!("SELECT {text}, {bytes} FROM {table}"), &[])
                .await
                .expect("read the table");
            for row in rows {
                let text: String = row.get(0);
                let mut bytes: Vec<u8> = row.get(1);
                bytes.extend_from_slice(text.as_bytes());
                out.push((table.to_string(), bytes));
            }
        }
        out
    })
}

/// The database URL of the config at `config_path`; none when it is on sled.
pub fn postgres_url(config_path: &Path) -> Option<String> {
    let config = std::fs::read_to_string(config_path).expect("read config");
    config
        .lines()
        .find_map(|l| l.strip_prefix("url = \""))
        .and_then(|l| l.strip_suffix('"'))
        .map(str::to_string)
}

/// Every file under `dir`, read whole.
fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.clone(), std::fs::read(&p).expect("read")));
            }
        }
    }
    out
}

/// Whether the store of the config at `config_path` (on sled, in `data_dir`; idem stopped)
/// still keeps the key of the SET `delivery`, read through the store's own seam.
pub async fn set_key_kept(config_path: &Path, data_dir: &Path, delivery: &str) -> bool {
    use idem_actors::settings::Backend;
    let store = match postgres_url(config_path) {
        Some(url) => Backend::Postgres { url, pool_size: 1 },
        None => Backend::Sled {
            data_dir: data_dir.to_path_buf(),
        },
    };
    let settings = idem_actors::Settings {
        store,
        ..idem_actors::Settings::default()
    };
    let node = idem_actors::store::Node {
        epoch: 1,
        settings: std::sync::Arc::new(settings),
    };
    let store = idem_actors::store::open(node)
        .await
        .expect("the store opens");
    let key = store.set_key(delivery).await.expect("read the SET key");
    key.is_some()
}
