//! The `/v1/answer` handler. Everything before the model is called (the key, the body, the
//! waits, the retrieval) fails as an ordinary JSON error. A whole answer is one JSON object; a
//! model that fails is a 503 (`llm_<class>`). A streamed answer is server-sent events:
//! `retrieval` (the question, passages and index commit, before any token), `delta` (each piece
//! of text as the model writes it), then exactly one `done` (the whole answer, as a whole
//! response has it: the citations are never lost) or one `error`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use freshet_llm::{ChatEvent, ChatOptions};
use freshet_service::{body, ApiError};
use futures::channel::mpsc;
use futures::{SinkExt, StreamExt};
use serde_json::json;

use super::request::{self, AnswerOptions};
use super::{llm_failure, Prepared, Said};
use crate::auth::Admission;
use crate::node::Node;
use crate::request::RetrieveRequest;
use crate::retrieve::Engine;
use crate::wait::{wait_for_offset, DEFAULT_WAIT_MS};

/// `POST /v1/answer`.
pub async fn answer(State(node): State<Arc<Node>>, headers: HeaderMap, body: Body) -> Response {
    let engine = node.engine.clone();
    let mut mode = "unknown";
    let prepared = async {
        let admission = node.auth.admit(&headers)?;
        let llm = engine.answer_model().map_err(ApiError::from)?;
        let body = body::read(body, engine.config.query.max_body_bytes).await?;
        let (req, opts) = request::parse(&body, &engine.config.answer, llm.settings().max_tokens)
            .map_err(|e| ApiError::bad_request(e.0))?;
        let p = prepare(&node, &admission, req, &opts, &mut mode).await?;
        Ok::<_, ApiError>((p, opts))
    }
    .await;
    let (p, opts) = match prepared {
        Ok(x) => x,
        Err(e) => {
            engine.metrics.request("answer", mode, e.code);
            return e.into_response();
        }
    };
    if opts.stream {
        engine.metrics.request("answer", mode, "ok");
        return stream(engine, p, opts).into_response();
    }
    let result = whole(&engine, p, &opts).await;
    crate::http::respond(&engine, "answer", mode, result, |r| !r.degraded.is_empty())
}

/// A `/v1/answer` body answered whole for `admission` (the MCP `answer` tool); `mode` is set
/// once the plan has one. A `stream` request is answered whole.
pub(crate) async fn answer_for(
    node: &Node,
    admission: &Admission,
    body: &[u8],
    mode: &mut &'static str,
) -> Result<super::AnswerResponse, ApiError> {
    let engine = &node.engine;
    let llm = engine.answer_model().map_err(ApiError::from)?;
    let (req, opts) = request::parse(body, &engine.config.answer, llm.settings().max_tokens)
        .map_err(|e| ApiError::bad_request(e.0))?;
    let p = prepare(node, admission, req, &opts, mode).await?;
    whole(engine, p, &opts).await
}

/// Plans `req` with the node's settings and the caller's principals, waits for its
/// `wait_for` offsets, retrieves and builds the prompt; `mode` is set once the plan has one.
pub(crate) async fn prepare(
    node: &Node,
    admission: &Admission,
    req: RetrieveRequest,
    opts: &AnswerOptions,
    mode: &mut &'static str,
) -> Result<Prepared, ApiError> {
    let engine = &node.engine;
    let requested = req.principals.clone();
    let mut plan = req
        .plan_with(
            &engine.config.query,
            &engine.config.transform,
            engine.reranker.is_some(),
            true,
        )
        .map_err(|e| ApiError::bad_request(e.0))?;
    *mode = plan.mode.as_str();
    plan.filter.principals = Some(node.auth.principals(admission, requested)?);
    wait_all(engine, opts).await?;
    crate::http::run_with_timeout(engine, engine.prepare_answer(plan)).await
}

/// Waits until every offset of `wait_for` is searchable (504 when one is not in time).
async fn wait_all(engine: &Engine, opts: &AnswerOptions) -> Result<(), ApiError> {
    let poll = Duration::from_millis(engine.config.query.reload_interval_ms.clamp(5, 100));
    for w in &opts.wait_for {
        let timeout = Duration::from_millis(w.timeout_ms.unwrap_or(DEFAULT_WAIT_MS));
        if let Err(seen) = wait_for_offset(&engine.indexes, w, timeout, poll).await {
            return Err(ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                "timeout",
                format!(
                    "wait_for: offset {} of {}/{} not searchable after {} ms (next offset \
                     served: {})",
                    w.offset,
                    w.topic,
                    w.partition,
                    timeout.as_millis(),
                    seen.map_or("none".to_string(), |n| n.to_string())
                ),
            ));
        }
    }
    Ok(())
}

fn chat_options(opts: &AnswerOptions) -> ChatOptions {
    ChatOptions {
        max_tokens: opts.max_tokens,
        temperature: opts.temperature,
        ..Default::default()
    }
}

