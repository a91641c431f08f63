//! idem's integration tests, one binary: black-box tests of the real `idem` binary of this
//! build against a real receiver, real sled in temp dirs or a real PostgreSQL (a fresh database
//! per config with `IDEM_TEST_STORE=postgres`), and a real Chromium for the console. Each module
//! is one area of the contract, its `//!` saying what it checks; `support` is what they share.
//! A new area is a module here, not a file in `tests/` (`layout` fails on one).
//!
//! `cargo test --test it decisions::` runs one area; `cargo test --features failpoints --test it
//! failpoints::` the recovery points under fire.

mod support;

mod cli;
mod cloudevents;
mod console;
mod decisions;
mod deliveries;
mod disk_full;
mod durability;
mod endpoints;
#[cfg(feature = "failpoints")]
mod failpoints;
mod hostile_sets;
mod hostile_sources;
mod hostile_transmitter;
mod ingest;
mod layout;
mod limits;
mod metrics;
mod once_per_subject;
mod openapi;
mod payloads;
mod poll_streams;
mod postgres;
mod receive;
mod refusals;
mod reload;
mod rules;
mod sources;
mod ssf;
mod ssf_receiver_plan;
mod ssf_transmitter_plan;
mod traces;
mod transmitter;
mod waiting;
