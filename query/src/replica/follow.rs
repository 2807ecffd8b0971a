//! The replica's writer: the changelog read from the position of the index's last commit,
//! each complete batch applied and committed (see the module docs of [`super`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use freshet_core::changelog::assemble::{Assembler, Read};
use freshet_core::changelog::config::ReplicationConfig;
use freshet_core::changelog::{self, Entry, SourceOffsets};
use freshet_core::clock::now_ms;
use freshet_kafka::{admin, KafkaConfig, PartitionReader};
use freshet_tantivy::{ChunkIndexWriter, CommitPayload};

use super::metrics::{BootstrapLabels, ReplicaMetrics};
use super::ReplicaConfig;

/// The changelog's one partition.
const PARTITION: i32 = 0;
/// Records handed over by one read of the changelog.
const MAX_RECORDS: usize = 5_000;
/// A file in the index directory saying that the index must be built again at the next start
/// (the changelog came from another pipeline index).
const REBUILD_FILE: &str = "freshet-replica-rebuild";

/// A running replica: its follower thread, and why it stopped if it did.
pub struct Replica {
    stop: Arc<AtomicBool>,
    failure: Mutex<Option<String>>,
    failed: tokio::sync::Notify,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Replica {
    /// See [`super::start`].
    pub fn start(
        kafka: &KafkaConfig,
        replication: &ReplicationConfig,
        config: &ReplicaConfig,
        metrics: ReplicaMetrics,
    ) -> Result<Arc<Replica>> {
        let mut follower = Follower::open(kafka, replication, config, metrics)?;
        if follower.bootstrapping {
            follower.catch_up()?;
        }
        let replica = Arc::new(Replica {
            stop: Arc::new(AtomicBool::new(false)),
            failure: Mutex::new(None),
            failed: tokio::sync::Notify::new(),
            thread: Mutex::new(None),
        });
        let r = replica.clone();
        let handle = std::thread::Builder::new()
            .name("freshet-replica".into())
            .spawn(move || {
                while !r.stop.load(Ordering::SeqCst) {
                    if let Err(e) = follower.step() {
                        let message = format!("{e:#}");
                        tracing::error!(error = %message, "the replica stopped following the changelog");
                        if let Ok(mut f) = r.failure.lock() {
                            *f = Some(message);
                        }
                        r.failed.notify_waiters();
                        r.failed.notify_one();
                        return;
                    }
                }
            })
            .context("starting the replica thread")?;
        if let Ok(mut t) = replica.thread.lock() {
            *t = Some(handle);
        }
        Ok(replica)
    }

    /// Resolves with the reason once the replica can no longer follow the changelog: the node
    /// then stops (it would serve an index that no longer moves).
    pub async fn failed(&self) -> String {
        loop {
            let notified = self.failed.notified();
            if let Some(f) = self.failure.lock().ok().and_then(|f| f.clone()) {
                return f;
            }
            notified.await;
        }
    }

    /// Stops the follower thread and waits for it.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.lock().ok().and_then(|mut t| t.take()) {
            let _ = t.join();
        }
    }
}

/// The replica's index and its reading of the changelog.
struct Follower {
    topic: String,
    path: PathBuf,
    writer: ChunkIndexWriter,
    reader: PartitionReader,
    assembler: Assembler,
    /// The source offsets of the last commit (they never go back).
    held: SourceOffsets,
    /// The offset after the last record read.
    position: i64,
    /// The log end when the index was opened: a bootstrap reads at least up to it.
    high_at_start: i64,
    bootstrapping: bool,
    committed: bool,
    min_lag_ms: u64,
    poll_wait: Duration,
    /// `[replica] stage`.
    stage: bool,
    metrics: ReplicaMetrics,
    last_lag_check: Instant,
    /// The replica's client settings, to open the reader again at an offset.
    kafka: KafkaConfig,
    /// The record last read again for its missing headers ([`Follower::read_again`]).
    reread: Option<i64>,
}

