//! Query transformation before retrieval, by the language model (`[llm]`): a follow-up question
//! made standalone from the conversation's previous turns (`history`), multi-query rewrites
//! searched beside the question and fused with RRF ([`fuse`]), and HyDE, a hypothetical answer
//! passage embedded for the vector route while BM25 keeps the user's words (`auto`: for
//! analytical questions only, [`classify`]). Per request (`transform`, `history`:
//! [`request`]) or by default (`[transform]`: [`config`]).
//!
//! The prompts ([`prompts`]) see the question and the conversation only, never a passage; the
//! rewrites search with exactly the request's filter and principals. Answers are cached by
//! model, prompt and input (an LRU of `cache_entries`). All calls share `transform.timeout_ms`
//! within the request's deadline; a call that fails, runs out of time or answers something
//! unreadable leaves the question as it was, is reported in `degraded` (route `transform`) and
//! counted in `transform_steps_total`, and never fails the request.

pub mod classify;
pub mod config;
pub mod fuse;
pub mod prompts;
pub mod request;
#[cfg(test)]
mod tests;

use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::Instant;

use freshet_llm::{ChatOptions, LlmClient, Message};
use serde::Serialize;

use crate::metrics::Metrics;
use crate::retrieve::Degraded;
use config::{HydeMode, TransformConfig};
use prompts::Garbage;
use request::TransformPlan;

/// What a response reports of its transformation (`transform` in the response).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TransformInfo {
    /// The standalone question the conversation's last question was rewritten into (only with
    /// `history`); it is the question that was searched, reranked and packed for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub standalone_query: Option<String>,
    /// Every query searched, the (standalone) question first, then the rewrites.
    pub queries: Vec<String>,
    /// `off`, `on` or `auto`, as the request or `[transform] hyde` asked.
    pub hyde: &'static str,
    /// Whether the vector route embedded a hypothetical passage.
    pub hyde_used: bool,
    /// Why (or why not): `requested`, `off`, the classifier's reason under `auto`, or what failed.
    pub hyde_reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hyde_passage: Option<String>,
    /// The steps answered from the cache (`condense`, `multi_query`, `hyde`).
    pub cached: Vec<&'static str>,
    /// Calls made to the language model for this request.
    pub llm_calls: usize,
}

/// A transformation's outcome.
pub struct Transformed {
    /// The question to search: the standalone question, or the question as sent.
    pub question: String,
    /// The rewrites to search beside it.
    pub variants: Vec<String>,
    /// The text the question's vector route embeds instead of it (HyDE).
    pub passage: Option<String>,
    pub info: TransformInfo,
    pub degraded: Vec<Degraded>,
}

/// Why a step gave nothing: its `transform_steps_total` outcome and the words of `degraded`.
struct Failure {
    class: &'static str,
    reason: String,
}

/// The node's transformer: its settings, its cache of answers and its metrics.
pub struct Transformer {
    pub config: TransformConfig,
    cache: Option<Mutex<lru::LruCache<String, String>>>,
    pub(crate) metrics: Metrics,
}

impl Transformer {
    pub fn new(config: TransformConfig, metrics: Metrics) -> Transformer {
        let cache =
            NonZeroUsize::new(config.cache_entries).map(|n| Mutex::new(lru::LruCache::new(n)));
        Transformer {
            config,
            cache,
            metrics,
        }
    }

    fn cached(&self, key: &str) -> Option<String> {
        let cache = self.cache.as_ref()?;
        let mut c = cache.lock().unwrap_or_else(|p| p.into_inner());
        c.get(key).cloned()
    }

    fn remember(&self, key: String, answer: String) {
        if let Some(cache) = &self.cache {
            cache
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .put(key, answer);
        }
    }

