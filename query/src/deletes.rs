//! Delete receipts: `GET /v1/deletes`, the operator's proof that documents left the indexes
//! ([`freshet_tantivy::receipts`]). Each receipt names the document, the record that asked for
//! its removal (topic, partition, offset), the cause, the commit that made the removal durable
//! in both indexes (its opstamp and epoch) and when, and how many chunks it removed. Receipts
//! are read up to the commit the node serves, so an answer never claims a removal its searches
//! do not show; each says too whether that commit holds the document again (a later version).
//!
//! Document ids of private documents are as sensitive as their text: the route needs an admin
//! key (`[query] admin_keys`), and a node without admin keys refuses it (403) rather than show
//! it to every caller.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use freshet_core::filter::ChunkFilter;
use freshet_service::ApiError;
use freshet_tantivy::receipts::{Numbered, ReceiptQuery, SourceRecord};
use serde::Serialize;

use crate::node::Node;
use crate::retrieve::IndexInfo;

/// Receipts answered when the request names no `limit`.
pub const DEFAULT_LIMIT: usize = 100;
/// The most receipts one answer carries (more a page at a time: `after`).
pub const MAX_LIMIT: usize = 1000;

/// Reads the route's query string: `doc_id`, `since` (ms since the Unix epoch or an RFC 3339
/// time), `after` (a previous page's `next_after`), `limit`.
pub fn parse(query: Option<&str>) -> Result<ReceiptQuery, String> {
    let mut q = ReceiptQuery {
        limit: DEFAULT_LIMIT,
        ..ReceiptQuery::default()
    };
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query.unwrap_or(""))
        .map_err(|e| format!("invalid query string: {e}"))?;
    let number = |k: &str, v: &str| -> Result<u64, String> {
        v.parse()
            .map_err(|_| format!("{k} must be a whole number, not {v:?}"))
    };
    for (k, v) in pairs {
        match k.as_str() {
            "doc_id" if v.is_empty() => return Err("doc_id is empty".into()),
            "doc_id" => q.doc_id = Some(v),
            "since" => q.since_ms = Some(since(&v)?),
            "after" => q.after_seq = Some(number(&k, &v)?),
            "limit" => {
                let n = number(&k, &v)?;
                if n == 0 || n > MAX_LIMIT as u64 {
                    return Err(format!("limit is 1 to {MAX_LIMIT} (got {n})"));
                }
                q.limit = n as usize;
            }
            other => {
                return Err(format!(
                    "unknown parameter {other:?} (doc_id, since, after, limit)"
                ))
            }
        }
    }
    Ok(q)
}

fn since(v: &str) -> Result<u64, String> {
    if let Ok(ms) = v.parse::<u64>() {
        return Ok(ms);
    }
    let t = humantime::parse_rfc3339_weak(v).map_err(|_| {
        format!("since must be milliseconds since the Unix epoch or an RFC 3339 time, not {v:?}")
    })?;
    Ok(t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64))
}

/// The commit that made a removal durable.
#[derive(Clone, Debug, Serialize)]
pub struct Commit {
    pub opstamp: u64,
    pub epoch: u64,
}

/// One receipt.
#[derive(Clone, Debug, Serialize)]
pub struct Receipt {
    /// Its place in the log: pass the last one as `after` for the next page.
    pub seq: u64,
    pub doc_id: String,
    /// `delete` or `refused`.
    pub cause: String,
    /// The dead-letter class of a refusal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceRecord>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_timestamp_ms: Option<i64>,
    pub chunks_removed: u64,
    pub commit: Commit,
    pub completed_at_ms: u64,
    /// Chunks of the document the served commit holds: 0 while it stays gone, more once a
    /// later version was indexed.
    pub chunks_now: u64,
}

/// `GET /v1/deletes`.
#[derive(Clone, Debug, Serialize)]
pub struct DeletesResponse {
    /// Oldest first.
    pub receipts: Vec<Receipt>,
    /// The `after` of the next page, when the page is full.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_after: Option<u64>,
    /// The commit served, up to which receipts are read.
    pub index: IndexInfo,
}

