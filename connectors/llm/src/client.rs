//! [`LlmClient`]: chat calls to an OpenAI-compatible `/chat/completions`, whole
//! ([`LlmClient::chat`]) or streamed ([`LlmClient::chat_stream`]), each within
//! `llm.max_concurrent` slots and `llm.deadline_ms`, retried on 429, 5xx and connection
//! failures until a response has begun (never once a stream has sent anything).

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use futures::Stream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::LlmSettings;
use crate::error::{LlmError, Result};
use crate::metrics::LlmMetrics;
use crate::retry;
use crate::wire::{
    error_message, ChatOptions, ChatRequest, ChatResponse, Completion, Message, StreamOptions,
};

/// A streamed answer: [`ChatEvent::Delta`](crate::ChatEvent::Delta)s, then one
/// [`ChatEvent::Done`](crate::ChatEvent::Done), or an error that ends it. Dropping it ends
/// the call (counted `cancelled`) and frees its slot.
pub type ChatStream = Pin<Box<dyn Stream<Item = Result<crate::ChatEvent>> + Send>>;

/// The client of one configured model. Cheap to clone (the slots are shared).
#[derive(Clone)]
pub struct LlmClient {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    endpoint: reqwest::Url,
    settings: LlmSettings,
    slots: Arc<Semaphore>,
    metrics: Option<LlmMetrics>,
}

impl std::fmt::Debug for LlmClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmClient")
            .field("endpoint", &self.inner.endpoint.as_str())
            .field("model", &self.inner.settings.model)
            .finish()
    }
}

/// What a call holds until it ends: its slot, and whether its outcome is counted yet. Dropped
/// before that (the caller gave up), it counts the call `cancelled`.
pub(crate) struct Call {
    slot: Option<OwnedSemaphorePermit>,
    metrics: Option<LlmMetrics>,
    pub(crate) started: Instant,
    pub(crate) deadline: Instant,
    first_token: bool,
    ended: bool,
}

impl Call {
    pub(crate) fn end(&mut self, outcome: &'static str) {
        if self.ended {
            return;
        }
        self.ended = true;
        self.slot = None;
        if let Some(m) = &self.metrics {
            m.outcome(outcome, self.started.elapsed());
        }
    }

    pub(crate) fn fail(&mut self, e: LlmError) -> LlmError {
        self.end(e.class());
        e
    }

    pub(crate) fn succeed(&mut self, usage: Option<&crate::Usage>) {
        if let (Some(m), Some(u)) = (&self.metrics, usage) {
            m.usage(u);
        }
        self.end("ok");
    }

    pub(crate) fn text_arrived(&mut self) {
        if !self.first_token {
            self.first_token = true;
            if let Some(m) = &self.metrics {
                m.first_token(self.started.elapsed());
            }
        }
    }

    /// The time left before the deadline.
    pub(crate) fn left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    pub(crate) fn timeout(&self, what: &'static str) -> LlmError {
        LlmError::Timeout {
            after: self.started.elapsed(),
            what,
        }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        self.end("cancelled");
    }
}

/// A failed attempt: retried while attempts and time are left, else the call's error.
pub(crate) enum Attempt {
    Retry {
        error: LlmError,
        reason: &'static str,
        retry_after: Option<Duration>,
    },
    Fail(LlmError),
}

impl LlmClient {
    /// A client of `settings` (`llm.*`, checked by
    /// [`LlmConfig::settings`](crate::LlmConfig::settings)).
    pub fn new(settings: LlmSettings) -> anyhow::Result<LlmClient> {
        let endpoint = settings
            .base_url
            .join("chat/completions")
            .context("llm.base_url: cannot add chat/completions to it")?;
        let http = reqwest::Client::builder()
            .connect_timeout(settings.connect_timeout)
            .build()
            .context("building the language model's HTTP client")?;
        Ok(LlmClient {
            inner: Arc::new(Inner {
                http,
                endpoint,
                slots: Arc::new(Semaphore::new(settings.max_concurrent)),
                settings,
                metrics: None,
            }),
        })
    }

