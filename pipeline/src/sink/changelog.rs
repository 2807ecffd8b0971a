//! The changelog's service: every committed batch's chunk changes on the compacted changelog
//! topic for query replicas (`freshet_operators::changelog`, `docs/replicas.md`).
//!
//! A batch's changes are published (and acknowledged) before its tantivy commit, whose payload
//! records the offset after them ([`freshet_tantivy::CommitPayload::changelog_next`]); its
//! marker after the commit, so that a marker always stands for a committed state. A batch
//! that never commits (a crash, a stall past the limit) may leave changes on the topic with no
//! marker after them; [`Changelog::recover`] finds them at the next start (they lie past the
//! last commit's `changelog_next`) and publishes each chunk's committed state over them, then
//! the marker of the last commit, before anything else is written. A replica thus never sees a
//! marker that closes a state the pipeline did not commit.
//!
//! The changelog has one partition: one writer (process 0's sink) and batches that a replica
//! reads whole, in order.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use freshet_kafka::{admin, DocumentProducer, KafkaConfig, PartitionReader};
use freshet_operators::changelog::config::ReplicationConfig;
use freshet_operators::changelog::{self, Encoded, Marker};
use freshet_operators::chunk::Chunk;
use freshet_tantivy::{ChunkIndexWriter, CommitPayload};

use super::text::TextCommit;
use super::Service;
use crate::metrics::Metrics;
use crate::stall::Stall;

/// The changelog's one partition.
pub const PARTITION: i32 = 0;

/// How long [`Changelog::recover`] waits for records it knows are there.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The producer of the changelog topic.
pub struct Changelog {
    producer: DocumentProducer,
    topic: String,
    stall: Stall,
    metrics: Metrics,
    /// The offset after the last change of the last commit.
    next: Option<i64>,
}

/// The marker of a commit (its payload as the pipeline wrote it).
pub struct MarkerOf<'a>(pub &'a CommitPayload);

/// Creates the changelog topic (compacted, one partition) if it is missing, and checks the
/// configs of one that exists: a topic that deletes records by age would lose chunks that never
/// change again, and replicas would silently miss them.
pub fn ensure_topic(kafka: &KafkaConfig, replication: &ReplicationConfig) -> Result<()> {
    let topic = &replication.changelog_topic;
    let wanted = replication.topic_configs();
    admin::ensure_topic_with_configs(kafka, topic, 1, &wanted)
        .with_context(|| format!("creating the changelog topic {topic}"))?;
    let parts = admin::partitions(kafka, topic)
        .with_context(|| format!("reading the partitions of the changelog topic {topic}"))?;
    if parts != [PARTITION] {
        bail!(
            "the changelog topic {topic} has partitions {parts:?}; it must have exactly one \
             (partition 0): delete it (replicas rebuild from the new one) or name another \
             replication.changelog_topic"
        );
    }
    let held = match admin::topic_configs(kafka, topic) {
        Ok(held) => held,
        Err(e) => {
            // A broker that does not answer DescribeConfigs: the topic is as it was created.
            tracing::warn!(topic, error = %e, "cannot read the changelog topic's configs; not checked");
            return Ok(());
        }
    };
    if let Some(Some(policy)) = held.get("cleanup.policy") {
        if policy.split(',').any(|p| p.trim() == "delete") || !policy.contains("compact") {
            bail!(
                "the changelog topic {topic} has cleanup.policy={policy}: it must be \
                 \"compact\" alone (records deleted by age would lose chunks that never change \
                 again); set it with kafka-configs --alter --add-config cleanup.policy=compact"
            );
        }
    }
    for (key, want) in &wanted[1..] {
        if let Some(Some(got)) = held.get(*key) {
            if got != want {
                tracing::warn!(
                    topic,
                    key,
                    held = %got,
                    configured = %want,
                    "the changelog topic's config differs from [replication]; replicas must be \
                     configured with the topic's value"
                );
            }
        }
    }
    Ok(())
}

impl Changelog {
    pub fn new(
        kafka: &KafkaConfig,
        topic: &str,
        stall: Stall,
        metrics: Metrics,
    ) -> Result<Changelog> {
        Ok(Changelog {
            producer: DocumentProducer::new(kafka).context("creating the changelog producer")?,
            topic: topic.to_string(),
            stall,
            metrics,
            next: None,
        })
    }

