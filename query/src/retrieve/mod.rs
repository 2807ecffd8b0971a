//! One retrieval, stage by stage: BM25 (tantivy) and vector (Milvus) routes in parallel, both
//! filtered inside the search → fusion → parents → rerank → context expansion (→ rerank of the
//! merged passages) → top k → context packing. Every stage is timed; every result carries its
//! per-stage ranks and scores. A query transformation ([`crate::transform`]) may run first and
//! add queries: each is searched, and their rankings are fused across queries.
//!
//! A retrieval holds one slot of the node ([`crate::overload`]) and reads one pinned index
//! snapshot for its BM25 search and every chunk it loads after it (`load.rs`); every chunk that
//! ends up in the answer passed the request's filter and principals once more
//! ([`crate::visible`]). `hit.rs` turns candidates into results.

pub(crate) mod hit;
mod load;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use freshet_core::chunk::HfTokenCounter;
use freshet_tantivy::Snapshot;
use serde::Serialize;

use crate::config::Config;
use crate::fusion::StageScore;
use crate::language::QueryLanguage;
use crate::metrics::Metrics;
use crate::overload::{Job, Limiter, Refused};
use crate::pack::{pack_until, Citation, PackInput};
use crate::request::{Mode, Plan};
use crate::rerank::Reranker;
use crate::serving::Serving;
use crate::visible::{Gate, Visible};

pub(crate) use load::Loads;

use axum::http::StatusCode;
use freshet_service::ApiError;

/// Why a retrieval failed.
#[derive(Debug)]
pub enum RetrieveError {
    /// A dependency is down or not ready (HTTP 503).
    Unavailable(String),
    /// The request was valid JSON but cannot be run (HTTP 400), e.g. a filter the index rejects.
    BadRequest(String),
    /// A bug or an unexpected failure (HTTP 500).
    Internal(String),
    /// The request ran past its deadline (HTTP 503 `timeout`); its work stopped.
    TimedOut,
    /// The node is running as many retrievals as it may, and the line is full or was too slow
    /// (HTTP 503 `overloaded` with `Retry-After`).
    Overloaded(Refused),
}

/// Per-stage ranks and scores of a result.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Scores {
    pub bm25: Option<StageScore>,
    pub vector: Option<StageScore>,
    pub fused: Option<StageScore>,
    pub rerank: Option<StageScore>,
}

/// One result: a chunk, or a passage of merged neighbouring chunks, or a parent.
#[derive(Clone, Debug, Serialize)]
pub struct Hit {
    /// 1-based.
    pub rank: usize,
    /// The chunk that matched (for a parent: the parent's id).
    pub chunk_id: String,
    pub doc_id: String,
    pub kind: &'static str,
    pub parent_id: Option<String>,
    pub title: String,
    pub source: String,
    pub section: Vec<String>,
    pub chunk_index: u32,
    /// Character span of `text` in the cleaned document.
    pub char_start: u32,
    pub char_end: u32,
    pub text: String,
    pub metadata: serde_json::Value,
    /// For a paged document (PDF): the first and last page of the passage (its chunks'
    /// `page_start` / `page_end` metadata).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_start: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_end: Option<u32>,
    /// The final score: rerank score if reranked, else the fusion (or single-route) score.
    pub score: f32,
    pub scores: Scores,
    /// Chunks merged into this passage (context expansion), in document order.
    pub passage_chunk_ids: Vec<String>,
    /// Parent-child: the children that matched, best first.
    pub matched_children: Vec<String>,
    /// With `"highlight": true`: where the query's terms occur in `text`, as character ranges
    /// `[start, end)` (Unicode scalar values, like `char_start`), by the BM25 index's analyzers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub highlights: Option<Vec<[usize; 2]>>,
}

/// Index state a response reflects.
#[derive(Clone, Debug, Serialize)]
pub struct IndexInfo {
    pub epoch: u64,
    pub committed_at_ms: u64,
    /// Age of that commit when the response was made.
    pub age_ms: u64,
    /// The index generation that answered (with `[query] serving_pointer` set): every result
    /// of the response comes from it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<String>,
}

