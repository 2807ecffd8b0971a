//! Request bodies within a service's limit: a 413 `too_large` over it, a 400 when the body
//! cannot be read.

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;

use crate::error::ApiError;

/// Reads `body` up to `limit` bytes. For a handler that reads the body only once the caller is
/// admitted (a refused caller's body is never read).
pub async fn read(body: Body, limit: usize) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        let too_large = e
            .into_inner()
            .downcast_ref::<http_body_util::LengthLimitError>()
            .is_some();
        if too_large {
            ApiError::too_large(limit)
        } else {
            ApiError::bad_request("cannot read the request body")
        }
    })
}

/// The body axum extracted under the router's `DefaultBodyLimit` of `limit` bytes, or its
/// error answer.
pub fn extracted(body: Result<Bytes, BytesRejection>, limit: usize) -> Result<Bytes, ApiError> {
    body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::too_large(limit)
        } else {
            ApiError::bad_request(format!("cannot read the request body: {e}"))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_body_over_the_limit_is_a_413() {
        let ok = read(Body::from("12345"), 5).await.unwrap();
        assert_eq!(&ok[..], b"12345");
        let e = read(Body::from("123456"), 5).await.unwrap_err();
        assert_eq!(
            (e.status, e.code),
            (StatusCode::PAYLOAD_TOO_LARGE, "too_large")
        );
    }
}
