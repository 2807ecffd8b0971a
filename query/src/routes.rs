//! The two retrieval routes of one request, run in parallel, each with the request's filter
//! inside its search: BM25 over tantivy and the vector route (embed the query, search Milvus).
//! Their failures map to the HTTP answer: a filter an index rejects is a 400, an index that is
//! down a 503, except that a hybrid request may answer from BM25 alone (`allow_partial`). BM25
//! searches the request's pinned snapshot and the vector route that snapshot's generation's
//! collection; both blocking steps (the search, the query
//! embedding) run under the request's job.

use std::time::Instant;

use freshet_core::chunk::Chunk;

use crate::indexes::EmbedderUnavailable;
use crate::request::{Mode, Plan};
use crate::retrieve::{Degraded, Engine, Loads, RetrieveError};

/// What the routes found, how long each stage took, and the routes left out.
pub(crate) struct RouteHits {
    /// BM25 hits with their chunk records, best first.
    pub bm25: Vec<(f32, Chunk)>,
    /// Vector hits (chunk id, similarity), best first.
    pub vector: Vec<(String, f32)>,
    /// Seconds of the `bm25`, `embed` and `vector` stages (0 for a route not run).
    pub seconds: [(&'static str, f64); 3],
    pub degraded: Vec<Degraded>,
}

impl Engine {
    /// Runs the routes `plan.mode` asks for, in parallel, BM25 for `words` and the vector
    /// route embedding `vector_text` (the same, or a HyDE passage); the vector route only if
    /// `run_vector` (it is left out of a query the model does not understand).
    pub(crate) async fn search_routes(
        &self,
        plan: &Plan,
        loads: &Loads,
        run_vector: bool,
        words: &str,
        vector_text: &str,
    ) -> Result<RouteHits, RetrieveError> {
        let bm25 = async {
            if !plan.mode.uses_bm25() {
                return Ok((Vec::new(), 0.0));
            }
            let (snapshot, q, k, f) = (
                loads.snapshot.clone(),
                words.to_owned(),
                plan.bm25_top_k,
                plan.filter.clone(),
            );
            let s = Instant::now();
            let hits = loads
                .job
                .blocking("bm25", move |_| {
                    snapshot.search_bm25(&q, k, &f).map_err(|e| match e {
                        freshet_tantivy::Error::InvalidFilter(m) => RetrieveError::BadRequest(m),
                        other => RetrieveError::Unavailable(format!("tantivy: {other}")),
                    })
                })
                .await?;
            Ok::<_, RetrieveError>((hits, s.elapsed().as_secs_f64()))
        };
        let vector = async {
            if !plan.mode.uses_vector() || !run_vector {
                return Ok((Vec::new(), 0.0, 0.0));
            }
            let milvus = loads
                .generation
                .milvus_to_search()
                .map_err(RetrieveError::Unavailable)?;
            let s = Instant::now();
            // The pinned generation's own query model: its collection's vector space.
            let pool = loads.generation.embedders().cloned().ok_or_else(|| {
                RetrieveError::Unavailable("no query model for this index generation".into())
            })?;
            let q = vector_text.to_owned();
            let v = loads
                .job
                .blocking("embed", move |job| {
                    pool.embed_query(&q, &|| job.is_cancelled()).map_err(|e| {
                        match job.check("embed") {
                            Err(timed_out) => timed_out,
                            Ok(()) => match e.downcast_ref::<EmbedderUnavailable>() {
                                Some(away) => RetrieveError::Unavailable(away.0.clone()),
                                None => {
                                    RetrieveError::Internal(format!("embedding the query: {e}"))
                                }
                            },
                        }
                    })
                })
                .await?;
            let embed_s = s.elapsed().as_secs_f64();
            let s = Instant::now();
            let hits = milvus
                .search_with(
                    &v,
                    plan.vector_top_k,
                    &plan.filter,
                    self.config.query.milvus_consistency.level(),
                    self.config.query.search_tuning(),
                )
                .await
                .map_err(|e| match e {
                    freshet_milvus::Error::InvalidFilter(m) => RetrieveError::BadRequest(m),
                    other => {
                        loads.generation.milvus_failed();
                        RetrieveError::Unavailable(format!("milvus: {other}"))
                    }
                })?;
            Ok::<_, RetrieveError>((hits, embed_s, s.elapsed().as_secs_f64()))
        };
        let (bm25, vector) = tokio::join!(bm25, vector);
        let (bm25_hits, bm25_s) = bm25?;
        let mut degraded = Vec::new();
        let (vector_hits, embed_s, vector_s) = match vector {
            // Hybrid without Milvus: BM25 alone is still an answer, if the caller accepts one.
            Err(RetrieveError::Unavailable(reason))
                if plan.mode == Mode::Hybrid && plan.allow_partial =>
            {
                tracing::warn!(%reason, "vector route unavailable: answering from BM25 alone");
                degraded.push(Degraded {
                    route: "vector",
                    reason,
                });
                (Vec::new(), 0.0, 0.0)
            }
            other => other?,
        };
        Ok(RouteHits {
            bm25: bm25_hits,
            vector: vector_hits,
            seconds: [("bm25", bm25_s), ("embed", embed_s), ("vector", vector_s)],
            degraded,
        })
    }
}