    /// Makes the topic agree with the last commit of `index` before the sink writes: the chunk
    /// ids of the changes past the commit's `changelog_next` (a batch that never committed) are
    /// published again with their committed state. A topic that does not hold that position
    /// (a first start with a changelog, an index or topic made anew) gets every chunk of the
    /// index, and a tombstone for every other chunk id it holds. Then the last commit's marker.
    pub fn recover(&mut self, kafka: &KafkaConfig, index: &ChunkIndexWriter) -> Result<()> {
        let payload = index.last_payload()?;
        let reader = PartitionReader::new(kafka, &self.topic, &[PARTITION], &BTreeMap::new())?;
        let (low, high) = reader
            .watermarks()?
            .get(&PARTITION)
            .copied()
            .unwrap_or((0, 0));
        drop(reader);
        let held = payload.as_ref().and_then(|p| p.changelog_next);
        let whole = !matches!(held, Some(n) if (low..=high).contains(&n));
        let from = if whole { low } else { held.unwrap_or(low) };
        let keys = self.keys_between(kafka, from, high)?;
        let mut records: Vec<Encoded> = Vec::new();
        let epoch = payload.as_ref().map_or(0, |p| p.epoch);
        let mut written: BTreeSet<String> = BTreeSet::new();
        if whole {
            for c in index
                .load_all()
                .context("loading the index for the changelog")?
            {
                written.insert(c.chunk_id.clone());
                records.push(changelog::encode_upsert(&c, epoch));
            }
        }
        for id in keys.iter().filter(|k| !written.contains(*k)) {
            match index.get(id)? {
                Some(c) => records.push(changelog::encode_upsert(&c, epoch)),
                None => records.push(changelog::encode_delete(id, epoch)),
            }
        }
        tracing::info!(
            topic = %self.topic,
            whole,
            from,
            high,
            records = records.len(),
            "bringing the changelog to the last commit"
        );
        if !records.is_empty() {
            changelog::mark_batch_end(&mut records);
            self.next = self.publish(&records)?.or(held);
        } else {
            self.next = held.filter(|_| !whole).or(Some(high));
        }
        if let Some(p) = &payload {
            self.call(MarkerOf(p))?;
        }
        Ok(())
    }

    /// The chunk ids of the changes at offsets `from..high` (markers left out).
    fn keys_between(&self, kafka: &KafkaConfig, from: i64, high: i64) -> Result<BTreeSet<String>> {
        let mut keys = BTreeSet::new();
        if from >= high {
            return Ok(keys);
        }
        let mut reader = PartitionReader::new(
            kafka,
            &self.topic,
            &[PARTITION],
            &BTreeMap::from([(PARTITION, from)]),
        )?;
        let started = Instant::now();
        let mut at = from;
        while at < high {
            let batch = reader.poll_batch(10_000, Duration::from_millis(500))?;
            if batch.is_empty() && started.elapsed() > READ_TIMEOUT {
                bail!(
                    "reading the changelog topic {}: offset {at} of {high} not reached in {READ_TIMEOUT:?}",
                    self.topic
                );
            }
            for r in batch {
                at = at.max(r.offset + 1);
                if r.offset >= high {
                    continue;
                }
                match r.key.as_deref() {
                    Some(k) if k != changelog::MARKER_KEY => {
                        keys.insert(String::from_utf8_lossy(k).into_owned());
                    }
                    _ => {}
                }
            }
        }
        Ok(keys)
    }

    /// Publishes `records` in order, waiting for every acknowledgement, retried through the stall
    /// policy. Returns the offset after the last.
    fn publish(&self, records: &[Encoded]) -> Result<Option<i64>> {
        let started = Instant::now();
        let rows: Vec<_> = records
            .iter()
            .map(|e| (e.key.clone(), e.value.clone(), e.headers.clone()))
            .collect();
        let placed = self
            .stall
            .retry("writing to the changelog", "changelog", |_| {
                Ok(self
                    .producer
                    .send_to_partition(&self.topic, PARTITION, &rows)?)
            })?;
        self.metrics
            .sink_write("changelog", started.elapsed().as_secs_f64());
        Ok(placed.iter().map(|(_, o)| o + 1).max())
    }

    /// The offset after the last change of the last commit, which the next commit carries.
    pub fn next(&self) -> Option<i64> {
        self.next
    }
}

/// The changes of a batch, published before its commit. Returns the offset after them (the
/// last commit's when the batch changes no chunk), for the commit's payload.
impl Service<&TextCommit<'_>> for Changelog {
    type Response = Option<i64>;

    fn call(&mut self, commit: &TextCommit<'_>) -> Result<Option<i64>> {
        self.publish_changes(&commit.upserts, &commit.deletes, commit.payload.epoch)
    }
}

