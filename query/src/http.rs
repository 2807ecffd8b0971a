//! The HTTP API: routes, API-key check, body limit, and the mapping of every failure to a JSON
//! error (4xx for the caller's mistakes, 503 for an unavailable dependency). See `openapi.rs`.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use freshet_service::body;
use freshet_service::routes::{self, healthz, with_fallbacks};
use serde_json::json;

use crate::node::Node;
use crate::pathway;
use crate::request;
use crate::retrieve::{Engine, RetrieveError};

pub use freshet_service::ApiError;

/// The router of the query node's API port (with `/metrics` and `/v1/deletes` unless
/// `admin_listen` is set).
pub fn router(node: Arc<Node>) -> Router {
    let limit = node.engine.config.query.max_body_bytes;
    crate::openai::http::started();
    let mut r = Router::new()
        .route("/v1/retrieve", post(retrieve))
        .route("/v1/answer", post(crate::answer::http::answer))
        .route(
            "/v1/documents/{doc_id}/chunks",
            get(crate::documents::chunks),
        )
        .route("/v1/models", get(crate::openai::http::models))
        .route("/v1/models/{model}", get(crate::openai::http::model))
        .route(
            "/v1/chat/completions",
            post(crate::openai::http::chat_completions),
        )
        .route("/v1/index", get(crate::wait::index_state))
        .route("/v1/index/wait", get(crate::wait::index_wait))
        .route("/v1/status", get(crate::status::status))
        .route("/pathway/v1/retrieve", post(pathway_retrieve))
        .route("/pathway/v1/inputs", post(pathway_inputs))
        .route(
            "/pathway/v1/statistics",
            post(pathway_statistics).get(pathway_statistics),
        )
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/openapi.json", get(openapi));
    if node.engine.config.query.admin_listen.is_empty() {
        r = r
            .route("/metrics", get(metrics))
            .route("/v1/deletes", get(crate::deletes::deletes));
    }
    if node.engine.config.query.console {
        r = r.merge(crate::console::router());
    }
    let r = r.merge(crate::mcp::http::router(node.clone()));
    with_fallbacks(r)
        .layer(DefaultBodyLimit::max(limit))
        .with_state(node)
}

/// The router of `admin_listen`: `/metrics`, `/v1/deletes`, `/healthz`, `/readyz`.
pub fn admin_router(node: Arc<Node>) -> Router {
    with_fallbacks(
        Router::new()
            .route("/metrics", get(metrics))
            .route("/v1/deletes", get(crate::deletes::deletes))
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz)),
    )
    .with_state(node)
}

pub(crate) async fn run_with_timeout<T>(
    engine: &Engine,
    fut: impl std::future::Future<Output = Result<T, RetrieveError>>,
) -> Result<T, ApiError> {
    let limit = Duration::from_millis(engine.config.query.request_timeout_ms);
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r.map_err(ApiError::from),
        Err(_) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "timeout",
            format!("retrieval took longer than {} ms", limit.as_millis()),
        )),
    }
}

async fn retrieve(State(node): State<Arc<Node>>, headers: HeaderMap, body: Body) -> Response {
    let engine = &node.engine;
    let mut mode = "unknown";
    let result = async {
        let admission = node.auth.admit(&headers)?;
        let body = body::read(body, engine.config.query.max_body_bytes).await?;
        retrieve_for(&node, &admission, &body, &mut mode).await
    }
    .await;
    respond(engine, "retrieve", mode, result, |r| !r.degraded.is_empty())
}

/// A `/v1/retrieve` body run for `admission` (the route and the MCP `search` tool); `mode` is
/// set once the plan has one.
pub(crate) async fn retrieve_for(
    node: &Node,
    admission: &crate::auth::Admission,
    body: &[u8],
    mode: &mut &'static str,
) -> Result<crate::retrieve::Response, ApiError> {
    let engine = &node.engine;
    let req = request::parse(body).map_err(|e| ApiError::bad_request(e.0))?;
    let requested = req.principals.clone();
    let mut plan = req
        .plan_with(
            &engine.config.query,
            &engine.config.transform,
            engine.reranker.is_some(),
            engine.llm.is_some(),
        )
        .map_err(|e| ApiError::bad_request(e.0))?;
    *mode = plan.mode.as_str();
    plan.filter.principals = Some(node.auth.principals(admission, requested)?);
    run_with_timeout(engine, engine.retrieve(plan)).await
}

/// A JSON answer or its error, counted in `requests_total` as `ok`, `degraded` (when
/// `degraded` says so) or the error's code.
pub(crate) fn respond<T: serde::Serialize>(
    engine: &Engine,
    endpoint: &str,
    mode: &str,
    result: Result<T, ApiError>,
    degraded: impl Fn(&T) -> bool,
) -> Response {
    match result {
        Ok(r) => {
            let outcome = if degraded(&r) { "degraded" } else { "ok" };
            engine.metrics.request(endpoint, mode, outcome);
            Json(r).into_response()
        }
        Err(e) => {
            engine.metrics.request(endpoint, mode, e.code);
            e.into_response()
        }
    }
}

