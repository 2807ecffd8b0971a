//! What `freshet run` checks and prepares before any worker starts: the tokenizer and the model
//! (its id and dimension), the topics, the embedding cache and the dead-letter producer; on
//! process 0 also the indexes: the offsets to resume from (the last tantivy commit), the indexed
//! state the dataflow replays, and Milvus reconciled with tantivy. Anything missing or
//! inconsistent fails here, before a record is read.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use freshet_embedding::{CachedEmbedder, DiskCache, FastEmbedder};
use freshet_kafka::{admin, DlqProducer};
use freshet_milvus::MilvusSink;
use freshet_operators::chunk::{Chunk, ChunkKind, HfTokenCounter};
use freshet_operators::embed::{embed_input, Embedder};
use freshet_tantivy::ChunkIndexWriter;

use crate::config::Config;
use crate::dlq::DeadLetters;
use crate::embedder::{ModelRef, SharedCache};
use crate::endpoint::Readiness;
use crate::metrics::Metrics;
use crate::sink::plan::{Offsets, TopicPartition};
use crate::sink::Sinks;
use crate::stall::Stall;
use crate::topics::Topic;

/// Everything the workers start from.
pub struct Prepared {
    pub tokens: HfTokenCounter,
    /// The topics read, each with its record format.
    pub topics: Vec<Topic>,
    /// Each topic's partitions, in the order of `topics`.
    pub partitions: Vec<Vec<i32>>,
    pub cache: SharedCache,
    /// Process 0 only (it owns the sinks).
    pub recovered: Option<Recovered>,
}

/// The indexed chunks by document, as the dataflow replays them after a restart.
pub type IndexedState = Vec<(String, Vec<Chunk>)>;

/// Process 0's state from the indexes.
pub struct Recovered {
    pub sinks: Sinks,
    /// Next offset per topic partition, from the last tantivy commit (empty for a new index).
    pub start_offsets: Offsets,
    /// The indexed chunks by document, replayed into the dataflow at the bootstrap time.
    pub bootstrap: IndexedState,
}

/// Runs the checks and the recovery (see the module docs).
pub fn preflight(
    config: &Config,
    metrics: &Metrics,
    ready: &Readiness,
    stop: &Arc<AtomicBool>,
) -> Result<Prepared> {
    ready.step("loading the tokenizer and the embedding model");
    // The model is loaded here once to fail fast and to learn its id and dimension.
    let mut model = FastEmbedder::load(&config.embedding).context("loading the embedding model")?;
    tracing::info!(model_id = %model.model_id(), dim = model.dim(), "embedding model loaded");
    // Chunk budgets hold a leaf's whole embedded input, within the model's window.
    let tokens = model.token_counter().context("loading the tokenizer")?;
    let chunking = &config.chunking;
    model
        .check_budget("chunking.max_tokens", chunking.max_tokens)
        .context("checking the chunk budget")?;
    if chunking.resolve_any_parent_child() {
        model
            .check_budget("chunking.child_max_tokens", chunking.child_max_tokens)
            .context("checking the chunk budget")?;
    }

    let kafka = &config.kafka;
    ready.step(format!("checking the topics on {}", kafka.brokers));
    let topics = config.topics()?;
    let mut partitions = Vec::with_capacity(topics.len());
    for t in &topics {
        admin::ensure_topic(kafka, &t.name, config.pipeline.topic_partitions)
            .with_context(|| format!("creating the topic {}", t.name))?;
        partitions.push(
            admin::partitions(kafka, &t.name)
                .with_context(|| format!("reading the partitions of {}", t.name))?,
        );
    }
    admin::ensure_topic(kafka, &kafka.dlq_topic, 1).context("creating the dead-letter topic")?;
    let cache = open_cache(config)?;
    let recovered = if config.pipeline.process_index == 0 {
        Some(recover(
            config, &topics, &mut model, &cache, metrics, ready, stop,
        )?)
    } else {
        None
    };
    Ok(Prepared {
        tokens,
        topics,
        partitions,
        cache,
        recovered,
    })
}

