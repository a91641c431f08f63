//! The storage seam: what the actors ask of a store, in their own words. A claim store keeps
//! each key's claim log and decides who holds a claim: starting a claim returns either the new
//! claim or the one that already holds the key, and an append to a generation that is no longer
//! the key's current one is refused as fenced, so a stale writer can never overwrite a newer
//! one. A delivery store keeps each callback's log, the durable retry queue and the tenant's
//! listing. An endpoint store keeps each endpoint's breaker; a stream store, the Shared Signals
//! streams receivers made; a SET key store, the key each SET is sealed under until its delivery
//! ends (a delivery write that ends it erases the key). Writes are made in a [`Unit`] of work, which the store applies and
//! makes durable as a whole (its group commit batches many units into one sync) before it
//! reports what the unit came to. `sled` is the embedded implementation, `postgres` the one
//! several nodes share.

pub(crate) mod postgres;
pub mod rule;
pub(crate) mod sled;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use idem_schemas::{
    ClaimEvent, DecisionRecord, DeliveryEvent, DeliveryRecord, DeliveryStatus, Stream, Subscription,
};

use crate::breaker::{EndpointEvent, EndpointHealth, EndpointId, Noted};
use crate::codec::CodecError;
use crate::settings::DeliverySettings;

/// Identifies a claim: a tenant and the keyed digest of an idempotency key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClaimId {
    /// The tenant's name.
    pub tenant: String,
    /// HMAC-SHA-256 of the key under the server's `key_secret`.
    pub digest: [u8; 32],
}

/// The current generation of a claim's log, as loaded.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClaimLog {
    /// Its events, in order.
    pub events: Vec<ClaimEvent>,
    /// Where the next append goes.
    pub head: LogHead,
}

/// One generation of a claim's log as its writer last read or wrote it: the generation it was
/// granted (the fencing token of every later write) and where its next record goes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LogHead {
    /// The claim.
    pub id: ClaimId,
    /// The generation (`claimed_at_ms` of its `Claimed` event).
    pub generation: u64,
    /// When the generation expires (unix milliseconds).
    pub expires_at_ms: u64,
    /// How many writes the log holds.
    pub next: u32,
}

/// Where a delivery sits in the indexes: its status, and while queued, when it is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Placement {
    /// The status.
    pub status: DeliveryStatus,
    /// Due time (unix milliseconds) while queued.
    pub due_ms: Option<u64>,
}

/// A write to one delivery's log: records `first_seq..` and its move in the indexes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DeliveryWrite {
    /// The tenant the delivery belongs to.
    pub tenant: String,
    /// The delivery.
    pub id: String,
    /// The endpoint it goes to: the queued count per endpoint is an index by it.
    pub url: String,
    /// The lease its writer holds (from [`DeliveryStore::due`]), which fences the write; none
    /// for a write no lease guards (a new delivery, a redelivery of a final one).
    pub lease: Option<u64>,
    /// The sequence number of the first record (0 creates the delivery).
    pub first_seq: u32,
    /// The records.
    pub events: Vec<DeliveryEvent>,
    /// Where it was (none for a new delivery).
    pub from: Option<Placement>,
    /// Where it goes.
    pub to: Placement,
}

/// What a unit's claim write is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ClaimWrite {
    /// Start a generation with `events`, the first of them its `Claimed`.
    Start(ClaimId, Vec<ClaimEvent>),
    /// Append `events` to the generation at the head.
    Append(LogHead, Vec<ClaimEvent>),
    /// Take over the in-flight generation at the head from a holder that is gone.
    TakeOver(LogHead),
}

impl ClaimWrite {
    /// How many records of the claim's log it writes.
    pub fn records(&self) -> usize {
        match self {
            ClaimWrite::Start(_, events) | ClaimWrite::Append(_, events) => events.len(),
            ClaimWrite::TakeOver(_) => 0,
        }
    }
}

/// The key a SET is sealed under, wrapped (see [`crate::seal`]), kept beside the claim that
/// made it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SetKey {
    /// The SET's delivery.
    pub delivery: String,
    /// The key, sealed for that delivery.
    pub wrapped: Vec<u8>,
}

