//! The mapping of every refusal to its status and JSON error ([`ApiError`], the shape of every
//! freshet service: `{"error": {"code", "message"}}`, here with the decoder's `class` for a
//! refused document and `lines` for a refused batch).

use axum::http::StatusCode;
use serde_json::{json, Value};

pub use freshet_service::ApiError;

use crate::decode::{BatchInvalid, Invalid};
use crate::produce::ProduceError;

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