impl Changelog {
    /// Publishes the chunks `upserts` and the deletes `deletes` of epoch `epoch` (a batch, or
    /// the repair of its commit); returns the offset after them (the last one when there are
    /// none).
    pub fn publish_changes(
        &mut self,
        upserts: &[Chunk],
        deletes: &[String],
        epoch: u64,
    ) -> Result<Option<i64>> {
        let records = batch_records(upserts, deletes, epoch);
        if records.is_empty() {
            return Ok(self.next);
        }
        let next = self.publish(&records)?;
        let deletes = records.iter().filter(|r| r.value.is_none()).count() as u64;
        self.metrics.sink("changelog", "delete", deletes);
        self.metrics
            .sink("changelog", "upsert", records.len() as u64 - deletes);
        self.next = next.or(self.next);
        Ok(self.next)
    }
}

/// The records of a batch that deletes `deletes` and writes `upserts`, as tantivy applies them
/// ([`ChunkIndexWriter::apply`]): an id both deleted and written is written, the last upsert of
/// an id wins. Tombstones first, then the upserts, each id once; the last record carries the
/// batch's end ([`changelog::mark_batch_end`]).
pub fn batch_records(upserts: &[Chunk], deletes: &[String], epoch: u64) -> Vec<Encoded> {
    let upserted: BTreeSet<&str> = upserts.iter().map(|c| c.chunk_id.as_str()).collect();
    let removed: BTreeSet<&str> = deletes
        .iter()
        .map(String::as_str)
        .filter(|d| !upserted.contains(d))
        .collect();
    let mut records: Vec<Encoded> = removed
        .into_iter()
        .map(|id| changelog::encode_delete(id, epoch))
        .collect();
    let mut last: BTreeMap<&str, &Chunk> = BTreeMap::new();
    for c in upserts {
        last.insert(c.chunk_id.as_str(), c);
    }
    records.extend(last.values().map(|c| changelog::encode_upsert(c, epoch)));
    changelog::mark_batch_end(&mut records);
    records
}

/// The marker of a commit, published after it.
impl Service<MarkerOf<'_>> for Changelog {
    type Response = ();

    fn call(&mut self, MarkerOf(payload): MarkerOf<'_>) -> Result<()> {
        let marker = Marker {
            epoch: payload.epoch,
            source_offsets: payload.offsets.clone(),
            committed_at_ms: payload.committed_at_ms,
            index_id: payload.index_id.clone(),
        };
        // Written right after the commit: the time it was durable, where a replica's lag starts.
        let durable_at_ms = freshet_operators::clock::now_ms();
        self.publish(&[changelog::encode_marker(&marker, durable_at_ms)])?;
        self.metrics.sink("changelog", "marker", 1);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use freshet_operators::changelog::{decode, Entry};
    use freshet_operators::testing::chunk;

    use super::*;

    fn decoded(records: &[Encoded]) -> Vec<Entry> {
        records
            .iter()
            .map(|e| decode(Some(&e.key), e.value.as_deref(), &e.headers).unwrap())
            .collect()
    }

    /// A batch's records say what tantivy holds after applying it: an id deleted and written
    /// again is written, the last upsert of an id wins, every id once.
    #[test]
    fn a_batch_is_published_as_tantivy_applies_it() {
        let a = chunk("d1", "alpha");
        let b = chunk("d2", "beta");
        let b2 = Chunk {
            title: "Beta again".into(),
            ..b.clone()
        };
        let deletes = vec![a.chunk_id.clone(), "gone".to_string(), "gone".to_string()];
        let records = batch_records(&[a.clone(), b, b2.clone()], &deletes, 7);
        let mut want_upserts = vec![a, b2];
        want_upserts.sort_by(|x, y| x.chunk_id.cmp(&y.chunk_id));
        let mut want = vec![Entry::Delete("gone".into())];
        want.extend(want_upserts.into_iter().map(|c| Entry::Upsert(Box::new(c))));
        assert_eq!(decoded(&records), want);
        assert!(records.iter().all(|r| r
            .headers
            .iter()
            .any(|(k, v)| k == changelog::EPOCH_HEADER && v.as_deref() == Some(&b"7"[..]))));
        // Only the last record ends the batch.
        let ends: Vec<bool> = records
            .iter()
            .map(|r| changelog::ends_batch(&r.headers))
            .collect();
        assert_eq!(ends, [false, false, true]);
        assert!(batch_records(&[], &[], 1).is_empty());
    }
}
