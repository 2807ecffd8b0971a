//! The HTTP API: routes, API-key check, body limit, and the mapping of every failure to a JSON
//! error (4xx for the caller's mistakes, 503 for an unavailable dependency). See `openapi.rs`.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use crate::auth::Admission;
use crate::pathway;
use crate::request;
use crate::retrieve::{Engine, RetrieveError};

/// A JSON error answer.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Seconds for a `Retry-After` header (429).
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }
    fn outcome(&self) -> &'static str {
        self.code
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Json(json!({"error": {"code": self.code, "message": self.message}}));
        match self.retry_after {
            Some(s) => (self.status, [(header::RETRY_AFTER, s.to_string())], body).into_response(),
            None => (self.status, body).into_response(),
        }
    }
}

impl From<RetrieveError> for ApiError {
    fn from(e: RetrieveError) -> Self {
        match e {
            RetrieveError::BadRequest(m) => ApiError::bad_request(m),
            RetrieveError::Unavailable(m) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", m)
            }
            RetrieveError::Internal(m) => {
                tracing::error!(error = %m, "retrieve failed");
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", m)
            }
            RetrieveError::TimedOut => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "timeout",
                "retrieval ran past the request timeout",
            ),
            RetrieveError::Overloaded(why) => ApiError {
                retry_after: Some(1),
                ..ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "overloaded",
                    format!(
                        "the node is running all the retrievals it may ({}); retry later",
                        why.reason()
                    ),
                )
            },
        }
    }
}

/// The router of the query node's API port (with `/metrics` unless `admin_listen` is set).
pub fn router(engine: Arc<Engine>) -> Router {
    let limit = engine.config.query.max_body_bytes;
    let mut r = Router::new()
        .route("/v1/retrieve", post(retrieve))
        .route("/v1/index", get(crate::wait::index_state))
        .route("/v1/index/wait", get(crate::wait::index_wait))
        .route("/pathway/v1/retrieve", post(pathway_retrieve))
        .route(
            "/pathway/v1/statistics",
            post(pathway_statistics).get(pathway_statistics),
        )
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/openapi.json", get(openapi));
    if engine.config.query.admin_listen.is_empty() {
        r = r.route("/metrics", get(metrics));
    }
    r.fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .with_state(engine)
}

/// The router of `admin_listen`: `/metrics`, `/healthz`, `/readyz`.
pub fn admin_router(engine: Arc<Engine>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(engine)
}

async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such route; see /openapi.json",
    )
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "method not allowed on this route; see /openapi.json",
    )
}

/// The principals a request searches with (see [`Admission::principals`]); a 403 is counted.
pub(crate) fn principals(
    engine: &Engine,
    admission: &Admission,
    requested: Option<Vec<String>>,
) -> Result<Vec<String>, ApiError> {
    admission.principals(requested).inspect_err(|_| {
        engine.metrics.auth_rejection(&admission.name, "forbidden");
    })
}

/// The request body, read only once the caller is admitted (a refused caller's body is never
/// read): a 413 over `limit` bytes, a 400 when it cannot be read.
async fn body_bytes(body: Body, limit: usize) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        let too_large = e
            .into_inner()
            .downcast_ref::<http_body_util::LengthLimitError>()
            .is_some();
        if too_large {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!("request body over {limit} bytes"),
            )
        } else {
            ApiError::bad_request("cannot read the request body")
        }
    })
}

