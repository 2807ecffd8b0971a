//! freshet's document contract: the types every crate that reads or writes documents and
//! chunks shares, with light dependencies (no parsers, no dataflow), so that the index
//! connectors and the query node build without the operators.
//!
//! - [`document`]: the document model ([`document::Document`], [`document::Change`]).
//! - [`envelope`]: a Kafka record (key, value) decoded into a [`document::Change`], or a
//!   classified [`envelope::DecodeError`] for the DLQ; and its inverse, `encode`.
//! - [`limits`]: the size limits of a record, checked before anything is written.
//! - [`json`]: canonical JSON (metadata is stored and hashed in it).
//! - [`chunk`]: the chunk record both indexes store, its id, what differs between two records,
//!   the text a leaf is embedded as, and token counting.
//! - [`filter`]: the retrieval filter (documents, ACL principals, metadata, kinds).
//! - [`embed`]: the embedding operator's traits and cache keys.
//! - [`clock`]: the wall clock epochs, commit stamps and ages share.
//! - [`chars`]: byte offsets into a string as character offsets (the API's span unit).
//! - [`changelog`]: the chunk changes the pipeline publishes for query replicas, and how a
//!   replica assembles them into the batches it commits.

pub mod changelog;
pub mod chars;
pub mod chunk;
pub mod clock;
pub mod document;
pub mod embed;
pub mod envelope;
pub mod filter;
pub mod json;
pub mod limits;
pub mod script;

#[cfg(any(test, feature = "test-support"))]
pub mod testing;
