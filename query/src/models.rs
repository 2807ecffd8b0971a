//! The query models of the index generations a node serves: each generation is searched with
//! vectors of the model its pipeline embedded it with (the pointer's `embedding`, else the
//! node's own `[embedding]`). A model is loaded once per node however many generations use it
//! (shared by settings, then by model id), and unloaded when the last generation holding it is
//! dropped, that is when no request pins it any more ([`EmbedderPool`]: one model's instances
//! and its cache of query vectors).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use freshet_config::serving::Generation;
use freshet_core::embed::Embedder;
use freshet_embedding::language::Languages;
use freshet_embedding::{EmbeddingConfig, EmbeddingModel, Provider};

use crate::config::{Config, QueryConfig};
use crate::metrics::Metrics;

/// Loads and shares the query models of generations.
pub struct QueryModels {
    /// The node's own `[embedding]`: the model of a generation that names none.
    default: EmbeddingConfig,
    query: QueryConfig,
    metrics: Metrics,
    loaded: Mutex<Vec<Loaded>>,
}

struct Loaded {
    settings: EmbeddingConfig,
    pool: Weak<EmbedderPool>,
}

impl QueryModels {
    pub fn new(default: EmbeddingConfig, query: QueryConfig, metrics: Metrics) -> QueryModels {
        QueryModels {
            default,
            query,
            metrics,
            loaded: Mutex::new(Vec::new()),
        }
    }

    /// The `[embedding]` settings `generation`'s queries are embedded with.
    pub fn settings(&self, generation: Option<&Generation>) -> Result<EmbeddingConfig> {
        match generation.and_then(|g| g.embedding.as_ref().map(|e| (g, e))) {
            None => Ok(self.default.clone()),
            Some((g, e)) => serde_json::from_value(e.clone()).with_context(|| {
                format!(
                    "the serving pointer's generation {} names embedding settings this node \
                     cannot read: write the pointer with `freshet reindex switch` of this version",
                    g.name
                )
            }),
        }
    }

    /// The query embedders of `generation`'s model: a pool already loaded with the same
    /// settings or the same model id, else a new one (blocking: loads the model).
    pub fn pool_for(&self, generation: Option<&Generation>) -> Result<Arc<EmbedderPool>> {
        let settings = self.settings(generation)?;
        if let Some(p) = self.find(|l, _| l.settings == settings) {
            return Ok(p);
        }
        let pool = EmbedderPool::load_model(&settings, &self.query, self.metrics.clone())
            .with_context(|| match generation {
                Some(g) => format!("loading the query model of index generation {}", g.name),
                None => "loading the query model ([embedding])".to_string(),
            })?;
        let model_id = pool.model_id().to_owned();
        if let Some(p) = self.find(|_, p| p.model_id() == model_id) {
            // Other settings of a model already loaded: one copy serves both.
            return Ok(p);
        }
        tracing::info!(model = %model_id, dim = pool.dim(), "query embedding model loaded");
        let pool = Arc::new(pool);
        if let Ok(mut loaded) = self.loaded.lock() {
            loaded.push(Loaded {
                settings,
                pool: Arc::downgrade(&pool),
            });
        }
        Ok(pool)
    }

    /// A live pool matching `keep`; forgets the dropped ones.
    fn find(&self, keep: impl Fn(&Loaded, &EmbedderPool) -> bool) -> Option<Arc<EmbedderPool>> {
        let mut loaded = self.loaded.lock().ok()?;
        loaded.retain(|l| l.pool.strong_count() > 0);
        loaded
            .iter()
            .find_map(|l| l.pool.upgrade().filter(|p| keep(l, p)))
    }
}

/// Query embedders shared by request handlers (each call takes one), and the vectors of
/// recent query texts.
pub struct EmbedderPool {
    free: Mutex<Vec<EmbeddingModel>>,
    available: Condvar,
    dim: usize,
    model_id: String,
    /// The languages the model declares it covers (`None`: undeclared).
    languages: Option<Languages>,
    provider: Provider,
    cache: Mutex<QueryVectorCache>,
    metrics: Metrics,
}

/// The vectors of the last `capacity` distinct query texts (oldest insert evicted first).
struct QueryVectorCache {
    capacity: usize,
    vectors: HashMap<String, Arc<Vec<f32>>>,
    order: VecDeque<String>,
}

impl QueryVectorCache {
    fn new(capacity: usize) -> QueryVectorCache {
        QueryVectorCache {
            capacity,
            vectors: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    fn get(&self, text: &str) -> Option<Arc<Vec<f32>>> {
        self.vectors.get(text).cloned()
    }

    fn put(&mut self, text: &str, vector: Arc<Vec<f32>>) {
        if self.capacity == 0 || self.vectors.contains_key(text) {
            return;
        }
        while self.order.len() >= self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.vectors.remove(&old);
            }
        }
        self.order.push_back(text.to_owned());
        self.vectors.insert(text.to_owned(), vector);
    }
}

impl EmbedderPool {
    pub fn load(cfg: &Config, metrics: Metrics) -> Result<EmbedderPool> {
        EmbedderPool::load_model(&cfg.embedding, &cfg.query, metrics)
    }

