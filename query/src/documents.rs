//! A document's chunks by id: `GET /v1/documents/{id}/chunks`, and the MCP `fetch` tool over
//! it. The whole document (its leaf chunks in order, a page at a time) or one chunk with its
//! `neighbours` on either side (`around`), all read from one pinned index snapshot under one
//! of the node's retrieval slots, and every chunk through the request's principals
//! ([`crate::visible`]). A document the caller may not see answers exactly as one that does not
//! exist (404 `not_found`, the same message), so a caller cannot learn that it exists.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use freshet_core::chunk::{Chunk, ChunkKind};
use freshet_service::ApiError;
use serde::Serialize;

use crate::node::Node;
use crate::retrieve::{Engine, IndexInfo, RetrieveError};
use crate::visible::{visible_to, Gate, Visible};

/// Chunks of a whole document answered when the request names no `limit`.
pub const DEFAULT_LIMIT: usize = 100;
/// The most chunks one answer carries (a longer document is read a page at a time: `from`).
pub const MAX_LIMIT: usize = 1000;
/// The most neighbours on each side of `around`.
pub const MAX_NEIGHBOURS: u32 = 50;

/// What to read of one document, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunksQuery {
    pub doc_id: String,
    /// A chunk of the document: answer it with its neighbours instead of the whole document.
    pub around: Option<String>,
    /// Neighbours on each side of `around` (same kind, by position).
    pub neighbours: u32,
    /// Whole document: the first chunk position answered (0-based).
    pub from: u32,
    /// Whole document: the most chunks answered.
    pub limit: usize,
}

impl ChunksQuery {
    /// Validates the route's query string (`around`, `neighbours`, `from`, `limit`), each
    /// mistake a 400-worthy message.
    pub fn parse(doc_id: String, query: Option<&str>) -> Result<ChunksQuery, String> {
        if doc_id.is_empty() {
            return Err("the document id is empty".into());
        }
        let mut q = ChunksQuery {
            doc_id,
            around: None,
            neighbours: 1,
            from: 0,
            limit: DEFAULT_LIMIT,
        };
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query.unwrap_or(""))
            .map_err(|e| format!("invalid query string: {e}"))?;
        let number = |k: &str, v: &str, max: u64| -> Result<u64, String> {
            let n: u64 = v
                .parse()
                .map_err(|_| format!("{k} must be a whole number, not {v:?}"))?;
            if n > max {
                return Err(format!("{k} is at most {max} (got {n})"));
            }
            Ok(n)
        };
        for (k, v) in pairs {
            match k.as_str() {
                "around" if !v.is_empty() => q.around = Some(v),
                "around" => return Err("around is empty: name a chunk id".into()),
                "neighbours" | "neighbors" => {
                    q.neighbours = number(&k, &v, u64::from(MAX_NEIGHBOURS))? as u32
                }
                "from" => q.from = number(&k, &v, u64::from(u32::MAX))? as u32,
                "limit" => {
                    q.limit = number(&k, &v, MAX_LIMIT as u64)? as usize;
                    if q.limit == 0 {
                        return Err("limit must be at least 1".into());
                    }
                }
                other => {
                    return Err(format!(
                        "unknown parameter {other:?} (around, neighbours, from, limit)"
                    ))
                }
            }
        }
        Ok(q)
    }
}

/// One chunk of a document answer.
#[derive(Clone, Debug, Serialize)]
pub struct DocChunk {
    pub chunk_id: String,
    pub kind: &'static str,
    /// Position among the document's chunks of its kind (0-based).
    pub index: u32,
    pub parent_id: Option<String>,
    pub section: Vec<String>,
    pub char_start: u32,
    pub char_end: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_start: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_end: Option<u32>,
    pub text: String,
}

/// `GET /v1/documents/{id}/chunks`.
#[derive(Clone, Debug, Serialize)]
pub struct ChunksResponse {
    pub doc_id: String,
    pub title: String,
    pub source: String,
    pub metadata: serde_json::Value,
    /// In document order.
    pub chunks: Vec<DocChunk>,
    /// Leaf chunks of the whole document visible to the caller.
    pub total_chunks: usize,
    /// Whole document: the `from` of the next page, when chunks remain.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_from: Option<u32>,
    pub index: IndexInfo,
}

fn doc_chunk(c: &Chunk) -> DocChunk {
    let metadata = serde_json::from_str(&c.metadata_json).unwrap_or(serde_json::Value::Null);
    let pages = crate::retrieve::hit::pages_of(&metadata);
    DocChunk {
        chunk_id: c.chunk_id.clone(),
        kind: c.kind.as_str(),
        index: c.index,
        parent_id: c.parent_id.clone(),
        section: c.section.clone(),
        char_start: c.char_start,
        char_end: c.char_end,
        page_start: pages.map(|p| p.0),
        page_end: pages.map(|p| p.1),
        text: c.text.clone(),
    }
}

