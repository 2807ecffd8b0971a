//! The JSON error answer (the query node's shape: `{"error": {"code", "message"}}`, here with
//! the decoder's `class` for a refused document and `lines` for a refused batch), and the
//! mapping of every refusal to its status.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::decode::{BatchInvalid, Invalid};
use crate::produce::ProduceError;

/// A JSON error answer.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Further members of the `error` object (`class`, `lines`).
    pub details: serde_json::Map<String, Value>,
    /// Seconds for a `Retry-After` header (429).
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

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    fn with(mut self, key: &str, value: Value) -> Self {
        self.details.insert(key.into(), value);
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

impl From<Invalid> for ApiError {
    fn from(e: Invalid) -> Self {
        match e {
            Invalid::Document { class, message } => {
                let status = if class == "too_large" {
                    StatusCode::PAYLOAD_TOO_LARGE
                } else {
                    StatusCode::BAD_REQUEST
                };
                ApiError::new(status, "invalid_document", message).with("class", class.into())
            }
            Invalid::BadRequest(m) => ApiError::bad_request(m),
            Invalid::UnsupportedMediaType(m) => ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                m,
            ),
            Invalid::TooManyDocuments { count, limit } => ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_many_documents",
                format!("the batch has {count} documents, over the limit of {limit}"),
            ),
        }
    }
}

impl From<BatchInvalid> for ApiError {
    fn from(e: BatchInvalid) -> Self {
        match e {
            BatchInvalid::Request(i) => i.into(),
            BatchInvalid::Lines(lines) => {
                let n = lines.len();
                let first = lines
                    .first()
                    .map(|l| format!("line {}: {}", l.line, l.message))
                    .unwrap_or_default();
                let lines: Vec<Value> = lines
                    .into_iter()
                    .map(|l| json!({"line": l.line, "class": l.class, "message": l.message}))
                    .collect();
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_batch",
                    format!("{n} line(s) refused, nothing was produced; first: {first}"),
                )
                .with("lines", Value::Array(lines))
            }
        }
    }
}

impl From<ProduceError> for ApiError {
    fn from(e: ProduceError) -> Self {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            format!("the broker did not acknowledge the record(s): {}", e.0),
        )
    }
}

/// The body, or a 413 (over `ingest.max_body_bytes`) or a 400 (unreadable).
pub fn body_bytes(body: Result<Bytes, BytesRejection>, limit: usize) -> Result<Bytes, ApiError> {
    body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!("request body over {limit} bytes"),
            )
        } else {
            ApiError::bad_request(format!("cannot read the request body: {e}"))
        }
    })
}