pub(crate) async fn whole(
    engine: &Engine,
    mut p: Prepared,
    opts: &AnswerOptions,
) -> Result<super::AnswerResponse, ApiError> {
    let said = match (&p.messages, engine.llm.as_ref()) {
        (Some(messages), Some(llm)) => {
            let s = std::time::Instant::now();
            let c = llm.chat(messages, &chat_options(opts)).await.map_err(|e| {
                let (code, message) = llm_failure(&e);
                engine.metrics.answer_failed(&code);
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, leak(&code), message)
            })?;
            p.timings_ms.insert("llm", super::ms(s));
            Some(Said {
                text: c.text,
                model: c.model,
                finish_reason: c.finish_reason,
                usage: c.usage,
            })
        }
        _ => None,
    };
    Ok(engine.finish_answer(p, said, opts.grounding).await)
}

/// An error code as the `&'static str` [`ApiError`] takes: one of the model's classes.
pub(crate) fn leak(code: &str) -> &'static str {
    const CODES: [&str; 6] = [
        "llm_timeout",
        "llm_rate_limited",
        "llm_server_error",
        "llm_unavailable",
        "llm_refused",
        "llm_bad_response",
    ];
    CODES
        .iter()
        .find(|c| **c == code)
        .copied()
        .unwrap_or("llm_error")
}

/// The event stream of an answer: a task drives the model and sends events until the client
/// goes away (its channel closes; the model's stream is dropped, which ends the call).
fn stream(engine: Arc<Engine>, p: Prepared, opts: AnswerOptions) -> impl IntoResponse {
    let (mut tx, rx) = mpsc::channel::<Event>(32);
    tokio::spawn(async move {
        let head = json!({
            "question": p.question,
            "transform": p.retrieval.transform,
            "passages": p.passages,
            "index": p.retrieval.index,
            "language": p.retrieval.language,
            "mode": p.retrieval.mode,
            "degraded": p.retrieval.degraded,
            "left_out": p.retrieval.left_out,
            "timings_ms": p.timings_ms,
        });
        if tx.send(event("retrieval", &head)).await.is_err() {
            return;
        }
        let said = match (&p.messages, engine.llm.as_ref()) {
            (Some(messages), Some(llm)) => {
                match relay(llm, messages, &opts, &mut tx, delta).await {
                    Ok(Some((said, first_token_ms, llm_ms))) => {
                        let mut p = p;
                        if let Some(ft) = first_token_ms {
                            p.timings_ms.insert("first_token", ft);
                        }
                        p.timings_ms.insert("llm", llm_ms);
                        let r = engine.finish_answer(p, Some(said), opts.grounding).await;
                        let _ = tx.send(event("done", &r)).await;
                        return;
                    }
                    Ok(None) => return, // the client went away
                    Err(e) => {
                        let (code, message) = llm_failure(&e);
                        engine.metrics.answer_failed(&code);
                        let body = json!({"error": {"code": code, "message": message}});
                        let _ = tx.send(event("error", &body)).await;
                        return;
                    }
                }
            }
            _ => None,
        };
        let r = engine.finish_answer(p, said, opts.grounding).await;
        if tx
            .send(event("delta", &json!({"text": r.answer})))
            .await
            .is_ok()
        {
            let _ = tx.send(event("done", &r)).await;
        }
    });
    Sse::new(rx.map(Ok::<_, Infallible>)).keep_alive(KeepAlive::default())
}

/// A `delta` event of `piece`.
fn delta(piece: &str) -> Event {
    event("delta", &json!({"text": piece}))
}

/// Relays the model's pieces as events (`as_event` makes each one). `Ok(None)` when the
/// client went away.
pub(crate) async fn relay(
    llm: &freshet_llm::LlmClient,
    messages: &[freshet_llm::Message],
    opts: &AnswerOptions,
    tx: &mut mpsc::Sender<Event>,
    as_event: impl Fn(&str) -> Event,
) -> Result<Option<(Said, Option<f64>, f64)>, freshet_llm::LlmError> {
    let s = std::time::Instant::now();
    let mut events = llm.chat_stream(messages, &chat_options(opts)).await?;
    let mut text = String::new();
    let mut first_token = None;
    while let Some(ev) = events.next().await {
        match ev? {
            ChatEvent::Delta(piece) => {
                first_token.get_or_insert_with(|| super::ms(s));
                text.push_str(&piece);
                if tx.send(as_event(&piece)).await.is_err() {
                    return Ok(None);
                }
            }
            ChatEvent::Done {
                finish_reason,
                usage,
            } => {
                let said = Said {
                    text,
                    model: llm.settings().model.clone(),
                    finish_reason,
                    usage,
                };
                return Ok(Some((said, first_token, super::ms(s))));
            }
        }
    }
    Err(freshet_llm::LlmError::BadResponse(
        "the stream ended without its end".into(),
    ))
}

fn event(name: &str, data: &impl serde::Serialize) -> Event {
    let data = serde_json::to_string(data).unwrap_or_else(|e| {
        json!({"error": {"code": "internal", "message": e.to_string()}}).to_string()
    });
    Event::default().event(name).data(data)
}
