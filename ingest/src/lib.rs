//! The freshet ingest service: documents over HTTP onto the document topic the pipeline reads.
//!
//! A request goes `http` (routes, authentication before the body is read, body limit,
//! answers) → `decode` (the body as the records to produce, checked with the pipeline's own
//! decoder and `[limits]`, so a document the pipeline would dead-letter is a 400 here) → `auth`
//! (whether the writer may write these ids, with these ACLs, and delete: every record is
//! checked before anything is produced) → `produce` (the broker's acknowledgement, with the
//! partition and offset the answer carries). `error` maps every refusal to a JSON error,
//! `config` reads the `[ingest]`, `[kafka]` and `[limits]` sections, `metrics` and `openapi`
//! describe the service, `server` runs it.

pub mod auth;
pub mod config;
pub mod decode;
pub mod error;
pub mod http;
pub mod metrics;
pub mod openapi;
pub mod produce;
pub mod server;