/// A unit of work: the records one step writes, applied in order (a decision's new delivery
/// logs before the claim record that names them) and made durable together by one commit.
#[derive(Debug, Default, Clone, PartialEq, Eq, Hash)]
#[must_use = "a unit is written only when committed"]
pub struct Unit {
    deliveries: Vec<DeliveryWrite>,
    /// New deliveries may exist already (a take-over after a crash): those are left alone.
    skip_existing: bool,
    claim: Option<ClaimWrite>,
    /// Decisions to keep for lookup, written only if the unit's claim write is (a fenced or
    /// refused one writes none); one kept already is left as it is.
    decisions: Vec<DecisionRecord>,
    /// SET keys to keep, and the deliveries whose keys to erase (SETs that will never be
    /// sent), written only if the unit's claim write is.
    keep_keys: Vec<SetKey>,
    erase_keys: Vec<String>,
}

impl Unit {
    /// An empty unit: committing it returns once every write made before is durable.
    pub fn new() -> Self {
        Unit::default()
    }

    /// Starts a new generation of `id`'s claim with `events` (the first is its `Claimed`).
    /// Refused, as [`Written::Held`], while another unexpired generation holds the key.
    pub fn start_claim(mut self, id: ClaimId, events: Vec<ClaimEvent>) -> Self {
        self.claim = Some(ClaimWrite::Start(id, events));
        self
    }

    /// Appends `events` to the generation at `head` as one write. Refused, as
    /// [`Written::Fenced`], when that generation is no longer the key's current one or its log
    /// has moved past `head`.
    pub fn append_claim(mut self, head: LogHead, events: Vec<ClaimEvent>) -> Self {
        self.claim = Some(ClaimWrite::Append(head, events));
        self
    }

    /// Takes over the in-flight generation at `head`, whose holder is gone: granted as
    /// [`Written::TakenOver`] when the store finds the holder gone too (its node's heartbeat
    /// expired, or the claim in flight for `in_flight_timeout`), refused as [`Written::Held`]
    /// otherwise. Every write of the old holder is fenced from then on.
    pub fn take_over_claim(mut self, head: LogHead) -> Self {
        self.claim = Some(ClaimWrite::TakeOver(head));
        self
    }

    /// Writes delivery logs (new ones, and answers to attempts or redeliveries).
    pub fn write_deliveries(mut self, writes: Vec<DeliveryWrite>) -> Self {
        self.deliveries.extend(writes);
        self
    }

    /// Keeps `decision` for lookup, until its `expires_at_ms`.
    pub fn record_decision(mut self, decision: DecisionRecord) -> Self {
        self.decisions.push(decision);
        self
    }

    /// Keeps `keys` until their deliveries end.
    pub fn keep_set_keys(mut self, keys: Vec<SetKey>) -> Self {
        self.keep_keys.extend(keys);
        self
    }

    /// Erases the keys of the SETs `deliveries`, which will never be sent.
    pub fn erase_set_keys(mut self, deliveries: Vec<String>) -> Self {
        self.erase_keys.extend(deliveries);
        self
    }

    /// New deliveries in this unit that exist already are left as they are (finishing a claim
    /// an earlier process may have half-written).
    pub fn skipping_existing(mut self) -> Self {
        self.skip_existing = true;
        self
    }

    /// Its claim write, if it has one.
    pub fn claim_write(&self) -> Option<&ClaimWrite> {
        self.claim.as_ref()
    }

    /// Its delivery writes, in order.
    pub fn delivery_writes(&self) -> &[DeliveryWrite] {
        &self.deliveries
    }

    /// The decisions it keeps.
    pub fn decisions(&self) -> &[DecisionRecord] {
        &self.decisions
    }

    /// The SET keys it keeps.
    pub fn set_keys(&self) -> &[SetKey] {
        &self.keep_keys
    }

    /// The deliveries whose SET keys it erases.
    pub fn erased_set_keys(&self) -> &[String] {
        &self.erase_keys
    }

    /// Whether its new deliveries that exist already are left as they are.
    pub fn skips_existing(&self) -> bool {
        self.skip_existing
    }
}

