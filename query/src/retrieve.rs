//! One retrieval, stage by stage: BM25 (tantivy) and vector (Milvus) routes in parallel, both
//! filtered inside the search → fusion → parents → rerank → context expansion (→ rerank of the
//! merged passages) → top k → context packing. Every stage is timed; every result carries its
//! per-stage ranks and scores.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use freshet_operators::chunk::{Chunk, HfTokenCounter};
use serde::Serialize;

use crate::config::Config;
use crate::fusion::{fuse, single_route, Fused, StageScore};
use crate::indexes::{EmbedderPool, Freshness, Indexes};
use crate::metrics::Metrics;
use crate::pack::{pack, Citation, PackInput};
use crate::passage::{expand, group_by_parent, merge_text};
use crate::request::{Mode, Plan};
use crate::rerank::Reranker;

/// Why a retrieval failed.
#[derive(Debug)]
pub enum RetrieveError {
    /// A dependency is down or not ready (HTTP 503).
    Unavailable(String),
    /// The request was valid JSON but cannot be run (HTTP 400), e.g. a filter the index rejects.
    BadRequest(String),
    /// A bug or an unexpected failure (HTTP 500).
    Internal(String),
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
}

/// Index state a response reflects.
#[derive(Clone, Debug, Serialize)]
pub struct IndexInfo {
    pub epoch: u64,
    pub committed_at_ms: u64,
    /// Age of that commit when the response was made.
    pub age_ms: u64,
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
    pub indexes: Arc<Indexes>,
    pub embedders: Arc<EmbedderPool>,
    pub reranker: Option<Reranker>,
    pub counter: Arc<HfTokenCounter>,
    pub metrics: Metrics,
    pub auth: crate::auth::Auth,
}

/// A candidate while it moves through the stages.
struct Candidate {
    chunk: Chunk,
    scores: Scores,
    /// Score by which it is currently ordered.
    score: f32,
    passage: Vec<Chunk>,
    children: Vec<String>,
}

struct Timer {
    timings: BTreeMap<&'static str, f64>,
    metrics: Metrics,
}

impl Timer {
    fn record(&mut self, stage: &'static str, since: Instant) {
        self.record_secs(stage, since.elapsed().as_secs_f64());
    }

    fn record_secs(&mut self, stage: &'static str, s: f64) {
        self.metrics.stage(stage, s);
        *self.timings.entry(stage).or_default() += s * 1000.0;
    }
}

pub(crate) fn internal(e: impl std::fmt::Display) -> RetrieveError {
    RetrieveError::Internal(e.to_string())
}

/// Runs a tantivy read off the async workers; a failing index is a 503.
async fn read_index<T: Send + 'static>(
    reader: &Arc<freshet_tantivy::ChunkIndexReader>,
    f: impl FnOnce(&freshet_tantivy::ChunkIndexReader) -> freshet_tantivy::Result<T> + Send + 'static,
) -> Result<T, RetrieveError> {
    let r = reader.clone();
    tokio::task::spawn_blocking(move || f(&r))
        .await
        .map_err(internal)?
        .map_err(|e| RetrieveError::Unavailable(format!("tantivy: {e}")))
}

