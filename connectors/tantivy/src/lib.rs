//! freshet tantivy connector: the full-text (BM25) side of the index, and the durable record of
//! the pipeline's progress.
//!
//! - Every [`Chunk`](freshet_core::chunk::Chunk) is stored with all of its fields, so the
//!   pipeline can rebuild its state from [`ChunkIndexWriter::load_all`] after a restart.
//! - Each commit carries a [`CommitPayload`] (Kafka offsets, epoch) in tantivy's commit payload:
//!   the index contents and the offsets they reflect become durable atomically.
//! - `text`, `title` and the section path are analysed with [`freshet_en_analyzer`] (registered
//!   as [`ANALYZER_NAME`]). Text and titles containing CJK are also indexed, unstored, in
//!   `text_zh` / `title_zh` with the jieba-based [`freshet_zh_analyzer`] ([`ZH_ANALYZER_NAME`]).
//!   Queries are analysed the same way (the Chinese analyzer only for queries containing CJK) and
//!   built directly from terms; there is no query parser, so user input cannot produce a syntax
//!   error.
//! - ACL, document, kind and metadata filters are applied inside the query (before top-k).
//! - The layout is versioned ([`SCHEMA_VERSION`], recorded in `freshet_schema.json` next to
//!   tantivy's `meta.json` and in every commit payload) and checked on open.
//!
//! One [`ChunkIndexWriter`] per index (tantivy's directory lock enforces it across processes);
//! any number of [`ChunkIndexReader`]s, also in other processes. A [`Snapshot`] pins one commit
//! for a series of reads (a search, then loads by id) and knows that commit's payload.

mod bm25;
mod config;
mod error;
mod payload;
mod query;
mod read;
mod reader;
mod schema;
mod snapshot;
mod writer;

pub use bm25::Bm25Params;
pub use config::TantivyConfig;
pub use error::{Error, Result};
pub use payload::CommitPayload;
pub use query::ChunkFilter;
pub use reader::ChunkIndexReader;
pub use schema::{
    analyze, analyze_zh, contains_cjk, freshet_en_analyzer, freshet_zh_analyzer,
    preload_zh_dictionary, ChunkSchema, ANALYZER_NAME, MAX_TERM_BYTES, MAX_TOKEN_BYTES,
    PUBLIC_ACL_MARKER, SCHEMA_VERSION, ZH_ANALYZER_NAME,
};
pub use snapshot::Snapshot;
pub use writer::{ChunkIndexWriter, MAX_WRITER_THREADS, MIN_HEAP_PER_THREAD};