    /// One step: the answer from the cache or the model, read by `read`; `calls` counts the
    /// model calls.
    async fn step<T>(
        &self,
        llm: &LlmClient,
        step: &'static str,
        messages: Vec<Message>,
        deadline: Instant,
        read: impl Fn(&str) -> Result<T, Garbage>,
        calls: &mut usize,
    ) -> Result<(T, bool), Failure> {
        let mut key = llm.settings().model.clone();
        for m in &messages {
            key.push('\u{0}');
            key.push_str(&m.content);
        }
        if let Some(answer) = self.cached(&key) {
            if let Ok(v) = read(&answer) {
                self.metrics.transform_step(step, "cache_hit");
                return Ok((v, true));
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let out = if left.is_zero() {
            Err(Failure {
                class: "timeout",
                reason: "no time was left of transform.timeout_ms".into(),
            })
        } else {
            *calls += 1;
            let options = ChatOptions {
                max_tokens: Some(self.config.max_tokens),
                deadline: Some(left),
                ..ChatOptions::default()
            };
            match tokio::time::timeout(left, llm.chat(&messages, &options)).await {
                Err(_) => Err(Failure {
                    class: "timeout",
                    reason: format!(
                        "the language model did not answer within {} ms (transform.timeout_ms)",
                        left.as_millis()
                    ),
                }),
                Ok(Err(e)) => Err(Failure {
                    class: e.class(),
                    reason: e.to_string(),
                }),
                Ok(Ok(c)) => match read(&c.text) {
                    Ok(v) => {
                        self.remember(key, c.text);
                        Ok((v, false))
                    }
                    Err(Garbage(why)) => Err(Failure {
                        class: "garbage",
                        reason: format!("the language model's answer is unusable: {why}"),
                    }),
                },
            }
        };
        match &out {
            Ok(_) => self.metrics.transform_step(step, "ok"),
            Err(f) => self.metrics.transform_step(step, f.class),
        }
        out
    }

    /// Runs `plan` for `question` before `deadline`; `vector_runs` says whether the vector
    /// route will run for a question (HyDE is pointless without it).
    pub async fn run(
        &self,
        llm: &LlmClient,
        question: &str,
        plan: &TransformPlan,
        max_query_chars: usize,
        deadline: Instant,
        vector_runs: &(dyn Fn(&str) -> bool + Sync),
    ) -> Transformed {
        let mut calls = 0;
        let mut cached = Vec::new();
        let mut degraded = Vec::new();
        let mut question = question.to_owned();
        let mut standalone = None;
        if !plan.history.is_empty() {
            let messages = prompts::condense(&plan.history, &question);
            let read = |a: &str| prompts::read_standalone(a, max_query_chars);
            match self
                .step(llm, "condense", messages, deadline, read, &mut calls)
                .await
            {
                Ok((q, hit)) => {
                    if hit {
                        cached.push("condense");
                    }
                    question = q.clone();
                    standalone = Some(q);
                }
                Err(f) => degraded.push(Degraded {
                    route: "transform",
                    reason: format!("condense: {}; searched the last question as sent", f.reason),
                }),
            }
        }
        let (hyde_wanted, mut hyde_reason) = match plan.hyde {
            HydeMode::Off => (false, "off".to_owned()),
            HydeMode::On => (true, "requested".to_owned()),
            HydeMode::Auto => {
                let d = classify::classify(&question);
                (d.analytical, format!("auto: {}", d.reason))
            }
        };
        let hyde_wanted = hyde_wanted && {
            let runs = vector_runs(&question);
            if !runs {
                hyde_reason = "the vector route does not run for this question".to_owned();
            }
            runs
        };
        let (mut calls_a, mut calls_b) = (0, 0);
        let multi = async {
            if plan.multi_query == 0 {
                return None;
            }
            let messages = prompts::multi_query(&question, plan.multi_query);
            let read =
                |a: &str| prompts::read_variants(a, &question, plan.multi_query, max_query_chars);
            Some(
                self.step(llm, "multi_query", messages, deadline, read, &mut calls_a)
                    .await,
            )
        };
        let hyde = async {
            if !hyde_wanted {
                return None;
            }
            let messages = prompts::hyde(&question);
            Some(
                self.step(
                    llm,
                    "hyde",
                    messages,
                    deadline,
                    prompts::read_passage,
                    &mut calls_b,
                )
                .await,
            )
        };
        let (multi, hyde) = tokio::join!(multi, hyde);
        calls += calls_a + calls_b;
        let mut variants = Vec::new();
        match multi {
            None => {}
            Some(Ok((v, hit))) => {
                if hit {
                    cached.push("multi_query");
                }
                variants = v;
            }
            Some(Err(f)) => degraded.push(Degraded {
                route: "transform",
                reason: format!("multi_query: {}; searched without rewrites", f.reason),
            }),
        }
        let mut passage = None;
        match hyde {
            None => {}
            Some(Ok((p, hit))) => {
                if hit {
                    cached.push("hyde");
                }
                passage = Some(p);
            }
            Some(Err(f)) => {
                hyde_reason = format!("failed: {}", f.class);
                degraded.push(Degraded {
                    route: "transform",
                    reason: format!("hyde: {}; the vector route embedded the question", f.reason),
                });
            }
        }
        let mut queries = vec![question.clone()];
        queries.extend(variants.iter().cloned());
        Transformed {
            info: TransformInfo {
                standalone_query: standalone,
                queries,
                hyde: plan.hyde.as_str(),
                hyde_used: passage.is_some(),
                hyde_reason,
                hyde_passage: passage.clone(),
                cached,
                llm_calls: calls,
            },
            question,
            variants,
            passage,
            degraded,
        }
    }
}