async fn run_with_timeout<T>(
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

async fn retrieve(State(engine): State<Arc<Engine>>, headers: HeaderMap, body: Body) -> Response {
    let mut mode = "unknown";
    let result = async {
        let admission = engine.auth.admit(&headers)?;
        let body = body_bytes(body, engine.config.query.max_body_bytes).await?;
        let req = request::parse(&body).map_err(|e| ApiError::bad_request(e.0))?;
        let requested = req.principals.clone();
        let mut plan = req
            .plan(&engine.config.query, engine.reranker.is_some())
            .map_err(|e| ApiError::bad_request(e.0))?;
        mode = plan.mode.as_str();
        plan.filter.principals = Some(principals(&engine, &admission, requested)?);
        run_with_timeout(&engine, engine.retrieve(plan)).await
    }
    .await;
    match result {
        Ok(r) => {
            let outcome = if r.degraded.is_empty() {
                "ok"
            } else {
                "degraded"
            };
            engine.metrics.request("retrieve", mode, outcome);
            Json(r).into_response()
        }
        Err(e) => {
            engine.metrics.request("retrieve", mode, e.outcome());
            e.into_response()
        }
    }
}

async fn pathway_retrieve(
    State(engine): State<Arc<Engine>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let result = async {
        let admission = engine.auth.admit(&headers)?;
        let body = body_bytes(body, engine.config.query.max_body_bytes).await?;
        let req = pathway::parse(&body).map_err(|e| ApiError::bad_request(e.0))?;
        let mut plan = pathway::plan(req, &engine)
            .await
            .map_err(|e| ApiError::bad_request(e.0))?;
        // Pathway requests name no principals: the identity's, all of them.
        plan.filter.principals = Some(principals(&engine, &admission, None)?);
        let r = run_with_timeout(&engine, engine.retrieve(plan)).await?;
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
            engine
                .metrics
                .request("pathway_retrieve", "hybrid", e.outcome());
            e.into_response()
        }
    }
}

async fn pathway_statistics(State(engine): State<Arc<Engine>>, headers: HeaderMap) -> Response {
    let result = async {
        let admission = engine.auth.admit(&headers)?;
        let filter = visible_to(principals(&engine, &admission, None)?);
        let count = match engine.indexes.tantivy() {
            Some(r) => tokio::task::spawn_blocking(move || r.count_matching(&filter))
                .await
                .map_err(|e| {
                    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
                })?
                .map_err(|e| {
                    ApiError::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "unavailable",
                        format!("tantivy: {e}"),
                    )
                })?,
            None => 0,
        };
        let f = engine.indexes.freshness();
        Ok::<_, ApiError>(Json(json!({
            "file_count": count,
            "last_modified": f.committed_at_ms / 1000,
            "last_indexed": f.visible_at_ms / 1000,
        })))
    }
    .await;
    match result {
        Ok(v) => v.into_response(),
        Err(e) => e.into_response(),
    }
}

/// The filter of what these principals may see.
pub(crate) fn visible_to(principals: Vec<String>) -> freshet_core::filter::ChunkFilter {
    freshet_core::filter::ChunkFilter::none().principals(principals)
}

async fn healthz() -> Response {
    Json(json!({"status": "ok"})).into_response()
}

async fn readyz(State(engine): State<Arc<Engine>>) -> Response {
    let s = engine.indexes.status();
    let f = engine.indexes.freshness();
    let auth = engine.auth.ready();
    let ready = s.tantivy.is_none() && s.milvus.is_none() && auth.is_ok();
    let body = Json(json!({
        "ready": ready,
        "tantivy": s.tantivy.clone().unwrap_or_else(|| "ok".into()),
        "milvus": s.milvus.clone().unwrap_or_else(|| "ok".into()),
        "jwks": auth.err().unwrap_or_else(|| "ok".into()),
        "index": {"epoch": f.epoch, "committed_at_ms": f.committed_at_ms},
        "auth": engine.auth.mode(),
        "auth_warnings": engine.auth.warnings(),
    }));
    if ready {
        (StatusCode::OK, body).into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
    }
}

async fn metrics(State(engine): State<Arc<Engine>>, headers: HeaderMap) -> Response {
    if let Err(e) = engine.auth.admit_admin(&headers) {
        return e.into_response();
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        engine.metrics.encode(),
    )
        .into_response()
}

async fn openapi() -> Response {
    Json(crate::openapi::document()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_body_over_the_limit_is_a_413() {
        let ok = body_bytes(Body::from("12345"), 5).await.unwrap();
        assert_eq!(&ok[..], b"12345");
        let e = body_bytes(Body::from("123456"), 5).await.unwrap_err();
        assert_eq!(
            (e.status, e.code),
            (StatusCode::PAYLOAD_TOO_LARGE, "too_large")
        );
    }
}
