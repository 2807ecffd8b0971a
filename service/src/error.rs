//! The JSON error answer of every freshet HTTP service: `{"error": {"code", "message"}}`, with
//! further members of the `error` object when a service has more to say (the ingest service's
//! `class` and `lines`), and `Retry-After` when the caller should come back later.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

/// A JSON error answer.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    /// The machine-readable reason (`bad_request`, `unauthorized`, `too_large` ...); the query
    /// node counts its answers by it.
    pub code: &'static str,
    pub message: String,
    /// Further members of the `error` object (`class`, `lines`).
    pub details: serde_json::Map<String, Value>,
    /// Seconds for a `Retry-After` header (429, 503 `overloaded`).
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            details: serde_json::Map::new(),
            retry_after: None,
        }
    }

    /// A 400 `bad_request`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// A 413 `too_large`: the body is over `limit` bytes.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("request body over {limit} bytes"),
        )
    }

    /// The same answer with `key` in the `error` object.
    pub fn with(mut self, key: &str, value: Value) -> Self {
        self.details.insert(key.into(), value);
        self
    }

    /// The same answer with a `Retry-After` of `seconds`.
    pub fn retry_after(mut self, seconds: Option<u64>) -> Self {
        self.retry_after = seconds;
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = self.details;
        error.insert("code".into(), self.code.into());
        error.insert("message".into(), self.message.into());
        let body = Json(json!({ "error": error }));
        match self.retry_after {
            Some(s) => (self.status, [(header::RETRY_AFTER, s.to_string())], body).into_response(),
            None => (self.status, body).into_response(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn answer(e: ApiError) -> (StatusCode, Option<String>, String) {
        let r = e.into_response();
        let status = r.status();
        let retry = r
            .headers()
            .get(header::RETRY_AFTER)
            .map(|v| v.to_str().unwrap().to_owned());
        let body = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
        (status, retry, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn the_json_shape_is_code_and_message_with_details_beside_them() {
        assert_eq!(
            answer(ApiError::bad_request("no")).await,
            (
                StatusCode::BAD_REQUEST,
                None,
                r#"{"error":{"code":"bad_request","message":"no"}}"#.into()
            )
        );
        let e = ApiError::new(StatusCode::TOO_MANY_REQUESTS, "too_many_requests", "slow")
            .with("class", "x".into())
            .retry_after(Some(3));
        assert_eq!(
            answer(e).await,
            (
                StatusCode::TOO_MANY_REQUESTS,
                Some("3".into()),
                r#"{"error":{"class":"x","code":"too_many_requests","message":"slow"}}"#.into()
            )
        );
        assert_eq!(
            answer(ApiError::too_large(5)).await.2,
            r#"{"error":{"code":"too_large","message":"request body over 5 bytes"}}"#
        );
    }
}
