//! The handlers of `GET /v1/models`, `GET /v1/models/{model}` and `POST /v1/chat/completions`.
//! A chat request is admitted like every other route (the key in `Authorization: Bearer`, its
//! principals and limits), read into a `/v1/answer` request for its assistant
//! (`messages.rs`), prepared and finished by the answer module, and sent in OpenAI's shapes
//! (`shapes.rs`): one `chat.completion`, or `chat.completion.chunk` events ending with
//! `data: [DONE]`. A model that fails after a stream began is an `error` chunk, and no
//! `[DONE]`.

use std::convert::Infallible;
use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use freshet_service::{body, ApiError};
use futures::channel::mpsc;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};

use super::assistants;
use super::messages::{self, HistoryLimits};
use super::shapes::{self, Head, OpenAiError};
use crate::answer::http::{prepare, relay, whole};
use crate::answer::{llm_failure, request, AnswerOptions, Prepared};
use crate::node::Node;
use crate::retrieve::Engine;

/// When the node started (seconds since the epoch): the `created` of its models.
pub fn started() -> u64 {
    static STARTED: OnceLock<u64> = OnceLock::new();
    *STARTED.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    })
}

/// `GET /v1/models`: every assistant.
pub async fn models(State(node): State<Arc<Node>>, headers: HeaderMap) -> Response {
    let engine = &node.engine;
    match node.auth.admit(&headers) {
        Ok(_) => {
            engine.metrics.request("models", "none", "ok");
            let list = assistants::all(&engine.config.answer.assistants);
            Json(shapes::models(&list, started())).into_response()
        }
        Err(e) => {
            engine.metrics.request("models", "none", e.code);
            OpenAiError::from(e).into_response()
        }
    }
}

/// `GET /v1/models/{model}`: one assistant, or a 404.
pub async fn model(
    State(node): State<Arc<Node>>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    let engine = &node.engine;
    let found = node
        .auth
        .admit(&headers)
        .map_err(OpenAiError::from)
        .and_then(|_| {
            assistants::find(&engine.config.answer.assistants, &name)
                .ok_or_else(|| OpenAiError::unknown_model(&name))
        });
    match found {
        Ok(a) => {
            engine.metrics.request("models", "none", "ok");
            Json(shapes::model(&a, started())).into_response()
        }
        Err(e) => {
            engine.metrics.request("models", "none", e.error.code);
            e.into_response()
        }
    }
}

/// What a chat request asks, ready to answer.
struct Asked {
    head: Head,
    prepared: Prepared,
    opts: AnswerOptions,
    stream: bool,
    include_usage: bool,
}

/// `POST /v1/chat/completions`.
pub async fn chat_completions(
    State(node): State<Arc<Node>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let engine = node.engine.clone();
    let mut mode = "unknown";
    let asked = async {
        let admission = node.auth.admit(&headers)?;
        let llm = engine.answer_model().map_err(ApiError::from)?;
        let body = body::read(body, engine.config.query.max_body_bytes).await?;
        let value: Value = serde_json::from_slice(&body)
            .map_err(|e| OpenAiError::bad_request(format!("invalid request body: {e}"), None))?;
        let t = &engine.config.transform;
        let limits = HistoryLimits {
            turns: t.max_history_turns,
            chars: t.max_history_chars,
        };
        let chat = messages::parse(&value, limits)
            .map_err(|e| OpenAiError::bad_request(e.message, e.param))?;
        let assistant = assistants::find(&engine.config.answer.assistants, &chat.model)
            .ok_or_else(|| OpenAiError::unknown_model(&chat.model))?;
        let answer_body = messages::answer_body(&chat, &assistant.options)
            .map_err(|e| OpenAiError::bad_request(e.message, e.param))?;
        let (req, opts) = request::parse_value(
            answer_body,
            &engine.config.answer,
            llm.settings().max_tokens,
        )
        .map_err(|e| {
            let param = messages::param_of(&e.0);
            OpenAiError::bad_request(e.0, param)
        })?;
        let prepared = prepare(&node, &admission, req, &opts, &mut mode).await?;
        Ok::<_, OpenAiError>(Asked {
            head: Head::new(&assistant.name),
            prepared,
            opts,
            stream: chat.stream,
            include_usage: chat.include_usage,
        })
    }
    .await;
    let asked = match asked {
        Ok(a) => a,
        Err(e) => {
            engine
                .metrics
                .request("chat_completions", mode, e.error.code);
            return e.into_response();
        }
    };
    if asked.stream {
        engine.metrics.request("chat_completions", mode, "ok");
        return stream(engine, asked).into_response();
    }
    match whole(&engine, asked.prepared, &asked.opts).await {
        Ok(r) => {
            let outcome = if r.degraded.is_empty() {
                "ok"
            } else {
                "degraded"
            };
            engine.metrics.request("chat_completions", mode, outcome);
            Json(shapes::completion(&asked.head, &r)).into_response()
        }
        Err(e) => {
            engine.metrics.request("chat_completions", mode, e.code);
            OpenAiError::from(e).into_response()
        }
    }
}

fn data(v: &Value) -> Event {
    Event::default().data(v.to_string())
}

/// The chunks of an answer: the role, the text as the model writes it, the last chunk with
/// the finish reason and the citations, the usage chunk when asked, `[DONE]`.
fn stream(engine: Arc<Engine>, asked: Asked) -> impl IntoResponse {
    let (mut tx, rx) = mpsc::channel::<Event>(32);
    tokio::spawn(async move {
        let Asked {
            head,
            prepared: p,
            opts,
            include_usage: usage,
            ..
        } = asked;
        let first = shapes::chunk(
            &head,
            json!({"role": "assistant", "content": ""}),
            None,
            usage,
        );
        if tx.send(data(&first)).await.is_err() {
            return;
        }
        let r = match (&p.messages, engine.llm.as_ref()) {
            (Some(messages), Some(llm)) => {
                let h = head.clone();
                let piece = move |text: &str| {
                    data(&shapes::chunk(&h, json!({"content": text}), None, usage))
                };
                match relay(llm, messages, &opts, &mut tx, piece).await {
                    Ok(Some((said, first_token_ms, llm_ms))) => {
                        let mut p = p;
                        if let Some(ft) = first_token_ms {
                            p.timings_ms.insert("first_token", ft);
                        }
                        p.timings_ms.insert("llm", llm_ms);
                        engine.finish_answer(p, Some(said), opts.grounding).await
                    }
                    Ok(None) => return, // the client went away
                    Err(e) => {
                        let (code, message) = llm_failure(&e);
                        engine.metrics.answer_failed(&code);
                        let body = json!({"error": {"message": message, "type": "server_error",
                                                     "param": null, "code": code}});
                        let _ = tx.send(data(&body)).await;
                        return;
                    }
                }
            }
            _ => {
                let r = engine.finish_answer(p, None, opts.grounding).await;
                let text = shapes::chunk(&head, json!({"content": r.answer}), None, usage);
                if tx.send(data(&text)).await.is_err() {
                    return;
                }
                r
            }
        };
        let mut tail = vec![data(&shapes::last_chunk(&head, &r, usage))];
        if usage {
            tail.push(data(&shapes::usage_chunk(&head, &r)));
        }
        tail.push(Event::default().data("[DONE]"));
        for e in tail {
            if tx.send(e).await.is_err() {
                return;
            }
        }
    });
    Sse::new(rx.map(Ok::<_, Infallible>)).keep_alive(KeepAlive::default())
}
