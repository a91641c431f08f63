//! idem's engine: what turns signals into decisions exactly once, and the store it writes to.
//! Data flows one way: the HTTP front hands the `signals` handle a routed signal; the claim core
//! (`claim::core`) decides what the request gets and when each record is written, asking for the
//! decision, which the `playbook` makes; what the decision writes is `record`'s; `delivery`
//! carries its callbacks and SETs out (`attempt` makes each attempt); `store` keeps it all.
//!
//! What callers use: `engine` (start, shutdown, and one handle per path: `signals`,
//! `deliveries`, `decisions`, `streams`, `node`), `outcome` (what happened to a signal),
//! `settings` (what the engine is built from), `playbook`, `breaker` (an endpoint's health as
//! the API shows it), `metrics` and `failpoint`.
//!
//! What the checkers drive and read: the sans-IO cores, `claim::core` and `claim::phase` (a
//! key's claim), `record` (what a decision writes), `delivery::state` (a callback's log and
//! retry policy), `breaker`, `signals::bulk`'s rule (what a bulk redelivery fixes in its claim
//! and redelivers); the claim a signal is decided under (`signals::claimed`, by the keyed digests
//! of `digest`); the store's rules (`store::rule`), its unit of work and what it answers;
//! `codec`, how records are stored.
//!
//! Inside: the actors that carry the cores' effects out (`claim`'s and `delivery`'s, found or
//! started under a supervisor by `supervise`, stopped when idle by `idle`), `attempt` (signed
//! callback and SET attempts), `endpoint` (each endpoint's admission and limit),
//! `retry_worker`, `sweeper`.

pub mod action;
mod attempt;
pub mod breaker;
pub mod claim;
pub mod codec;
pub mod decisions;
pub mod deliveries;
pub mod delivery;
pub mod destination;
pub mod digest;
mod endpoint;
pub mod engine;
pub mod failpoint;
pub mod history;
mod idle;
pub mod metrics;
pub mod node;
pub mod outcome;
pub mod playbook;
pub mod record;
mod retry_worker;
pub mod rules;
pub mod seal;
pub mod set;
pub mod settings;
pub mod signals;
pub mod store;
pub mod stream_event;
pub mod streams;
mod supervise;
mod sweeper;
pub mod trace;

pub use attempt::Keyring;
pub use decisions::{DecisionList, Decisions};
pub use deliveries::{Deliveries, DeliveriesError, DeliveryList};
pub use delivery::RedeliverError;
pub use engine::{Engine, EngineError};
pub use node::{Gauges, Node};
pub use outcome::Outcome;
pub use settings::Settings;
pub use signals::bulk::{BulkError, BulkReply, RedeliverFilter};
pub use signals::{By, Routed, SignalError, Signals};
pub use store::StoreError;
pub use streams::{Streams, StreamsError};
pub use supervise::RegistryError;
