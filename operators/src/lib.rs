//! freshet's operators: pure transforms from a Kafka record to the chunk deltas that the sinks
//! apply. No I/O lives here.
//!
//! - [`cdc`]: how a topic's records are read ([`cdc::RecordFormat`]); Debezium change events
//!   mapped to documents.
//! - [`envelope`], [`document`], [`limits`], [`json`], [`filter`], [`embed`], [`clock`]: the
//!   document contract, re-exported from `freshet-core` (its crate documentation says what
//!   each holds).
//! - [`intake`]: one record to an upsert, a delete or a rejection (class and stage) that deletes
//!   the document it names.
//! - [`clean`]: NFKC, control characters, whitespace; HTML to Markdown without boilerplate.
//! - [`hash`]: the content hash of a document version.
//! - [`chunk`]: token-counted recursive, Markdown and parent-child chunking into the chunk
//!   record (contract, `freshet-core`).
//! - [`prepare`]: clean, hash and chunk one document.
//! - [`dataflow`]: keyed document upserts to chunk deltas (timely + differential).

// The document contract, from `freshet-core`, under the paths the code above it uses.
pub use freshet_core::{changelog, clock, document, embed, envelope, filter, json, limits};

pub mod cdc;
pub mod chunk;
pub mod clean;
pub mod dataflow;
pub mod hash;
pub mod intake;
pub mod parse;
pub mod prepare;
pub mod table;
pub mod title;

#[cfg(test)]
mod fuzz;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;
