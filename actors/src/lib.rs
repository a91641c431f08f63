//! idem's actors and the durable log they fold. `store` and `commit` put events on disk (sled,
//! group commit), `codec` encodes them; `claim` is the actor that owns one idempotency key,
//! `registry` finds or starts it under a supervisor; `dispatch` makes a decision's callback
//! attempts; `sweeper` prunes expired claims.

pub mod claim;
pub mod codec;
pub mod commit;
pub mod dispatch;
pub mod registry;
pub mod store;
pub mod sweeper;

pub use claim::{ClaimSettings, Reply, Submission};
pub use dispatch::{Dispatcher, Keyring};
pub use registry::{ClaimRegistry, RegistryError};
pub use store::{ClaimId, Store, StoreError};