/// Why an index must be built from the beginning, if it must.
fn rebuild_reason(
    path: &Path,
    payload: Option<&CommitPayload>,
    (low, high): (i64, i64),
    first_after: impl FnOnce(i64) -> Result<Option<i64>>,
    retention_ms: u64,
) -> Result<Option<&'static str>> {
    if path.join(REBUILD_FILE).exists() {
        return Ok(Some("other_index"));
    }
    let Some(next) = payload.and_then(|p| p.changelog_next) else {
        return Ok(Some("new"));
    };
    if next < low || next > high {
        return Ok(Some("behind"));
    }
    if next < high {
        // A tombstone written after the position is kept for delete.retention.ms once
        // compacted: past that, deletes may be gone from the topic.
        if let Some(ts) = first_after(next)? {
            if now_ms() as i64 - ts > retention_ms as i64 {
                return Ok(Some("stale"));
            }
        }
    }
    Ok(None)
}

impl Follower {
    fn open(
        kafka: &KafkaConfig,
        replication: &ReplicationConfig,
        config: &ReplicaConfig,
        metrics: ReplicaMetrics,
    ) -> Result<Follower> {
        let mut kafka = kafka.clone();
        kafka.group_id = format!("{}.replica", kafka.group_id);
        let topic = replication.changelog_topic.clone();
        admin::partitions(&kafka, &topic).with_context(|| {
            format!(
                "the changelog topic {topic} is not there: start the pipeline with [replication] \
                 changelog_topic = {topic:?} first"
            )
        })?;
        let path = config.path.clone();
        let heap = config.writer_heap_bytes;
        let mut writer = ChunkIndexWriter::open_or_create(&path, heap)
            .with_context(|| format!("opening the replica index {}", path.display()))?;
        let payload = writer.last_payload()?;
        let probe = PartitionReader::new(&kafka, &topic, &[PARTITION], &BTreeMap::new())?;
        let marks = probe
            .watermarks()?
            .get(&PARTITION)
            .copied()
            .unwrap_or((0, 0));
        drop(probe);
        let margin = config.clock_margin_ms;
        let retention = replication.delete_retention_ms.saturating_sub(margin);
        let first_after = |at: i64| first_timestamp(&kafka, &topic, at);
        let reason = rebuild_reason(&path, payload.as_ref(), marks, first_after, retention)?;
        let mut payload = payload;
        if let Some(reason) = reason {
            if payload.is_some() || path.join(REBUILD_FILE).exists() {
                writer.close()?;
                set_aside(&path)?;
                writer = ChunkIndexWriter::open_or_create(&path, heap)
                    .with_context(|| format!("creating the replica index {}", path.display()))?;
                payload = None;
            }
            tracing::warn!(
                path = %path.display(),
                reason,
                "building the replica index from the beginning of the changelog"
            );
            metrics
                .bootstraps
                .get_or_create(&BootstrapLabels { reason })
                .inc();
        }
        let position = payload
            .as_ref()
            .and_then(|p| p.changelog_next)
            .unwrap_or(marks.0);
        let reader = PartitionReader::new(
            &kafka,
            &topic,
            &[PARTITION],
            &BTreeMap::from([(PARTITION, position)]),
        )?;
        tracing::info!(topic, position, high = marks.1, path = %path.display(), "replica following the changelog");
        Ok(Follower {
            topic,
            path,
            writer,
            reader,
            assembler: Assembler::new(),
            held: payload.map(|p| p.offsets).unwrap_or_default(),
            position,
            high_at_start: marks.1,
            bootstrapping: reason.is_some(),
            committed: false,
            min_lag_ms: replication.min_compaction_lag_ms.saturating_sub(margin),
            poll_wait: Duration::from_millis(config.poll_wait_ms.max(1)),
            stage: config.stage,
            metrics,
            last_lag_check: Instant::now(),
            kafka,
            reread: None,
        })
    }

    /// Whether record `offset`, read without any header, is read again from its own offset
    /// (once): tansu 0.6 looks the headers of a fetch's first record up at the fetch's offset,
    /// so a fetch that starts at an offset compaction removed returns its first record without
    /// them. Read from its own offset it comes whole; a record still without headers is
    /// unreadable.
    fn read_again(&mut self, offset: i64) -> Result<bool> {
        if self.reread == Some(offset) {
            return Ok(false);
        }
        tracing::debug!(offset, "changelog record without headers; reading it again");
        self.reread = Some(offset);
        self.reader = PartitionReader::new(
            &self.kafka,
            &self.topic,
            &[PARTITION],
            &BTreeMap::from([(PARTITION, offset)]),
        )?;
        self.position = offset;
        Ok(true)
    }

