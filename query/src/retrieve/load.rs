//! The reads of one retrieval after its searches, all on the request's pinned snapshot and
//! each chunk through the request's [`Gate`]: the chunk records of vector hits, then fusion;
//! parents of matched children; the windows of neighbours of expanded hits. Loads run on the
//! blocking pool under the request's [`Job`], in units of at most [`LOAD_BATCH`] ids or one
//! window, and stop between units once the request is cancelled.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use freshet_core::chunk::Chunk;
use freshet_tantivy::Snapshot;

use super::{Candidate, RetrieveError, Scores, Timer};
use crate::fusion::{fuse, single_route, Fused};
use crate::overload::Job;
use crate::passage::{expand, group_by_parent};
use crate::request::{ExpandPlan, Mode, Plan};
use crate::transform::fuse::fuse_queries;
use crate::visible::{Gate, Visible};

/// One query's route hits: BM25 hits with their chunk records, vector hits (id, similarity).
pub(crate) type QueryHits = (Vec<(f32, Chunk)>, Vec<(String, f32)>);
/// One query's ranked lists of ids: BM25, vector.
type RankedLists = (Vec<(String, f32)>, Vec<(String, f32)>);

/// Chunk ids loaded between two checks of the request's cancellation.
pub const LOAD_BATCH: usize = 32;

/// What one retrieval reads with.
pub(crate) struct Loads {
    /// The commit the request reads, from its BM25 search to its last load.
    pub snapshot: Arc<Snapshot>,
    /// The generation the snapshot belongs to: its collection is the one the vector route
    /// searches.
    pub generation: Arc<crate::indexes::Indexes>,
    pub gate: Gate,
    pub job: Job,
}

fn unavailable(e: freshet_tantivy::Error) -> RetrieveError {
    RetrieveError::Unavailable(format!("tantivy: {e}"))
}

