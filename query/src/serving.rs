//! The index generation the node serves, and the switch to another one.
//!
//! Without `[query] serving_pointer` the node serves `[tantivy] path` and `[milvus] collection`,
//! one [`Indexes`] for its whole life. With a pointer (`freshet_config::serving`), it serves
//! the generation the pointer names and polls the file: when it names another generation, the
//! node loads that generation's query model (`models.rs`), opens it beside the one served (its
//! tantivy commit loaded, its collection connected, holding that model's vectors and bound to
//! that commit's index id) and only then switches, in one swap of an `Arc`. A request pins the
//! generation it started on ([`Serving::current`]) and reads only it from start to end (its
//! tantivy snapshot, that generation's own collection, never a Milvus alias, and its query
//! model), so no answer mixes two generations or embeds with another generation's model; the generation left keeps answering the requests
//! that pinned it and stops its background tasks.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::{Context, Result};
use freshet_config::serving::{Generation, ServingPointer};
use freshet_milvus::MilvusConfig;
use freshet_tantivy::{Bm25Params, ChunkIndexReader, Snapshot};
use serde::Serialize;

use crate::indexes::{EmbedderPool, Freshness, Indexes, Status};
use crate::metrics::{GenerationLabels, Metrics};
use crate::models::QueryModels;

/// How to open a generation's two indexes.
#[derive(Clone)]
pub struct Opener {
    pub reload_interval: Duration,
    /// Load commits on file notifications too (`[query] reload_notify`).
    pub reload_notify: bool,
    pub bm25: Bm25Params,
    /// `[milvus]`; the collection, dimension and model id are the generation's.
    pub milvus: MilvusConfig,
    /// The generations' query models.
    pub models: Arc<QueryModels>,
    pub runtime: tokio::runtime::Handle,
}

impl Opener {
    /// Opens `tantivy_path` and `milvus.collection` in the background (a reload thread and a
    /// Milvus task, both ending when the indexes are stopped).
    /// The collection must hold vectors of `embedders`' model (its dimension and id).
    pub fn open(
        &self,
        generation: Option<Generation>,
        tantivy_path: PathBuf,
        mut milvus: MilvusConfig,
        embedders: Arc<EmbedderPool>,
        reporting: bool,
        metrics: &Metrics,
    ) -> Arc<Indexes> {
        milvus.dim = embedders.dim();
        milvus.model_id = embedders.model_id().to_owned();
        let ix = Indexes::for_generation(generation, Some(embedders), reporting, metrics.clone());
        ix.spawn_tantivy_reloader(
            tantivy_path,
            self.reload_interval,
            self.bm25,
            self.reload_notify,
        );
        let _entered = self.runtime.enter();
        ix.spawn_milvus_connector(milvus);
        ix
    }

    fn open_generation(
        &self,
        g: &Generation,
        embedders: Arc<EmbedderPool>,
        reporting: bool,
        metrics: &Metrics,
    ) -> Arc<Indexes> {
        let mut m = self.milvus.clone();
        m.collection.clone_from(&g.milvus_collection);
        self.open(
            Some(g.clone()),
            g.tantivy_path.clone(),
            m,
            embedders,
            reporting,
            metrics,
        )
    }
}

