//! A deterministic OpenAI-compatible chat server for tests (`freshet-tools llm-standin`, or
//! [`StandIn::start`] in process). `POST /v1/chat/completions` answers in OpenAI's exact shapes
//! (`chat.completion`; streamed, `chat.completion.chunk` events, the usage chunk when
//! `stream_options.include_usage`, then `[DONE]`) with an answer derived from the request alone
//! ([`answer::answer`]; freshet's query transformations, recognised by their task marker:
//! [`rewrite::answer`]); the model name chooses faults ([`Script`]). `POST /v1/embeddings`
//! answers deterministic vectors ([`embeddings`]). `GET /v1/models` lists `standin`. The same
//! request always gets the same bytes.

pub mod answer;
pub mod embeddings;
pub mod ground;
pub mod rewrite;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use futures::StreamExt;
use serde_json::{json, Value};

pub use answer::{Script, REFUSAL};

/// The `created` of every answer (fixed, so that answers are byte-for-byte the same).
pub const CREATED: u64 = 1_767_225_600;

/// How the stand-in is run.
#[derive(Clone, Debug, Default)]
pub struct StandinOptions {
    /// Requests must carry `Authorization: Bearer <key>` (else 401).
    pub api_key: Option<String>,
}

#[derive(Default)]
struct Shared {
    api_key: Option<String>,
    /// Requests seen per model name (the `-then-ok` scripts fail the first).
    seen: Mutex<HashMap<String, u32>>,
    /// Every chat request body received, in order.
    requests: Mutex<Vec<Value>>,
    in_flight: AtomicUsize,
    peak: AtomicUsize,
}

/// A stand-in serving on a local port until dropped.
pub struct StandIn {
    addr: SocketAddr,
    shared: Arc<Shared>,
    embed: Arc<embeddings::EmbedState>,
    task: tokio::task::JoinHandle<()>,
}

impl StandIn {
    /// Serves on a free port of 127.0.0.1 (in the current tokio runtime).
    pub async fn start() -> std::io::Result<StandIn> {
        StandIn::start_with(StandinOptions::default()).await
    }

