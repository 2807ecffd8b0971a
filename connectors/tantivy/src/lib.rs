//! freshet tantivy connector: the full-text (BM25) side of the index, and the durable record of
//! the pipeline's progress.
//!
//! - Every [`Chunk`](freshet_core::chunk::Chunk) is stored with all of its fields, so the
//!   pipeline can rebuild its state from [`ChunkIndexWriter::load_all`] after a restart.
//! - Each commit carries a [`CommitPayload`] (Kafka offsets, epoch) in tantivy's commit payload:
//!   the index contents and the offsets they reflect become durable atomically.
//! - `text`, `title` and the section path are analysed with [`freshet_en_analyzer`] (registered
//!   as [`ANALYZER_NAME`]). Chinese, Japanese and Korean text and titles are also indexed,
//!   unstored, with the analyzer of their script ([`CjkScripts`]): jieba
//!   ([`freshet_zh_analyzer`]) for Han without kana, lindera with IPADIC
//!   ([`freshet_ja_analyzer`], the dictionary loaded from `[tantivy] ja_dictionary`:
//!   [`configure_japanese`]) for text with kana, Hangul bigrams ([`freshet_ko_analyzer`]).
//!   Queries are analysed the same way and built directly from terms; there is no query parser,
//!   so user input cannot produce a syntax error.
//! - ACL, document, kind and metadata filters are applied inside the query (before top-k).
//! - The layout is versioned ([`SCHEMA_VERSION`], recorded in `freshet_schema.json` next to
//!   tantivy's `meta.json` and in every commit payload) and checked on open.
//!
//! - Every commit that removes documents records a delete receipt for each, atomically with the
//!   removal ([`receipts`]): the proof that a document left the index, read by
//!   [`ChunkIndexReader::delete_receipts`] up to the commit a reader serves.
//!
//! One [`ChunkIndexWriter`] per index (tantivy's directory lock enforces it across processes);
//! any number of [`ChunkIndexReader`]s, also in other processes. A [`Snapshot`] pins one commit
//! for a series of reads (a search, then loads by id) and knows that commit's payload.

mod analyzers;
mod bm25;
mod config;
mod error;
mod payload;
mod query;
mod read;
mod reader;
pub mod receipts;
mod schema;
mod snapshot;
mod writer;

pub use analyzers::{
    analyze, analyze_ja, analyze_ko, analyze_zh, build_ja_dictionary, configure_japanese,
    contains_cjk, default_ja_dictionary, freshet_en_analyzer, freshet_ja_analyzer,
    freshet_ko_analyzer, freshet_zh_analyzer, highlight_spans, japanese_analysis,
    preload_zh_dictionary, CjkScripts, JapaneseAnalysis, ANALYZER_NAME, JA_ANALYZER_NAME,
    KO_ANALYZER_NAME, MAX_TOKEN_BYTES, ZH_ANALYZER_NAME,
};
pub use bm25::{Bm25Params, Bm25Scorer};
pub use config::TantivyConfig;
pub use error::{Error, Result};
pub use payload::CommitPayload;
pub use query::ChunkFilter;
pub use reader::ChunkIndexReader;
pub use receipts::{DeleteReceipt, ReceiptQuery, SourceRecord};
pub use schema::{ChunkSchema, MAX_TERM_BYTES, PUBLIC_ACL_MARKER, SCHEMA_VERSION};
pub use snapshot::Snapshot;
pub use writer::{writer_running, ChunkIndexWriter, MAX_WRITER_THREADS, MIN_HEAP_PER_THREAD};