/// What `GET /v1/index` says about generations (absent without a serving pointer).
#[derive(Clone, Debug, Default, Serialize)]
pub struct GenerationState {
    /// The generation served.
    pub serving: Option<String>,
    /// A generation the pointer names that the node is still opening, and why it is not
    /// served yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub opening: Option<Opening>,
    /// Why the pointer cannot be read (the node keeps serving what it serves).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pointer_error: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Opening {
    pub generation: String,
    pub status: Status,
    /// Why its query model cannot be loaded (it is tried again every few seconds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// How long a generation whose query model failed to load waits before the next try.
const MODEL_RETRY: Duration = Duration::from_secs(5);

/// A query model that failed to load: for which generation, why, and when.
struct ModelFailure {
    generation: Generation,
    error: String,
    at: std::time::Instant,
}

/// The generation served, and the one being opened.
pub struct Serving {
    current: RwLock<Arc<Indexes>>,
    opening: Mutex<Option<Arc<Indexes>>>,
    model_failure: Mutex<Option<ModelFailure>>,
    pointer_error: RwLock<Option<String>>,
    metrics: Metrics,
}

impl Serving {
    /// Serving `indexes` for good (no pointer).
    pub fn fixed(indexes: Arc<Indexes>, metrics: Metrics) -> Arc<Serving> {
        Arc::new(Serving {
            current: RwLock::new(indexes),
            opening: Mutex::new(None),
            model_failure: Mutex::new(None),
            pointer_error: RwLock::new(None),
            metrics,
        })
    }

    /// Starts serving: `[tantivy]`/`[milvus]` without a pointer; with one, the generation it
    /// names (a pointer that cannot be read stops the start) and a thread following it.
    pub fn start(
        pointer: &Path,
        tantivy_path: PathBuf,
        opener: Opener,
        metrics: Metrics,
    ) -> Result<Arc<Serving>> {
        if pointer.as_os_str().is_empty() {
            let pool = opener.models.pool_for(None)?;
            let ix = opener.open(
                None,
                tantivy_path,
                opener.milvus.clone(),
                pool,
                true,
                &metrics,
            );
            return Ok(Serving::fixed(ix, metrics));
        }
        let p = ServingPointer::read(pointer).context(
            "[query] serving_pointer: write it with `freshet reindex switch`, or set it to \"\" \
             to serve [tantivy] path and [milvus] collection",
        )?;
        tracing::info!(
            generation = %p.serving.name,
            pointer = %pointer.display(),
            "serving the pointer's generation"
        );
        let pool = opener.models.pool_for(Some(&p.serving)).context(
            "the serving pointer's generation: check its embedding settings (the model dir or \
             server its pipeline embeds with must be reachable from this node)",
        )?;
        let ix = opener.open_generation(&p.serving, pool, true, &metrics);
        let me = Serving::fixed(ix, metrics);
        me.label(&p.serving.name, None);
        let (follower, path) = (me.clone(), pointer.to_owned());
        std::thread::Builder::new()
            .name("serving-pointer".into())
            .spawn(move || loop {
                std::thread::sleep(opener.reload_interval.max(Duration::from_millis(50)));
                follower.follow_tick(&path, &opener);
            })
            .context("spawning the serving pointer thread")?;
        Ok(me)
    }

    /// One poll of the pointer: open the generation it names beside the one served, and switch
    /// once that one is ready.
    pub(crate) fn follow_tick(&self, pointer: &Path, opener: &Opener) {
        let want = match ServingPointer::read(pointer) {
            Ok(p) => {
                self.set_pointer_error(None);
                p.serving
            }
            Err(e) => {
                self.set_pointer_error(Some(e.to_string()));
                return;
            }
        };
        let current = self.current();
        if current.generation() == Some(&want) {
            self.set_opening(None);
            self.set_model_failure(None);
            return;
        }
        let being_opened = self
            .opening
            .lock()
            .ok()
            .and_then(|o| o.clone())
            .filter(|o| o.generation() == Some(&want));
        let next = match being_opened {
            Some(o) => o,
            None => {
                if self.model_failed_lately(&want) {
                    return;
                }
                // The query model first (loading it takes a while; nothing is locked), then
                // the indexes, which are searched with its vectors only.
                let pool = match opener.models.pool_for(Some(&want)) {
                    Ok(p) => p,
                    Err(e) => {
                        let error = format!("{e:#}");
                        tracing::warn!(generation = %want.name, error = %error,
                            "the next index generation's query model cannot be loaded");
                        self.set_opening(None);
                        self.set_model_failure(Some(ModelFailure {
                            generation: want,
                            error,
                            at: std::time::Instant::now(),
                        }));
                        return;
                    }
                };
                self.set_model_failure(None);
                tracing::info!(generation = %want.name, model = %pool.model_id(),
                    "opening the next index generation");
                let o = opener.open_generation(&want, pool, false, &self.metrics);
                self.set_opening(Some(o.clone()));
                o
            }
        };
        if !next.is_ready() {
            return;
        }
        if let Ok(mut opening) = self.opening.lock() {
            *opening = None;
        }
        if let Ok(mut c) = self.current.write() {
            *c = next.clone();
        }
        next.set_reporting(true);
        current.stop();
        self.metrics.index_switches.inc();
        self.label(&want.name, current.generation_name());
        tracing::info!(
            from = current.generation_name().unwrap_or_default(),
            to = %want.name,
            "switched index generation"
        );
    }

