//! idem: exactly-once trust decisions for identity webhooks. This crate is the binary's side:
//! configuration, the HTTP front, playbooks, keyed digests, and `serve`, which wires them to the
//! claim actors and the store of `idem-actors`.

pub mod config;
pub mod digest;
pub mod http;
pub mod key;
pub mod playbook;
pub mod serve;