/// What a committed unit's claim write came to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Written {
    /// The unit wrote no claim record.
    Nothing,
    /// The generation was started: its head, and the events written.
    Claimed(LogHead, Vec<ClaimEvent>),
    /// Another generation holds the key: its log (nothing of the unit was written).
    Held(ClaimLog),
    /// The events were appended: the new head, and the events.
    Appended(LogHead, Vec<ClaimEvent>),
    /// The generation was taken over: the head every later write of it must carry.
    TakenOver(LogHead),
    /// The generation appended to is no longer the key's current one: nothing of the unit was
    /// written.
    Fenced,
}

/// Why the store failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The embedded database refused an operation.
    #[error("store: {0}")]
    Sled(#[from] ::sled::Error),
    /// A file operation or sync failed: the write may not be durable.
    #[error("store: {0}")]
    Io(Arc<std::io::Error>),
    /// A record did not decode or encode.
    #[error("store: {0}")]
    Codec(Arc<CodecError>),
    /// The group commit has stopped (the store is shutting down).
    #[error("store: the group commit has stopped")]
    Stopped,
    /// A new generation was written without its `Claimed` event first.
    #[error("store: a claim log must start with its claim")]
    NotAClaim,
    /// A stored key or log has an impossible shape.
    #[error("store: malformed entry in {0}")]
    Malformed(&'static str),
    /// The database failed or could not be reached.
    #[error("store: postgres: {}", postgres_detail(.0))]
    Postgres(Arc<tokio_postgres::Error>),
    /// No connection to the database could be had.
    #[error("store: postgres pool: {0}")]
    Pool(String),
    /// The database's schema is newer than this idem knows.
    #[error(
        "store: the database's schema is version {found}, newer than version {known} that this \
         idem knows; run a newer idem"
    )]
    Schema {
        /// The version found in the database.
        found: i32,
        /// The newest version this idem knows.
        known: i32,
    },
    /// The data directory was written in another format: what was found there.
    #[error(
        "store: the data directory holds {0}, this idem reads and writes format {format}; \
         start it on an empty data_dir",
        format = sled::FORMAT
    )]
    Format(String),
    /// The database holds claims in a form this idem no longer reads: what was found there.
    #[error("store: the database holds {0}")]
    OldClaims(String),
    /// The database acknowledges commits before they are durable (`synchronous_commit`, as
    /// found): a claim answered could be lost in its crash and decided again.
    #[error(
        "store: the database commits with synchronous_commit = {0}, so a claim it acknowledges \
         can be lost in a crash; set synchronous_commit = on for idem's database or role"
    )]
    NotDurable(String),
    /// A write or sync failed earlier, and the store cannot vouch for what it holds since: it
    /// refuses everything until idem restarts and recovers from what is durable.
    #[error("store: failed for good after {0}; restart idem to recover from what is durable")]
    Halted(Arc<StoreError>),
    /// The store did not answer in time.
    #[error("store: no answer within {0:?}")]
    Unresponsive(std::time::Duration),
    /// The database did not connect and answer within `store.connect_timeout` at start.
    #[error("store: the database at store.url did not connect and answer within store.connect_timeout ({0:?})")]
    NoAnswerAtStart(std::time::Duration),
}

impl From<std::io::Error> for StoreError {
    fn from(e: std::io::Error) -> Self {
        StoreError::Io(Arc::new(e))
    }
}

/// A database error with what the server said, on one line (tokio-postgres shows only "db
/// error").
fn postgres_detail(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(said) => format!("{e}: {}: {}", said.severity(), said.message()),
        None => e.to_string(),
    }
}

impl StoreError {
    /// Whether the store refused a write because it takes none: a database that is read-only
    /// (a standby, `default_transaction_read_only`) or a data directory on a read-only file
    /// system, rather than one that failed or could not be reached.
    pub fn is_read_only(&self) -> bool {
        use tokio_postgres::error::SqlState;
        let read_only_io = |e: &std::io::Error| e.kind() == std::io::ErrorKind::ReadOnlyFilesystem;
        match self {
            StoreError::Postgres(e) => e.code() == Some(&SqlState::READ_ONLY_SQL_TRANSACTION),
            StoreError::Io(e) => read_only_io(e),
            StoreError::Sled(::sled::Error::Io(e)) => read_only_io(e),
            StoreError::Halted(e) => e.is_read_only(),
            _ => false,
        }
    }
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        StoreError::Postgres(Arc::new(e))
    }
}

