//! What `freshet run` checks and prepares before any worker starts: the tokenizer and the model
//! (its id and dimension), the topics, the embedding cache and the dead-letter producer; on
//! process 0 also the indexes: that the tantivy index and the Milvus collection belong together
//! ([`binding`]), the offsets to resume from (the last tantivy commit), the indexed state the
//! dataflow replays, and Milvus reconciled with tantivy ([`reconcile`]). Anything missing or
//! inconsistent fails here, before a record is read or an index written.

pub mod binding;
pub mod reconcile;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use freshet_embedding::{CachedEmbedder, DiskCache, EmbeddingModel};
use freshet_kafka::{admin, KafkaConfig, PartitionReader};
use freshet_milvus::MilvusSink;
use freshet_operators::chunk::{Chunk, ChunkKind, HfTokenCounter};
use freshet_operators::embed::Embedder;
use freshet_tantivy::{ChunkIndexWriter, CommitPayload};

use binding::{CollectionStep, GroupProgress, IndexState};
use reconcile::DeleteBound;

use crate::census::LanguageCensus;
use crate::config::Config;
use crate::embedder::{ModelRef, SharedCache};
use crate::endpoint::Readiness;
use crate::metrics::Metrics;
use crate::sink::changelog::Changelog;
use crate::sink::plan::{Offsets, TopicPartition};
use crate::sink::{Indexes, Sinks};
use crate::stall::Stall;
use crate::topics::Topic;

/// Everything the workers start from.
pub struct StartState {
    pub tokens: HfTokenCounter,
    /// The topics read, each with its record format.
    pub topics: Vec<Topic>,
    /// Each topic's partitions, in the order of `topics`.
    pub partitions: Vec<Vec<i32>>,
    pub cache: SharedCache,
    /// The embedding model, loaded as the workers' first copy ([`crate::embedder::Models`]).
    pub model: EmbeddingModel,
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
    flags: StartFlags,
    metrics: &Metrics,
    ready: &Readiness,
    stop: &Arc<AtomicBool>,
) -> Result<StartState> {
    ready.step("loading the tokenizer and the embedding model");
    // Loaded here to fail fast and to learn its id and dimension; the workers embed with it.
    let mut model = EmbeddingModel::load_with_metrics(
        &crate::embedder::copy_config(&config.embedding, &config.pipeline),
        Some(&metrics.remote_embedding),
    )
    .context("loading the embedding model")?;
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
    if config.replication.enabled() {
        crate::sink::changelog::ensure_topic(kafka, &config.replication)?;
    }
    let cache = open_cache(config)?;
    let recovered = if config.pipeline.process_index == 0 {
        Some(recover(
            config,
            flags,
            &topics,
            &partitions,
            &mut model,
            &cache,
            metrics,
            ready,
            stop,
        )?)
    } else {
        None
    };
    Ok(StartState {
        tokens,
        topics,
        partitions,
        cache,
        model,
        recovered,
    })
}

/// Where this process's embedding cache lives (processes other than 0 keep their own file
/// beside process 0's); the process's crash ledger lies beside it (`crate::quarantine`).
pub fn cache_path(config: &Config) -> std::path::PathBuf {
    let p = &config.pipeline;
    if p.process_index == 0 {
        p.embedding_cache_path.clone()
    } else {
        p.embedding_cache_path
            .with_extension(format!("p{}.log", p.process_index))
    }
}

/// The process's embedding cache.
fn open_cache(config: &Config) -> Result<SharedCache> {
    let path = cache_path(config);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let cache = DiskCache::open(&path)
        .with_context(|| format!("opening the embedding cache {}", path.display()))?;
    Ok(SharedCache(Arc::new(Mutex::new(cache))))
}

/// The explicit choices `freshet run` takes on the command line (none by default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StartFlags {
    pub bind: binding::BindFlags,
    /// `--allow-reconcile-deletes`: the start-up reconcile may delete any share of the
    /// collection, this once.
    pub allow_reconcile_deletes: bool,
}

