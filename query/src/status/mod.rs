//! `GET /v1/status`: what an operator watches, in one answer, for the console's status page
//! (docs/console.md). The node's own part: documents and chunks in tantivy, vectors in Milvus,
//! the commit it serves with its Kafka offsets and age (and that age over the last minutes,
//! `ages.rs`), Milvus and model health, readiness. The pipeline's part: its own `/v1/status`
//! fetched server-side from `[query] pipeline_url` (`pipeline.rs`): consumer lag per
//! partition, freshness, dead letters by class with the latest ones, Kafka/Milvus/model health.
//!
//! Counts over every document and dead letters with keys and messages are for operators: when
//! `[query] admin_keys` are set, only an admin key reads this; otherwise any caller the API
//! admits ([`crate::auth::Auth::admit_status`]).

pub mod ages;
pub mod pipeline;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use freshet_core::filter::ChunkFilter;
use serde_json::{json, Value};

use freshet_service::ApiError;

use crate::indexes::Indexes;
use crate::node::Node;
use crate::retrieve::RetrieveError;

pub use ages::AgeHistory;
pub use pipeline::{PipelineClient, PipelinePart};

/// What the status route reads beside the engine: the pipeline's client (when
/// `pipeline_url` is set) and the sampled commit ages.
pub struct StatusSources {
    pub pipeline: Option<PipelineClient>,
    pub ages: Arc<AgeHistory>,
}

impl StatusSources {
    /// Reads `[query] pipeline_*` (the key from its file or variable).
    pub fn new(
        c: &crate::config::QueryConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> anyhow::Result<StatusSources> {
        Ok(StatusSources {
            pipeline: PipelineClient::new(c, env)?,
            ages: Arc::new(AgeHistory::default()),
        })
    }

    /// The pipeline's part now.
    pub async fn pipeline_part(&self) -> PipelinePart {
        match &self.pipeline {
            Some(c) => c.fetch().await,
            None => pipeline::not_configured(),
        }
    }
}

/// The tantivy part: health, chunks and documents of the commit served. Blocking (the
/// document count reads every chunk's document id).
pub fn tantivy_part(indexes: &Indexes) -> Value {
    let status = indexes.status();
    let snapshot = indexes.snapshot();
    let chunks = snapshot.as_ref().map(|s| s.count());
    let documents = indexes
        .tantivy()
        .and_then(|r| r.count_documents_matching(&ChunkFilter::none()).ok());
    json!({
        "ok": status.tantivy.is_none() && snapshot.is_some(),
        "detail": status.tantivy.unwrap_or_else(|| "ok".into()),
        "documents": documents,
        "chunks": chunks,
    })
}

/// The commit served: epoch, when the pipeline made it and the node loaded it, its age, and
/// its Kafka offsets (per topic and partition, the next offset to read).
pub fn index_part(indexes: &Indexes, now_ms: u64) -> Value {
    let f = indexes.freshness();
    let offsets = indexes
        .snapshot()
        .and_then(|s| s.payload().map(|p| p.offsets.clone()))
        .unwrap_or_default();
    json!({
        "epoch": f.epoch,
        "committed_at_ms": f.committed_at_ms,
        "visible_at_ms": f.visible_at_ms,
        "age_ms": (f.committed_at_ms > 0).then(|| now_ms.saturating_sub(f.committed_at_ms)),
        "offsets": offsets,
    })
}

/// The Milvus part: whether the collection can be searched, and its vectors (within
/// `timeout`).
async fn milvus_part(indexes: &Indexes, timeout: Duration) -> Value {
    match indexes.milvus_to_search() {
        Err(why) => json!({"ok": false, "detail": why, "vectors": null}),
        Ok(m) => match tokio::time::timeout(timeout, m.count()).await {
            Ok(Ok(n)) => json!({"ok": true, "detail": "ok", "vectors": n}),
            Ok(Err(e)) => json!({"ok": false, "detail": format!("milvus: {e}"), "vectors": null}),
            Err(_) => json!({
                "ok": false,
                "detail": format!("milvus did not count within {} ms", timeout.as_millis()),
                "vectors": null,
            }),
        },
    }
}

/// The handler.
pub async fn status(State(node): State<Arc<Node>>, headers: HeaderMap) -> Response {
    let engine = &node.engine;
    let result = async {
        node.auth.admit_status(&headers)?;
        let q = &engine.config.query;
        // The document count is blocking work like a retrieval's: it takes a slot.
        let deadline = Instant::now() + Duration::from_millis(q.request_timeout_ms);
        let job = engine
            .limiter
            .admit(deadline)
            .await
            .map_err(|why| ApiError::from(RetrieveError::Overloaded(why)))?;
        // One generation for the whole answer, as a retrieval pins one.
        let ix = engine.indexes.current();
        let pinned = ix.clone();
        let tantivy = job.blocking("status", move |_| Ok(tantivy_part(&pinned)));
        let milvus = milvus_part(&ix, Duration::from_millis(q.request_timeout_ms.min(5000)));
        let (tantivy, milvus, pipeline) =
            tokio::join!(tantivy, milvus, node.status.pipeline_part());
        let tantivy = tantivy.map_err(ApiError::from)?;
        let now = freshet_core::clock::now_ms();
        let s = ix.status();
        let auth = node.auth.ready();
        let model = ix.embedders().map_or_else(
            || "no query model".to_string(),
            |p| format!("{} ({} dimensions)", p.model_id(), p.dim()),
        );
        Ok::<_, ApiError>(json!({
            "generated_at_ms": now,
            "node": {
                "ready": s.tantivy.is_none() && s.milvus.is_none() && auth.is_ok(),
                "auth": node.auth.mode(),
                "auth_warnings": node.auth.warnings(),
                "index": index_part(&ix, now),
                "generation": engine.indexes.state(),
                "tantivy": tantivy,
                "milvus": milvus,
                "model": {
                    "ok": ix.embedders().is_some(),
                    "detail": model,
                },
                "commit_ages": {
                    "every_ms": ages::SAMPLE_EVERY.as_millis() as u64,
                    "window_s": ages::WINDOW.as_secs(),
                    "samples": node.status.ages.samples(),
                },
            },
            "pipeline": pipeline,
        }))
    }
    .await;
    match result {
        Ok(v) => {
            engine.metrics.request("status", "none", "ok");
            (StatusCode::OK, Json(v)).into_response()
        }
        Err(e) => {
            engine.metrics.request("status", "none", e.code);
            e.into_response()
        }
    }
}
