//! idem: exactly-once trust decisions for identity webhooks. This crate is the binary's side:
//! configuration, the HTTP front (which authenticates and routes each signal, and maps what the
//! engine of `idem-actors` answers to HTTP), providers' sources, `serve`, which wires them to
//! the engine, `telemetry` (logs, and traces over OTLP), `receive`, the reference receiver, and
//! `healthcheck`, a running idem's health asked from the command line.

pub mod config;
pub mod healthcheck;
pub mod http;
pub mod key;
pub mod prefer;
pub mod receive;
pub mod serve;
pub mod source;
pub mod telemetry;
pub mod transmitter;
