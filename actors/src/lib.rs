//! idem's actors and the durable log they fold. `store` and `commit` put events on disk (sled,
//! group commit), `codec` encodes them; `claim` is the actor that owns one idempotency key,
//! `delivery` the actor that owns one callback's retries; `registry` finds or starts actors under
//! a supervisor, and `idle` stops them when idle; `dispatch` makes callback attempts;
//! `retry_worker` wakes due deliveries; `sweeper` prunes expired claims.

pub mod claim;
pub mod codec;
pub mod commit;
pub mod delivery;
pub mod dispatch;
pub mod failpoint;
pub mod idle;
pub mod metrics;
pub mod registry;
pub mod retry_worker;
pub mod store;
pub mod sweeper;

pub use claim::{ClaimSettings, Reply, Submission};
pub use delivery::{Deliveries, DeliveryContext, DeliverySettings};
pub use dispatch::{Dispatcher, Keyring};
pub use registry::{ClaimRegistry, RegistryError};
pub use store::{ClaimId, Store, StoreError};
