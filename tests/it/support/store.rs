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
        Ok("postgres") => on_postgres(&test_database()),
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

/// A fresh database on the test server (`IDEM_TEST_POSTGRES_URL`, or this machine's), made by
/// `devtools::postgres::fresh_database` as `idem_test_…`, which `scripts/test` drops; its URL.
pub fn test_database() -> String {
    let server = std::env::var("IDEM_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| devtools::postgres::LOCAL.into());
    devtools::postgres::fresh_database(&server, "idem_test")
        .unwrap_or_else(|e| panic!("the test database: {e}"))
}

/// Everything the store of the config at `config_path` holds, as (where, bytes): every file of
/// its data directory `data_dir` on sled; on PostgreSQL, every row of every table as `pg_dump`
/// writes them, each `bytea` value decoded from its hex.
pub fn stored(config_path: &Path, data_dir: &Path) -> Vec<(String, Vec<u8>)> {
    let Some(url) = postgres_url(config_path) else {
        return files_under(data_dir)
            .into_iter()
            .map(|(path, bytes)| (path.display().to_string(), bytes))
            .collect();
    };
    let dump = std::process::Command::new("pg_dump")
        .args(["--data-only", "--no-owner", &url])
        .output()
        .unwrap_or_else(|e| panic!("pg_dump must run for this test: {e}"));
    assert!(
        dump.status.success(),
        "pg_dump: {}",
        String::from_utf8_lossy(&dump.stderr)
    );
    let (text, binary) = split_bytea(&dump.stdout);
    vec![("pg_dump".into(), text), ("pg_dump bytea".into(), binary)]
}

/// A `pg_dump`'s text without its `bytea` values (`\\x` and hex digits), and those values
/// decoded, one after another.
fn split_bytea(dump: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let (mut text, mut binary) = (Vec::new(), Vec::new());
    let mut rest = dump;
    while let Some(at) = rest.windows(3).position(|w| w == b"\\\\x") {
        text.extend_from_slice(&rest[..at]);
        let hex = &rest[at + 3..];
        let digits = hex.iter().take_while(|b| b.is_ascii_hexdigit()).count();
        for pair in hex[..digits - digits % 2].chunks(2) {
            let pair = std::str::from_utf8(pair).unwrap_or("00");
            binary.push(u8::from_str_radix(pair, 16).unwrap_or(0));
        }
        binary.push(b'\n');
        rest = &hex[digits..];
    }
    text.extend_from_slice(rest);
    (text, binary)
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
        Some(url) => Backend::Postgres {
            url,
            pool_size: 1,
            connect_timeout: std::time::Duration::from_secs(10),
        },
        None => Backend::Sled {
            data_dir: data_dir.to_path_buf(),
        },
    };
    let settings = idem_actors::Settings {
        store,
        ..idem_actors::Settings::default()
    };
    let node = idem_actors::store::Process {
        epoch: 1,
        settings: std::sync::Arc::new(settings),
    };
    let store = idem_actors::store::open(node)
        .await
        .expect("the store opens");
    let key = store.set_key(delivery).await.expect("read the SET key");
    key.is_some()
}

#[test]
fn a_dumps_bytea_values_are_read_as_the_bytes_they_hold() {
    let dump = b"1\tacme\t\\\\x2b3135\t\\\\x41\n";
    let (text, binary) = split_bytea(dump);
    assert_eq!(text, b"1\tacme\t\t\n");
    assert_eq!(binary, b"+15\nA\n");
}
