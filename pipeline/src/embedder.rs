//! The model side of the workers: the embedding cache they share, and the [`BatchEmbed`] the
//! embedding operator asks for vectors.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use freshet_embedding::{CachedEmbedder, DiskCache, FastEmbedder};
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
/// (the cache cannot be read or written) stalls the worker ([`Stall`]) until the cache works
/// again or the stall limit passes.
pub struct WorkerEmbedder {
    cached: Option<CachedEmbedder<FastEmbedder, SharedCache>>,
    metrics: Metrics,
    stall: Stall,
}

impl WorkerEmbedder {
    pub fn new(
        cached: Option<CachedEmbedder<FastEmbedder, SharedCache>>,
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
        // A model error may be about one of the texts: handed back at once, for the operator to
        // isolate. Anything else is retried.
        let (vectors, stats) = self
            .stall
            .retry(
                "embedding through the cache",
                "embedding_cache",
                |_| match cached.embed(&refs) {
                    Err(e) if !e.may_be_about_texts => Err(anyhow::Error::new(e)),
                    outcome => Ok(outcome),
                },
            )
            .map_err(|e| EmbedError::environment(format!("{e:#}")))??;
        let m = &self.metrics;
        m.embed_batch.observe(started.elapsed().as_secs_f64());
        Metrics::outcome(&m.embedding_texts, "embedded", stats.embedded as u64);
        Metrics::outcome(&m.embedding_texts, "cache_hit", stats.cache_hits as u64);
        m.embedding_calls.inc_by(stats.model_calls as u64);
        // The crash trials add these lines up over restarts (tests/src/chaos).
        tracing::debug!(
            "embedding batch embedded={} cache_hits={}",
            stats.embedded,
            stats.cache_hits
        );
        Ok(vectors)
    }

    /// Embeds [`CANARY`] with the model itself (not the cache).
    fn model_works(&mut self) -> bool {
        let Some(cached) = self.cached.as_mut() else {
            return false;
        };
        match cached.embedder_mut().embed_passages(&[CANARY]) {
            Ok(v) => v.len() == 1 && !v[0].is_empty() && v[0].iter().all(|x| x.is_finite()),
            Err(e) => {
                tracing::warn!(error = %e, "the embedding model fails on a known text");
                false
            }
        }
    }
}

/// Borrows a model as an [`Embedder`].
pub struct ModelRef<'a>(pub &'a mut FastEmbedder);

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
