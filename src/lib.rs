//! idem: exactly-once trust decisions for identity webhooks. This crate is the binary's side:
//! configuration, the HTTP front, playbooks, providers' sources, keyed digests, `serve`, which
//! wires them to the actors and the store of `idem-actors`, and `receive`, the reference
//! receiver.

pub mod canonical;
pub mod config;
pub mod digest;
pub mod http;
pub mod key;
pub mod playbook;
pub mod prefer;
pub mod receive;
pub mod serve;
pub mod source;
