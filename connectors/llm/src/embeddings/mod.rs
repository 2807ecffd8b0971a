//! [`EmbeddingsClient`]: vectors from an OpenAI-compatible `/embeddings` server (TEI, vLLM,
//! Ollama, LiteLLM, hosted APIs). A call's texts go in requests of `batch_size`, at most
//! `max_concurrent` of them in flight and `requests_per_minute` started from this process, each
//! retried with back-off and jitter on 429, 5xx, timeouts and connection failures, honouring
//! `Retry-After`, within the call's deadline. Every vector must have the dimension configured or learnt from the first answer;
//! failures are [`LlmError`]s whose [`is_outage`](LlmError::is_outage) tells a server that is
//! away from a request it refuses.

mod config;
mod metrics;
#[cfg(test)]
mod tests;

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

pub use config::{EmbeddingsConfig, EmbeddingsSettings};
pub use metrics::EmbeddingsMetrics;

use crate::client::{describe, refusal, Attempt};
use crate::error::{LlmError, Result};
use crate::retry;

/// The client of one configured embedding model. Cheap to clone (slots and the learnt
/// dimension are shared).
#[derive(Clone)]
pub struct EmbeddingsClient {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    endpoint: reqwest::Url,
    settings: EmbeddingsSettings,
    slots: Semaphore,
    /// When the next request may start (`requests_per_minute`).
    next_start: tokio::sync::Mutex<Instant>,
    /// The dimension configured, or learnt from the first answer.
    dim: OnceLock<usize>,
    metrics: Option<EmbeddingsMetrics>,
}

impl std::fmt::Debug for EmbeddingsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddingsClient")
            .field("endpoint", &self.inner.endpoint.as_str())
            .field("model", &self.inner.settings.model)
            .finish()
    }
}

#[derive(Serialize)]
struct EmbeddingsRequest<'a> {
    model: &'a str,
    input: &'a [String],
    encoding_format: &'static str,
}

#[derive(Deserialize)]
struct EmbeddingsResponse {
    data: Vec<EmbeddingItem>,
    #[serde(default)]
    usage: Option<EmbeddingsUsage>,
}

#[derive(Deserialize)]
struct EmbeddingItem {
    embedding: Vec<f32>,
    index: usize,
}

#[derive(Deserialize)]
struct EmbeddingsUsage {
    #[serde(default)]
    prompt_tokens: u64,
}

impl EmbeddingsClient {
    /// A client of `settings` (checked by [`EmbeddingsConfig::settings`]).
    pub fn new(settings: EmbeddingsSettings) -> anyhow::Result<EmbeddingsClient> {
        let endpoint = settings
            .base_url
            .join("embeddings")
            .context("embedding.base_url: cannot add embeddings to it")?;
        let http = reqwest::Client::builder()
            .connect_timeout(settings.connect_timeout)
            .build()
            .context("building the embedding server's HTTP client")?;
        let dim = OnceLock::new();
        if let Some(d) = settings.dim {
            let _ = dim.set(d);
        }
        Ok(EmbeddingsClient {
            inner: Arc::new(Inner {
                http,
                endpoint,
                slots: Semaphore::new(settings.max_concurrent),
                next_start: tokio::sync::Mutex::new(Instant::now()),
                settings,
                dim,
                metrics: None,
            }),
        })
    }

    /// The same settings recording into `metrics` (a new client: slots are not shared).
    pub fn with_metrics(self, metrics: EmbeddingsMetrics) -> EmbeddingsClient {
        let i = &self.inner;
        let dim = OnceLock::new();
        if let Some(d) = i.dim.get() {
            let _ = dim.set(*d);
        }
        EmbeddingsClient {
            inner: Arc::new(Inner {
                http: i.http.clone(),
                endpoint: i.endpoint.clone(),
                slots: Semaphore::new(i.settings.max_concurrent),
                next_start: tokio::sync::Mutex::new(Instant::now()),
                settings: i.settings.clone(),
                dim,
                metrics: Some(metrics),
            }),
        }
    }