/// What a replica answers: its index is built from the changelog, which carries chunks, not
/// receipts, so its own receipt log is empty and an empty answer would read as "never deleted".
pub const NOT_ON_A_REPLICA: &str = "this node is a query replica: delete receipts are recorded \
     by the pipeline's index only; ask a query node that reads it (docs/replicas.md)";

/// `GET /v1/deletes`: admin keys only.
pub async fn deletes(
    State(node): State<Arc<Node>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let engine = &node.engine;
    let result = async {
        // Before the key check: a replica serves no receipts to anyone, and saying so names
        // no document.
        if engine.config.replica.enabled {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                NOT_ON_A_REPLICA,
            ));
        }
        node.auth.admit_operator(&headers)?;
        let q = parse(query.as_deref())
            .map_err(|m| ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", m))?;
        let unavailable =
            |m: String| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", m);
        // One generation (docs/reindex.md) for the whole answer: its receipts and its commit.
        let generation = engine.indexes.current();
        let snapshot = generation.snapshot_to_search().map_err(unavailable)?;
        let reader = generation
            .tantivy()
            .ok_or_else(|| unavailable("tantivy index not open".into()))?;
        let name = generation.generation_name();
        tokio::task::spawn_blocking(move || answer(&reader, &snapshot, name, &q))
            .await
            .map_err(|e| unavailable(format!("reading the delete receipts: {e}")))?
    }
    .await;
    match result {
        Ok(r) => {
            engine.metrics.request("deletes", "none", "ok");
            Json(r).into_response()
        }
        Err(e) => {
            engine.metrics.request("deletes", "none", e.code);
            e.into_response()
        }
    }
}

fn answer(
    reader: &freshet_tantivy::ChunkIndexReader,
    snapshot: &freshet_tantivy::Snapshot,
    generation: Option<String>,
    q: &ReceiptQuery,
) -> Result<DeletesResponse, ApiError> {
    let failed = |e: freshet_tantivy::Error| {
        tracing::error!(error = %e, "reading the delete receipts");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("reading the delete receipts: {e}"),
        )
    };
    let found = reader.delete_receipts(snapshot, q).map_err(failed)?;
    let next_after = (found.len() == q.limit)
        .then(|| found.last().map(|n| n.seq))
        .flatten();
    let mut receipts = Vec::with_capacity(found.len());
    for Numbered { seq, receipt: r } in found {
        let chunks_now = snapshot
            .count_matching(&ChunkFilter::none().doc_ids([r.doc_id.as_str()]))
            .map_err(failed)?;
        receipts.push(Receipt {
            seq,
            doc_id: r.doc_id,
            cause: r.cause,
            class: r.class,
            source: r.source,
            source_timestamp_ms: r.source_timestamp_ms,
            chunks_removed: r.chunks_removed,
            commit: Commit {
                opstamp: r.opstamp,
                epoch: r.epoch,
            },
            completed_at_ms: r.completed_at_ms,
            chunks_now,
        });
    }
    Ok(DeletesResponse {
        receipts,
        next_after,
        index: crate::retrieve::index_info(snapshot, generation),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_string_is_read_strictly() {
        let q = parse(Some(
            "doc_id=a%2Fb&since=2026-01-02T03:04:05Z&after=7&limit=5",
        ))
        .unwrap();
        assert_eq!(q.doc_id.as_deref(), Some("a/b"));
        assert_eq!(q.since_ms, Some(1_767_323_045_000));
        assert_eq!((q.after_seq, q.limit), (Some(7), 5));
        assert_eq!(parse(Some("since=12")).unwrap().since_ms, Some(12));
        assert_eq!(parse(None).unwrap().limit, DEFAULT_LIMIT);
        for bad in [
            "limit=0",
            "limit=1001",
            "after=-1",
            "since=yesterday",
            "doc_id=",
            "x=1",
        ] {
            assert!(parse(Some(bad)).is_err(), "{bad}");
        }
    }
}
