//! The stand-in's `POST /v1/embeddings`, in OpenAI's exact shape (`object: "list"`,
//! `data[].embedding`/`index`, `usage`): a deterministic vector per text, the normalised hashed
//! bag of its words (CJK characters count as words), so that texts sharing words lie near each
//! other and retrieval through it means something. The model name picks the dimension and the
//! faults ([`EmbedScript`]), as for chat; [`EmbedState`] records every request and can be
//! taken down (503 to everything) and brought back.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};

use super::answer::Script;
use super::{error, lock, rate_limited};

/// The dimension of the stand-in's vectors unless the model name says otherwise.
pub const DEFAULT_DIM: usize = 256;

/// What an embeddings request's model name asks of the stand-in: `standin` embeds with
/// [`DEFAULT_DIM`] dimensions; `standin-dim-<n>` with `n`; `standin-max-words-<n>` refuses (400)
/// a request with a text of more than `n` words, as a server refuses a text longer than its
/// model's window; `standin-<code>-x<n>-then-ok` answers `code` to the first `n` requests;
/// any chat fault (`standin-429`, `-429-then-ok`, `-429-long`, `-503`, `-500-then-ok`,
/// `-slow-2s`, `-malformed`) does what it does for chat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EmbedScript {
    Embed { dim: usize },
    MaxWords(usize),
    StatusTimes { code: u16, times: u32 },
    Chat(Script),
}

impl EmbedScript {
    /// The script of `model`, `None` when it is not a stand-in model name.
    pub fn of(model: &str) -> Option<EmbedScript> {
        let rest = model.strip_prefix("standin")?;
        let Some(spec) = rest.strip_prefix('-') else {
            return rest
                .is_empty()
                .then_some(EmbedScript::Embed { dim: DEFAULT_DIM });
        };
        if let Some(n) = spec.strip_prefix("dim-") {
            let dim = n.parse().ok().filter(|d| (1..=8192).contains(d))?;
            return Some(EmbedScript::Embed { dim });
        }
        if let Some(n) = spec.strip_prefix("max-words-") {
            return n.parse().ok().map(EmbedScript::MaxWords);
        }
        if let Some((code, rest)) = spec.split_once("-x") {
            if let Some(times) = rest.strip_suffix("-then-ok") {
                let code = code.parse().ok().filter(|c| (400..600).contains(c))?;
                return Some(EmbedScript::StatusTimes {
                    code,
                    times: times.parse().ok()?,
                });
            }
        }
        match Script::of(model)? {
            Script::Answer | Script::InvalidCitation | Script::Uncited => None,
            Script::StallAfter(_) | Script::Drip(_) | Script::Truncated => None,
            s => Some(EmbedScript::Chat(s)),
        }
    }

    fn dim(&self) -> usize {
        match self {
            EmbedScript::Embed { dim } => *dim,
            _ => DEFAULT_DIM,
        }
    }
}

/// The embeddings side of a stand-in: the requests it received and whether it is down.
#[derive(Default)]
pub struct EmbedState {
    api_key: Option<String>,
    requests: Mutex<Vec<Value>>,
    seen: Mutex<HashMap<String, u32>>,
    down: AtomicBool,
}

impl EmbedState {
    pub(crate) fn new(api_key: Option<String>) -> Arc<EmbedState> {
        Arc::new(EmbedState {
            api_key,
            ..EmbedState::default()
        })
    }

    /// Every embeddings request body received, in order.
    pub fn requests(&self) -> Vec<Value> {
        lock(&self.requests).clone()
    }

    /// While down, every embeddings request is answered 503 (an outage of the server).
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }
}

pub(crate) fn routes(state: Arc<EmbedState>) -> Router {
    Router::new()
        .route("/v1/embeddings", post(embeddings))
        .with_state(state)
}

/// The words of `text` as the stand-in counts and hashes them: lower-cased runs of letters and
/// digits, each CJK character a word of its own.
pub fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    for c in text.chars() {
        if is_cjk(c) {
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            out.push(c.to_string());
        } else if c.is_alphanumeric() {
            word.extend(c.to_lowercase());
        } else if !word.is_empty() {
            out.push(std::mem::take(&mut word));
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32, 0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xAC00..=0xD7AF | 0xF900..=0xFAFF)
}