    /// The same client recording into `metrics`.
    pub fn with_metrics(self, metrics: LlmMetrics) -> LlmClient {
        let inner = &self.inner;
        LlmClient {
            inner: Arc::new(Inner {
                http: inner.http.clone(),
                endpoint: inner.endpoint.clone(),
                settings: inner.settings.clone(),
                slots: inner.slots.clone(),
                metrics: Some(metrics),
            }),
        }
    }

    pub fn settings(&self) -> &LlmSettings {
        &self.inner.settings
    }

    /// The URL the client posts to (`<base_url>/chat/completions`).
    pub fn endpoint(&self) -> &str {
        self.inner.endpoint.as_str()
    }

    /// The whole answer to `messages`.
    pub async fn chat(&self, messages: &[Message], options: &ChatOptions) -> Result<Completion> {
        let mut call = self.begin(options);
        let body = self.request(messages, options, false);
        let response = self.send(&body, &mut call, false).await?;
        let bytes = match tokio::time::timeout(call.left(), response.bytes()).await {
            Err(_) => return Err(call.fail(call.timeout("the call's deadline (llm.deadline_ms)"))),
            Ok(Err(e)) if e.is_timeout() => {
                return Err(call.fail(call.timeout("one attempt (llm.timeout_ms)")))
            }
            Ok(Err(e)) => {
                return Err(call.fail(LlmError::Unavailable {
                    message: format!("the answer broke off: {}", describe(&e)),
                    attempts: 1,
                }))
            }
            Ok(Ok(b)) => b,
        };
        match whole(&bytes) {
            Ok(c) => {
                call.succeed(c.usage.as_ref());
                Ok(c)
            }
            Err(e) => Err(call.fail(e)),
        }
    }

    /// The answer to `messages` as it is written. Errors before the first event (refused,
    /// rate limited, unreachable) come back here, retried like [`chat`](Self::chat)'s; once the
    /// stream has begun, an error ends it and is not retried.
    pub async fn chat_stream(
        &self,
        messages: &[Message],
        options: &ChatOptions,
    ) -> Result<ChatStream> {
        let mut call = self.begin(options);
        let body = self.request(messages, options, true);
        let response = self.send(&body, &mut call, true).await?;
        Ok(crate::stream::events(
            response,
            call,
            self.inner.settings.stream_idle_timeout,
        ))
    }

    fn begin(&self, options: &ChatOptions) -> Call {
        let started = Instant::now();
        let budget = options.deadline.map_or(self.inner.settings.deadline, |d| {
            d.min(self.inner.settings.deadline)
        });
        Call {
            slot: None,
            metrics: self.inner.metrics.clone(),
            started,
            deadline: started + budget,
            first_token: false,
            ended: false,
        }
    }

