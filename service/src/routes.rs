//! The routes every freshet HTTP service answers the same way: JSON 404 and 405 for what it
//! does not serve, `GET /healthz`, and the Prometheus text of `GET /metrics`.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use prometheus_client::registry::Registry;
use serde_json::json;

use crate::error::ApiError;

/// The content type of `/metrics` (OpenMetrics text).
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `router` answering an unknown path with a JSON 404 and a known path with the wrong method
/// with a JSON 405, both pointing at the service's `/openapi.json`.
pub fn with_fallbacks<S: Clone + Send + Sync + 'static>(router: Router<S>) -> Router<S> {
    router
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
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

/// `GET /healthz` of an API service: 200 `{"status":"ok"}` while the process serves.
pub async fn healthz() -> Response {
    Json(json!({"status": "ok"})).into_response()
}

/// The answer of `GET /metrics`: every metric of `registry` as OpenMetrics text.
pub fn metrics(registry: &Registry) -> Response {
    (
        [(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)],
        crate::metrics::encode(registry),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;

    async fn call(app: &Router, method: &str, path: &str) -> (StatusCode, String) {
        use tower::ServiceExt;
        let req = axum::http::Request::builder()
            .method(method)
            .uri(path)
            .body(axum::body::Body::empty())
            .unwrap();
        let r = app.clone().oneshot(req).await.unwrap();
        let status = r.status();
        let body = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn unknown_routes_and_methods_are_json_errors() {
        let app = with_fallbacks(Router::new().route("/healthz", get(healthz)));
        assert_eq!(
            call(&app, "GET", "/healthz").await,
            (StatusCode::OK, r#"{"status":"ok"}"#.into())
        );
        assert_eq!(
            call(&app, "GET", "/nope").await,
            (
                StatusCode::NOT_FOUND,
                r#"{"error":{"code":"not_found","message":"no such route; see /openapi.json"}}"#
                    .into()
            )
        );
        assert_eq!(
            call(&app, "POST", "/healthz").await,
            (
                StatusCode::METHOD_NOT_ALLOWED,
                r#"{"error":{"code":"method_not_allowed","message":"method not allowed on this route; see /openapi.json"}}"#
                    .into()
            )
        );
    }
}