impl Loads {
    /// The chunks with these ids in the snapshot (missing ones skipped), unchecked.
    async fn get_many(
        &self,
        stage: &'static str,
        ids: Vec<String>,
    ) -> Result<Vec<Chunk>, RetrieveError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let snapshot = self.snapshot.clone();
        self.job
            .blocking(stage, move |job| {
                let mut out = Vec::with_capacity(ids.len());
                for batch in ids.chunks(LOAD_BATCH) {
                    job.check(stage)?;
                    out.extend(snapshot.get_many(batch).map_err(unavailable)?);
                }
                Ok(out)
            })
            .await
    }

    /// Chunk records for the route hits, then fusion: the candidates in fused order. A vector
    /// hit that the snapshot lacks (written to Milvus, tantivy commit pending, or gone since)
    /// or holds with a chunk the request may not see (Milvus not yet at the snapshot's ACL) is
    /// left out before fusion, so that ranks count only chunks that can be returned; BM25 hits
    /// pass the same check.
    #[cfg(test)]
    pub async fn fetch_and_fuse(
        &self,
        plan: &Plan,
        bm25_hits: Vec<(f32, Chunk)>,
        vector_hits: Vec<(String, f32)>,
        t: &mut Timer,
    ) -> Result<Vec<Candidate>, RetrieveError> {
        self.fetch_and_fuse_queries(plan, vec![(bm25_hits, vector_hits)], t)
            .await
    }

    /// As `fetch_and_fuse`, for the route hits of several queries (the question and its
    /// rewrites): each query's routes are fused by the request's method, then the queries'
    /// rankings with RRF ([`crate::transform::fuse`]).
    pub async fn fetch_and_fuse_queries(
        &self,
        plan: &Plan,
        hits: Vec<QueryHits>,
        t: &mut Timer,
    ) -> Result<Vec<Candidate>, RetrieveError> {
        let s = Instant::now();
        let mut records: HashMap<String, Visible> = HashMap::new();
        let mut refused: HashSet<String> = HashSet::new();
        let mut lists: Vec<RankedLists> = Vec::new();
        for (bm25_hits, vector_hits) in hits {
            let mut bm25_list: Vec<(String, f32)> = Vec::with_capacity(bm25_hits.len());
            for (score, c) in bm25_hits {
                let id = c.chunk_id.clone();
                if records.contains_key(&id) {
                    bm25_list.push((id, score));
                    continue;
                }
                match self.gate.hit(c) {
                    Some(v) => {
                        records.insert(id.clone(), v);
                        bm25_list.push((id, score));
                    }
                    None => {
                        refused.insert(id);
                    }
                }
            }
            lists.push((bm25_list, vector_hits));
        }
        let mut missing: Vec<String> = lists
            .iter()
            .flat_map(|(_, v)| v.iter())
            .filter(|(id, _)| !records.contains_key(id) && !refused.contains(id))
            .map(|(id, _)| id.clone())
            .collect();
        missing.sort_unstable();
        missing.dedup();
        // Without parents or expansion only the first `max(k, rerank candidates)` fused
        // candidates can be returned: for the others the snapshot is only asked whether it
        // holds them with a chunk that passes the filter (term dictionary and filter clauses),
        // their stored documents are not loaded (~20 us each at 107k chunks).
        let lazy =
            (!plan.parents && plan.expand.is_none()).then(|| plan.k.max(plan.rerank.unwrap_or(0)));
        let mut present: HashSet<String> = HashSet::new();
        if missing.is_empty() {
        } else if lazy.is_some() {
            let (snapshot, filter) = (self.snapshot.clone(), plan.filter.clone());
            let asked = missing.len();
            present = self
                .job
                .blocking("fetch", move |job| {
                    let mut out = HashSet::new();
                    for batch in missing.chunks(LOAD_BATCH * 8) {
                        job.check("fetch")?;
                        let found = snapshot
                            .existing_matching(batch, &filter)
                            .map_err(unavailable)?;
                        out.extend(found.into_iter().map(str::to_owned));
                    }
                    Ok(out)
                })
                .await?;
            self.gate.missing(asked - present.len());
        } else {
            let asked = missing.len();
            let got = self.get_many("fetch", missing).await?;
            self.gate.missing(asked - got.len());
            for c in got {
                let id = c.chunk_id.clone();
                if let Some(v) = self.gate.hit(c) {
                    records.insert(id, v);
                }
            }
        }
        let mut fetch_s = s.elapsed().as_secs_f64();

        let s = Instant::now();
        let several = lists.len() > 1;
        let mut rankings: Vec<Vec<Fused>> = lists
            .into_iter()
            .map(|(bm25_list, vector_hits)| {
                let vector_list: Vec<(String, f32)> = vector_hits
                    .into_iter()
                    .filter(|(id, _)| records.contains_key(id) || present.contains(id))
                    .collect();
                match plan.mode {
                    Mode::Hybrid => fuse(&bm25_list, &vector_list, plan.fusion),
                    Mode::Bm25 => single_route(&bm25_list, true),
                    Mode::Vector => single_route(&vector_list, false),
                }
            })
            .collect();
        let fused: Vec<Fused> = if several {
            fuse_queries(&rankings, plan.fusion.rrf_k)
        } else {
            rankings.pop().unwrap_or_default()
        };
        t.record("fusion", s);
        // The fused score is shown when more than one list was fused.
        let hybrid = plan.mode == Mode::Hybrid || several;
        let candidate = |f: Fused, chunk: Visible| Candidate {
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
        };
        let mut cands: Vec<Candidate> = Vec::new();
        let Some(need) = lazy else {
            cands.extend(
                fused
                    .into_iter()
                    .filter_map(|f| records.remove(&f.chunk_id).map(|c| candidate(f, c))),
            );
            t.record_secs("fetch", fetch_s);
            return Ok(cands);
        };
        // Load the first `need` in fused order; one the check refuses after all makes room for
        // the next.
        let s = Instant::now();
        let mut rest = fused.into_iter().peekable();
        while cands.len() < need && rest.peek().is_some() {
            let next: Vec<Fused> = rest.by_ref().take(need - cands.len()).collect();
            let unloaded: Vec<String> = next
                .iter()
                .filter(|f| !records.contains_key(&f.chunk_id))
                .map(|f| f.chunk_id.clone())
                .collect();
            for c in self.get_many("fetch", unloaded).await? {
                let id = c.chunk_id.clone();
                if let Some(v) = self.gate.hit(c) {
                    records.insert(id, v);
                }
            }
            cands.extend(
                next.into_iter()
                    .filter_map(|f| records.remove(&f.chunk_id).map(|c| candidate(f, c))),
            );
        }
        fetch_s += s.elapsed().as_secs_f64();
        t.record_secs("fetch", fetch_s);
        Ok(cands)
    }

    /// Replaces children by their parents, ranked by the best child.
    pub async fn to_parents(&self, cands: Vec<Candidate>) -> Result<Vec<Candidate>, RetrieveError> {
        let chunks: Vec<&Chunk> = cands.iter().map(|c| &*c.chunk).collect();
        let groups = group_by_parent(&chunks);
        let mut parent_ids: Vec<String> = cands
            .iter()
            .filter_map(|c| c.chunk.parent_id.clone())
            .collect();
        parent_ids.sort();
        parent_ids.dedup();
        let parents: HashMap<String, Visible> = self
            .get_many("parents", parent_ids)
            .await?
            .into_iter()
            .filter_map(|c| self.gate.context(c))
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
                        .filter_map(|&i| slots[i].take().map(|c| c.chunk.chunk_id.clone())),
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
                // No parent (plain chunking), or the parent is not in the snapshot or not
                // visible: the child stands for itself.
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

    /// Context expansion of the top `top_m` candidates: for each, the window of its ±window
    /// neighbours is read (not the whole document) and checked.
    pub async fn expand(
        &self,
        cands: Vec<Candidate>,
        e: &ExpandPlan,
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
        let windows: Vec<(String, freshet_core::chunk::ChunkKind, u32, u32)> = cands
            .iter()
            .zip(&wanted)
            .filter(|(_, w)| **w)
            .map(|(c, _)| {
                let w = e.window as u32;
                (
                    c.chunk.doc_id.clone(),
                    c.chunk.kind,
                    c.chunk.index.saturating_sub(w),
                    c.chunk.index.saturating_add(w),
                )
            })
            .collect();
        if windows.is_empty() {
            return Ok(cands);
        }
        let snapshot = self.snapshot.clone();
        let loaded: Vec<(String, Vec<Chunk>)> = self
            .job
            .blocking("expand", move |job| {
                let mut out = Vec::with_capacity(windows.len());
                for (doc, kind, lo, hi) in windows {
                    job.check("expand")?;
                    let chunks = snapshot.window(&doc, kind, lo, hi).map_err(unavailable)?;
                    out.push((doc, chunks));
                }
                Ok(out)
            })
            .await?;
        let mut doc_chunks: HashMap<String, Vec<Visible>> = HashMap::new();
        let mut seen: HashSet<String> = HashSet::new();
        for (doc, chunks) in loaded {
            for c in chunks {
                if seen.contains(&c.chunk_id) {
                    continue;
                }
                seen.insert(c.chunk_id.clone());
                if let Some(v) = self.gate.context(c) {
                    doc_chunks.entry(doc.clone()).or_default().push(v);
                }
            }
        }
        let (passages, owners): (Vec<Vec<Visible>>, Vec<usize>) = {
            let hits: Vec<&Visible> = cands.iter().map(|c| &c.chunk).collect();
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