impl Engine {
    pub async fn retrieve(&self, plan: Plan) -> Result<Response, RetrieveError> {
        let started = Instant::now();
        let mut t = Timer {
            timings: BTreeMap::new(),
            metrics: self.metrics.clone(),
        };
        let reader = self.indexes.tantivy().ok_or_else(|| {
            RetrieveError::Unavailable(
                self.indexes
                    .status()
                    .tantivy
                    .unwrap_or_else(|| "tantivy index not open".into()),
            )
        })?;
        let freshness = self.indexes.freshness();

        let routes = self.search_routes(&plan, &reader).await?;
        for (stage, secs) in routes.seconds {
            if secs > 0.0 {
                self.metrics.stage(stage, secs);
                t.timings.insert(stage, secs * 1000.0);
            }
        }
        let degraded = routes.degraded;
        let mut cands = self
            .fetch_and_fuse(&plan, &reader, routes.bm25, routes.vector, &mut t)
            .await?;

        if plan.parents {
            let s = Instant::now();
            cands = self.to_parents(&reader, cands).await?;
            t.record("parents", s);
        }

        if let Some(n) = plan.rerank {
            let s = Instant::now();
            self.rerank(&plan.query, &mut cands, n).await?;
            t.record("rerank", s);
        }

        if let Some(e) = &plan.expand {
            let s = Instant::now();
            cands = self.expand(&reader, cands, e).await?;
            if let Some(n) = plan.rerank {
                // Rank the merged passages again.
                self.rerank(&plan.query, &mut cands, n).await?;
            }
            t.record("expand", s);
        }

        cands.truncate(plan.k);
        let results: Vec<Hit> = cands
            .into_iter()
            .enumerate()
            .map(|(i, c)| to_hit(i, c))
            .collect();

        let (mut context, mut citations, mut context_tokens) = (None, None, None);
        if let Some((budget, order)) = plan.pack {
            let s = Instant::now();
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
            let p = pack(&inputs, budget, order, &*self.counter);
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
            index: index_info(freshness),
            degraded,
        })
    }

    /// Chunk records for the route hits, then fusion: the candidates in fused order. A vector
    /// hit tantivy does not have yet (written to Milvus, tantivy commit pending) or any more is
    /// left out before fusion, so that ranks count only chunks that can be returned.
    async fn fetch_and_fuse(
        &self,
        plan: &Plan,
        reader: &Arc<freshet_tantivy::ChunkIndexReader>,
        bm25_hits: Vec<(f32, Chunk)>,
        vector_hits: Vec<(String, f32)>,
        t: &mut Timer,
    ) -> Result<Vec<Candidate>, RetrieveError> {
        let s = Instant::now();
        let mut records: HashMap<String, Chunk> = HashMap::new();
        let bm25_list: Vec<(String, f32)> = bm25_hits
            .into_iter()
            .map(|(score, c)| {
                let id = c.chunk_id.clone();
                records.insert(id.clone(), c);
                (id, score)
            })
            .collect();
        let missing: Vec<String> = vector_hits
            .iter()
            .filter(|(id, _)| !records.contains_key(id))
            .map(|(id, _)| id.clone())
            .collect();
        // Without parents or expansion only the first `max(k, rerank candidates)` fused
        // candidates can be returned: the others are only checked for existence (term
        // dictionary), their stored documents are not loaded (~20 us each at 107k chunks).
        let lazy =
            (!plan.parents && plan.expand.is_none()).then(|| plan.k.max(plan.rerank.unwrap_or(0)));
        let present: HashSet<String> = if missing.is_empty() {
            HashSet::new()
        } else if lazy.is_some() {
            read_index(reader, move |r| {
                r.existing(&missing)
                    .map(|ids| ids.into_iter().map(str::to_owned).collect())
            })
            .await?
        } else {
            let got = read_index(reader, move |r| r.get_many(&missing)).await?;
            let ids = got.iter().map(|c| c.chunk_id.clone()).collect();
            for c in got {
                records.insert(c.chunk_id.clone(), c);
            }
            ids
        };
        let vector_list: Vec<(String, f32)> = vector_hits
            .into_iter()
            .filter(|(id, _)| records.contains_key(id) || present.contains(id))
            .collect();
        let mut fetch_s = s.elapsed().as_secs_f64();

        let s = Instant::now();
        let mut fused: Vec<Fused> = match plan.mode {
            Mode::Hybrid => fuse(&bm25_list, &vector_list, plan.fusion),
            Mode::Bm25 => single_route(&bm25_list, true),
            Mode::Vector => single_route(&vector_list, false),
        };
        t.record("fusion", s);
        if let Some(need) = lazy {
            let s = Instant::now();
            fused.truncate(need);
            let unloaded: Vec<String> = fused
                .iter()
                .filter(|f| !records.contains_key(&f.chunk_id))
                .map(|f| f.chunk_id.clone())
                .collect();
            if !unloaded.is_empty() {
                // One deleted since the existence check is skipped below, and the answer has
                // one result fewer: the same as if the request had come a moment later.
                for c in read_index(reader, move |r| r.get_many(&unloaded)).await? {
                    records.insert(c.chunk_id.clone(), c);
                }
            }
            fetch_s += s.elapsed().as_secs_f64();
        }
        t.record_secs("fetch", fetch_s);
        let hybrid = plan.mode == Mode::Hybrid;
        let cands: Vec<Candidate> = fused
            .into_iter()
            .filter_map(|f| {
                let chunk = records.remove(&f.chunk_id)?;
                Some(Candidate {
                    passage: vec![chunk.clone()],
                    chunk,
                    score: f.fused.score,
                    scores: Scores {
                        bm25: f.bm25,
                        vector: f.vector,
                        fused: hybrid.then_some(f.fused),
                        rerank: None,
                    },
                    children: Vec::new(),
                })
            })
            .collect();

        Ok(cands)
    }

    /// Replaces children by their parents, ranked by the best child.
    async fn to_parents(
        &self,
        reader: &Arc<freshet_tantivy::ChunkIndexReader>,
        cands: Vec<Candidate>,
    ) -> Result<Vec<Candidate>, RetrieveError> {
        let chunks: Vec<&Chunk> = cands.iter().map(|c| &c.chunk).collect();
        let groups = group_by_parent(&chunks);
        let parent_ids: Vec<String> = cands
            .iter()
            .filter_map(|c| c.chunk.parent_id.clone())
            .collect();
        let parents: HashMap<String, Chunk> = read_index(reader, move |r| r.get_many(&parent_ids))
            .await?
            .into_iter()
            .map(|c| (c.chunk_id.clone(), c))
            .collect();
        let mut slots: Vec<Option<Candidate>> = cands.into_iter().map(Some).collect();
        let mut out = Vec::with_capacity(groups.len());
        for (key, members) in groups {
            let Some(best) = slots[members[0]].take() else {
                continue;
            };
            let children: Vec<String> = std::iter::once(best.chunk.chunk_id.clone())
                .chain(
                    members[1..]
                        .iter()
                        .filter_map(|&i| slots[i].take().map(|c| c.chunk.chunk_id)),
                )
                .collect();
            match parents.get(&key) {
                Some(p) => out.push(Candidate {
                    passage: vec![p.clone()],
                    chunk: p.clone(),
                    scores: best.scores,
                    score: best.score,
                    children,
                }),
                // No parent (plain chunking), or the parent is not committed yet: the child
                // stands for itself.
                None => out.push(Candidate {
                    children: if best.chunk.parent_id.is_some() {
                        children
                    } else {
                        Vec::new()
                    },
                    ..best
                }),
            }
        }
        Ok(out)
    }

    /// Rescores the first `n` candidates with the cross-encoder and orders them by that score
    /// (ties keep the previous order); the rest follow unchanged.
    async fn rerank(
        &self,
        query: &str,
        cands: &mut [Candidate],
        n: usize,
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
        let texts: Vec<String> = cands[..n].iter().map(passage_text).collect();
        let scores = reranker.score(query, texts).await.map_err(|e| {
            RetrieveError::Unavailable(format!("reranker ({}): {e:#}", reranker.name()))
        })?;
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

    /// Context expansion of the top `top_m` candidates.
    async fn expand(
        &self,
        reader: &Arc<freshet_tantivy::ChunkIndexReader>,
        cands: Vec<Candidate>,
        e: &crate::request::ExpandPlan,
    ) -> Result<Vec<Candidate>, RetrieveError> {
        let wanted: Vec<bool> = cands
            .iter()
            .enumerate()
            .map(|(i, c)| {
                i < e.top_m
                    && match e.min_vector_score {
                        None => true,
                        Some(t) => c.scores.vector.is_some_and(|v| v.score >= t),
                    }
            })
            .collect();
        let mut docs: Vec<String> = cands
            .iter()
            .zip(&wanted)
            .filter(|(_, w)| **w)
            .map(|(c, _)| c.chunk.doc_id.clone())
            .collect();
        docs.sort();
        docs.dedup();
        if docs.is_empty() {
            return Ok(cands);
        }
        let doc_chunks: HashMap<String, Vec<Chunk>> = read_index(reader, move |r| {
            docs.into_iter()
                .map(|d| r.chunks_of_doc(&d).map(|c| (d, c)))
                .collect::<Result<HashMap<_, _>, _>>()
        })
        .await?;
        let (passages, owners): (Vec<Vec<Chunk>>, Vec<usize>) = {
            let hits: Vec<&Chunk> = cands.iter().map(|c| &c.chunk).collect();
            let ex = expand(&hits, &wanted, &doc_chunks, e.window);
            (
                ex.passages
                    .iter()
                    .map(|p| p.iter().map(|c| (*c).clone()).collect())
                    .collect(),
                ex.owner,
            )
        };
        // The best hit of each passage represents it (its scores and its chunk id).
        let mut out: Vec<Option<Candidate>> = (0..passages.len()).map(|_| None).collect();
        for (cand, owner) in cands.into_iter().zip(owners) {
            if out[owner].is_none() {
                out[owner] = Some(Candidate {
                    passage: passages[owner].clone(),
                    ..cand
                });
            }
        }
        Ok(out.into_iter().flatten().collect())
    }
}

