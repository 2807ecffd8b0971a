//! freshet milvus connector: the vector side of the index.
//!
//! [`MilvusSink`] keeps one Milvus collection in step with the chunk stream: one row per leaf
//! chunk (`chunk_id` primary key, `doc_id`, `kind`, `source`, the embedding in `vector` under a
//! COSINE index of `[milvus] index_type`: HNSW, IVF_FLAT, IVF_SQ8 or FLAT; `acl` as
//! `Array<VarChar>`, `acl_public` = `acl` is empty, `metadata` as JSON). The collection records
//! the embedding model, dimension and field layout (collection properties `freshet.model_id` /
//! `freshet.dim` / `freshet.layout_version`, and the description `freshet model=<id> dim=<n>`);
//! [`MilvusSink::ensure_collection`] refuses a collection that holds other vectors, has an older
//! layout or another index type. Searches use the parameters of the collection's index type as
//! Milvus describes it (HNSW `ef`, IVF `nprobe`, FLAT none: [`SearchTuning`]).
//!
//! Works against Milvus 2.3.5 standalone and milvus-lite 3.2.2 with `milvus-sdk-rust` 3.0.3,
//! avoiding the SDK features those servers lack:
//! - ids are never sent as filter templates (`chunk_id in {ids}`): every delete / get builds a
//!   literal expression with [`expr::quote`], whose escaping both servers parse identically;
//! - indexes are created with `sync(false)` (the SDK's wait needs `AllocTimestamp`);
//! - search results are read via `get_ids()` / `get_scores()` (`rows()` fails on 2.3.5);
//! - id listing paginates by primary key with the `iterator` query flag (lite sorts by primary
//!   key only then) and checks the total against `count(*)`.
//!
//! [`MilvusMetrics`], when the binary hands them to the sink
//! ([`MilvusSink::with_metrics`]), count and time every call to the server.
//!
//! The SDK's client telemetry (on by default) is switched off in [`MilvusSink::connect`].

mod alias;
mod binding;
mod collection;
mod columns;
mod config;
mod error;
pub mod expr;
mod health;
mod metrics;
mod read;
pub mod schema;
pub mod seal;
mod sink;
mod write;

pub use binding::{Binding, P_INDEX_ID, P_INDEX_PATH};
pub use collection::{SearchedIndex, VectorIndexInfo};
pub use config::{IndexType, MilvusConfig, MAX_HNSW_M, MAX_IVF_NLIST};
pub use error::{Error, Result};
pub use expr::{filter_expr, ChunkFilter};
pub use health::ServerHealth;
pub use metrics::MilvusMetrics;
pub use milvus::v2::prelude::ConsistencyLevel;
pub use read::{
    search_params, SearchTuning, DEFAULT_SEARCH_EF, DEFAULT_SEARCH_NPROBE, MAX_QUERY_WINDOW,
    MAX_SEARCH_EF, MAX_SEARCH_NPROBE,
};
pub use seal::{LoadedSegment, SealMetrics, Sealer};
pub use sink::MilvusSink;
pub use write::RefusedRow;
