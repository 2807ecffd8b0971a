//! The model side of the workers: the embedding cache they share, and the [`BatchEmbed`] the
//! embedding operator asks for vectors.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use freshet_embedding::{CachedEmbedder, DiskCache, EmbeddingModel, Provider};
use freshet_operators::embed::{BatchEmbed, EmbedError, Embedder, VectorCache};

use crate::metrics::Metrics;
use crate::stall::Stall;

/// The text [`WorkerEmbedder::model_works`] embeds: ordinary words any model takes.
const CANARY: &str = "The river rises in spring when the snow melts.";

/// The embedding cache, shared by the workers of one process.
#[derive(Clone)]
pub struct SharedCache(pub Arc<Mutex<DiskCache>>);

impl VectorCache for SharedCache {
    fn get_many(&self, keys: &[[u8; 32]]) -> Result<Vec<Option<Vec<f32>>>, EmbedError> {
        self.0
            .lock()
            .map_err(|_| EmbedError::environment("cache lock poisoned"))?
            .get_many(keys)
    }
    fn put_many(&mut self, entries: &[([u8; 32], Vec<f32>)]) -> Result<(), EmbedError> {
        self.0
            .lock()
            .map_err(|_| EmbedError::environment("cache lock poisoned"))?
            .put_many(entries)
    }
}

/// A worker's model behind its cache, counting what it does in the metrics. A worker whose
/// model did not load (the pipeline is stopping then) embeds nothing. A failure about no text
/// (the cache cannot be read or written, a remote embedding server is away: unreachable,
/// timing out, 5xx or 429 after the client's retries) stalls the worker ([`Stall`]) until it
/// works again or the stall limit passes.
pub struct WorkerEmbedder {
    cached: Option<CachedEmbedder<EmbeddingModel, SharedCache>>,
    metrics: Metrics,
    stall: Stall,
}

impl WorkerEmbedder {
    pub fn new(
        cached: Option<CachedEmbedder<EmbeddingModel, SharedCache>>,
        metrics: Metrics,
        stall: Stall,
    ) -> Self {
        WorkerEmbedder {
            cached,
            metrics,
            stall,
        }
    }
}

impl BatchEmbed for WorkerEmbedder {
    fn embed(&mut self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let Some(cached) = self.cached.as_mut() else {
            return Err(EmbedError::new("no embedding model on this worker"));
        };
        let refs: Vec<&str> = texts.iter().map(|s| s.as_str()).collect();
        let started = Instant::now();
        let at = stall_label(cached.embedder());
        // A model error may be about one of the texts: handed back at once, for the operator to
        // isolate. Anything else is retried.
        let (vectors, stats) = self
            .stall
            .retry("embedding through the cache", at, |_| {
                match cached.embed(&refs) {
                    Err(e) if !e.may_be_about_texts => Err(anyhow::Error::new(e)),
                    outcome => Ok(outcome),
                }
            })
            .map_err(|e| EmbedError::environment(format!("{e:#}")))?
            .inspect_err(|e| self.metrics.board.embedding_error(e.to_string()))?;
        let m = &self.metrics;
        m.embed_batch.observe(started.elapsed().as_secs_f64());
        Metrics::outcome(&m.embedding_texts, "embedded", stats.embedded as u64);
        Metrics::outcome(&m.embedding_texts, "cache_hit", stats.cache_hits as u64);
        m.embedding_calls.inc_by(stats.model_calls as u64);
        if let Ok(c) = cached.cache().0.lock() {
            crate::cache::observe(&c, m);
        }
        // The crash trials add these lines up over restarts (tests/src/chaos).
        tracing::debug!(
            "embedding batch embedded={} cache_hits={}",
            stats.embedded,
            stats.cache_hits
        );
        Ok(vectors)
    }

    /// Embeds [`CANARY`] with the model itself (not the cache); an outage of a remote model
    /// is waited out as for [`WorkerEmbedder::embed`].
    fn model_works(&mut self) -> bool {
        let Some(cached) = self.cached.as_mut() else {
            return false;
        };
        let at = stall_label(cached.embedder());
        let model = cached.embedder_mut();
        let outcome = self
            .stall
            .retry("embedding a known text", at, |_| {
                match model.embed_passages(&[CANARY]) {
                    Err(e) if !e.may_be_about_texts => Err(anyhow::Error::new(e)),
                    outcome => Ok(outcome),
                }
            })
            .map_err(|e| EmbedError::environment(format!("{e:#}")))
            .and_then(|r| r);
        match outcome {
            Ok(v) => v.len() == 1 && !v[0].is_empty() && v[0].iter().all(|x| x.is_finite()),
            Err(e) => {
                tracing::warn!(error = %e, "the embedding model fails on a known text");
                false
            }
        }
    }
}

/// The `at` label of a stalled embedding: `embedding_server` for a remote model (the server is
/// away, or the cache behind it fails), `embedding_cache` for the local one.
fn stall_label(model: &EmbeddingModel) -> &'static str {
    match model.provider() {
        Provider::Openai => "embedding_server",
        Provider::Local => "embedding_cache",
    }
}

/// Borrows a model as an [`Embedder`].
pub struct ModelRef<'a>(pub &'a mut EmbeddingModel);

impl Embedder for ModelRef<'_> {
    fn model_id(&self) -> &str {
        self.0.model_id()
    }
    fn dim(&self) -> usize {
        self.0.dim()
    }
    fn embed_passages(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.0.embed_passages(texts)
    }
}