fn passage_text(c: &Candidate) -> String {
    let refs: Vec<&Chunk> = c.passage.iter().collect();
    merge_text(&refs)
}

/// A chunk's pages from its metadata (`page_start`, `page_end`), if it has them.
fn pages_of(metadata: &serde_json::Value) -> Option<(u32, u32)> {
    let page = |k: &str| {
        metadata
            .get(k)
            .and_then(|v| v.as_u64())
            .and_then(|v| u32::try_from(v).ok())
    };
    page("page_start").zip(page("page_end"))
}

/// The pages a passage spans: the hit's (its metadata already parsed), widened by those of the
/// passage's other chunks; `None` when no chunk has pages.
fn passage_pages(
    hit: &Chunk,
    metadata: &serde_json::Value,
    passage: &[Chunk],
) -> Option<(u32, u32)> {
    let others = passage
        .iter()
        .filter(|c| c.chunk_id != hit.chunk_id)
        .filter_map(|c| serde_json::from_str::<serde_json::Value>(&c.metadata_json).ok())
        .filter_map(|m| pages_of(&m));
    pages_of(metadata)
        .into_iter()
        .chain(others)
        .reduce(|(a, b), (x, y)| (a.min(x), b.max(y)))
}

fn index_info(f: Freshness) -> IndexInfo {
    IndexInfo {
        epoch: f.epoch,
        committed_at_ms: f.committed_at_ms,
        age_ms: if f.committed_at_ms == 0 {
            0
        } else {
            freshet_operators::clock::now_ms().saturating_sub(f.committed_at_ms)
        },
    }
}

fn to_hit(i: usize, c: Candidate) -> Hit {
    let text = passage_text(&c);
    let char_start = c.passage.iter().map(|p| p.char_start).min().unwrap_or(0);
    let char_end = c.passage.iter().map(|p| p.char_end).max().unwrap_or(0);
    let passage_chunk_ids = if c.passage.len() > 1 {
        c.passage.iter().map(|p| p.chunk_id.clone()).collect()
    } else {
        Vec::new()
    };
    let ch = c.chunk;
    let metadata = serde_json::from_str(&ch.metadata_json)
        .unwrap_or(serde_json::Value::Object(Default::default()));
    let pages = passage_pages(&ch, &metadata, &c.passage);
    Hit {
        rank: i + 1,
        page_start: pages.map(|p| p.0),
        page_end: pages.map(|p| p.1),
        metadata,
        chunk_id: ch.chunk_id,
        doc_id: ch.doc_id,
        kind: ch.kind.as_str(),
        parent_id: ch.parent_id,
        title: ch.title,
        source: ch.source,
        section: ch.section,
        chunk_index: ch.index,
        char_start,
        char_end,
        text,
        score: c.score,
        scores: c.scores,
        passage_chunk_ids,
        matched_children: c.children,
    }
}
