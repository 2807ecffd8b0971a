//! `freshet run`: preflight (model, topics, indexes, recovery), then the timely workers.
//!
//! Each worker reads its share of the partitions, feeds prepared document updates into the
//! dataflow at one epoch per poll, and commits Kafka offsets of an epoch once the probe after
//! the sink says that epoch is durable in both indexes. The dataflow closure only builds
//! operators; this file owns the loops, the commits and shutdown.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use freshet_embedding::{CachedEmbedder, DiskCache, FastEmbedder};
use freshet_kafka::{admin, partitions_for_worker, DlqProducer, PartitionReader};
use freshet_milvus::MilvusSink;
use freshet_operators::chunk::{Chunk, ChunkKind, HfTokenCounter};
use freshet_operators::dataflow::{chunk_deltas, embed_deltas, DocUpdate, Time, BOOTSTRAP_TIME};
use freshet_operators::embed::{embed_input, Embedder};
use freshet_tantivy::ChunkIndexWriter;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::operators::vec::Map;
use timely::dataflow::operators::{Concat, Probe};
use timely::dataflow::{InputHandle, ProbeHandle};

use crate::config::Config;
use crate::dlq::DeadLetters;
use crate::embedder::{ModelRef, SharedCache, WorkerEmbedder};
use crate::metrics::Metrics;
use crate::sink::{sink, Fatal, SinkMsg, Sinks};
use crate::source::{Processing, Source};

