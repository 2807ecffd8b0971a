//! freshet's operators: pure transforms from a Kafka record to the chunk deltas that the sinks
//! apply. No I/O lives here.
//!
//! - [`cdc`]: how a topic's records are read ([`cdc::RecordFormat`]); Debezium change events
//!   mapped to documents.
//! - [`envelope`]: a Kafka record (key, value) decoded into a [`document::Change`], or a
//!   classified [`envelope::DecodeError`] for the DLQ.
//! - [`limits`]: the size limits of a record, checked before anything is written.
//! - [`intake`]: one record to an upsert, a delete or a rejection (class and stage) that deletes
//!   the document it names.
//! - [`document`]: the document model (contract).
//! - [`clean`]: NFKC, control characters, whitespace; HTML to Markdown without boilerplate.
//! - [`hash`]: the content hash of a document version.
//! - [`chunk`]: the chunk record (contract) and token-counted recursive, Markdown and
//!   parent-child chunking.
//! - [`prepare`]: clean, hash and chunk one document.
//! - [`dataflow`]: keyed document upserts to chunk deltas (timely + differential).
//! - [`filter`]: the retrieval filter (documents, ACL principals, metadata, kinds).
//! - [`embed`]: the embedding operator's traits (contract).

pub mod cdc;
pub mod chunk;
pub mod clean;
pub mod clock;
pub mod dataflow;
pub mod document;
pub mod embed;
pub mod envelope;
pub mod filter;
pub mod hash;
pub mod intake;
pub mod json;
pub mod limits;
pub mod parse;
pub mod prepare;
pub mod table;
pub mod title;

#[cfg(test)]
mod fuzz;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;
