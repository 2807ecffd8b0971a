//! [`LlmError`]: why a call to a model server (chat or embeddings) gave no answer, as data.
//! Each error has a [`class`](LlmError::class), the `outcome` label of `llm_requests_total`
//! and `remote_embedding_requests_total`.

use std::time::Duration;

/// Why a chat call failed (after the retries it was allowed).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmError {
    /// An attempt, a stream's silence or the call's deadline ran out.
    #[error("the model server did not answer within {after:?} ({what})")]
    Timeout { after: Duration, what: &'static str },
    /// The server answered 429 to every attempt (or asked to wait past the deadline).
    #[error(
        "the model server is rate limiting (429) after {attempts} attempt(s){}",
        retry_after.map(|d| format!("; it asks to retry after {d:?}")).unwrap_or_default()
    )]
    RateLimited {
        attempts: u32,
        retry_after: Option<Duration>,
    },
    /// The server answered 5xx to every attempt.
    #[error("the model server failed with {status} after {attempts} attempt(s): {message}")]
    Server {
        status: u16,
        message: String,
        attempts: u32,
    },
    /// The server could not be reached (connection refused, DNS, TLS) on every attempt, or the
    /// connection broke while the answer came.
    #[error("the model server is unreachable after {attempts} attempt(s): {message}")]
    Unavailable { message: String, attempts: u32 },
    /// The server refused the request (4xx other than 429: a bad key, an unknown model, a
    /// prompt too long); retrying would not help.
    #[error("the model server refused the request ({status}): {message}")]
    Refused { status: u16, message: String },
    /// The answer is not an OpenAI chat completion: malformed JSON, a missing field, a stream
    /// that ended before `[DONE]` or its finish.
    #[error("the model server's answer is not valid: {0}")]
    BadResponse(String),
}

impl LlmError {
    /// A short, stable name of the error's kind (`timeout`, `rate_limited`, `server_error`,
    /// `unavailable`, `refused`, `bad_response`).
    pub fn class(&self) -> &'static str {
        match self {
            LlmError::Timeout { .. } => "timeout",
            LlmError::RateLimited { .. } => "rate_limited",
            LlmError::Server { .. } => "server_error",
            LlmError::Unavailable { .. } => "unavailable",
            LlmError::Refused { .. } => "refused",
            LlmError::BadResponse(_) => "bad_response",
        }
    }
}

pub type Result<T> = std::result::Result<T, LlmError>;