impl From<CodecError> for StoreError {
    fn from(e: CodecError) -> Self {
        StoreError::Codec(Arc::new(e))
    }
}

/// What a store's read answers with: a future, so that a store across the network can wait
/// without holding a thread (the embedded one answers at once).
pub type Read<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Opens the store `node`'s settings name, for `node`.
pub async fn open(node: Process) -> Result<Arc<dyn Store>, StoreError> {
    Ok(match node.settings.store.clone() {
        crate::settings::Backend::Sled { data_dir } => {
            sled::SledStore::open(&data_dir, node.settings.idempotency.in_flight_timeout)?
        }
        crate::settings::Backend::Postgres {
            url,
            pool_size,
            connect_timeout,
        } => postgres::PgStore::open(&url, pool_size, connect_timeout, node).await?,
    })
}

/// The smallest decision id made at or after `at_ms`: a decision id is `dec_` and a UUIDv7,
/// whose first twelve hex digits are its unix milliseconds.
pub fn first_decision_id_at(at_ms: u64) -> String {
    format!("dec_{:012x}", at_ms.min((1 << 48) - 1))
}

/// A subject digest as stored: the bytes behind its hex (the text itself, should it not be hex).
pub fn subject_bytes(subject_hash: &str) -> Vec<u8> {
    idem_schemas::hex::decode(subject_hash).unwrap_or_else(|| subject_hash.as_bytes().to_vec())
}

/// How many deliveries have each status, in [`DeliveryStatus::ALL`] order.
pub type StatusCounts = [u64; DeliveryStatus::ALL.len()];

/// A delivery status as stored: its place in [`DeliveryStatus::ALL`].
pub fn status_number(status: DeliveryStatus) -> u8 {
    match status {
        DeliveryStatus::Queued => 0,
        DeliveryStatus::Delivered => 1,
        DeliveryStatus::Failed => 2,
        DeliveryStatus::Dead => 3,
        DeliveryStatus::Dropped => 4,
    }
}

/// Claim logs: one log per generation of a key; writes go through a [`Unit`].
pub trait ClaimStore: Send + Sync {
    /// The key's current generation, if it has one that holds the key at `now_ms` (one that is
    /// not [`rule::replaceable`] by then).
    fn load_claim<'a>(&'a self, id: &'a ClaimId, now_ms: u64) -> Read<'a, Option<ClaimLog>>;

    /// Marks the generation at `head` completed, if it is still the key's current one. Written
    /// (or queued) now, durable with a later commit: losing it leaves the recovery point, which
    /// answers the same bytes. A store may leave it out where it changes nothing: a generation
    /// whose window is no shorter than `in_flight_timeout` is [`rule::replaceable`] at its
    /// expiry either way.
    fn complete_claim(&self, head: &LogHead) -> Result<(), StoreError>;

    /// Deletes up to `limit` records of generations replaceable at `now_ms` (those that expired
    /// `in_flight_timeout` before it); how many. It blocks: call it from a blocking thread.
    fn sweep_claims(&self, now_ms: u64, limit: usize) -> Result<usize, StoreError>;
}

/// Decisions kept for lookup; written through a [`Unit`].
pub trait DecisionStore: Send + Sync {
    /// `tenant`'s decision `id`, if it is kept and has not expired at `now_ms`.
    fn load_decision<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
        now_ms: u64,
    ) -> Read<'a, Option<DecisionRecord>>;

    /// Up to `limit` of `tenant`'s decisions (about the subject whose digest is `subject_hash`
    /// only, and of `signal_type` only, if given), newest first, older than the decision
    /// `before` if given, unexpired at `now_ms`.
    fn decisions_about<'a>(
        &'a self,
        tenant: &'a str,
        subject_hash: Option<&'a str>,
        signal_type: Option<&'a str>,
        before: Option<&'a str>,
        limit: usize,
        now_ms: u64,
    ) -> Read<'a, Vec<DecisionRecord>>;

    /// How many of `tenant`'s decisions about the subject whose digest is `subject_hash` (of
    /// `signal_type` only, if given) were made at or after `since_ms` and are unexpired at
    /// `now_ms`, counted up to `limit`: one range of the subject's index, from `since_ms` on
    /// (ids are time-ordered).
    fn count_decisions<'a>(
        &'a self,
        tenant: &'a str,
        subject_hash: &'a str,
        signal_type: Option<&'a str>,
        since_ms: u64,
        limit: u64,
        now_ms: u64,
    ) -> Read<'a, u64>;

    /// Forgets up to `limit` decisions expired before `now_ms`; how many. It blocks: call it
    /// from a blocking thread.
    fn expire_decisions(&self, now_ms: u64, limit: usize) -> Result<usize, StoreError>;
}