/// Runs until `stop` is set (then drains and commits) or a fatal error.
pub fn run(config: Config, stop: Arc<AtomicBool>, metrics: Metrics) -> Result<()> {
    let is_first_process = config.pipeline.process_index == 0;
    let tokenizer_path = config.embedding.model_dir.join("tokenizer.json");
    let tokens = HfTokenCounter::from_file(&tokenizer_path)
        .map_err(|e| anyhow!("loading the tokenizer {}: {e}", tokenizer_path.display()))?;

    // The model is loaded here once to fail fast and to learn its id and dimension.
    let mut probe_model =
        FastEmbedder::load(&config.embedding).context("loading the embedding model")?;
    let (model_id, dim) = (probe_model.model_id().to_string(), probe_model.dim());
    tracing::info!(%model_id, dim, "embedding model loaded");

    let kafka = config.kafka.clone();
    admin::ensure_topic(&kafka, &kafka.topic, config.pipeline.topic_partitions)
        .context("creating the document topic")?;
    admin::ensure_topic(&kafka, &kafka.dlq_topic, 1).context("creating the dead-letter topic")?;
    let all_partitions = admin::partitions(&kafka, &kafka.topic)
        .context("reading the document topic's partitions")?;

    let cache_path = if is_first_process {
        config.pipeline.embedding_cache_path.clone()
    } else {
        config
            .pipeline
            .embedding_cache_path
            .with_extension(format!("p{}.log", config.pipeline.process_index))
    };
    if let Some(dir) = cache_path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let cache = SharedCache(Arc::new(Mutex::new(
        DiskCache::open(&cache_path)
            .with_context(|| format!("opening the embedding cache {}", cache_path.display()))?,
    )));

    let dlq = DeadLetters::new(
        DlqProducer::new(&kafka).context("creating the DLQ producer")?,
        metrics.clone(),
    );

    // Process 0 owns the sinks: recover from the indexes, then hand them to worker 0.
    let mut start_offsets: BTreeMap<i32, i64> = BTreeMap::new();
    let mut bootstrap: Vec<(String, Vec<Chunk>)> = Vec::new();
    let sinks: Arc<Mutex<Option<Sinks>>> = Arc::new(Mutex::new(None));
    if is_first_process {
        std::fs::create_dir_all(&config.tantivy.path)
            .with_context(|| format!("creating {}", config.tantivy.path.display()))?;
        let tantivy = ChunkIndexWriter::open_or_create_with_threads(
            &config.tantivy.path,
            config.tantivy.writer_heap_bytes,
            config.tantivy.writer_threads,
        )
        .with_context(|| {
            format!(
                "opening the tantivy index {}",
                config.tantivy.path.display()
            )
        })?;
        if let Some(payload) = tantivy.last_payload()? {
            start_offsets = payload
                .offsets
                .get(&kafka.topic)
                .cloned()
                .unwrap_or_default();
            tracing::info!(epoch = payload.epoch, offsets = ?start_offsets, "resuming from the tantivy commit");
        }
        let chunks = tantivy.load_all().context("loading the indexed chunks")?;
        let mut by_doc: BTreeMap<String, Vec<Chunk>> = BTreeMap::new();
        for c in chunks {
            by_doc.entry(c.doc_id.clone()).or_default().push(c);
        }
        for v in by_doc.values_mut() {
            v.sort_by_key(|c| (c.kind, c.index));
        }

        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let mut milvus_cfg = config.milvus.clone();
        milvus_cfg.dim = dim;
        milvus_cfg.model_id = model_id.clone();
        let milvus = runtime
            .block_on(async {
                let m = MilvusSink::connect(milvus_cfg).await?;
                m.ensure_collection().await?;
                Ok::<_, freshet_milvus::Error>(m)
            })
            .context("connecting to Milvus")?;

        let leaf_chunks: Vec<&Chunk> = by_doc
            .values()
            .flatten()
            .filter(|c| c.kind == ChunkKind::Leaf)
            .collect();
        reconcile(
            &runtime,
            &milvus,
            &leaf_chunks,
            &mut probe_model,
            cache.clone(),
            config.embedding.batch_size,
        )
        .context("reconciling Milvus with the tantivy index")?;
        bootstrap = by_doc.into_iter().collect();
        *sinks.lock().map_err(|_| anyhow!("lock"))? = Some(Sinks {
            kafka: kafka.clone(),
            dlq: dlq.clone(),
            tantivy,
            milvus,
            runtime,
            offsets: start_offsets.clone(),
            metrics: metrics.clone(),
        });
    }
    drop(probe_model);

    let processing = Arc::new(Processing {
        limits: config.limits.clone(),
        chunking: config.chunking.clone(),
        tokens: Arc::new(tokens),
    });
    let fatal: Fatal = Arc::new(Mutex::new(None));
    let bootstrap = Arc::new(Mutex::new(Some(bootstrap)));
    let threads = config.pipeline.workers;
    let timely_config = timely_config(&config);
    let pcfg = config.pipeline.clone();
    let ecfg = config.embedding.clone();
    let fatal_outer = fatal.clone();

    let guards = timely::execute(timely_config, move |worker| {
        let index = worker.index();
        let peers = worker.peers();
        let fail = |msg: String| {
            tracing::error!(worker = index, "{msg}");
            if let Ok(mut f) = fatal.lock() {
                f.get_or_insert(msg);
            }
        };
        let my_partitions = partitions_for_worker(&all_partitions, index, peers);
        let my_start: BTreeMap<i32, i64> = start_offsets
            .iter()
            .filter(|(p, _)| my_partitions.contains(p))
            .map(|(p, o)| (*p, *o))
            .collect();
        let reader = if my_partitions.is_empty() {
            None
        } else {
            match PartitionReader::new(&kafka, &kafka.topic, &my_partitions, &my_start) {
                Ok(r) => Some(r),
                Err(e) => {
                    fail(format!(
                        "worker {index}: cannot read partitions {my_partitions:?}: {e}"
                    ));
                    None
                }
            }
        };
        let mut source =
            reader.map(|r| Source::new(r, dlq.clone(), processing.clone(), metrics.clone()));
        let mut ecfg = ecfg.clone();
        if ecfg.threads.is_none() {
            let cores = std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1);
            ecfg.threads = Some((cores / threads.max(1)).max(1));
        }
        let embedder = match FastEmbedder::load(&ecfg) {
            Ok(e) => Some(e),
            Err(e) => {
                fail(format!("worker {index}: loading the embedding model: {e}"));
                None
            }
        };
        let my_sinks = if index == 0 {
            sinks.lock().ok().and_then(|mut s| s.take())
        } else {
            None
        };

        let mut docs_in = InputHandle::<Time, CapacityContainerBuilder<Vec<DocUpdate>>>::new();
        let mut progress_in = InputHandle::<Time, CapacityContainerBuilder<Vec<SinkMsg>>>::new();
        let probe = ProbeHandle::new();
        let cached = embedder.map(|e| CachedEmbedder::new(e, cache.clone(), ecfg.batch_size));
        let embedder = WorkerEmbedder::new(cached, metrics.clone());
        worker.dataflow::<Time, _, _>(|scope| {
            let deltas = chunk_deltas(docs_in.to_stream(scope));
            let records = embed_deltas(deltas, embedder);
            let msgs = records
                .map(|r| SinkMsg::Record(Box::new(r)))
                .concat(progress_in.to_stream(scope));
            sink(msgs, my_sinks, fatal.clone()).probe_with(&probe);
        });

        if index == 0 {
            if let Some(docs) = bootstrap.lock().ok().and_then(|mut b| b.take()) {
                tracing::info!(
                    documents = docs.len(),
                    "replaying indexed state into the dataflow"
                );
                for (doc, chunks) in docs {
                    docs_in.send((doc, Some(chunks), BOOTSTRAP_TIME));
                }
            }
        }
        let mut epoch: Time = next_epoch(BOOTSTRAP_TIME);
        let mut in_flight: VecDeque<Time> = VecDeque::new();
        docs_in.advance_to(epoch);
        progress_in.advance_to(epoch);

        let max_wait = Duration::from_millis(pcfg.batch_max_wait_ms);
        let mut pending: VecDeque<(Time, BTreeMap<i32, i64>)> = VecDeque::new();
        let mut last_lag = Instant::now();
        let is_fatal = || fatal.lock().map(|f| f.is_some()).unwrap_or(true);
        while !stop.load(Ordering::SeqCst) && !is_fatal() {
            let mut read_any = false;
            match source.as_mut() {
                Some(src) => match src.poll(pcfg.batch_max_records, max_wait) {
                    Ok(batch) => {
                        read_any = batch.records_read > 0;
                        Metrics::observe_ages(&metrics.source_to_read, &batch.timestamps_ms);
                        for (id, update) in batch.updates {
                            docs_in.send((id, update, epoch));
                        }
                        if !batch.next_offsets.is_empty() {
                            pending.push_back((epoch, batch.next_offsets.clone()));
                            progress_in.send(SinkMsg::Progress {
                                next_offsets: batch.next_offsets,
                                timestamps_ms: batch.timestamps_ms,
                                records: batch.records,
                            });
                        }
                    }
                    Err(e) => {
                        fail(format!("worker {index}: {e:#}"));
                        break;
                    }
                },
                None => std::thread::sleep(max_wait),
            }
            // Only epochs that carry records count against `max_epochs_in_flight`: an idle
            // worker advances time every `batch_max_wait_ms` and its empty epochs cost nothing.
            if read_any {
                in_flight.push_back(epoch);
            }
            epoch = next_epoch(epoch);
            docs_in.advance_to(epoch);
            progress_in.advance_to(epoch);
            worker.step();
            // Back-pressure: park (not spin) while too many of this worker's epochs are not
            // durable yet, so the cores stay with the embedding model and the sink.
            loop {
                while in_flight.front().is_some_and(|e| !probe.less_equal(e)) {
                    in_flight.pop_front();
                }
                if in_flight.len() < pcfg.max_epochs_in_flight as usize || is_fatal() {
                    break;
                }
                worker.step_or_park(Some(Duration::from_millis(5)));
            }
            commit_durable(&probe, &mut pending, source.as_ref(), index, false);
            if last_lag.elapsed() > Duration::from_secs(5) {
                last_lag = Instant::now();
                if let Some(src) = source.as_ref() {
                    report_lag(src.reader(), &metrics);
                }
            }
        }
        // Drain: close inputs and let everything already read become durable.
        docs_in.close();
        progress_in.close();
        let deadline = Instant::now() + Duration::from_secs(pcfg.shutdown_timeout_s);
        while !probe.done() && !is_fatal() && Instant::now() < deadline {
            worker.step_or_park(Some(Duration::from_millis(5)));
        }
        commit_durable(&probe, &mut pending, source.as_ref(), index, true);
        if let Some(src) = source.as_ref() {
            report_lag(src.reader(), &metrics);
        }
        if !probe.done() {
            // A fatal error or the shutdown deadline: whatever is not durable stays uncommitted
            // and is replayed on restart. Drop the dataflow so that the worker can exit.
            tracing::warn!(
                worker = index,
                "stopping with epochs not durable; they will be replayed"
            );
            for id in worker.installed_dataflows() {
                worker.drop_dataflow(id);
            }
        }
    })
    .map_err(|e| anyhow!("starting timely workers: {e}"))?;
    drop(guards);
    if let Some(msg) = fatal_outer.lock().map_err(|_| anyhow!("lock"))?.take() {
        bail!("pipeline stopped: {msg}");
    }
    Ok(())
}