    fn request<'a>(
        &'a self,
        messages: &'a [Message],
        options: &'a ChatOptions,
        stream: bool,
    ) -> ChatRequest<'a> {
        let s = &self.inner.settings;
        ChatRequest {
            model: &s.model,
            messages,
            max_tokens: options.max_tokens.unwrap_or(s.max_tokens),
            temperature: options.temperature.unwrap_or(s.temperature),
            stop: &options.stop,
            stream,
            stream_options: stream.then_some(StreamOptions {
                include_usage: true,
            }),
        }
    }

    /// Waits for a slot, then posts `body` until a 2xx response (its headers) or the call's
    /// error, retrying as the settings allow.
    async fn send(
        &self,
        body: &ChatRequest<'_>,
        call: &mut Call,
        stream: bool,
    ) -> Result<reqwest::Response> {
        let s = &self.inner.settings;
        let slot = tokio::time::timeout(call.left(), self.inner.slots.clone().acquire_owned());
        match slot.await {
            Ok(Ok(permit)) => call.slot = Some(permit),
            Ok(Err(_)) => {
                return Err(call.fail(LlmError::Unavailable {
                    message: "the client's slots are closed".into(),
                    attempts: 0,
                }))
            }
            Err(_) => {
                return Err(call.fail(call.timeout("waiting for a free slot (llm.max_concurrent)")))
            }
        }
        let mut attempt = 1u32;
        loop {
            let left = call.left();
            if left.is_zero() {
                return Err(call.fail(call.timeout("the call's deadline (llm.deadline_ms)")));
            }
            let (limit, what) = if s.timeout <= left {
                (s.timeout, "one attempt (llm.timeout_ms)")
            } else {
                (left, "the call's deadline (llm.deadline_ms)")
            };
            let mut request = self.inner.http.post(self.inner.endpoint.clone()).json(body);
            if let Some(key) = &s.api_key {
                request = request.bearer_auth(key.expose());
            }
            if !stream {
                // A whole answer: the limit covers reading the body too.
                request = request.timeout(limit);
            }
            let outcome = match tokio::time::timeout(limit, request.send()).await {
                Err(_) => Attempt::Fail(call.timeout(what)),
                Ok(Err(e)) if e.is_timeout() => Attempt::Fail(call.timeout(what)),
                Ok(Err(e)) => Attempt::Retry {
                    error: LlmError::Unavailable {
                        message: describe(&e),
                        attempts: attempt,
                    },
                    reason: "unavailable",
                    retry_after: None,
                },
                Ok(Ok(response)) if response.status().is_success() => return Ok(response),
                Ok(Ok(response)) => refusal(response, attempt, call.left()).await,
            };
            let (error, reason, retry_after) = match outcome {
                Attempt::Fail(e) => return Err(call.fail(e)),
                Attempt::Retry {
                    error,
                    reason,
                    retry_after,
                } => (error, reason, retry_after),
            };
            if attempt > s.retries {
                return Err(call.fail(error));
            }
            let wait = retry_after.unwrap_or_else(|| {
                retry::backoff(attempt, s.backoff_initial, s.backoff_max, fastrand::f64())
            });
            if wait >= call.left() {
                // The wait would outlast the deadline: give up now with what the server said.
                return Err(call.fail(error));
            }
            tracing::debug!(attempt, ?wait, error = %error, "language model call retried");
            if let Some(m) = &self.inner.metrics {
                m.retry(reason);
            }
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
    }
}

/// A non-2xx response as an attempt's outcome (its body read within `left`, at most 5 s).
pub(crate) async fn refusal(response: reqwest::Response, attempt: u32, left: Duration) -> Attempt {
    let status = response.status();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| retry::retry_after(v, SystemTime::now()));
    let body = tokio::time::timeout(left.min(Duration::from_secs(5)), response.text())
        .await
        .ok()
        .and_then(|r| r.ok())
        .unwrap_or_default();
    let message = error_message(&body);
    if status.as_u16() == 429 {
        Attempt::Retry {
            error: LlmError::RateLimited {
                attempts: attempt,
                retry_after,
            },
            reason: "rate_limited",
            retry_after,
        }
    } else if status.is_server_error() {
        Attempt::Retry {
            error: LlmError::Server {
                status: status.as_u16(),
                message,
                attempts: attempt,
            },
            reason: "server_error",
            retry_after,
        }
    } else {
        Attempt::Fail(LlmError::Refused {
            status: status.as_u16(),
            message,
        })
    }
}

/// A `chat.completion` body as a [`Completion`].
pub(crate) fn whole(bytes: &[u8]) -> Result<Completion> {
    let response: ChatResponse = serde_json::from_slice(bytes).map_err(|e| {
        LlmError::BadResponse(format!(
            "{e} (body starts {:?})",
            String::from_utf8_lossy(&bytes[..bytes.len().min(120)])
        ))
    })?;
    let Some(choice) = response.choices.into_iter().next() else {
        return Err(LlmError::BadResponse("no choices".into()));
    };
    Ok(Completion {
        text: choice.message.content.unwrap_or_default(),
        finish_reason: choice.finish_reason,
        usage: response.usage,
        model: response.model,
    })
}

/// A reqwest error with its causes (`connection refused` is a cause, not the error's text).
pub(crate) fn describe(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
