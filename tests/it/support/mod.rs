//! What the test modules share, one module per concern, all re-exported here so that a test
//! module needs one `use crate::support::*;`: the [`harness`] most tests start with, the test
//! [`receiver`], the [`idem`] process and its [`config`]s, the HTTP [`client`], the [`store`]
//! the tests run on, [`deliveries`] as the API shows them, [`asserts`], [`wait`]ing, the
//! [`answered`] keys of the crash tests, the reference receiver as a process
//! ([`receive_proc`]), an OTLP trace [`collector`], a real [`browser`] (and, from devtools, a Shared Signals transmitter
//! signing with `devtools::jose`).

pub mod answered;
pub mod asserts;
pub mod browser;
pub mod client;
pub mod collector;
pub mod config;
pub mod deliveries;
pub mod harness;
pub mod idem;
pub mod receive_proc;
pub mod receiver;
pub mod store;
pub mod wait;

pub use answered::*;
pub use asserts::*;
pub use client::*;
pub use config::*;
pub use deliveries::*;
pub use devtools::transmitter::*;
pub use harness::*;
pub use idem::*;
pub use receive_proc::*;
pub use receiver::*;
pub use store::*;
pub use wait::*;
