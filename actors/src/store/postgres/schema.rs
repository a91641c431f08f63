//! The database's schema, created and migrated at start. Migrations are embedded and numbered;
//! they run in one transaction under an advisory lock, so nodes starting together on an empty
//! database serialise on it and all come up. A database whose schema is newer than this idem
//! knows is refused: reading it could misread a claim as free.

use idem_schemas::DeliveryEvent;
use tokio_postgres::{Client, Transaction};

use crate::codec;
use crate::store::StoreError;

/// The advisory lock migrations hold (any fixed number; this one spells "idem").
const MIGRATION_LOCK: i64 = 0x6964_656d;

/// The migrations, in order: the schema's version is how many have run.
const MIGRATIONS: &[&str] = &[
    // 1: claims (one row per key: its current generation, holder and log), deliveries (one row
    // per callback: its log, its place in the retry queue and the listing, its lease) and nodes
    // (each node's heartbeat, by the database's clock).
    r#"
    CREATE TABLE idem_claims (
        tenant        text        NOT NULL,
        digest        bytea       NOT NULL,
        generation    bigint      NOT NULL,
        expires_at_ms bigint      NOT NULL,
        log           bytea       NOT NULL,
        writes        integer     NOT NULL,
        completed     boolean     NOT NULL DEFAULT false,
        holder        bigint      NOT NULL,
        held_since    timestamptz NOT NULL DEFAULT clock_timestamp(),
        PRIMARY KEY (tenant, digest)
    );
    CREATE TABLE idem_nodes (
        epoch        bigint      PRIMARY KEY,
        heartbeat_at timestamptz NOT NULL
    );
    CREATE INDEX idem_claims_expiry ON idem_claims (expires_at_ms);
    CREATE TABLE idem_deliveries (
        id            text     PRIMARY KEY,
        tenant        text     NOT NULL,
        status        smallint NOT NULL,
        due_ms        bigint,
        expires_at_ms bigint   NOT NULL,
        log           bytea    NOT NULL,
        records       integer  NOT NULL,
        lease_until   timestamptz,
        lease_token   bigint   NOT NULL DEFAULT 0
    );
    CREATE INDEX idem_deliveries_due ON idem_deliveries (due_ms) WHERE due_ms IS NOT NULL;
    CREATE INDEX idem_deliveries_listing ON idem_deliveries (tenant, status, id);
    CREATE INDEX idem_deliveries_expiry ON idem_deliveries (expires_at_ms);
    "#,
    // 2: decisions kept for lookup (one row per decision: its record, its subject's digest for
    // the subject's listing in id order, which is the order decisions are made, and the end of
    // its retention). Besides, a claim's log names its subject's claim and payload fingerprints
    // are of the body's RFC 8785 form: a version-1 database that holds claims is refused (see
    // `migrate`).
    r#"
    CREATE TABLE idem_decisions (
        tenant        text   NOT NULL,
        id            text   NOT NULL,
        subject       bytea  NOT NULL,
        signal_type   text   NOT NULL,
        expires_at_ms bigint NOT NULL,
        record        bytea  NOT NULL,
        PRIMARY KEY (tenant, id)
    );
    CREATE INDEX idem_decisions_subject ON idem_decisions (tenant, subject, id);
    CREATE INDEX idem_decisions_expiry ON idem_decisions (expires_at_ms);
    "#,
    // 3: each endpoint's breaker (one row per tenant and action URL: its health, encoded).
    r#"
    CREATE TABLE idem_endpoints (
        tenant text  NOT NULL,
        url    text  NOT NULL,
        health bytea NOT NULL,
        PRIMARY KEY (tenant, url)
    );
    "#,
    // 4: a decision names its source, so every record is of another format (codec version 5):
    // a database that holds claims, deliveries or decisions an older idem wrote is refused (see
    // `migrate`). Endpoint health is an observation, rebuilt by the next attempts: it starts
    // afresh.
    r#"
    DELETE FROM idem_endpoints;
    "#,
    // 5: leases of the jobs one node at a time runs (polling a source): the holder's epoch and
    // the fencing token, raised each time the lease changes hands.
    r#"
    CREATE TABLE IF NOT EXISTS idem_leases (
        job    text   PRIMARY KEY,
        holder bigint NOT NULL,
        token  bigint NOT NULL
    );
    "#,
    // 6: a delivery's endpoint URL, and an index of the queued ones by tenant and URL, from
    // which the queued count per endpoint is read without the logs. The rows an older idem
    // wrote get their URL from their log (`backfill_urls`) before it is required.
    r#"
    ALTER TABLE idem_deliveries ADD COLUMN IF NOT EXISTS url text;
    CREATE INDEX IF NOT EXISTS idem_deliveries_queued ON idem_deliveries (tenant, url)
        WHERE status = 0;
    "#,
    // 7: the Shared Signals streams receivers made, one row each, written over its version.
    r#"
    CREATE TABLE IF NOT EXISTS idem_ssf_streams (
        tenant  text   NOT NULL,
        id      text   NOT NULL,
        version bigint NOT NULL,
        record  bytea  NOT NULL,
        PRIMARY KEY (tenant, id)
    );
    "#,
    // 8: the key each SET is sealed under, by its delivery, until its delivery ends.
    r#"
    CREATE TABLE IF NOT EXISTS idem_set_keys (
        delivery text  PRIMARY KEY,
        key      bytea NOT NULL
    );
    "#,
    // 9: records name the trace their decision was made in (codec version 6), which an older
    // idem cannot read: nothing changes in the tables, the version refuses such an idem. This
    // idem reads the rows written before as they were.
    "",
    // 10: a decision and its kept record name the rule that decided and the rules that failed
    // (codec version 7), which an older idem cannot read: as 9. A subject's history is counted
    // on the `(tenant, subject, id)` index, which is there already.
    "",
    // 11: the streams idem made at transmitters for its sources, one row per source.
    r#"
    CREATE TABLE IF NOT EXISTS idem_ssf_subscriptions (
        tenant  text   NOT NULL,
        source  text   NOT NULL,
        version bigint NOT NULL,
        record  bytea  NOT NULL,
        PRIMARY KEY (tenant, source)
    );
    "#,
];