/// Opens both indexes, checks that they belong together, reads where the last commit left off,
/// and makes Milvus agree with tantivy.
#[allow(clippy::too_many_arguments)]
fn recover(
    config: &Config,
    flags: StartFlags,
    topics: &[Topic],
    partitions: &[Vec<i32>],
    model: &mut EmbeddingModel,
    cache: &SharedCache,
    metrics: &Metrics,
    ready: &Readiness,
    stop: &Arc<AtomicBool>,
) -> Result<Recovered> {
    let path = &config.tantivy.path;
    ready.step(format!("opening the tantivy index {}", path.display()));
    std::fs::create_dir_all(path).with_context(|| format!("creating {}", path.display()))?;
    ready.step("loading the Japanese dictionary ([tantivy] ja_dictionary)".to_string());
    config.tantivy.configure_japanese()?;
    let mut tantivy = ChunkIndexWriter::open_or_create_with_threads(
        path,
        config.tantivy.writer_heap_bytes,
        config.tantivy.writer_threads,
    )
    .with_context(|| format!("opening the tantivy index {}", path.display()))?;
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
    let index = IndexState {
        committed: tantivy.last_payload()?.is_some(),
        chunks: tantivy.count(),
        index_id: tantivy.index_id().map(str::to_string),
    };

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
    let (milvus, bound) = runtime
        .block_on(async {
            let m = MilvusSink::connect(milvus_cfg)
                .await?
                .with_metrics(metrics.milvus.clone());
            let b = m.binding().await?;
            Ok::<_, freshet_milvus::Error>((m, b))
        })
        .context("connecting to Milvus")?;

    // Which index and collection go together, decided before either is written.
    let kafka = &config.kafka;
    let group = if index.is_new() {
        let step = "reading the consumer group's offsets";
        ready.step(step);
        group_progress(kafka, topics, partitions).context(step)?
    } else {
        Vec::new()
    };
    let decision = binding::decide(&path, &index, bound.as_ref(), &group, flags.bind, || {
        uuid::Uuid::new_v4().to_string()
    })
    .map_err(|why| anyhow!("collection {collection}: {why}"))?;
    tracing::info!(
        index = %path.display(), %collection, index_id = %decision.index_id,
        collection_step = ?decision.collection, from_beginning = decision.from_beginning,
        "the tantivy index and the Milvus collection belong together"
    );
    let where_ = path.display().to_string();
    match decision.collection {
        // Milvus 2.3 holds a new collection back until the sessions of its previous run have
        // expired: right after a restart that is tens of seconds, which this step names.
        CollectionStep::Create => ready.step(format!(
            "creating the Milvus collection {collection} (right after a Milvus restart this waits \
             up to ~30 s for the sessions of Milvus' previous run to expire)"
        )),
        CollectionStep::Bind => ready.step(format!(
            "binding the Milvus collection {collection} to the index"
        )),
        CollectionStep::Keep => {}
    }
    // The collection first: a start that stops between the two steps is taken up again by the
    // same decision (a new index stays new; an index from before ids takes the collection's).
    runtime
        .block_on(async {
            match decision.collection {
                CollectionStep::Create => milvus.create_bound(&decision.index_id, &where_).await,
                CollectionStep::Bind => milvus.bind(&decision.index_id, &where_).await,
                CollectionStep::Keep => Ok(()),
            }
        })
        .with_context(|| format!("binding the Milvus collection {collection} to the index"))?;
    tracing::info!(%collection, elapsed = ?started.elapsed(), "the Milvus collection is loaded");
    let rows = bound.as_ref().map_or(0, |b| b.rows);

    let mut start_offsets = Offsets::new();
    if decision.from_beginning {
        let step = "setting the consumer group to the beginning of the topics";
        ready.step(step);
        let low = from_the_beginning(kafka, topics, partitions).context(step)?;
        let mut payload = CommitPayload::new(low, 0);
        payload.index_id = Some(decision.index_id.clone());
        tantivy
            .commit(&payload)
            .context("writing the index id into the new tantivy index")?;
    } else if decision.write_id {
        let mut payload = tantivy
            .last_payload()?
            .unwrap_or_else(|| CommitPayload::new(Default::default(), 0));
        payload.index_id = Some(decision.index_id.clone());
        tantivy
            .commit(&payload)
            .context("writing the index id into the tantivy index")?;
    }
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
    ready.step(format!("loading the {} indexed chunks", index.chunks));
    let mut by_doc: BTreeMap<String, Vec<Chunk>> = BTreeMap::new();
    for c in tantivy.load_all().context("loading the indexed chunks")? {
        by_doc.entry(c.doc_id.clone()).or_default().push(c);
    }
    for v in by_doc.values_mut() {
        v.sort_by_key(|c| (c.kind, c.index));
    }
    // Past [embedding] cache_max_bytes, the cache keeps only the texts the index holds (no
    // record is read yet, so no text in flight is lost; crate::cache).
    {
        let mut c = cache
            .0
            .lock()
            .map_err(|_| anyhow!("embedding cache lock poisoned"))?;
        crate::cache::compact_at_start(
            &mut c,
            config.embedding.cache_max_bytes,
            model.cache_id(),
            by_doc.values().flatten(),
            metrics,
        )?;
    }

    // The dead letters written since the last commit (all of them before a first commit), so
    // that none is written twice (see crate::dlq).
    ready.step(format!(
        "reading the dead-letter topic {}",
        config.kafka.dlq_topic
    ));
    let payload_epoch = payload.as_ref().map(|p| p.epoch);
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
    ready.step("reconciling Milvus with the tantivy index");
    let bound = DeleteBound {
        unbounded: decision.reconcile_unbounded || flags.allow_reconcile_deletes,
        max_share: config.pipeline.reconcile_max_delete_share,
        expected: crate::sink::pending::read(tantivy.path(), payload_epoch),
    };
    let mut embedder =
        CachedEmbedder::new(ModelRef(model), cache.clone(), config.embedding.batch_size);
    reconcile::reconcile(&runtime, &milvus, &leaves, rows, &bound, &mut embedder)
        .context("reconciling Milvus with the tantivy index")?;
    let stall = Stall::new(
        Duration::from_secs(config.pipeline.stall_limit_s),
        stop.clone(),
        ready.clone(),
        metrics.clone(),
    );
    let changelog = if config.replication.enabled() {
        ready.step(format!(
            "bringing the changelog {} to the last commit",
            config.replication.changelog_topic
        ));
        let mut c = Changelog::new(
            kafka,
            &config.replication.changelog_topic,
            stall.clone(),
            metrics.clone(),
        )?;
        c.recover(kafka, &tantivy)
            .context("bringing the changelog topic to the last commit")?;
        Some(c)
    } else {
        None
    };
    let indexes = Indexes {
        tantivy,
        milvus,
        runtime,
    };
    let topics = topics.iter().map(|t| t.name.clone()).collect();
    let mut census = LanguageCensus::new(
        model.languages().cloned(),
        config.pipeline.uncovered_language_warn_share,
        metrics.clone(),
        ready.clone(),
    );
    for (doc, chunks) in &by_doc {
        census.set(doc, chunks);
    }
    census.publish();
    let sinks = Sinks::new(
        &config.kafka,
        topics,
        indexes,
        scan,
        start_offsets.clone(),
        stall,
        metrics,
    )?
    .with_census(census);
    let sinks = match changelog {
        Some(c) => sinks.with_changelog(c),
        None => sinks,
    };
    Ok(Recovered {
        sinks,
        start_offsets,
        bootstrap: by_doc.into_iter().collect(),
    })
}