/// The epoch after `prev`: the wall clock in milliseconds (at least `prev + 1`). Every worker
/// stamps its batches with the same clock, so an epoch becomes complete as soon as every worker
/// has read past that instant: a worker slowed down (worker 0 runs the sink) does not hold back
/// the records another worker read at the same time behind a backlog of numbered epochs.
fn next_epoch(prev: Time) -> Time {
    (prev + 1).max(freshet_operators::clock::now_ms())
}

/// Commits the Kafka offsets of every epoch the probe reports durable: in the background while
/// running (a round trip per epoch would hold up the worker), synchronously when stopping.
fn commit_durable(
    probe: &ProbeHandle<Time>,
    pending: &mut VecDeque<(Time, BTreeMap<i32, i64>)>,
    source: Option<&Source>,
    index: usize,
    sync: bool,
) {
    let mut offsets = BTreeMap::new();
    while let Some((e, _)) = pending.front() {
        if probe.less_equal(e) {
            break;
        }
        if let Some((_, o)) = pending.pop_front() {
            offsets.extend(o);
        }
    }
    if offsets.is_empty() {
        return;
    }
    if let Some(src) = source {
        // The index commit already holds these offsets; the group commit is for lag monitoring
        // and for tools, so a failure here is logged, not fatal.
        let result = if sync {
            src.reader().commit(&offsets)
        } else {
            src.reader().commit_async(&offsets)
        };
        if let Err(e) = result {
            tracing::warn!(worker = index, error = %e, "committing Kafka offsets failed");
        }
    }
}

fn report_lag(reader: &PartitionReader, metrics: &Metrics) {
    let (Ok(high), Ok(committed)) = (reader.high_watermarks(), reader.committed()) else {
        return;
    };
    for (p, h) in high {
        let next = committed.get(&p).copied().unwrap_or(0).max(0);
        metrics
            .consumer_lag
            .get_or_create(&crate::metrics::Partition {
                partition: p.to_string(),
            })
            .set((h - next).max(0));
    }
}

fn timely_config(config: &Config) -> timely::Config {
    let p = &config.pipeline;
    let communication = if p.cluster_addresses.len() > 1 {
        timely::CommunicationConfig::Cluster {
            threads: p.workers,
            process: p.process_index,
            addresses: p.cluster_addresses.clone(),
            report: false,
            zerocopy: false,
        }
    } else {
        timely::CommunicationConfig::Process(p.workers)
    };
    timely::Config {
        communication,
        worker: timely::WorkerConfig::default(),
    }
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