async fn pathway_retrieve(
    State(node): State<Arc<Node>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let engine = &node.engine;
    let result = async {
        let admission = node.auth.admit(&headers)?;
        let body = body::read(body, engine.config.query.max_body_bytes).await?;
        let req = pathway::parse(&body).map_err(|e| ApiError::bad_request(e.0))?;
        let mut plan = pathway::plan(req, engine)
            .await
            .map_err(|e| ApiError::bad_request(e.0))?;
        // Pathway requests name no principals: the identity's, all of them.
        plan.filter.principals = Some(node.auth.principals(&admission, None)?);
        let r = run_with_timeout(engine, engine.retrieve(plan)).await?;
        let outcome = if r.degraded.is_empty() {
            "ok"
        } else {
            "degraded"
        };
        Ok::<_, ApiError>((outcome, pathway::answer(r)))
    }
    .await;
    match result {
        Ok((outcome, v)) => {
            engine
                .metrics
                .request("pathway_retrieve", "hybrid", outcome);
            Json(v).into_response()
        }
        Err(e) => {
            engine.metrics.request("pathway_retrieve", "hybrid", e.code);
            e.into_response()
        }
    }
}

/// Runs a blocking read of the tantivy reader (none yet: `empty`).
async fn read_tantivy<T: Send + 'static>(
    engine: &Engine,
    empty: T,
    read: impl FnOnce(&freshet_tantivy::ChunkIndexReader) -> freshet_tantivy::Result<T> + Send + 'static,
) -> Result<T, ApiError> {
    let Some(r) = engine.indexes.tantivy() else {
        return Ok(empty);
    };
    tokio::task::spawn_blocking(move || read(&r))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?
        .map_err(|e| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                format!("tantivy: {e}"),
            )
        })
}

async fn pathway_statistics(State(node): State<Arc<Node>>, headers: HeaderMap) -> Response {
    let engine = &node.engine;
    let result = async {
        let admission = node.auth.admit(&headers)?;
        let filter = crate::visible::visible_to(node.auth.principals(&admission, None)?);
        let count = read_tantivy(engine, 0, move |r| r.count_documents_matching(&filter)).await?;
        let f = engine.indexes.freshness();
        Ok::<_, ApiError>(Json(json!({
            "file_count": count,
            "last_modified": f.committed_at_ms / 1000,
            "last_indexed": f.visible_at_ms / 1000,
        })))
    }
    .await;
    match result {
        Ok(v) => {
            engine.metrics.request("pathway_statistics", "none", "ok");
            v.into_response()
        }
        Err(e) => {
            engine.metrics.request("pathway_statistics", "none", e.code);
            e.into_response()
        }
    }
}

async fn pathway_inputs(State(node): State<Arc<Node>>, headers: HeaderMap, body: Body) -> Response {
    let engine = &node.engine;
    let result = async {
        let admission = node.auth.admit(&headers)?;
        let body = body::read(body, engine.config.query.max_body_bytes).await?;
        let req = pathway::parse_inputs(&body).map_err(|e| ApiError::bad_request(e.0))?;
        let mut filter = pathway::inputs_filter(&req, engine)
            .await
            .map_err(|e| ApiError::bad_request(e.0))?;
        filter.principals = Some(node.auth.principals(&admission, None)?);
        let docs = read_tantivy(engine, Vec::new(), move |r| r.documents_matching(&filter)).await?;
        Ok::<_, ApiError>(pathway::inputs_answer(
            &docs,
            req.return_status.unwrap_or(false),
        ))
    }
    .await;
    match result {
        Ok(v) => {
            engine.metrics.request("pathway_inputs", "none", "ok");
            Json(v).into_response()
        }
        Err(e) => {
            engine.metrics.request("pathway_inputs", "none", e.code);
            e.into_response()
        }
    }
}

async fn readyz(State(node): State<Arc<Node>>) -> Response {
    let engine = &node.engine;
    let s = engine.indexes.status();
    let f = engine.indexes.freshness();
    let auth = node.auth.ready();
    let ready = s.tantivy.is_none() && s.milvus.is_none() && auth.is_ok();
    let body = Json(json!({
        "ready": ready,
        "tantivy": s.tantivy.clone().unwrap_or_else(|| "ok".into()),
        "milvus": s.milvus.clone().unwrap_or_else(|| "ok".into()),
        "jwks": auth.err().unwrap_or_else(|| "ok".into()),
        "index": {"epoch": f.epoch, "committed_at_ms": f.committed_at_ms},
        "auth": node.auth.mode(),
        "auth_warnings": node.auth.warnings(),
    }));
    if ready {
        (StatusCode::OK, body).into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
    }
}

async fn metrics(State(node): State<Arc<Node>>, headers: HeaderMap) -> Response {
    let engine = &node.engine;
    if let Err(e) = node.auth.admit_admin(&headers) {
        return e.into_response();
    }
    routes::metrics(&engine.metrics.registry)
}

async fn openapi() -> Response {
    Json(crate::openapi::document()).into_response()
}