/// A due-index or retention-index entry: when, and which delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timed {
    /// The time of the entry (unix milliseconds).
    pub at_ms: u64,
    /// The delivery.
    pub id: String,
    /// The lease taken on it with this entry, where the store leases due deliveries (several
    /// nodes share it): the token that fences the attempt's record.
    pub lease: Option<u64>,
}

/// The process a store is opened by: who it is, and its settings (the store they name, how long a
/// claim may stay in flight, how long an attempt may take, which a delivery's lease outlasts).
#[derive(Debug, Clone)]
pub struct Process {
    /// This process's epoch, the holder of the claims it makes.
    pub epoch: u64,
    /// The engine's settings.
    pub settings: Arc<crate::settings::Settings>,
}

/// Delivery logs and their indexes; writes go through a [`Unit`].
pub trait DeliveryStore: Send + Sync {
    /// A delivery's log, if it exists.
    fn load_delivery<'a>(&'a self, id: &'a str) -> Read<'a, Option<Vec<DeliveryEvent>>>;

    /// Up to `limit` queued deliveries due at or before `now_ms`, oldest first, each durable
    /// with the unit that wrote it. A store shared by several nodes leases each to the caller,
    /// so no two nodes attempt it at once.
    fn due(&self, now_ms: u64, limit: usize) -> Read<'_, Vec<Timed>>;

    /// Whether [`DeliveryStore::due`] leases what it returns, leaving out what is leased (a store
    /// shared by nodes); otherwise it returns every due entry, those being attempted too.
    fn leases_due(&self) -> bool;

    /// Forgets a due entry that no longer matches its delivery.
    fn drop_due<'a>(&'a self, due: &'a Timed) -> Read<'a, ()>;

    /// Moves a held delivery's entry `from` (by which it was woken, under its lease where the
    /// store leases) to `to_ms`, with no record in its log: a hold after the first one moves
    /// only its place in the queue. Not durable by itself: lost in a crash, the delivery is
    /// woken at its recorded time and held again.
    fn move_due<'a>(&'a self, from: &'a Timed, to_ms: u64) -> Read<'a, ()>;

    /// Ids of `tenant`'s deliveries with `status` (every status when `None`), in (status, id)
    /// order, after the cursor `after`, at most `limit`.
    fn list_deliveries<'a>(
        &'a self,
        tenant: &'a str,
        status: Option<DeliveryStatus>,
        after: Option<(DeliveryStatus, &'a str)>,
        limit: usize,
    ) -> Read<'a, Vec<(DeliveryStatus, String)>>;

    /// Forgets up to `limit` final deliveries whose retention ended before `now_ms`; one still
    /// queued is looked at again at `requeue_ms`. Returns the statuses of those forgotten. It
    /// blocks: call it from a blocking thread.
    fn expire_deliveries(
        &self,
        now_ms: u64,
        requeue_ms: u64,
        limit: usize,
    ) -> Result<Vec<DeliveryStatus>, StoreError>;

    /// How many of `tenant`'s deliveries have `status`, counting no further than `cap`.
    fn count_deliveries<'a>(
        &'a self,
        tenant: &'a str,
        status: DeliveryStatus,
        cap: u64,
    ) -> Read<'a, u64>;

    /// How many deliveries are queued.
    fn queued(&self) -> Read<'_, u64>;

    /// The record of the longest-waiting queued delivery, if any.
    fn oldest_queued(&self) -> Read<'_, Option<DeliveryRecord>>;

    /// How many deliveries have each status, in [`DeliveryStatus::ALL`] order (read once at
    /// start, for the gauges, which then follow each write).
    fn count_by_status(&self) -> Read<'_, StatusCounts>;
}