    /// Replaces the generation being opened (stopping the one replaced).
    fn set_opening(&self, next: Option<Arc<Indexes>>) {
        if let Ok(mut opening) = self.opening.lock() {
            if let Some(o) = opening.take() {
                o.stop();
            }
            *opening = next;
        }
    }

    fn set_model_failure(&self, f: Option<ModelFailure>) {
        if let Ok(mut g) = self.model_failure.lock() {
            *g = f;
        }
    }

    /// `want`'s model failed to load less than [`MODEL_RETRY`] ago.
    fn model_failed_lately(&self, want: &Generation) -> bool {
        self.model_failure.lock().ok().is_some_and(|g| {
            g.as_ref()
                .is_some_and(|f| f.generation == *want && f.at.elapsed() < MODEL_RETRY)
        })
    }

    fn label(&self, serving: &str, left: Option<String>) {
        if let Some(old) = left {
            self.metrics
                .index_generation
                .remove(&GenerationLabels { generation: old });
        }
        self.metrics
            .index_generation
            .get_or_create(&GenerationLabels {
                generation: serving.to_owned(),
            })
            .set(1);
    }

    fn set_pointer_error(&self, e: Option<String>) {
        if let Ok(mut g) = self.pointer_error.write() {
            if *g != e {
                if let Some(e) = &e {
                    tracing::warn!(error = %e, "serving pointer unreadable: serving what was served");
                }
                *g = e;
            }
        }
    }

    /// The generation served now: pin it for a whole request.
    pub fn current(&self) -> Arc<Indexes> {
        match self.current.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// What `GET /v1/index` reports about generations (`None` without a pointer).
    pub fn state(&self) -> Option<GenerationState> {
        let serving = self.current().generation_name()?;
        let opening = self
            .opening
            .lock()
            .ok()
            .and_then(|o| o.clone())
            .map(|o| Opening {
                generation: o.generation_name().unwrap_or_default(),
                status: o.status(),
                model: None,
            })
            .or_else(|| {
                let failure = self.model_failure.lock().ok()?;
                let f = failure.as_ref()?;
                Some(Opening {
                    generation: f.generation.name.clone(),
                    status: Status::default(),
                    model: Some(f.error.clone()),
                })
            });
        Some(GenerationState {
            serving: Some(serving),
            opening,
            pointer_error: self.pointer_error.read().ok().and_then(|g| g.clone()),
        })
    }

    // The served generation's state, for callers that read one thing of it.
    pub fn freshness(&self) -> Freshness {
        self.current().freshness()
    }
    pub fn status(&self) -> Status {
        self.current().status()
    }
    pub fn served_offset(&self, topic: &str, partition: i32) -> Option<i64> {
        self.current().served_offset(topic, partition)
    }
    pub fn snapshot(&self) -> Option<Arc<Snapshot>> {
        self.current().snapshot()
    }
    pub fn snapshot_to_search(&self) -> std::result::Result<Arc<Snapshot>, String> {
        self.current().snapshot_to_search()
    }
    pub fn tantivy(&self) -> Option<Arc<ChunkIndexReader>> {
        self.current().tantivy()
    }
}

#[cfg(test)]
#[path = "serving_tests.rs"]
mod tests;