    pub fn settings(&self) -> &EmbeddingsSettings {
        &self.inner.settings
    }

    /// The URL the client posts to (`<base_url>/embeddings`).
    pub fn endpoint(&self) -> &str {
        self.inner.endpoint.as_str()
    }

    /// The vector dimension: configured, or learnt from the first answer (`None` before it).
    pub fn dim(&self) -> Option<usize> {
        self.inner.dim.get().copied()
    }

    /// One vector per text, in order, as the server computed them (not normalised). The texts
    /// go in requests of `batch_size`; the first request that fails fails the call.
    pub async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let started = Instant::now();
        let deadline = started + self.inner.settings.deadline;
        let batches = texts
            .chunks(self.inner.settings.batch_size)
            .map(|batch| self.embed_batch(batch, deadline));
        let results = futures::future::join_all(batches).await;
        let mut out = Vec::with_capacity(texts.len());
        for r in results {
            out.extend(r?);
        }
        Ok(out)
    }

    /// One request (with its retries) for `texts`.
    async fn embed_batch(&self, texts: &[String], deadline: Instant) -> Result<Vec<Vec<f32>>> {
        let started = Instant::now();
        let outcome = self.send(texts, deadline, started).await;
        if let Some(m) = &self.inner.metrics {
            let class = match &outcome {
                Ok(_) => "ok",
                Err(e) => e.class(),
            };
            m.outcome(class, started.elapsed());
            if let Ok((_, tokens)) = &outcome {
                m.inputs(texts.len() as u64, *tokens);
            }
        }
        outcome.map(|(v, _)| v)
    }

    async fn send(
        &self,
        texts: &[String],
        deadline: Instant,
        started: Instant,
    ) -> Result<(Vec<Vec<f32>>, u64)> {
        let s = &self.inner.settings;
        let timeout = |what: &'static str| LlmError::Timeout {
            after: started.elapsed(),
            what,
        };
        let left = || deadline.saturating_duration_since(Instant::now());
        let _slot = match tokio::time::timeout(left(), self.inner.slots.acquire()).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) => {
                return Err(LlmError::Unavailable {
                    message: "the client's slots are closed".into(),
                    attempts: 0,
                })
            }
            Err(_) => {
                return Err(timeout(
                    "waiting for a free slot (embedding.max_concurrent)",
                ))
            }
        };
        let body = EmbeddingsRequest {
            model: &s.model,
            input: texts,
            encoding_format: "float",
        };
        let mut attempt = 1u32;
        loop {
            if let Some(interval) = s.min_interval {
                // Take the next start time; waiting past the deadline is a timeout now.
                let start = {
                    let mut next = self.inner.next_start.lock().await;
                    let start = (*next).max(Instant::now());
                    if start >= deadline {
                        return Err(timeout(
                            "waiting for its turn (embedding.requests_per_minute)",
                        ));
                    }
                    *next = start + interval;
                    start
                };
                tokio::time::sleep_until(start.into()).await;
            }
            let left = left();
            if left.is_zero() {
                return Err(timeout("the call's deadline (embedding.deadline_ms)"));
            }
            let (limit, what) = if s.timeout <= left {
                (s.timeout, "one attempt (embedding.timeout_ms)")
            } else {
                (left, "the call's deadline (embedding.deadline_ms)")
            };
            let mut request = self
                .inner
                .http
                .post(self.inner.endpoint.clone())
                .json(&body)
                .timeout(limit);
            if let Some(key) = &s.api_key {
                request = request.bearer_auth(key.expose());
            }
            let sent = async {
                let response = request.send().await?;
                let status = response.status();
                if status.is_success() {
                    Ok(Ok(response.bytes().await?))
                } else {
                    Ok(Err(response))
                }
            };
            let outcome = match tokio::time::timeout(limit, sent).await {
                Err(_) => Attempt::Retry {
                    error: timeout(what),
                    reason: "timeout",
                    retry_after: None,
                },
                Ok(Err::<_, reqwest::Error>(e)) if e.is_timeout() => Attempt::Retry {
                    error: timeout(what),
                    reason: "timeout",
                    retry_after: None,
                },
                Ok(Err(e)) => Attempt::Retry {
                    error: LlmError::Unavailable {
                        message: describe(&e),
                        attempts: attempt,
                    },
                    reason: "unavailable",
                    retry_after: None,
                },
                Ok(Ok(Ok(bytes))) => return self.vectors(&bytes, texts.len()),
                Ok(Ok(Err(response))) => refusal(response, attempt, left).await,
            };
            let (error, reason, retry_after) = match outcome {
                Attempt::Fail(e) => return Err(e),
                Attempt::Retry {
                    error,
                    reason,
                    retry_after,
                } => (error, reason, retry_after),
            };
            if attempt > s.retries {
                return Err(error);
            }
            let wait = retry_after.unwrap_or_else(|| {
                retry::backoff(attempt, s.backoff_initial, s.backoff_max, fastrand::f64())
            });
            if wait >= deadline.saturating_duration_since(Instant::now()) {
                return Err(error);
            }
            tracing::debug!(attempt, ?wait, error = %error, "embedding request retried");
            if let Some(m) = &self.inner.metrics {
                m.retry(reason);
            }
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
    }

    /// The vectors of a 2xx body, in input order, checked: one per text, each index once, every
    /// vector of the model's dimension with finite components.
    fn vectors(&self, bytes: &[u8], n: usize) -> Result<(Vec<Vec<f32>>, u64)> {
        let bad = |m: String| LlmError::BadResponse(format!("embeddings: {m}"));
        let response: EmbeddingsResponse = serde_json::from_slice(bytes).map_err(|e| {
            let per_token = serde_json::from_slice::<serde_json::Value>(bytes)
                .ok()
                .and_then(|v| v.pointer("/data/0/embedding/0").map(|x| x.is_array()))
                .unwrap_or(false);
            if per_token {
                return bad(
                    "the server answers a vector per token, not per text: its model does not \
                     pool (serve a sentence-embedding model, or one with mean or CLS pooling)"
                        .into(),
                );
            }
            bad(format!(
                "{e} (body starts {:?})",
                String::from_utf8_lossy(&bytes[..bytes.len().min(120)])
            ))
        })?;
        if response.data.len() != n {
            return Err(bad(format!(
                "{} vectors for {n} texts",
                response.data.len()
            )));
        }
        let mut out: Vec<Option<Vec<f32>>> = vec![None; n];
        for item in response.data {
            let dim = *self.inner.dim.get_or_init(|| item.embedding.len());
            if item.embedding.len() != dim || dim == 0 {
                return Err(bad(format!(
                    "a {}-dimensional vector where the model's are {dim}-dimensional \
                     (embedding.dim or the first answer)",
                    item.embedding.len()
                )));
            }
            if !item.embedding.iter().all(|x| x.is_finite()) {
                return Err(bad(format!(
                    "the vector of text {} has a NaN or infinite component",
                    item.index
                )));
            }
            match out.get_mut(item.index) {
                Some(slot @ None) => *slot = Some(item.embedding),
                _ => {
                    return Err(bad(format!(
                        "index {} is out of range or repeated",
                        item.index
                    )))
                }
            }
        }
        let vectors = out.into_iter().flatten().collect::<Vec<_>>();
        let tokens = response.usage.map_or(0, |u| u.prompt_tokens);
        Ok((vectors, tokens))
    }
}

impl LlmError {
    /// Whether the error says the server is away or overwhelmed (timeout, 429, 5xx,
    /// unreachable) rather than refusing or garbling this request: worth waiting out.
    pub fn is_outage(&self) -> bool {
        matches!(
            self,
            LlmError::Timeout { .. }
                | LlmError::RateLimited { .. }
                | LlmError::Server { .. }
                | LlmError::Unavailable { .. }
        )
    }
}