/// Jobs that one node at a time runs (polling a source), by lease.
pub trait LeaseStore: Send + Sync {
    /// Takes or keeps the lease on `job` for this node: its fencing token while this node holds
    /// it (a new, higher one each time it changes hands), none while a live node holds it. A
    /// lease passes to another node only once its holder's heartbeat has expired, by the
    /// store's clock; a store of one process always holds its jobs.
    fn lease<'a>(&'a self, job: &'a str) -> Read<'a, Option<u64>>;
}

/// The Shared Signals streams receivers made at each tenant's transmitter. A change is written
/// only over the version it was made from, so two nodes changing one stream at once cannot both
/// win; each write is durable when it returns.
/// The most streams one receiver may have in a tenant: each is a SET per decision it asks for.
pub const STREAMS_PER_RECEIVER: usize = 16;

/// What a stream's creation came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// Made, durably.
    Made,
    /// A stream of the tenant has that id: nothing written.
    Taken,
    /// Its receiver has [`STREAMS_PER_RECEIVER`] streams already: nothing written.
    Full,
}

pub trait StreamStore: Send + Sync {
    /// `tenant`'s stream `id`, if it exists.
    fn stream<'a>(&'a self, tenant: &'a str, id: &'a str) -> Read<'a, Option<Stream>>;

    /// `tenant`'s streams, by id.
    fn streams<'a>(&'a self, tenant: &'a str) -> Read<'a, Vec<Stream>>;

    /// Writes `stream`: a new one at version 1 as [`StreamStore::create_stream`] makes it,
    /// otherwise over the stored one only if that is at the version before. Whether it was
    /// written.
    fn put_stream<'a>(&'a self, tenant: &'a str, stream: &'a Stream) -> Read<'a, bool>;

    /// Makes the new `stream` (at version 1) if no stream of the tenant has its id and its
    /// receiver has fewer than [`STREAMS_PER_RECEIVER`] streams, decided by the store itself:
    /// of creates racing on any number of nodes, no more than the limit are made.
    fn create_stream<'a>(&'a self, tenant: &'a str, stream: &'a Stream) -> Read<'a, Created>;

    /// Removes `tenant`'s stream `id`; whether it was there.
    fn delete_stream<'a>(&'a self, tenant: &'a str, id: &'a str) -> Read<'a, bool>;
}

/// The streams idem made at transmitters for its `ssf` sources, one record per (tenant,
/// source), written over its version and durable when written.
pub trait SubscriptionStore: Send + Sync {
    /// The record of `tenant`'s source `source`, if there is one.
    fn subscription<'a>(
        &'a self,
        tenant: &'a str,
        source: &'a str,
    ) -> Read<'a, Option<Subscription>>;

    /// Writes `record`: a new one at version 1 if there is none, otherwise over the stored one
    /// only if that is at the version before. Whether it was written.
    fn put_subscription<'a>(
        &'a self,
        tenant: &'a str,
        source: &'a str,
        record: &'a Subscription,
    ) -> Read<'a, bool>;
}

/// The keys SETs are sealed under. A key is kept by the unit that starts its decision's claim
/// ([`Unit::keep_set_keys`]) and erased by the delivery write that ends its SET (delivered,
/// failed, dead) or by [`Unit::erase_set_keys`]: from then on the SET's stored bytes do not
/// open.
pub trait SetKeyStore: Send + Sync {
    /// The wrapped key of the SET `delivery`, while it is kept.
    fn set_key<'a>(&'a self, delivery: &'a str) -> Read<'a, Option<Vec<u8>>>;
}

/// Whether a delivery write to `url` that moves it to `to` erases its SET key: a SET's whose
/// delivery ends.
pub fn ends_set(url: &str, to: DeliveryStatus) -> bool {
    idem_schemas::stored::stream_of(url).is_some() && to != DeliveryStatus::Queued
}