/// The partitions the consumer group has read past their beginning (committed offset above the
/// low watermark).
fn group_progress(
    kafka: &KafkaConfig,
    topics: &[Topic],
    partitions: &[Vec<i32>],
) -> Result<Vec<GroupProgress>> {
    let mut out = Vec::new();
    for (topic, parts) in topics.iter().zip(partitions) {
        let reader = PartitionReader::new(kafka, &topic.name, parts, &BTreeMap::new())?;
        let committed = reader.committed()?;
        for (p, (low, _)) in reader.watermarks()? {
            if let Some(c) = committed.get(&p).filter(|c| **c > low) {
                out.push(GroupProgress {
                    topic: topic.name.clone(),
                    partition: p,
                    committed: *c,
                    low,
                });
            }
        }
    }
    Ok(out)
}

/// Sets the consumer group to the beginning (the low watermark) of every partition, so that
/// every process of a cluster reads the topics from there, and returns those offsets by topic.
fn from_the_beginning(
    kafka: &KafkaConfig,
    topics: &[Topic],
    partitions: &[Vec<i32>],
) -> Result<BTreeMap<String, BTreeMap<i32, i64>>> {
    let mut out = BTreeMap::new();
    for (topic, parts) in topics.iter().zip(partitions) {
        let reader = PartitionReader::new(kafka, &topic.name, parts, &BTreeMap::new())?;
        let low: BTreeMap<i32, i64> = reader
            .watermarks()?
            .into_iter()
            .map(|(p, (low, _))| (p, low))
            .collect();
        reader.commit(&low)?;
        out.insert(topic.name.clone(), low);
    }
    Ok(out)
}