    /// Reads until the index holds a commit at or past the log end seen at start (a topic
    /// with no batch yet leaves it empty).
    fn catch_up(&mut self) -> Result<()> {
        let started = Instant::now();
        while !self.caught_up() {
            self.step()?;
        }
        tracing::info!(
            elapsed = ?started.elapsed(),
            chunks = self.writer.count(),
            position = self.position,
            "the replica index has caught up with the changelog"
        );
        Ok(())
    }

    /// Read past the log end seen at start, with a commit, or with nothing waiting (a topic
    /// with no batch yet).
    fn caught_up(&self) -> bool {
        self.position >= self.high_at_start && (self.committed || self.assembler.pending() == 0)
    }

    fn high_watermark(&self) -> Result<i64> {
        Ok(self
            .reader
            .high_watermarks()?
            .get(&PARTITION)
            .copied()
            .unwrap_or(0))
    }

    /// Whether `offset` was the last record of the changelog. The watermark of the fetch
    /// response that carried it answers without a request; only when that is missing (or below
    /// the record, which a broker should never answer) is the broker asked. A request would wait
    /// behind the reader's next fetch in flight, which a slow broker serving a bootstrap's large
    /// fetches can hold past the request timeout.
    fn last_in_log(&self, offset: i64) -> Result<bool> {
        match self.reader.fetched_high_watermark(PARTITION) {
            Some(high) if high > offset => Ok(high == offset + 1),
            _ => Ok(self.high_watermark()? == offset + 1),
        }
    }

    /// One read of the changelog: the complete batches in it applied and committed at the last
    /// of their markers; then, when the read ends with a batch's last change and the replica
    /// is past the bootstrap, that batch staged ([`Follower::stage`], `[replica] stage`).
    fn step(&mut self) -> Result<()> {
        let records = self.reader.poll_batch(MAX_RECORDS, self.poll_wait)?;
        if records.is_empty() {
            if self.last_lag_check.elapsed() > Duration::from_secs(5) {
                self.last_lag_check = Instant::now();
                // A gauge: a broker that does not answer now is no reason to stop following.
                match self.high_watermark() {
                    Ok(high) => {
                        self.metrics.lag_records.set((high - self.position).max(0));
                    }
                    Err(e) => tracing::warn!(error = %format!("{e:#}"), "replica lag not read"),
                };
            }
            return Ok(());
        }
        let mut commit: Option<Marked> = None;
        let mut ops = (0u64, 0u64);
        let mut ends_batch = false;
        for r in records {
            self.position = r.offset + 1;
            let decoded = changelog::decode(r.key.as_deref(), r.value.as_deref(), &r.headers);
            if decoded.is_err() && r.headers.is_empty() && self.read_again(r.offset)? {
                // What was read before it stands; the next read starts at this record.
                ends_batch = false;
                break;
            }
            let entry = decoded.map_err(|e| {
                anyhow!(
                    "changelog {} offset {}: {e}; the replica cannot apply it and stops \
                         (a pipeline of another version writes the topic?)",
                    self.topic,
                    r.offset
                )
            })?;
            let now = now_ms() as i64;
            let fresh = r
                .timestamp_ms
                .is_some_and(|ts| now - ts < self.min_lag_ms as i64);
            let is_marker = matches!(entry, Entry::Marker(_));
            ends_batch = !is_marker && changelog::ends_batch(&r.headers);
            let last_in_log = is_marker
                && (!fresh || self.assembler.waits_for_the_end())
                && self.last_in_log(r.offset)?;
            if let Some(ready) = self.assembler.push(entry, Read { fresh, last_in_log }) {
                self.writer
                    .apply(&ready.upserts, &ready.deletes)
                    .context("staging a changelog batch")?;
                ops.0 += ready.upserts.len() as u64;
                ops.1 += ready.deletes.len() as u64;
                commit = Some(Marked {
                    durable_at_ms: changelog::durable_at_ms(&r.headers)
                        .unwrap_or(ready.marker.committed_at_ms),
                    marker: ready.marker,
                    next: r.offset + 1,
                    read_at_ms: now,
                });
            }
        }
        if let Some(marked) = commit {
            self.commit(marked, ops)?;
        }
        if self.stage && ends_batch && self.position >= self.high_at_start {
            self.stage()?;
        }
        Ok(())
    }

