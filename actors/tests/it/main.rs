//! The engine's integration tests, one binary: `engine`, the engine through its public handle
//! without HTTP; `store`, the store conformance suite, every case on sled and on PostgreSQL.

mod engine;
mod store;
