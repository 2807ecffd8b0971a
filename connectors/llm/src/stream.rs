//! A streamed answer: OpenAI's server-sent events (`data: {chat.completion.chunk}` …
//! `data: [DONE]`) read with `eventsource-stream` into [`ChatEvent`]s, each wait bounded by
//! `llm.stream_idle_timeout_ms` and the call's deadline. A server that ignores `stream` and
//! answers a whole `chat.completion` is read as one delta and the end.

use std::time::Duration;

use eventsource_stream::{EventStreamError, Eventsource};
use futures::{Stream, StreamExt};

use crate::client::{describe, whole, Call, ChatStream};
use crate::error::{LlmError, Result};
use crate::wire::{error_message, ChatChunk, ChatEvent, Usage};

type Events = std::pin::Pin<
    Box<
        dyn Stream<
                Item = std::result::Result<
                    eventsource_stream::Event,
                    EventStreamError<reqwest::Error>,
                >,
            > + Send,
    >,
>;

struct State {
    source: Source,
    call: Call,
    idle: Duration,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    ended: bool,
}

enum Source {
    Events(Events),
    /// A whole answer still to read (the server did not stream).
    Whole(Option<reqwest::Response>),
    /// The whole answer's end, still to hand out.
    Finished(Option<ChatEvent>),
}

/// The events of a 2xx `response` to a streamed request.
pub(crate) fn events(response: reqwest::Response, call: Call, idle: Duration) -> ChatStream {
    let json = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("application/json"));
    let source = if json {
        Source::Whole(Some(response))
    } else {
        Source::Events(Box::pin(response.bytes_stream().eventsource()))
    };
    let state = State {
        source,
        call,
        idle,
        finish_reason: None,
        usage: None,
        ended: false,
    };
    Box::pin(futures::stream::unfold(state, |mut s| async move {
        if s.ended {
            return None;
        }
        let item = s.next().await;
        if item.as_ref().is_err() || matches!(item, Ok(ChatEvent::Done { .. })) {
            s.ended = true;
        }
        Some((item, s))
    }))
}

impl State {
    async fn next(&mut self) -> Result<ChatEvent> {
        loop {
            match &mut self.source {
                Source::Finished(done) => {
                    let done = done.take().unwrap_or(ChatEvent::Done {
                        finish_reason: None,
                        usage: None,
                    });
                    return Ok(done);
                }
                Source::Whole(response) => {
                    let Some(response) = response.take() else {
                        return Err(self.fail(LlmError::BadResponse("read twice".into())));
                    };
                    let bytes = tokio::time::timeout(self.call.left(), response.bytes()).await;
                    let bytes = match bytes {
                        Err(_) => {
                            let e = self.call.timeout("the call's deadline (llm.deadline_ms)");
                            return Err(self.fail(e));
                        }
                        Ok(Err(e)) => {
                            return Err(self.fail(LlmError::Unavailable {
                                message: format!("the answer broke off: {}", describe(&e)),
                                attempts: 1,
                            }))
                        }
                        Ok(Ok(b)) => b,
                    };
                    let c = whole(&bytes).map_err(|e| self.fail(e))?;
                    self.source = Source::Finished(Some(ChatEvent::Done {
                        finish_reason: c.finish_reason,
                        usage: c.usage,
                    }));
                    if let Some(u) = &c.usage {
                        self.usage = Some(*u);
                    }
                    if !c.text.is_empty() {
                        self.call.text_arrived();
                        return Ok(ChatEvent::Delta(c.text));
                    }
                }
                Source::Events(events) => {
                    let left = self.call.left();
                    let (limit, what) = if self.idle < left {
                        (self.idle, "a silent stream (llm.stream_idle_timeout_ms)")
                    } else {
                        (left, "the call's deadline (llm.deadline_ms)")
                    };
                    let event = match tokio::time::timeout(limit, events.next()).await {
                        Err(_) => {
                            let e = self.call.timeout(what);
                            return Err(self.fail(e));
                        }
                        Ok(None) => return self.end_of_stream(),
                        Ok(Some(Err(EventStreamError::Transport(e)))) => {
                            return Err(self.fail(if e.is_timeout() {
                                self.call.timeout(what)
                            } else {
                                LlmError::Unavailable {
                                    message: format!("the stream broke off: {}", describe(&e)),
                                    attempts: 1,
                                }
                            }))
                        }
                        Ok(Some(Err(e))) => {
                            return Err(self.fail(LlmError::BadResponse(format!(
                                "unreadable server-sent events: {e}"
                            ))))
                        }
                        Ok(Some(Ok(event))) => event,
                    };
                    if let Some(item) = self.chunk(&event.data)? {
                        return Ok(item);
                    }
                }
            }
        }
    }

    /// One `data:` payload: an event to hand out, or none (a chunk without text).
    fn chunk(&mut self, data: &str) -> Result<Option<ChatEvent>> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(None);
        }
        if data == "[DONE]" {
            // Every server says why the model stopped before it is done; a stream without it
            // was cut off (llama.cpp's server does so when another request arrives, unless it
            // runs with --interrupt_requests false).
            if self.finish_reason.is_none() {
                return Err(self.fail(LlmError::BadResponse(
                    "the stream sent [DONE] without a finish_reason: the answer was cut off".into(),
                )));
            }
            return Ok(Some(self.done()));
        }
        let value: serde_json::Value = serde_json::from_str(data).map_err(|e| {
            let start: String = data.chars().take(120).collect();
            self.fail(LlmError::BadResponse(format!(
                "a stream chunk is not JSON: {e} (it starts {start:?})"
            )))
        })?;
        if let Some(error) = value.get("error") {
            let message = error_message(&serde_json::json!({ "error": error }).to_string());
            return Err(self.fail(LlmError::BadResponse(format!(
                "the server reported an error in the stream: {message}"
            ))));
        }
        let chunk: ChatChunk = serde_json::from_value(value).map_err(|e| {
            self.fail(LlmError::BadResponse(format!(
                "a stream chunk is not a chat.completion.chunk: {e}"
            )))
        })?;
        if let Some(u) = chunk.usage {
            self.usage = Some(u);
        }
        let mut text = String::new();
        if let Some(choice) = chunk.choices.into_iter().next() {
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
            text = choice.delta.content.unwrap_or_default();
        }
        if text.is_empty() {
            return Ok(None);
        }
        self.call.text_arrived();
        Ok(Some(ChatEvent::Delta(text)))
    }

    /// The stream closed without `[DONE]`: complete if the server said why the model stopped,
    /// else cut off.
    fn end_of_stream(&mut self) -> Result<ChatEvent> {
        if self.finish_reason.is_some() {
            Ok(self.done())
        } else {
            Err(self.fail(LlmError::BadResponse(
                "the stream ended before [DONE] or a finish_reason".into(),
            )))
        }
    }

    fn done(&mut self) -> ChatEvent {
        self.call.succeed(self.usage.as_ref());
        ChatEvent::Done {
            finish_reason: self.finish_reason.take(),
            usage: self.usage.take(),
        }
    }

    fn fail(&mut self, e: LlmError) -> LlmError {
        self.call.fail(e)
    }
}