    /// Applies the changes of a batch whose marker has not arrived yet and builds their segment
    /// ([`ChunkIndexWriter::stage`]), while the pipeline commits the batch: at the marker the
    /// replica only records the commit. Nothing is staged from a stretch that may have been
    /// compacted ([`Assembler::stage`]).
    fn stage(&mut self) -> Result<()> {
        let Some((upserts, deletes)) = self.assembler.stage() else {
            return Ok(());
        };
        let started = Instant::now();
        self.writer
            .apply(&upserts, &deletes)
            .context("staging a changelog batch")?;
        self.writer
            .stage()
            .context("building the segment of a changelog batch")?;
        let m = &self.metrics;
        m.stage_seconds.observe(started.elapsed().as_secs_f64());
        m.count_changes(upserts.len() as u64, deletes.len() as u64);
        Ok(())
    }

    /// Commits what is applied and staged, at `marked`'s marker.
    fn commit(&mut self, marked: Marked, ops: (u64, u64)) -> Result<()> {
        let Marked {
            marker,
            next,
            read_at_ms,
            durable_at_ms,
        } = marked;
        self.held = changelog::advance(&self.held, &marker.source_offsets);
        let mut payload = CommitPayload::new(self.held.clone(), marker.epoch);
        payload.committed_at_ms = marker.committed_at_ms;
        payload.index_id = marker.index_id.clone();
        payload.changelog_next = Some(next);
        let committing = Instant::now();
        if let Err(e) = self.writer.commit(&payload) {
            if matches!(e, freshet_tantivy::Error::IndexIdMismatch { .. }) {
                std::fs::write(self.path.join(REBUILD_FILE), b"")
                    .context("marking the replica index for a rebuild")?;
                bail!(
                    "the changelog now carries another pipeline index ({e}); restart the \
                     replica: it builds its index again from the changelog"
                );
            }
            return Err(e).context("committing the replica index");
        }
        self.committed = true;
        let m = &self.metrics;
        m.commit_seconds.observe(committing.elapsed().as_secs_f64());
        let read_lag_ms = read_at_ms.saturating_sub(durable_at_ms as i64).max(0);
        m.read_lag_seconds.observe(read_lag_ms as f64 / 1000.0);
        m.count_changes(ops.0, ops.1);
        m.commits.inc();
        let lag = (now_ms().saturating_sub(durable_at_ms)) as f64 / 1000.0;
        m.lag_seconds.observe(lag);
        tracing::debug!(
            epoch = marker.epoch,
            upserts = ops.0,
            deletes = ops.1,
            next,
            "replica committed a changelog batch"
        );
        Ok(())
    }
}

/// A batch marker read, with what its commit records and measures.
struct Marked {
    marker: changelog::Marker,
    /// The offset after the marker.
    next: i64,
    /// When the replica read it (Unix ms).
    read_at_ms: i64,
    /// When the pipeline's commit of the batch was durable (Unix ms): the marker's header, or
    /// for a marker written without it, the commit's own stamp (taken before the commit).
    durable_at_ms: u64,
}

/// The timestamp of the first record at or after `at`, `None` when none arrives soon.
fn first_timestamp(kafka: &KafkaConfig, topic: &str, at: i64) -> Result<Option<i64>> {
    let mut reader = PartitionReader::new(
        kafka,
        topic,
        &[PARTITION],
        &BTreeMap::from([(PARTITION, at)]),
    )?;
    let records = reader.poll_batch(1, Duration::from_secs(5))?;
    Ok(records.first().and_then(|r| r.timestamp_ms))
}

/// Moves an index that must be built again to `<path>.previous` (replacing an older one), so
/// that nothing is deleted without a trace; the operator removes it.
fn set_aside(path: &Path) -> Result<()> {
    let mut aside = path.as_os_str().to_owned();
    aside.push(".previous");
    let aside = PathBuf::from(aside);
    if aside.exists() {
        std::fs::remove_dir_all(&aside).with_context(|| format!("removing {}", aside.display()))?;
    }
    std::fs::rename(path, &aside)
        .with_context(|| format!("moving {} to {}", path.display(), aside.display()))?;
    tracing::warn!(from = %path.display(), to = %aside.display(), "set the replica index aside");
    Ok(())
}

#[cfg(test)]
#[path = "follow_tests.rs"]
mod tests;