/// A `/v1/retrieve` answer.
#[derive(Clone, Debug, Serialize)]
pub struct Response {
    pub results: Vec<Hit>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub citations: Option<Vec<Citation>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_tokens: Option<usize>,
    pub mode: &'static str,
    /// Milliseconds per stage (`total` included).
    pub timings_ms: BTreeMap<&'static str, f64>,
    pub index: IndexInfo,
    /// Routes left out because they were unavailable (only with `allow_partial`); absent when
    /// the answer is complete.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub degraded: Vec<Degraded>,
    /// The query's language and whether the embedding model understands it.
    pub language: QueryLanguage,
    /// Routes a hybrid retrieval left out on purpose (a query in a language the model does not
    /// cover, `[query] language_routing`); absent when every route ran.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<Degraded>,
    /// The query transformation that ran (the standalone question, the queries searched,
    /// HyDE); absent when none was asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transform: Option<crate::transform::TransformInfo>,
}

/// A route a partial answer was made without, and why.
#[derive(Clone, Debug, Serialize)]
pub struct Degraded {
    pub route: &'static str,
    pub reason: String,
}

/// Everything a retrieval needs; shared by request handlers.
pub struct Engine {
    pub config: Config,
    /// The index generation served (pin [`Serving::current`] for a whole request).
    pub indexes: Arc<Serving>,
    pub reranker: Option<Reranker>,
    pub counter: Arc<HfTokenCounter>,
    pub metrics: Metrics,
    /// Retrievals running at once and waiting (`[query] max_running_retrievals`, ...).
    pub limiter: Limiter,
    /// The language model (`[llm]`), when one is configured.
    pub llm: Option<freshet_llm::LlmClient>,
    /// Query transformation with it (`[transform]`) and its cache.
    pub transformer: crate::transform::Transformer,
    /// The replica keeping the served index from the changelog (`[replica]`), if any.
    pub replica: Option<Arc<crate::replica::Replica>>,
}

/// A candidate while it moves through the stages: only checked chunks.
pub(crate) struct Candidate {
    pub chunk: Visible,
    pub scores: Scores,
    /// Score by which it is currently ordered.
    pub score: f32,
    pub passage: Vec<Visible>,
    pub children: Vec<String>,
}

pub(crate) struct Timer {
    pub timings: BTreeMap<&'static str, f64>,
    pub metrics: Metrics,
}

impl Timer {
    pub fn record(&mut self, stage: &'static str, since: Instant) {
        self.record_secs(stage, since.elapsed().as_secs_f64());
    }

    pub fn record_secs(&mut self, stage: &'static str, s: f64) {
        self.metrics.stage(stage, s);
        *self.timings.entry(stage).or_default() += s * 1000.0;
    }
}

pub(crate) fn internal(e: impl std::fmt::Display) -> RetrieveError {
    RetrieveError::Internal(e.to_string())
}

/// How a failed retrieval answers over HTTP.
impl From<RetrieveError> for ApiError {
    fn from(e: RetrieveError) -> Self {
        match e {
            RetrieveError::BadRequest(m) => ApiError::bad_request(m),
            RetrieveError::Unavailable(m) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", m)
            }
            RetrieveError::Internal(m) => {
                tracing::error!(error = %m, "retrieve failed");
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", m)
            }
            RetrieveError::TimedOut => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "timeout",
                "retrieval ran past the request timeout",
            ),
            RetrieveError::Overloaded(why) => ApiError {
                retry_after: Some(1),
                ..ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "overloaded",
                    format!(
                        "the node is running all the retrievals it may ({}); retry later",
                        why.reason()
                    ),
                )
            },
        }
    }
}