/// Endpoint health, shared by every node of the store (see [`crate::breaker`]).
pub trait EndpointStore: Send + Sync {
    /// Applies `event` to the health of `tenant`'s endpoint `url` atomically, by the store's
    /// clock, and answers the health after it. A change that moves the breaker is durable
    /// before it is answered.
    fn note_endpoint<'a>(
        &'a self,
        tenant: &'a str,
        url: &'a str,
        event: EndpointEvent,
        settings: &'a DeliverySettings,
    ) -> Read<'a, Noted>;

    /// Every endpoint with a stored health (of `tenant` only, if given).
    fn endpoints<'a>(
        &'a self,
        tenant: Option<&'a str>,
    ) -> Read<'a, Vec<(EndpointId, EndpointHealth)>>;

    /// How many of `tenant`'s deliveries are queued, by URL.
    fn queued_by_endpoint<'a>(
        &'a self,
        tenant: &'a str,
    ) -> Read<'a, std::collections::HashMap<String, u64>>;

    /// The ids of `tenant`'s queued deliveries to `url`, oldest first, at most `limit` (what a
    /// poll stream has waiting).
    fn queued_to<'a>(
        &'a self,
        tenant: &'a str,
        url: &'a str,
        limit: usize,
    ) -> Read<'a, Vec<String>>;

    /// How many nodes are alive on the store (this one included).
    fn live_nodes(&self) -> Read<'_, usize>;
}

/// Told what a unit came to once it is durable (or why it is not); called on the store's
/// commit thread, so it only hands the news on.
pub type Then = Box<dyn FnOnce(Result<Written, StoreError>) + Send>;

/// News of a claim from another node sharing the store: how a request waiting on one node
/// (`Prefer: wait`) for a claim held on another hears that its answer is durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimNews {
    /// A node has requests waiting for the claim `id`, which the node of epoch `holder` holds.
    Asked {
        /// The claim.
        id: ClaimId,
        /// The epoch of the claim's holder, which is to answer.
        holder: u64,
    },
    /// The claim `id` has a durable answer (it may have been there before it was asked for).
    Answered {
        /// The claim.
        id: ClaimId,
    },
}

/// A store: claims, deliveries, and the commit that makes a unit durable.
pub trait Store:
    ClaimStore
    + DeliveryStore
    + DecisionStore
    + EndpointStore
    + LeaseStore
    + StreamStore
    + SetKeyStore
    + SubscriptionStore
{
    /// Tells the other nodes that this one has requests waiting for the claim `id`, held by the
    /// node of epoch `holder` (nothing to tell on a store of one process).
    fn ask_holder(&self, id: &ClaimId, holder: u64);

    /// Tells the other nodes that the claim `id` has a durable answer.
    fn announce_answer(&self, id: &ClaimId);

    /// The news from the other nodes, taken once by the engine; `None` on a store of one
    /// process.
    fn claim_news(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<ClaimNews>>;

    /// Applies `unit` and calls `then` once it is durable, with what it came to. Every unit
    /// committed before is durable no later.
    fn commit_then(&self, unit: Unit, then: Then);

    /// Makes a small write durable by the path every write takes: whether the store can write
    /// now, asked of the disk or the database, never of memory.
    fn probe(&self) -> Read<'_, ()>;

    /// Watches for the store's failure for good (see [`StoreError::Halted`]); stays `None` on a
    /// store that recovers by itself.
    fn halted(&self) -> Halted;
}

/// A watch on a store's failure for good: `None` while it works.
pub type Halted = tokio::sync::watch::Receiver<Option<StoreError>>;

impl dyn Store {
    /// Returns once every write made before it is durable. A record is in the store a moment
    /// before the commit that wrote it returns; what a read shows must not be undone by a crash
    /// in that moment, so each read the API answers settles what it read first.
    pub async fn settle(&self) -> Result<(), StoreError> {
        self.commit(Unit::new()).await.map(drop)
    }

    /// Applies `unit` and returns what it came to once it is durable.
    pub async fn commit(&self, unit: Unit) -> Result<Written, StoreError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.commit_then(
            unit,
            Box::new(move |outcome| {
                let _ = tx.send(outcome);
            }),
        );
        rx.await.map_err(|_| StoreError::Stopped)?
    }
}
