//! freshet's embedding connector: turns chunk texts into vectors with a local ONNX model, and
//! remembers every vector it has made.
//!
//! - [`FastEmbedder`] runs a sentence-embedding model (by default sentence-transformers'
//!   all-MiniLM-L6-v2, exported to ONNX by `deploy/export-model.sh`) through
//!   [fastembed](https://crates.io/crates/fastembed) and a dynamically loaded ONNX Runtime
//!   (`ORT_DYLIB_PATH`, `libonnxruntime.so.1.31.1` from the `onnxruntime` wheel). It implements
//!   [`freshet_core::embed::Embedder`] for the pipeline and [`FastEmbedder::embed_query`] for
//!   the query side. Loading never panics: a missing or wrong runtime library, a missing model
//!   directory or a broken model file come back as an [`Error`].
//! - [`RemoteEmbedder`] gets them from an OpenAI-compatible `/embeddings` server
//!   (`[embedding] provider = "openai"`: TEI, vLLM, Ollama, LiteLLM, hosted APIs) through
//!   `freshet_llm`'s client; [`EmbeddingModel`] is whichever of the two the configuration names,
//!   the type the pipeline and the query node hold.
//! - [`DiskCache`] is a crash-safe persistent [`freshet_core::embed::VectorCache`]: an
//!   append-only log with a checksum per record, one write + `fdatasync` per batch, a torn tail
//!   dropped on open (Linux/Unix only).
//! - [`FastReranker`] scores (query, passage) pairs with a user-supplied cross-encoder (the query
//!   node's local rerank backend).
//! - [`CachedEmbedder`] / [`embed_with_cache`] do the cache-aware batch: cache lookup, in-batch
//!   deduplication, model calls for the misses only, normalisation, store. It is pure logic over the
//!   two traits and may move into `freshet_core::embed` unchanged.
//!
//! The model directory layout (written by `deploy/export-model.sh`, see `model-export/`):
//!
//! ```text
//! $FRESHET_HOME/models/all-MiniLM-L6-v2-int8/   (the default; all-MiniLM-L6-v2/ is the float export)
//!   model.onnx              inputs input_ids/attention_mask/token_type_ids, output last_hidden_state
//!   tokenizer.json config.json special_tokens_map.json tokenizer_config.json
//!   freshet-model.json      {"model_id", "dim", "pooling": "mean"|"cls", "normalize", "sha256", ...}
//!   freshet-check.json      reference token ids and embeddings (used by the live tests)
//! ```

mod batching;
mod cache;
mod cached;
mod compute;
mod config;
mod embedder;
mod error;
mod heap;
pub mod language;
mod model;
mod remote;
mod rerank;

pub use cache::{Compaction, DiskCache};
pub use cached::{embed_with_cache, CachedEmbedder, EmbedStats};
pub use config::{
    find_ort_library, EmbeddingConfig, ModelMeta, Provider, DEFAULT_BATCH_TOKENS,
    DEFAULT_MODEL_DIR_NAME,
};
pub use embedder::{FastEmbedder, MIN_ORT_MINOR};
pub use error::{Error, Result};
pub use freshet_llm::EmbeddingsMetrics;
pub use model::EmbeddingModel;
pub use remote::{RemoteEmbedder, DEFAULT_REMOTE_MAX_LENGTH};
pub use rerank::{FastReranker, RerankerConfig};
