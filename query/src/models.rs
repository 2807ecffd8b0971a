//! The query models of the index generations a node serves: each generation is searched with
//! vectors of the model its pipeline embedded it with (the pointer's `embedding`, else the
//! node's own `[embedding]`). A model is loaded once per node however many generations use it
//! (shared by settings, then by model id), and unloaded when the last generation holding it is
//! dropped, that is when no request pins it any more.

use std::sync::{Arc, Mutex, Weak};

use anyhow::{Context, Result};
use freshet_config::serving::Generation;
use freshet_embedding::EmbeddingConfig;

use crate::config::QueryConfig;
use crate::indexes::EmbedderPool;
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