/// The schema that added deliveries' URLs.
const URLS: i32 = 6;

/// The first schema whose records this idem reads: older ones encode claims, deliveries and
/// decisions another way.
const FIRST_READABLE: i32 = 4;

/// The schema version this idem reads and writes.
pub const VERSION: i32 = MIGRATIONS.len() as i32;

/// Brings the database's schema to [`VERSION`], or refuses a newer one.
pub async fn migrate(client: &mut Client) -> Result<(), StoreError> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS idem_schema (version integer NOT NULL)")
        .await?;
    let found: i32 = tx
        .query_opt("SELECT version FROM idem_schema", &[])
        .await?
        .map_or(0, |row| row.get(0));
    if found > VERSION {
        return Err(StoreError::Schema {
            found,
            known: VERSION,
        });
    }
    if found > 0 && found < FIRST_READABLE {
        // Schema 1 has no decisions table.
        let decisions = if found >= 2 {
            "(SELECT count(*) FROM idem_decisions)"
        } else {
            "0"
        };
        let held: i64 = tx
            .query_one(
                &format!(
                    "SELECT (SELECT count(*) FROM idem_claims) \
                     + (SELECT count(*) FROM idem_deliveries) + {decisions}"
                ),
                &[],
            )
            .await?
            .get(0);
        if held > 0 {
            return Err(StoreError::OldClaims(format!(
                "schema {found} with {held} claims, deliveries and decisions that an older idem \
                 wrote (this idem reads those of schema {FIRST_READABLE} on): start on a new \
                 database, or stop every node, let key_ttl and decisions.retention pass and \
                 delete the rows of idem_claims, idem_deliveries and idem_decisions"
            )));
        }
    }
    for (n, migration) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        tracing::info!(version = n + 1, "migrating the database schema");
        tx.batch_execute(migration).await?;
        if n as i32 + 1 == URLS {
            backfill_urls(&tx).await?;
        }
    }
    if found == 0 {
        tx.execute("INSERT INTO idem_schema (version) VALUES ($1)", &[&VERSION])
            .await?;
    } else if found < VERSION {
        tx.execute("UPDATE idem_schema SET version = $1", &[&VERSION])
            .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Gives each delivery row an older idem wrote the URL its log's first record names, then
/// requires one of every row.
async fn backfill_urls(tx: &Transaction<'_>) -> Result<(), StoreError> {
    let rows = tx
        .query("SELECT id, log FROM idem_deliveries WHERE url IS NULL", &[])
        .await?;
    let (mut ids, mut urls) = (
        Vec::with_capacity(rows.len()),
        Vec::with_capacity(rows.len()),
    );
    for row in &rows {
        let Some(DeliveryEvent::Created(record)) = codec::decode_first(row.try_get(1)?)? else {
            return Err(StoreError::Malformed("idem_deliveries"));
        };
        ids.push(row.try_get::<_, &str>(0)?);
        urls.push(record.url);
    }
    tx.execute(
        "UPDATE idem_deliveries d SET url = u.url \
         FROM unnest($1::text[], $2::text[]) AS u(id, url) WHERE d.id = u.id",
        &[&ids, &urls],
    )
    .await?;
    tx.batch_execute("ALTER TABLE idem_deliveries ALTER COLUMN url SET NOT NULL")
        .await?;
    Ok(())
}