impl Engine {
    pub async fn retrieve(&self, mut plan: Plan) -> Result<Response, RetrieveError> {
        let started = Instant::now();
        let deadline = started + Duration::from_millis(self.config.query.request_timeout_ms);
        let mut t = Timer {
            timings: BTreeMap::new(),
            metrics: self.metrics.clone(),
        };
        // The language model's rewrites first, outside the node's retrieval slots (they wait
        // on another server), within their own share of the deadline.
        let (mut degraded, mut transform, mut variants, mut passage) =
            (Vec::new(), None, Vec::new(), None);
        if let (Some(tp), Some(llm)) = (plan.transform.clone(), &self.llm) {
            // The languages of the model served now (the request pins its generation later).
            let languages = self
                .indexes
                .current()
                .embedders()
                .and_then(|p| p.languages().cloned());
            let s = Instant::now();
            let share = s + Duration::from_millis(self.transformer.config.timeout_ms);
            let vector_runs = |q: &str| {
                plan.mode.uses_vector()
                    && (plan.mode != Mode::Hybrid
                        || crate::language::runs_vector(
                            plan.language_routing,
                            &crate::language::assess(
                                q,
                                plan.language.as_deref(),
                                languages.as_ref(),
                            ),
                        ))
            };
            let out = self
                .transformer
                .run(
                    llm,
                    &plan.query,
                    &tp,
                    self.config.query.max_query_chars,
                    share.min(deadline),
                    &vector_runs,
                )
                .await;
            t.record("transform", s);
            plan.query = out.question;
            variants = out.variants;
            passage = out.passage;
            degraded = out.degraded;
            transform = Some(out.info);
        }
        let job = self
            .limiter
            .admit(deadline)
            .await
            .map_err(RetrieveError::Overloaded)?;
        // A request that times out (this future dropped) stops the work it left running.
        let _cancel = job.cancel_on_drop();
        // One generation for the whole request: its snapshot and its own collection.
        let generation = self.indexes.current();
        // ... and the query model that generation's collection was embedded with.
        let languages = generation.embedders().and_then(|p| p.languages().cloned());
        let snapshot = generation
            .snapshot_to_search()
            .map_err(RetrieveError::Unavailable)?;
        let loads = Loads {
            snapshot,
            generation,
            gate: Gate::new(&plan.filter, self.metrics.clone()),
            job: job.clone(),
        };

        let language =
            crate::language::assess(&plan.query, plan.language.as_deref(), languages.as_ref());
        let mut left_out = Vec::new();
        let run_vector = plan.mode != Mode::Hybrid
            || crate::language::runs_vector(plan.language_routing, &language);
        if !run_vector {
            self.metrics.route_left_out("vector", "language");
            left_out.push(Degraded {
                route: "vector",
                reason: format!(
                    "the embedding model covers {}; the query is in {}: BM25 alone answers it",
                    languages.as_ref().map(|l| l.describe()).unwrap_or_default(),
                    language.language.as_deref().unwrap_or("another language"),
                ),
            });
        }
        // The question (its vector route on the HyDE passage, if any), then each rewrite, all
        // with the request's filter and principals; their times add up per stage.
        let mut queries = vec![(
            plan.query.clone(),
            passage.unwrap_or_else(|| plan.query.clone()),
        )];
        queries.extend(variants.into_iter().map(|v| (v.clone(), v)));
        let searches = queries
            .iter()
            .map(|(words, vector)| self.search_routes(&plan, &loads, run_vector, words, vector));
        let mut hits = Vec::with_capacity(queries.len());
        for routes in futures::future::try_join_all(searches).await? {
            for (stage, secs) in routes.seconds {
                if secs > 0.0 {
                    t.record_secs(stage, secs);
                }
            }
            for d in routes.degraded {
                if !degraded.iter().any(|x: &Degraded| x.route == d.route) {
                    degraded.push(d);
                }
            }
            hits.push((routes.bm25, routes.vector));
        }
        let mut cands = loads.fetch_and_fuse_queries(&plan, hits, &mut t).await?;

        if plan.parents {
            let s = Instant::now();
            cands = loads.to_parents(cands).await?;
            t.record("parents", s);
        }

        if let Some(n) = plan.rerank {
            let s = Instant::now();
            self.rerank(&plan.query, &mut cands, n, &job).await?;
            t.record("rerank", s);
        }

        if let Some(e) = &plan.expand {
            let s = Instant::now();
            cands = loads.expand(cands, e).await?;
            if let Some(n) = plan.rerank {
                // Rank the merged passages again.
                self.rerank(&plan.query, &mut cands, n, &job).await?;
            }
            t.record("expand", s);
        }

        cands.truncate(plan.k);
        let mut results: Vec<Hit> = cands
            .into_iter()
            .enumerate()
            .map(|(i, c)| hit::to_hit(i, c))
            .collect();
        if plan.highlight {
            let s = Instant::now();
            let query = plan.query.clone();
            results = job
                .blocking("highlight", move |_| {
                    for h in &mut results {
                        h.highlights = Some(hit::highlights(&query, &h.text));
                    }
                    Ok(results)
                })
                .await?;
            t.record("highlight", s);
        }

        let (mut context, mut citations, mut context_tokens) = (None, None, None);
        if let Some((budget, order)) = plan.pack {
            let s = Instant::now();
            let counter = self.counter.clone();
            let (back, p) = job
                .blocking("pack", move |job| {
                    let inputs: Vec<PackInput<'_>> = results
                        .iter()
                        .enumerate()
                        .map(|(i, h)| PackInput {
                            doc_id: &h.doc_id,
                            title: &h.title,
                            source: &h.source,
                            text: &h.text,
                            result_index: i,
                            pages: h.page_start.zip(h.page_end),
                        })
                        .collect();
                    let stop = || job.is_cancelled();
                    let p = pack_until(&inputs, budget, order, &*counter, &stop);
                    drop(inputs);
                    match p {
                        Some(p) => Ok((results, p)),
                        None => {
                            job.check("pack")?;
                            Err(RetrieveError::TimedOut)
                        }
                    }
                })
                .await?;
            results = back;
            context = Some(p.context);
            citations = Some(p.citations);
            context_tokens = Some(p.tokens);
            t.record("pack", s);
        }

        let total = started.elapsed().as_secs_f64();
        self.metrics
            .request_seconds
            .get_or_create(&crate::metrics::ModeLabels {
                mode: plan.mode.as_str().into(),
            })
            .observe(total);
        t.timings.insert("total", total * 1000.0);
        Ok(Response {
            results,
            context,
            citations,
            context_tokens,
            mode: plan.mode.as_str(),
            timings_ms: t.timings,
            index: index_info(&loads.snapshot, loads.generation.generation_name()),
            degraded,
            language,
            left_out,
            transform,
        })
    }