    pub async fn start_with(options: StandinOptions) -> std::io::Result<StandIn> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let embed = embeddings::EmbedState::new(options.api_key.clone());
        let shared = Arc::new(Shared {
            api_key: options.api_key,
            ..Shared::default()
        });
        let app = routes(shared.clone(), embed.clone());
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(no_delay(listener), app).await {
                tracing::error!(error = %e, "the LLM stand-in stopped");
            }
        });
        Ok(StandIn {
            addr,
            shared,
            embed,
            task,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>/v1`, the `llm.base_url` of a client of it.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The chat request bodies received so far.
    pub fn requests(&self) -> Vec<Value> {
        lock(&self.shared.requests).clone()
    }

    /// The embeddings side: its requests, and switching it down and up.
    pub fn embeddings(&self) -> &embeddings::EmbedState {
        &self.embed
    }

    /// The most chat requests it was answering at once.
    pub fn peak_in_flight(&self) -> usize {
        self.shared.peak.load(Ordering::SeqCst)
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves on `listener` until the process ends (`freshet-tools llm-standin`).
pub async fn serve(
    listener: tokio::net::TcpListener,
    options: StandinOptions,
) -> std::io::Result<()> {
    let embed = embeddings::EmbedState::new(options.api_key.clone());
    let shared = Arc::new(Shared {
        api_key: options.api_key,
        ..Shared::default()
    });
    axum::serve(no_delay(listener), routes(shared, embed)).await
}

/// `TCP_NODELAY` on every connection: a stream's small chunks go out at once, not after the
/// client acknowledged the one before.
fn no_delay(
    listener: tokio::net::TcpListener,
) -> impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = SocketAddr> {
    use axum::serve::ListenerExt;
    listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    })
}

fn routes(shared: Arc<Shared>, embed: Arc<embeddings::EmbedState>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/models", get(models))
        .with_state(shared)
        .merge(embeddings::routes(embed))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn models() -> Response {
    axum::Json(json!({
        "object": "list",
        "data": [{"id": "standin", "object": "model", "created": CREATED, "owned_by": "freshet"}]
    }))
    .into_response()
}

/// OpenAI's error shape.
fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"error": {"message": message, "type": kind, "code": null}})),
    )
        .into_response()
}

/// Counts a request in flight while it lives.
struct InFlight(Arc<Shared>);

impl InFlight {
    fn new(shared: &Arc<Shared>) -> InFlight {
        let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        shared.peak.fetch_max(now, Ordering::SeqCst);
        InFlight(shared.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A checked chat request.
struct Request {
    model: String,
    texts: Vec<String>,
    max_tokens: Option<u64>,
    stream: bool,
    include_usage: bool,
}

/// The request as OpenAI checks it: a model, messages with roles and text content.
fn parse(body: &Value) -> Result<Request, String> {
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .ok_or("`model` is missing or not a string")?;
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .filter(|m| !m.is_empty())
        .ok_or("`messages` must be a non-empty array")?;
    let mut texts = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        if !["system", "developer", "user", "assistant", "tool"].contains(&role) {
            return Err(format!("messages[{i}].role {role:?} is not a role"));
        }
        let text = match m.get("content") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
            _ => return Err(format!("messages[{i}].content must be text")),
        };
        texts.push(text);
    }
    let max_tokens = match body.get("max_completion_tokens").or(body.get("max_tokens")) {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .filter(|n| *n > 0)
                .ok_or("`max_tokens` must be a positive integer")?,
        ),
    };
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let include_usage = body
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok(Request {
        model: model.to_owned(),
        texts,
        max_tokens,
        stream,
        include_usage,
    })
}

async fn chat(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let _in_flight = InFlight::new(&shared);
    if let Some(key) = &shared.api_key {
        let sent = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if sent != Some(key.as_str()) {
            return error(
                StatusCode::UNAUTHORIZED,
                "invalid_request_error",
                "Incorrect API key provided.",
            );
        }
    }
    let value: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                &format!("the body is not JSON: {e}"),
            )
        }
    };
    lock(&shared.requests).push(value.clone());
    let request = match parse(&value) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, "invalid_request_error", &e),
    };
    let Some(script) = Script::of(&request.model) else {
        return error(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            &format!("The model `{}` does not exist.", request.model),
        );
    };
    let first = {
        let mut seen = lock(&shared.seen);
        let count = seen.entry(request.model.clone()).or_insert(0);
        *count += 1;
        *count == 1
    };
    match script {
        Script::RateLimited => return rate_limited("1"),
        Script::RateLimitedLong => return rate_limited("3600"),
        Script::RateLimitedOnce { http_date } if first => {
            let at = std::time::SystemTime::now() + Duration::from_secs(1);
            return if http_date {
                rate_limited(&httpdate::fmt_http_date(at))
            } else {
                rate_limited("1")
            };
        }
        Script::Status(code) | Script::StatusOnce(code)
            if first || matches!(script, Script::Status(_)) =>
        {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return error(
                status,
                "server_error",
                &format!("the stand-in answers {code}"),
            );
        }
        Script::Slow(d) => tokio::time::sleep(d).await,
        Script::StallAfter(_) if !request.stream => {
            futures::future::pending::<()>().await;
        }
        _ => {}
    }
    let id = format!("chatcmpl-standin-{}", &blake3::hash(&body).to_hex()[..16]);
    let texts: Vec<&str> = request.texts.iter().map(String::as_str).collect();
    let full = rewrite::answer(&texts).unwrap_or_else(|| answer::answer(&texts, &script));
    let (text, finish) = cut(&full, request.max_tokens);
    let usage = json!({
        "prompt_tokens": texts.iter().map(|t| answer::tokens(t)).sum::<u64>(),
        "completion_tokens": answer::tokens(&text),
        "total_tokens": texts.iter().map(|t| answer::tokens(t)).sum::<u64>() + answer::tokens(&text),
    });
    if request.stream {
        return stream(&id, &request, &script, &text, finish, usage);
    }
    if script == Script::Malformed || script == Script::Truncated || script == Script::Cut {
        return (
            [(header::CONTENT_TYPE, "application/json")],
            format!("{{\"id\":\"{id}\",\"object\":\"chat.completion\",\"choices\":["),
        )
            .into_response();
    }
    axum::Json(json!({
        "id": id,
        "object": "chat.completion",
        "created": CREATED,
        "model": request.model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": null,
            "finish_reason": finish,
        }],
        "usage": usage,
    }))
    .into_response()
}

fn rate_limited(retry_after: &str) -> Response {
    let mut r = error(
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limit_error",
        "Rate limit reached; retry later.",
    );
    if let Ok(v) = retry_after.parse() {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    r
}

/// `text` within `max_tokens` words, and the finish reason.
fn cut(text: &str, max_tokens: Option<u64>) -> (String, &'static str) {
    match max_tokens {
        Some(max) if answer::tokens(text) > max => (
            text.split_whitespace()
                .take(max as usize)
                .collect::<Vec<_>>()
                .join(" "),
            "length",
        ),
        _ => (text.to_owned(), "stop"),
    }
}

/// The answer as OpenAI streams it: a role chunk, a chunk per word, the finish chunk, the
/// usage chunk when asked for, `[DONE]`.
fn stream(
    id: &str,
    request: &Request,
    script: &Script,
    text: &str,
    finish: &str,
    usage: Value,
) -> Response {
    let chunk = |delta: Value, finish: Option<&str>| {
        let mut c = json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": request.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        });
        if request.include_usage {
            c["usage"] = Value::Null;
        }
        format!("data: {c}\n\n")
    };
    let mut events = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    let mut pieces = Vec::new();
    for (i, word) in text.split_whitespace().enumerate() {
        pieces.push(if i == 0 {
            word.to_owned()
        } else {
            format!(" {word}")
        });
    }
    for piece in &pieces {
        events.push(chunk(json!({ "content": piece }), None));
    }
    match script {
        Script::Malformed => {
            events.truncate(2);
            events.push("data: {\"id\": \"broken\", \"choices\": [\n\n".to_owned());
        }
        Script::Truncated => {}
        Script::Cut => events.push("data: [DONE]\n\n".to_owned()),
        Script::StallAfter(n) => events.truncate(1 + n),
        _ => {
            events.push(chunk(json!({}), Some(finish)));
            if request.include_usage {
                let c = json!({
                    "id": id,
                    "object": "chat.completion.chunk",
                    "created": CREATED,
                    "model": request.model,
                    "choices": [],
                    "usage": usage,
                });
                events.push(format!("data: {c}\n\n"));
            }
            events.push("data: [DONE]\n\n".to_owned());
        }
    }
    let drip = match script {
        Script::Drip(d) => Some(*d),
        _ => None,
    };
    let body = futures::stream::iter(events).then(move |e| async move {
        if let Some(d) = drip {
            tokio::time::sleep(d).await;
        }
        Ok::<_, std::convert::Infallible>(Bytes::from(e))
    });
    let body = if matches!(script, Script::StallAfter(_)) {
        Body::from_stream(body.chain(futures::stream::pending()))
    } else {
        Body::from_stream(body)
    };
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}
