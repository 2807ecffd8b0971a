//! What the OpenAI-compatible routes send, in OpenAI's shapes: a `chat.completion`, the
//! `chat.completion.chunk`s of a stream, the `model` list and the `{"error": {message, type,
//! param, code}}` of every failure. An answer's citations ride in the `freshet` member (the
//! `/v1/answer` response without its `answer`, which is the message's content). Pure.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use freshet_service::ApiError;
use serde_json::{json, Value};

use crate::answer::AnswerResponse;
use crate::openai::assistants::Assistant;

/// A failure in OpenAI's shape, with the node's code and HTTP status.
#[derive(Debug)]
pub struct OpenAiError {
    pub error: ApiError,
    pub param: Option<String>,
}

impl From<ApiError> for OpenAiError {
    fn from(error: ApiError) -> Self {
        OpenAiError { error, param: None }
    }
}

impl OpenAiError {
    /// A 400 about `param`.
    pub fn bad_request(message: impl Into<String>, param: Option<String>) -> Self {
        OpenAiError {
            error: ApiError::bad_request(message),
            param,
        }
    }

    /// The 404 of a model no assistant is named.
    pub fn unknown_model(name: &str) -> Self {
        OpenAiError {
            error: ApiError::new(
                StatusCode::NOT_FOUND,
                "model_not_found",
                format!("The model {name:?} does not exist: GET /v1/models lists the assistants"),
            ),
            param: Some("model".into()),
        }
    }

    /// `{"error": {...}}`.
    pub fn body(&self) -> Value {
        json!({"error": {
            "message": self.error.message,
            "type": error_type(self.error.status),
            "param": self.param,
            "code": self.error.code,
        }})
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        let body = Json(self.body());
        match self.error.retry_after {
            Some(s) => (
                self.error.status,
                [(header::RETRY_AFTER, s.to_string())],
                body,
            )
                .into_response(),
            None => (self.error.status, body).into_response(),
        }
    }
}

/// OpenAI's error `type` for a status.
pub fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 | 400 | 405 | 413 => "invalid_request_error",
        429 => "rate_limit_error",
        _ => "server_error",
    }
}

/// One `model` of `GET /v1/models`; `created`: when the node started (seconds).
pub fn model(a: &Assistant, created: u64) -> Value {
    json!({"id": a.name, "object": "model", "created": created, "owned_by": "freshet",
           "description": a.description})
}

/// The `GET /v1/models` list.
pub fn models(list: &[Assistant], created: u64) -> Value {
    json!({"object": "list", "data": list.iter().map(|a| model(a, created)).collect::<Vec<_>>()})
}

/// OpenAI's `finish_reason` of an answer: the model's `length` or `content_filter`, else `stop`
/// (a refusal by the node is a stop).
pub fn finish_reason(r: &AnswerResponse) -> &'static str {
    match r.finish_reason.as_deref() {
        Some("length") => "length",
        Some("content_filter") => "content_filter",
        _ => "stop",
    }
}

/// The token counts: the server's, zeros when no model was called, null when the server
/// reported none.
pub fn usage(r: &AnswerResponse) -> Value {
    match (&r.usage, r.model.is_empty()) {
        (Some(u), _) => json!({"prompt_tokens": u.prompt_tokens,
            "completion_tokens": u.completion_tokens,
            "total_tokens": if u.total_tokens > 0 { u.total_tokens } else { u.prompt_tokens + u.completion_tokens }}),
        (None, true) => json!({"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}),
        (None, false) => Value::Null,
    }
}

/// The `freshet` member: the `/v1/answer` response without `answer`.
pub fn extension(r: &AnswerResponse) -> Value {
    let mut v = serde_json::to_value(r).unwrap_or_else(|_| json!({}));
    if let Some(o) = v.as_object_mut() {
        o.remove("answer");
    }
    v
}

/// Names a completion: its id and creation time, and the assistant that answered.
#[derive(Clone, Debug)]
pub struct Head {
    pub id: String,
    pub created: u64,
    pub model: String,
}

impl Head {
    pub fn new(model: &str) -> Head {
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Head {
            id: format!("chatcmpl-{}", uuid::Uuid::new_v4().simple()),
            created,
            model: model.to_owned(),
        }
    }
}

/// A whole `chat.completion`.
pub fn completion(h: &Head, r: &AnswerResponse) -> Value {
    json!({
        "id": h.id, "object": "chat.completion", "created": h.created, "model": h.model,
        "choices": [{"index": 0,
                     "message": {"role": "assistant", "content": r.answer, "refusal": null},
                     "logprobs": null, "finish_reason": finish_reason(r)}],
        "usage": usage(r),
        "system_fingerprint": null,
        "freshet": extension(r),
    })
}

/// A `chat.completion.chunk` carrying `delta`; with `usage`, a `usage: null` member as OpenAI
/// sends on every chunk but the last when `include_usage` is set.
pub fn chunk(h: &Head, delta: Value, finish: Option<&str>, usage: bool) -> Value {
    let mut c = json!({
        "id": h.id, "object": "chat.completion.chunk", "created": h.created, "model": h.model,
        "system_fingerprint": null,
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
    });
    if usage {
        c["usage"] = Value::Null;
    }
    c
}

/// The last choice chunk: the finish reason and the `freshet` member.
pub fn last_chunk(h: &Head, r: &AnswerResponse, usage: bool) -> Value {
    let mut c = chunk(h, json!({}), Some(finish_reason(r)), usage);
    c["freshet"] = extension(r);
    c
}

/// The usage chunk of `include_usage`: no choices, the token counts.
pub fn usage_chunk(h: &Head, r: &AnswerResponse) -> Value {
    json!({
        "id": h.id, "object": "chat.completion.chunk", "created": h.created, "model": h.model,
        "system_fingerprint": null, "choices": [], "usage": usage(r),
    })
}