    /// Rescores the first `n` candidates with the cross-encoder and orders them by that score
    /// (ties keep the previous order); the rest follow unchanged.
    async fn rerank(
        &self,
        query: &str,
        cands: &mut [Candidate],
        n: usize,
        job: &Job,
    ) -> Result<(), RetrieveError> {
        let Some(reranker) = &self.reranker else {
            return Err(RetrieveError::BadRequest(
                "no reranker configured".to_string(),
            ));
        };
        let n = n.min(cands.len());
        if n == 0 {
            return Ok(());
        }
        let texts: Vec<String> = cands[..n].iter().map(hit::passage_text).collect();
        let scores = reranker.score(query, texts, job).await?;
        for (c, s) in cands[..n].iter_mut().zip(&scores) {
            c.score = *s;
            c.scores.rerank = Some(StageScore { rank: 0, score: *s });
        }
        cands[..n].sort_by(|a, b| b.score.total_cmp(&a.score));
        for (i, c) in cands[..n].iter_mut().enumerate() {
            if let Some(r) = &mut c.scores.rerank {
                r.rank = i + 1;
            }
        }
        Ok(())
    }
}

/// The commit an answer reflects: the one its snapshot holds.
pub(crate) fn index_info(snapshot: &Snapshot, generation: Option<String>) -> IndexInfo {
    let (epoch, committed_at_ms) = snapshot
        .payload()
        .map_or((0, 0), |p| (p.epoch, p.committed_at_ms));
    IndexInfo {
        epoch,
        committed_at_ms,
        age_ms: if committed_at_ms == 0 {
            0
        } else {
            freshet_core::clock::now_ms().saturating_sub(committed_at_ms)
        },
        generation,
    }
}
