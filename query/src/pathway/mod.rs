//! A Pathway-compatible API under `/pathway`, so Pathway's `DocumentStoreClient` (and
//! `VectorStoreClient`), LangChain's `PathwayVectorClient` and LlamaIndex's `PathwayRetriever`
//! pointed at `http://host:8080/pathway` work:
//!
//! - `POST /pathway/v1/retrieve`: `{"query", "k", "metadata_filter", "filepath_globpattern"}` →
//!   `[{"text", "metadata", "dist"}]`, hybrid retrieval; `dist` is the negated final score
//!   (lower is closer, as in Pathway);
//! - `POST /pathway/v1/inputs`: `{"metadata_filter", "filepath_globpattern", "return_status"}`
//!   → the metadata of each matching document, `[{"path", "doc_id", "title", ...}]`;
//! - `GET`/`POST /pathway/v1/statistics`: `file_count` (documents), `last_modified`,
//!   `last_indexed`.
//!
//! Every route sees what the request's credential may see (public documents only without
//! one). The filters are read by [`filter`].

pub mod filter;
#[cfg(test)]
mod tests;

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::request::{parse_filter, BadRequest, RetrieveRequest};
use crate::retrieve::{Engine, Response};
use freshet_core::chunk::Chunk;
use freshet_core::filter::ChunkFilter;

pub use filter::{glob_matcher, jmespath_subset, PathCondition, PathwayFilter};

/// Most sources a path condition may select.
const MAX_GLOB_SOURCES: usize = 1024;

#[derive(Debug, Deserialize)]
pub struct PathwayRequest {
    pub query: String,
    pub k: Option<usize>,
    pub metadata_filter: Option<String>,
    pub filepath_globpattern: Option<String>,
}

/// The body of `/pathway/v1/inputs` (every field may be absent or null).
#[derive(Debug, Default, Deserialize)]
pub struct InputsRequest {
    pub metadata_filter: Option<String>,
    pub filepath_globpattern: Option<String>,
    #[serde(default)]
    pub return_status: Option<bool>,
}

pub fn parse(body: &[u8]) -> Result<PathwayRequest, BadRequest> {
    serde_json::from_slice(body).map_err(|e| BadRequest(format!("invalid request body: {e}")))
}

/// An inputs request; an empty body is no filter.
pub fn parse_inputs(body: &[u8]) -> Result<InputsRequest, BadRequest> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(InputsRequest::default());
    }
    serde_json::from_slice(body).map_err(|e| BadRequest(format!("invalid request body: {e}")))
}

/// The native plan of a Pathway request.
pub async fn plan(
    req: PathwayRequest,
    engine: &Engine,
) -> Result<crate::request::Plan, BadRequest> {
    let f = PathwayFilter::of(
        req.metadata_filter.as_deref(),
        req.filepath_globpattern.as_deref(),
    )?;
    let native = RetrieveRequest {
        query: req.query,
        k: req.k,
        mode: None,
        filter: (!f.metadata.is_empty()).then(|| Value::Object(f.metadata.clone())),
        principals: None,
        bm25_top_k: None,
        vector_top_k: None,
        fusion: None,
        rerank: None,
        expand: None,
        parents: None,
        pack: None,
        // The server's setting: Pathway's answer (a bare list) has no room to say "degraded".
        allow_partial: None,
        language: None,
        language_routing: None,
        // Pathway's answer has no room for a transformation's report: none, whatever
        // `[transform]` says.
        transform: None,
        history: None,
        highlight: None,
    };
    let mut plan = native.plan(&engine.config.query, engine.reranker.is_some())?;
    if !f.path.is_empty() {
        plan.filter.sources = Some(matching_sources(&f, engine).await?);
    }
    Ok(plan)
}

/// The filter of an inputs request (without principals): its metadata conditions and the
/// sources its path conditions select.
pub async fn inputs_filter(
    req: &InputsRequest,
    engine: &Engine,
) -> Result<ChunkFilter, BadRequest> {
    let f = PathwayFilter::of(
        req.metadata_filter.as_deref(),
        req.filepath_globpattern.as_deref(),
    )?;
    let mut filter = parse_filter(&Value::Object(f.metadata.clone()))?;
    if !f.path.is_empty() {
        filter.sources = Some(matching_sources(&f, engine).await?);
    }
    Ok(filter)
}

/// The sources of the index that pass the filter's path conditions.
async fn matching_sources(f: &PathwayFilter, engine: &Engine) -> Result<Vec<String>, BadRequest> {
    let all = match engine.indexes.tantivy() {
        Some(r) => tokio::task::spawn_blocking(move || r.sources())
            .await
            .map_err(|e| BadRequest(format!("listing sources: {e}")))?
            .map_err(|e| BadRequest(format!("listing sources: {e}")))?,
        None => Vec::new(),
    };
    let matching: Vec<String> = all.into_iter().filter(|s| f.path_holds(s)).collect();
    // The sources are listed regardless of ACLs: the error says no count, so that it does
    // not tell how many sources the caller cannot see.
    if matching.len() > MAX_GLOB_SOURCES {
        return Err(BadRequest(format!(
            "the path conditions (filepath_globpattern, or `path` in metadata_filter) match \
             more than {MAX_GLOB_SOURCES} sources; narrow them"
        )));
    }
    Ok(matching)
}

/// A document's metadata as Pathway lists it: its own metadata with `path` (the source),
/// `doc_id` and `title`.
fn document_metadata(c: &Chunk) -> Map<String, Value> {
    let mut m = match serde_json::from_str::<Value>(&c.metadata_json) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    };
    m.insert("path".into(), Value::String(c.source.clone()));
    m.insert("doc_id".into(), Value::String(c.doc_id.clone()));
    m.insert("title".into(), Value::String(c.title.clone()));
    m
}

/// The inputs answer: one metadata object per document (sorted by document id), with
/// `_indexing_status` when asked (every listed document is indexed: the list is read from the
/// index).
pub fn inputs_answer(docs: &[Chunk], return_status: bool) -> Value {
    Value::Array(
        docs.iter()
            .map(|c| {
                let mut m = document_metadata(c);
                if return_status {
                    m.insert("_indexing_status".into(), Value::String("INDEXED".into()));
                }
                Value::Object(m)
            })
            .collect(),
    )
}

/// The Pathway answer shape.
pub fn answer(r: Response) -> Value {
    Value::Array(
        r.results
            .into_iter()
            .map(|h| {
                let mut metadata = match h.metadata {
                    Value::Object(m) => m,
                    _ => Default::default(),
                };
                metadata.insert("path".into(), Value::String(h.source.clone()));
                metadata.insert("doc_id".into(), Value::String(h.doc_id));
                metadata.insert("chunk_id".into(), Value::String(h.chunk_id));
                metadata.insert("title".into(), Value::String(h.title));
                json!({"text": h.text, "metadata": metadata, "dist": -h.score})
            })
            .collect(),
    )
}
