//! idem's engine: the actors that turn signals into decisions exactly once, and the store they
//! write to. `engine` is the one handle the HTTP front uses. `claim` is the actor that owns one
//! idempotency key (its state machine in `claim::phase`), `delivery` the actor that owns one
//! callback's retries (its fold in `delivery::state`); `supervise` finds or starts actors by
//! name under a supervisor, and `idle` stops them when idle; `dispatch` makes callback attempts;
//! `retry_worker` wakes due deliveries; `sweeper` deletes what expired. `store` is the storage
//! seam (claims, deliveries, units of work) and `store::sled` its embedded implementation;
//! `codec` encodes what is stored.

pub mod bulk;
pub mod claim;
pub mod codec;
pub mod delivery;
pub mod dispatch;
pub mod endpoint;
pub mod engine;
pub mod failpoint;
pub mod idle;
pub mod metrics;
pub mod retry_worker;
pub mod store;
pub mod supervise;
pub mod sweeper;

pub use bulk::{BulkReply, RedeliverFilter};
pub use claim::{ClaimError, DecideError, Reply, Submission};
pub use delivery::RedeliverError;
pub use dispatch::Keyring;
pub use engine::{DecisionList, DeliveryList, Engine, EngineConfig, EngineError, Gauges};
pub use store::{ClaimId, StoreError};
pub use supervise::RegistryError;