/// The answer from the chunks the caller may see (`leaves`: the document's leaf chunks in
/// order; `window`: what to answer with instead of a page of them). `None`: nothing to see.
pub fn shape(
    q: &ChunksQuery,
    leaves: &[Visible],
    window: Option<&[Visible]>,
    index: IndexInfo,
) -> Option<ChunksResponse> {
    let first = leaves.first().or_else(|| window.and_then(|w| w.first()))?;
    let metadata = serde_json::from_str(&first.metadata_json)
        .unwrap_or(serde_json::Value::Object(Default::default()));
    let (chunks, next_from) = match window {
        Some(w) => (w.iter().map(|c| doc_chunk(c)).collect(), None),
        None => {
            let page: Vec<&Visible> = leaves
                .iter()
                .filter(|c| c.index >= q.from)
                .take(q.limit + 1)
                .collect();
            let next = page.get(q.limit).map(|c| c.index);
            (
                page.iter().take(q.limit).map(|c| doc_chunk(c)).collect(),
                next,
            )
        }
    };
    Some(ChunksResponse {
        doc_id: first.doc_id.clone(),
        title: first.title.clone(),
        source: first.source.clone(),
        metadata,
        chunks,
        total_chunks: leaves.len(),
        next_from,
        index,
    })
}

impl Engine {
    /// The chunks `q` asks for that `principals` may see, from one snapshot under one of the
    /// node's retrieval slots; `None` when the document (or `around` in it) does not exist or
    /// is not visible to them: the two are one answer.
    pub async fn document_chunks(
        &self,
        q: ChunksQuery,
        principals: Vec<String>,
    ) -> Result<Option<ChunksResponse>, RetrieveError> {
        let deadline = Instant::now() + Duration::from_millis(self.config.query.request_timeout_ms);
        let job = self
            .limiter
            .admit(deadline)
            .await
            .map_err(RetrieveError::Overloaded)?;
        let _cancel = job.cancel_on_drop();
        let generation = self.indexes.current();
        let snapshot = generation
            .snapshot_to_search()
            .map_err(RetrieveError::Unavailable)?;
        let gate = Arc::new(Gate::new(&visible_to(principals), self.metrics.clone()));
        let index = crate::retrieve::index_info(&snapshot, generation.generation_name());
        let unavailable =
            |e: freshet_tantivy::Error| RetrieveError::Unavailable(format!("tantivy: {e}"));
        job.blocking("documents", move |job| {
            let all = snapshot.chunks_of_doc(&q.doc_id).map_err(unavailable)?;
            job.check("documents")?;
            Ok(select(&all, &q, &gate, index))
        })
        .await
    }
}

/// What `q` reads of a document's chunks (`all`, as the index holds them) through `gate`:
/// `None` when no chunk of it (or not `around`) passes, as when the document does not exist.
pub fn select(
    all: &[Chunk],
    q: &ChunksQuery,
    gate: &Gate,
    index: IndexInfo,
) -> Option<ChunksResponse> {
    let mut leaves: Vec<Visible> = all
        .iter()
        .filter(|c| c.kind == ChunkKind::Leaf && c.doc_id == q.doc_id)
        .filter_map(|c| gate.context(c.clone()))
        .collect();
    leaves.sort_by_key(|c| c.index);
    let window = match &q.around {
        None => None,
        Some(id) => {
            let centre = all
                .iter()
                .find(|c| &c.chunk_id == id && c.doc_id == q.doc_id)
                .and_then(|c| gate.context(c.clone()))?;
            let (lo, hi) = (
                centre.index.saturating_sub(q.neighbours),
                centre.index.saturating_add(q.neighbours),
            );
            let mut w: Vec<Visible> = all
                .iter()
                .filter(|c| c.doc_id == q.doc_id && c.kind == centre.kind)
                .filter(|c| (lo..=hi).contains(&c.index))
                .filter_map(|c| gate.context(c.clone()))
                .collect();
            w.sort_by_key(|c| c.index);
            Some(w)
        }
    };
    shape(q, &leaves, window.as_deref(), index)
}

/// The answer of a document the caller cannot see, and of one that does not exist.
pub fn not_found(q: &ChunksQuery) -> ApiError {
    let what = match &q.around {
        Some(c) => format!("no chunk {c:?} in document {:?}", q.doc_id),
        None => format!("no document {:?}", q.doc_id),
    };
    ApiError::new(StatusCode::NOT_FOUND, "not_found", what)
}

/// Reads `q` for `admission`: the document route and the MCP `fetch` tool.
pub(crate) async fn chunks_for(
    node: &Node,
    admission: &crate::auth::Admission,
    q: ChunksQuery,
) -> Result<ChunksResponse, ApiError> {
    let engine = &node.engine;
    let principals = node.auth.principals(admission, None)?;
    let found =
        crate::http::run_with_timeout(engine, engine.document_chunks(q.clone(), principals))
            .await?;
    found.ok_or_else(|| not_found(&q))
}

/// `GET /v1/documents/{id}/chunks?around=&neighbours=&from=&limit=`.
pub async fn chunks(
    State(node): State<Arc<Node>>,
    doc_id: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let result = async {
        let admission = node.auth.admit(&headers)?;
        let Path(doc_id) = doc_id.map_err(|e| ApiError::bad_request(e.body_text()))?;
        let q = ChunksQuery::parse(doc_id, query.as_deref()).map_err(ApiError::bad_request)?;
        chunks_for(&node, &admission, q).await
    }
    .await;
    crate::http::respond(&node.engine, "documents", "none", result, |_| false)
}

#[cfg(test)]
#[path = "documents_tests.rs"]
mod tests;
