//! `[store]`: sled in `data_dir` (the default), or PostgreSQL at `url`. Read into the engine's
//! `Backend` in one step, since sled's directory is the top-level `data_dir` and each backend
//! has keys of its own; checked without connecting.

use std::path::Path;
use std::time::Duration;

use idem_actors::settings::read::{self, SecretText};
use idem_actors::settings::Backend;
use serde::Deserialize;

use super::{invalid, ConfigError};

/// The connections one node holds to the database unless told otherwise, and the most it may.
const POOL: usize = 16;
const MAX_POOL: i64 = 1024;

/// How long `idem serve` waits at start for the database to connect and answer, unless told
/// otherwise: long enough for a database across a network, short enough that a supervisor sees
/// the failed start and retries.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// `[store]` as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct StoreSection {
    backend: Option<String>,
    /// A URL may hold a password: like any secret it may be read from a file or the
    /// environment.
    url: Option<SecretText>,
    pool_size: Option<i64>,
    /// A duration as written ("10s").
    connect_timeout: Option<String>,
}

impl StoreSection {
    /// The backend it names, sled living in `data_dir`.
    pub(super) fn backend(self, data_dir: &Path) -> Result<Backend, ConfigError> {
        match self.backend.as_deref().unwrap_or("sled") {
            "sled" => {
                if self.url.is_some() || self.pool_size.is_some() || self.connect_timeout.is_some()
                {
                    return Err(invalid(
                        "store.url",
                        "url, pool_size and connect_timeout are for backend = \"postgres\"; sled lives in data_dir",
                    ));
                }
                Ok(Backend::Sled {
                    data_dir: data_dir.to_path_buf(),
                })
            }
            "postgres" => {
                let written = self.url.ok_or_else(|| {
                    invalid(
                        "store.url",
                        "is required with backend = \"postgres\", e.g. \"postgres://postgres@127.0.0.1:5432/idem\"",
                    )
                })?;
                // Read from a file or the environment, the URL holds a password: never echoed.
                let literal = matches!(written, SecretText::Literal(_));
                let url = written.resolve().map_err(|why| invalid("store.url", why))?;
                Backend::check_postgres_url(&url).map_err(|why| match literal {
                    true => invalid("store.url", why),
                    false => invalid(
                        "store.url",
                        "what it names is not a PostgreSQL URL (postgres://user:password@host:port/database)",
                    ),
                })?;
                let pool_size = match self.pool_size {
                    None => POOL,
                    Some(n) => read::bounded(n, 1, MAX_POOL, "connections")
                        .map_err(|why| invalid("store.pool_size", why))?,
                };
                let connect_timeout = match self.connect_timeout {
                    None => CONNECT_TIMEOUT,
                    Some(text) => read::parse_duration(&text)
                        .map_err(|why| invalid("store.connect_timeout", why))?,
                };
                Ok(Backend::Postgres {
                    url,
                    pool_size,
                    connect_timeout,
                })
            }
            other => Err(invalid(
                "store.backend",
                format!("{other:?} is not a backend: use \"sled\" or \"postgres\""),
            )),
        }
    }
}