    /// The pool of `embedding`'s model, sized by `[query]` (a generation's own model).
    pub fn load_model(
        embedding: &EmbeddingConfig,
        query: &QueryConfig,
        metrics: Metrics,
    ) -> Result<EmbedderPool> {
        let mut ecfg = embedding.clone();
        ecfg.threads = Some(query.embedder_threads);
        if ecfg.provider == Provider::Openai {
            // A query waits for a remote model at most half its request's time, retries
            // included, so that a server that is away leaves time to answer from BM25
            // (hybrid, allow_partial) instead of timing the request out.
            let half = (query.request_timeout_ms / 2).max(1);
            ecfg.deadline_ms = ecfg.deadline_ms.min(half);
            ecfg.timeout_ms = ecfg.timeout_ms.min(ecfg.deadline_ms);
            ecfg.connect_timeout_ms = ecfg.connect_timeout_ms.min(ecfg.timeout_ms);
        }
        let mut free: Vec<EmbeddingModel> = Vec::with_capacity(query.embedder_instances);
        for _ in 0..query.embedder_instances {
            // A remote model is one client shared by every handle (its max_concurrent holds
            // for the node); a local one is loaded per instance.
            let model = match free.first().and_then(EmbeddingModel::share) {
                Some(shared) => shared,
                None => EmbeddingModel::load_with_metrics(&ecfg, Some(&metrics.remote_embedding))
                    .context("loading the query embedding model")?,
            };
            free.push(model);
        }
        let first = free
            .first()
            .context("[query] embedder_instances must be at least 1")?;
        let dim = first.dim();
        let model_id = first.model_id().to_owned();
        let languages = first.languages().cloned();
        let provider = first.provider();
        metrics.query_models.inc();
        Ok(EmbedderPool {
            free: Mutex::new(free),
            available: Condvar::new(),
            dim,
            model_id,
            languages,
            provider,
            cache: Mutex::new(QueryVectorCache::new(query.query_cache_entries)),
            metrics,
        })
    }

    /// Embeds a query (blocking; call from a blocking thread), or returns the vector of the
    /// same text embedded before. Gives up, without embedding, once `stop()` holds while it
    /// waits for a free model.
    pub fn embed_query(&self, text: &str, stop: &dyn Fn() -> bool) -> Result<Arc<Vec<f32>>> {
        let cached = self.cache.lock().ok().and_then(|c| c.get(text));
        if let Some(v) = cached {
            self.metrics.query_embedding("cache_hit");
            return Ok(v);
        }
        let v = Arc::new(self.embed_with_model(text, stop)?);
        self.metrics.query_embedding("embedded");
        if let Ok(mut c) = self.cache.lock() {
            c.put(text, v.clone());
        }
        Ok(v)
    }

    fn embed_with_model(&self, text: &str, stop: &dyn Fn() -> bool) -> Result<Vec<f32>> {
        let mut free = self
            .free
            .lock()
            .map_err(|_| anyhow!("embedder pool poisoned"))?;
        loop {
            if stop() {
                return Err(anyhow!("cancelled while waiting for a query embedder"));
            }
            if !free.is_empty() {
                break;
            }
            free = self
                .available
                .wait_timeout(free, Duration::from_millis(10))
                .map_err(|_| anyhow!("embedder pool poisoned"))?
                .0;
        }
        let mut model = free.pop().expect("non-empty");
        drop(free);
        let out = model.embed_query(text).map_err(|e| match e {
            freshet_embedding::Error::Remote { outage: true, .. } => {
                anyhow::Error::new(EmbedderUnavailable(e.to_string()))
            }
            e => anyhow!("{e}"),
        });
        if let Ok(mut free) = self.free.lock() {
            free.push(model);
        }
        self.available.notify_one();
        out
    }

    pub fn dim(&self) -> usize {
        self.dim
    }
    pub fn model_id(&self) -> &str {
        &self.model_id
    }
    pub fn languages(&self) -> Option<&Languages> {
        self.languages.as_ref()
    }
    /// Where the query vectors come from (`[embedding] provider`).
    pub fn provider(&self) -> Provider {
        self.provider
    }
}

impl Drop for EmbedderPool {
    fn drop(&mut self) {
        // The models first (the fields drop after this body), then their freed memory back to
        // the system: glibc keeps freed heap for re-use, and a node that switched models
        // would otherwise hold the old model's size for good.
        if let Ok(free) = self.free.get_mut() {
            free.clear();
        }
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim(3) takes no pointers and only returns free heap to the system.
        unsafe {
            libc::malloc_trim(0);
        }
        self.metrics.query_models.dec();
        tracing::info!(model = %self.model_id, "query embedding model unloaded");
    }
}

/// The remote embedding server is away (unreachable, timing out, 5xx or 429 after the
/// client's retries): the vector route is unavailable, as when Milvus is down.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct EmbedderUnavailable(pub String);

#[cfg(test)]
#[path = "models_tests.rs"]
mod tests;