/// The process's embedding cache (processes other than 0 keep their own file beside it).
fn open_cache(config: &Config) -> Result<SharedCache> {
    let p = &config.pipeline;
    let path = if p.process_index == 0 {
        p.embedding_cache_path.clone()
    } else {
        p.embedding_cache_path
            .with_extension(format!("p{}.log", p.process_index))
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let cache = DiskCache::open(&path)
        .with_context(|| format!("opening the embedding cache {}", path.display()))?;
    Ok(SharedCache(Arc::new(Mutex::new(cache))))
}

/// Opens both indexes, reads where the last commit left off, and makes Milvus agree with
/// tantivy.
fn recover(
    config: &Config,
    topics: &[Topic],
    model: &mut FastEmbedder,
    cache: &SharedCache,
    metrics: &Metrics,
    ready: &Readiness,
    stop: &Arc<AtomicBool>,
) -> Result<Recovered> {
    let path = &config.tantivy.path;
    ready.step(format!("opening the tantivy index {}", path.display()));
    std::fs::create_dir_all(path).with_context(|| format!("creating {}", path.display()))?;
    let tantivy = ChunkIndexWriter::open_or_create_with_threads(
        path,
        config.tantivy.writer_heap_bytes,
        config.tantivy.writer_threads,
    )
    .with_context(|| format!("opening the tantivy index {}", path.display()))?;
    let mut start_offsets = Offsets::new();
    let payload = tantivy.last_payload()?;
    if let Some(payload) = &payload {
        // Each topic resumes where the commit left it; a topic it does not name starts from
        // the group's offsets, or the beginning.
        for (t, topic) in topics.iter().enumerate() {
            for (p, o) in payload.offsets.get(&topic.name).into_iter().flatten() {
                let tp = TopicPartition {
                    topic: t,
                    partition: *p,
                };
                start_offsets.insert(tp, *o);
            }
        }
        tracing::info!(epoch = payload.epoch, offsets = ?payload.offsets, "resuming from the tantivy commit");
    }
    let mut by_doc: BTreeMap<String, Vec<Chunk>> = BTreeMap::new();
    for c in tantivy.load_all().context("loading the indexed chunks")? {
        by_doc.entry(c.doc_id.clone()).or_default().push(c);
    }
    for v in by_doc.values_mut() {
        v.sort_by_key(|c| (c.kind, c.index));
    }

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut milvus_cfg = config.milvus.clone();
    milvus_cfg.dim = model.dim();
    milvus_cfg.model_id = model.model_id().to_string();
    let collection = milvus_cfg.collection.clone();
    ready.step(format!(
        "opening and loading the Milvus collection {collection} at {}",
        milvus_cfg.url
    ));
    let started = Instant::now();
    let milvus = runtime
        .block_on(async {
            let m = MilvusSink::connect(milvus_cfg).await?;
            m.ensure_collection().await?;
            Ok::<_, freshet_milvus::Error>(m)
        })
        .context("connecting to Milvus")?;
    tracing::info!(%collection, elapsed = ?started.elapsed(), "the Milvus collection is loaded");

    // The dead letters written since the last commit (all of them before a first commit), so
    // that none is written twice (see crate::dlq).
    ready.step(format!(
        "reading the dead-letter topic {}",
        config.kafka.dlq_topic
    ));
    let (dlq_from, resume) = payload
        .map(|p| (p.dead_letters_next, p.offsets))
        .unwrap_or_default();
    let scan = crate::dlq::already_sent(&config.kafka, &dlq_from, &resume)
        .context("reading the dead-letter topic")?;

    let leaves: Vec<&Chunk> = by_doc
        .values()
        .flatten()
        .filter(|c| c.kind == ChunkKind::Leaf)
        .collect();
    let batch_size = config.embedding.batch_size;
    ready.step("reconciling Milvus with the tantivy index");
    reconcile(&runtime, &milvus, &leaves, model, cache.clone(), batch_size)
        .context("reconciling Milvus with the tantivy index")?;
    Ok(Recovered {
        sinks: Sinks {
            kafka: config.kafka.clone(),
            topics: topics.iter().map(|t| t.name.clone()).collect(),
            dlq: DeadLetters::new(
                DlqProducer::new(&config.kafka).context("creating the DLQ producer")?,
                metrics.clone(),
            ),
            dlq_sent: scan.sent,
            dlq_next: scan.ends,
            tantivy,
            milvus,
            runtime,
            offsets: start_offsets.clone(),
            metrics: metrics.clone(),
            lost: Default::default(),
            stall: Stall::new(
                Duration::from_secs(config.pipeline.stall_limit_s),
                stop.clone(),
                ready.clone(),
                metrics.clone(),
            ),
        },
        start_offsets,
        bootstrap: by_doc.into_iter().collect(),
    })
}

/// Makes Milvus hold exactly the leaf chunks that tantivy holds (after a crash between the two
/// writes): deletes extra ids and re-inserts missing ones (vectors from the cache when possible).
fn reconcile(
    runtime: &tokio::runtime::Runtime,
    milvus: &MilvusSink,
    leaves: &[&Chunk],
    model: &mut FastEmbedder,
    cache: SharedCache,
    batch_size: usize,
) -> Result<()> {
    let in_milvus: BTreeSet<String> = runtime
        .block_on(milvus.list_chunk_ids())?
        .into_iter()
        .collect();
    let in_tantivy: BTreeSet<&str> = leaves.iter().map(|c| c.chunk_id.as_str()).collect();
    let extra: Vec<String> = in_milvus
        .iter()
        .filter(|id| !in_tantivy.contains(id.as_str()))
        .cloned()
        .collect();
    let missing: Vec<&Chunk> = leaves
        .iter()
        .copied()
        .filter(|c| !in_milvus.contains(&c.chunk_id))
        .collect();
    if extra.is_empty() && missing.is_empty() {
        return Ok(());
    }
    tracing::warn!(
        extra = extra.len(),
        missing = missing.len(),
        "Milvus differs from tantivy; reconciling"
    );
    if !extra.is_empty() {
        runtime.block_on(milvus.delete(&extra))?;
    }
    let mut embedder = CachedEmbedder::new(ModelRef(model), cache, batch_size);
    for batch in missing.chunks(256) {
        let texts: Vec<String> = batch.iter().map(|c| embed_input(c)).collect();
        let refs: Vec<&str> = texts.iter().map(|s| s.as_str()).collect();
        let (vectors, _) = embedder.embed(&refs).map_err(|e| anyhow!("{e}"))?;
        let rows: Vec<(Chunk, Vec<f32>)> =
            batch.iter().map(|c| (*c).clone()).zip(vectors).collect();
        runtime.block_on(milvus.upsert(&rows))?;
    }
    Ok(())
}
