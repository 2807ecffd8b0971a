//! The model side of the workers: the model copies and the embedding cache they share, and the
//! [`BatchEmbed`] the embedding operator asks for vectors.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use freshet_embedding::{CachedEmbedder, DiskCache, EmbeddingConfig, EmbeddingModel, Provider};
use freshet_operators::embed::{BatchEmbed, EmbedError, Embedder, VectorCache};
use prometheus_client::metrics::histogram::Histogram;

use crate::config::{EmbeddingPriority, PipelineConfig};
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

/// The embedding configuration a model copy loads with: unless `[embedding] threads` is set,
/// the cores are shared among the `[pipeline] model_copies` copies; it computes at
/// `[pipeline] embedding_priority`.
pub fn copy_config(embedding: &EmbeddingConfig, pipeline: &PipelineConfig) -> EmbeddingConfig {
    let mut cfg = embedding.clone();
    cfg.idle_priority = pipeline.embedding_priority == EmbeddingPriority::Idle;
    if cfg.threads.is_none() {
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        cfg.threads = Some((cores / pipeline.model_copies.max(1)).max(1));
    }
    cfg
}

/// One model behind a lock, for the workers that take turns on it.
#[derive(Clone)]
pub struct SharedModel {
    model: Arc<Mutex<EmbeddingModel>>,
    /// Where each model call's wait for its turn is observed (`embedding_model_wait_seconds`).
    wait: Option<Histogram>,
    model_id: String,
    cache_id: String,
    dim: usize,
    provider: Provider,
}

impl SharedModel {
    pub fn new(model: EmbeddingModel) -> Self {
        SharedModel {
            model_id: model.model_id().to_string(),
            cache_id: model.cache_id().to_string(),
            dim: model.dim(),
            provider: model.provider(),
            model: Arc::new(Mutex::new(model)),
            wait: None,
        }
    }
}

impl Embedder for SharedModel {
    fn model_id(&self) -> &str {
        &self.model_id
    }
    fn cache_id(&self) -> &str {
        &self.cache_id
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn embed_passages(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let asked = Instant::now();
        let mut model = self
            .model
            .lock()
            .map_err(|_| EmbedError::environment("embedding model lock poisoned"))?;
        if let Some(h) = &self.wait {
            h.observe(asked.elapsed().as_secs_f64());
        }
        model.embed_passages(texts)
    }
}

/// The models the workers of one process embed with. A local model: `[pipeline] model_copies`
/// copies, worker `i` (of this process) on copy `i % copies`; the first is the one the preflight
/// loaded, the others are loaded by the first worker that needs them. A remote model: a client
/// per worker, all on the preflight's ([`EmbeddingModel::share`]).
pub struct Models {
    copies: Vec<OnceLock<Result<SharedModel, String>>>,
    config: EmbeddingConfig,
}

impl Models {
    /// `first` was loaded with [`copy_config`].
    pub fn new(first: EmbeddingModel, embedding: &EmbeddingConfig, p: &PipelineConfig) -> Self {
        let n = match first.provider() {
            Provider::Local => p.model_copies.clamp(1, p.workers.max(1)),
            Provider::Openai => 1,
        };
        let copies: Vec<_> = (0..n).map(|_| OnceLock::new()).collect();
        let _ = copies[0].set(Ok(SharedModel::new(first)));
        Models {
            copies,
            config: copy_config(embedding, p),
        }
    }

    /// The model worker `local` (its index within this process) embeds with.
    pub fn for_worker(&self, local: usize, metrics: &Metrics) -> Result<SharedModel, String> {
        let slot = &self.copies[local % self.copies.len()];
        let mut model = slot
            .get_or_init(|| {
                EmbeddingModel::load_with_metrics(&self.config, Some(&metrics.remote_embedding))
                    .map(SharedModel::new)
                    .map_err(|e| format!("{e:#}"))
            })
            .clone()?;
        if model.provider != Provider::Openai {
            model.wait = Some(metrics.model_wait.clone());
            return Ok(model);
        }
        let client = model
            .model
            .lock()
            .map_err(|_| "embedding model lock poisoned".to_string())?
            .share()
            .ok_or_else(|| "a remote embedding model could not be shared".to_string())?;
        Ok(SharedModel::new(client))
    }
}

/// A worker's model behind its cache, counting what it does in the metrics. A worker whose
/// model did not load (the pipeline is stopping then) embeds nothing. A failure about no text
/// (the cache cannot be read or written, a remote embedding server is away: unreachable,
/// timing out, 5xx or 429 after the client's retries) stalls the worker ([`Stall`]) until it
/// works again or the stall limit passes.
pub struct WorkerEmbedder {
    cached: Option<CachedEmbedder<SharedModel, SharedCache>>,
    metrics: Metrics,
    stall: Stall,
}

impl WorkerEmbedder {
    pub fn new(
        cached: Option<CachedEmbedder<SharedModel, SharedCache>>,
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
fn stall_label(model: &SharedModel) -> &'static str {
    match model.provider {
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

#[cfg(test)]
mod tests {
    use freshet_llm::standin::StandIn;

    use super::*;

    #[test]
    fn copies_share_the_cores_unless_threads_are_set() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let p = |copies| PipelineConfig {
            workers: 2,
            model_copies: copies,
            ..PipelineConfig::default()
        };
        let e = EmbeddingConfig::default();
        assert_eq!(copy_config(&e, &p(1)).threads, Some(cores));
        assert_eq!(copy_config(&e, &p(2)).threads, Some((cores / 2).max(1)));
        let set = EmbeddingConfig {
            threads: Some(3),
            ..EmbeddingConfig::default()
        };
        assert_eq!(copy_config(&set, &p(2)).threads, Some(3));
        assert!(copy_config(&e, &p(1)).idle_priority);
        let normal = PipelineConfig {
            embedding_priority: EmbeddingPriority::Normal,
            ..p(1)
        };
        assert!(!copy_config(&e, &normal).idle_priority);
    }

    /// A remote model is a client per worker on the preflight's (no lock held across workers),
    /// whatever `model_copies` says; each embeds.
    #[test]
    fn a_remote_model_is_a_client_per_worker() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let s = rt.block_on(StandIn::start()).unwrap();
        let cfg = EmbeddingConfig {
            provider: Provider::Openai,
            base_url: s.base_url(),
            model: "standin".into(),
            ..EmbeddingConfig::default()
        };
        let p = PipelineConfig {
            workers: 2,
            model_copies: 2,
            ..PipelineConfig::default()
        };
        let metrics = Metrics::new();
        let first = EmbeddingModel::load(&cfg).unwrap();
        let models = Models::new(first, &cfg, &p);
        assert_eq!(models.copies.len(), 1);
        let mut a = models.for_worker(0, &metrics).unwrap();
        let mut b = models.for_worker(1, &metrics).unwrap();
        assert!(!Arc::ptr_eq(&a.model, &b.model));
        let va = a.embed_passages(&["a text"]).unwrap();
        let vb = b.embed_passages(&["a text"]).unwrap();
        assert_eq!(va, vb);
        assert_eq!(va[0].len(), a.dim());
        assert_eq!(a.cache_id(), b.cache_id());
    }
}