/// The stand-in's vector of `text`: each word adds ±1 at a position its hash picks, then the
/// sum is scaled to unit length (a text without words gets a fixed unit vector).
pub fn vector(text: &str, dim: usize) -> Vec<f32> {
    let mut v = vec![0f32; dim];
    for w in words(text) {
        let h = blake3::hash(w.as_bytes());
        let b = h.as_bytes();
        let i = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as usize % dim;
        v[i] += if b[8] & 1 == 0 { 1.0 } else { -1.0 };
    }
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if n > 0.0 {
        v.iter_mut().for_each(|x| *x /= n);
    } else {
        v[0] = 1.0;
    }
    v
}

async fn embeddings(
    State(state): State<Arc<EmbedState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let invalid = |m: &str| error(StatusCode::BAD_REQUEST, "invalid_request_error", m);
    if let Some(key) = &state.api_key {
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
        Err(e) => return invalid(&format!("the body is not JSON: {e}")),
    };
    lock(&state.requests).push(value.clone());
    if state.down.load(Ordering::SeqCst) {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "the stand-in is down",
        );
    }
    let Some(model) = value.get("model").and_then(Value::as_str) else {
        return invalid("`model` is missing or not a string");
    };
    let inputs: Vec<String> = match value.get("input") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) if !items.is_empty() => {
            match items
                .iter()
                .map(|i| i.as_str().map(str::to_owned))
                .collect()
            {
                Some(texts) => texts,
                None => return invalid("`input` must be a string or an array of strings"),
            }
        }
        _ => return invalid("`input` must be a string or a non-empty array of strings"),
    };
    if inputs.iter().any(|t| t.is_empty()) {
        return invalid("'$.input' is invalid: an input is an empty string");
    }
    match value.get("encoding_format").and_then(Value::as_str) {
        None | Some("float") => {}
        Some(other) => {
            return invalid(&format!(
                "encoding_format {other:?}: the stand-in sends float only"
            ))
        }
    }
    let Some(script) = EmbedScript::of(model) else {
        return error(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            &format!("The model `{model}` does not exist."),
        );
    };
    let count = {
        let mut seen = lock(&state.seen);
        let c = seen.entry(model.to_owned()).or_insert(0);
        *c += 1;
        *c
    };
    match &script {
        EmbedScript::MaxWords(max) => {
            if let Some((i, n)) = inputs
                .iter()
                .map(|t| words(t).len())
                .enumerate()
                .find(|(_, n)| n > max)
            {
                return invalid(&format!(
                    "input[{i}] is too long: {n} tokens, the model's maximum is {max}"
                ));
            }
        }
        EmbedScript::StatusTimes { code, times } if count <= *times => {
            let status = StatusCode::from_u16(*code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return error(
                status,
                "server_error",
                &format!("the stand-in answers {code}"),
            );
        }
        EmbedScript::Chat(s) => match s {
            Script::RateLimited => return rate_limited("1"),
            Script::RateLimitedLong => return rate_limited("3600"),
            Script::RateLimitedOnce { http_date } if count == 1 => {
                let at = std::time::SystemTime::now() + Duration::from_secs(1);
                return if *http_date {
                    rate_limited(&httpdate::fmt_http_date(at))
                } else {
                    rate_limited("1")
                };
            }
            Script::Status(code) | Script::StatusOnce(code)
                if count == 1 || matches!(s, Script::Status(_)) =>
            {
                let status =
                    StatusCode::from_u16(*code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                return error(
                    status,
                    "server_error",
                    &format!("the stand-in answers {code}"),
                );
            }
            Script::Slow(d) => tokio::time::sleep(*d).await,
            Script::Malformed => {
                return (
                    [(header::CONTENT_TYPE, "application/json")],
                    "{\"object\":\"list\",\"data\":[{\"embedding\":[0.1,",
                )
                    .into_response()
            }
            _ => {}
        },
        _ => {}
    }
    let dim = script.dim();
    let tokens: usize = inputs.iter().map(|t| words(t).len()).sum();
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": vector(t, dim)}))
        .collect();
    axum::Json(json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }))
    .into_response()
}
