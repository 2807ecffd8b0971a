//! The sink's driver: one collapsed batch of epochs written to Milvus, then to tantivy, whose
//! commit carries the Kafka offsets and is read back ([`super::verify`]). A document version
//! that an index refuses (or whose text the model could not embed) is removed from both indexes
//! and its record dead-lettered before the commit; everything else is written and the offsets
//! move past it. A failure that is not about one record (Milvus unreachable or timing out, a
//! full disk) is retried while nothing is committed ([`super::stall`]); once it outlasts the
//! stall limit it returns an error and the pipeline stops, to replay the batch after a restart.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use freshet_kafka::{Failure, PartitionReader, Record};
use freshet_operators::chunk::{Chunk, ChunkKind};
use freshet_operators::dataflow::Time;
use freshet_operators::ingest::Stage;
use freshet_tantivy::CommitPayload;

use super::plan::{self, Batch, RecordRef, TopicPartition};
use super::{pending, verify, SinkMsg, Sinks};
use crate::metrics::Metrics;

/// DLQ class of a version whose text the model could not embed.
pub const EMBED_FAILED: &str = "embedding_failed";
/// DLQ class of a version whose row Milvus refused.
pub const MILVUS_REFUSED: &str = "milvus_refused";

/// How long reading a refused record back from the topic may take.
const READ_BACK_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a document's version was refused.
struct Refusal {
    stage: Stage,
    class: &'static str,
    message: String,
}

/// Applies complete epochs (in time order) to both indexes, durably.
pub fn apply_epochs(sinks: &mut Sinks, epochs: Vec<(Time, Vec<SinkMsg>)>) -> Result<()> {
    let batch =
        plan::collapse(epochs, &sinks.lost).map_err(|e| anyhow!("embedding failed: {e}"))?;
    let durable_before = sinks.offsets.clone();
    for (p, o) in &batch.next_offsets {
        let e = sinks.offsets.entry(*p).or_insert(*o);
        *e = (*e).max(*o);
    }
    Metrics::observe_ages(&sinks.metrics.source_to_sink, &batch.timestamps_ms);

    let mut refused: BTreeMap<String, Refusal> = batch
        .docs
        .iter()
        .filter_map(|(doc, d)| {
            let e = d.embed_error.as_ref()?;
            let refusal = Refusal {
                stage: Stage::Embed,
                class: EMBED_FAILED,
                message: e.clone(),
            };
            Some((doc.clone(), refusal))
        })
        .collect();
    write_milvus(sinks, &batch, &mut refused)?;

    // Nothing of a refused document stays in either index.
    let removed: Vec<String> = refused
        .keys()
        .flat_map(|doc| plan::removals(&batch.docs[doc]))
        .collect();
    if !removed.is_empty() {
        let (milvus, runtime) = (&sinks.milvus, &sinks.runtime);
        sinks
            .stall
            .retry("removing refused documents from Milvus", "milvus", |_| {
                Ok(runtime.block_on(milvus.delete(&removed))?)
            })?;
    }
    fail::fail_point!("sink.after_milvus");

    // Dead letters before the commit that moves the offsets past their records.
    for r in &batch.refused {
        let tp = TopicPartition {
            topic: r.at.topic,
            partition: r.at.partition,
        };
        if durable_before
            .get(&tp)
            .is_some_and(|next| r.at.offset < *next)
        {
            // read again by a process resuming from older group offsets: written before the
            // commit that covered it
            continue;
        }
        let topic = topic_name(sinks, r.at.topic)?;
        let failure = Failure {
            class: &r.class,
            stage: &r.stage,
            message: &r.message,
        };
        send_once(sinks, &r.record(topic), &failure)?;
    }
    for r in &batch.embed_refusals {
        let failure = Failure {
            class: EMBED_FAILED,
            stage: Stage::Embed.as_str(),
            message: &r.error,
        };
        dead_letter(sinks, &r.doc_id, r.record, &failure)?;
    }
    for (doc, r) in refused.iter().filter(|(_, r)| r.stage == Stage::Sink) {
        let failure = Failure {
            class: r.class,
            stage: r.stage.as_str(),
            message: &r.message,
        };
        dead_letter(sinks, doc, batch.records.get(doc).copied(), &failure)?;
    }

    fail::fail_point!("sink.after_dead_letters");
    let mut upserts: Vec<Chunk> = Vec::new();
    let mut deletes: Vec<String> = removed;
    for (doc, d) in &batch.docs {
        if refused.contains_key(doc) {
            continue;
        }
        deletes.extend(d.deletes.iter().cloned());
        upserts.extend(
            d.upserts
                .values()
                .filter(|r| r.text_record_changed())
                .map(|r| r.chunk.clone()),
        );
    }
    let started = Instant::now();
    // Nothing the commit covers is dead-lettered again (see above): only the rest stays pending.
    let durable = plan::by_topic_name(&sinks.topics, &sinks.offsets);
    sinks.dlq_sent.retain(|(t, p, o), _| {
        durable
            .get(t)
            .and_then(|m| m.get(p))
            .is_none_or(|next| o >= next)
    });
    let mut payload = CommitPayload::new(
        plan::by_topic_name(&sinks.topics, &sinks.offsets),
        batch.last_epoch,
    );
    payload.dead_letters_next = crate::dlq::resume_marks(&sinks.dlq_next, &sinks.dlq_sent);
    // A failed write or commit leaves the writer in no known state (an indexing thread may have
    // died on a full disk): each attempt after the first starts again from the last commit.
    let tantivy = &mut sinks.tantivy;
    sinks
        .stall
        .retry("writing to tantivy", "tantivy", |attempt| {
            if attempt > 0 {
                tantivy
                    .rollback()
                    .context("rolling tantivy back to its last commit")?;
            }
            tantivy
                .apply(&upserts, &deletes)
                .context("staging the batch")?;
            tantivy.commit(&payload).context("committing")?;
            Ok(())
        })?;
    // Each document written holds its final version's chunks: all of its upserts, those not
    // rewritten included; none when it was deleted or refused.
    let expected: verify::Expected<'_> = batch
        .docs
        .iter()
        .map(|(doc, d)| {
            let chunks = if refused.contains_key(doc) {
                Vec::new()
            } else {
                d.upserts.values().map(|r| &r.chunk).collect()
            };
            (doc.as_str(), chunks)
        })
        .collect();
    verify::check_and_repair(
        &mut sinks.tantivy,
        &sinks.stall,
        &sinks.metrics,
        &expected,
        &payload,
    )?;
    fail::fail_point!("sink.after_commit");
    let m = &sinks.metrics;
    m.sink_write("tantivy", started.elapsed().as_secs_f64());
    m.sink("tantivy", "delete", deletes.len() as u64);
    m.sink("tantivy", "upsert", upserts.len() as u64);
    Metrics::outcome(&m.chunks, "upsert", upserts.len() as u64);
    Metrics::outcome(&m.chunks, "delete", deletes.len() as u64);
    m.commits.inc();
    m.durable_epoch.set(batch.last_epoch as i64);
    // A refused document is lost to the indexes until its next version or delete is written.
    for doc in batch.docs.keys() {
        if refused.contains_key(doc) {
            sinks.lost.insert(doc.clone());
        } else {
            sinks.lost.remove(doc);
        }
    }
    Metrics::observe_ages(&m.source_to_durable, &batch.timestamps_ms);
    tracing::debug!(
        epoch = batch.last_epoch,
        upserts = upserts.len(),
        deletes = deletes.len(),
        refused = refused.len(),
        "epochs durable"
    );
    // Every id, for tracing a wrong index back to the batch that wrote it (the crash trials
    // log at this level).
    tracing::trace!(
        epoch = batch.last_epoch,
        offsets = ?payload.offsets,
        upserts = ?upserts.iter().map(|c| c.chunk_id.as_str()).collect::<Vec<_>>(),
        deletes = ?deletes,
        "epochs durable: chunk ids"
    );
    Ok(())
}

/// Deletes and inserts the rows of every document not refused yet whose Milvus row differs
/// ([`plan::Row::vector_row_changed`]); a document with a row that Milvus refuses joins
/// `refused`.
fn write_milvus(
    sinks: &Sinks,
    batch: &Batch,
    refused: &mut BTreeMap<String, Refusal>,
) -> Result<()> {
    let mut deletes = Vec::new();
    let mut rows: Vec<(Chunk, Vec<f32>)> = Vec::new();
    for (doc, d) in &batch.docs {
        if refused.contains_key(doc) {
            continue;
        }
        deletes.extend(d.deletes.iter().cloned());
        for (id, r) in &d.upserts {
            if r.chunk.kind != ChunkKind::Leaf || !r.vector_row_changed() {
                continue;
            }
            let v = r
                .vector
                .as_ref()
                .ok_or_else(|| anyhow!("leaf chunk {id} reached the sink without a vector"))?;
            rows.push((r.chunk.clone(), v.clone()));
        }
    }
    if deletes.is_empty() && rows.is_empty() {
        return Ok(());
    }
    let started = Instant::now();
    // Rows Milvus may hold without tantivy if the process dies before the commit.
    let index_dir = sinks.tantivy.path();
    sinks
        .stall
        .retry("noting the rows written to Milvus", "tantivy", |_| {
            let ids = rows.iter().map(|(c, _)| c.chunk_id.as_str());
            pending::note(index_dir, batch.last_epoch, ids)
                .with_context(|| format!("writing {}", index_dir.join(pending::FILE).display()))
        })?;
    let (milvus, runtime) = (&sinks.milvus, &sinks.runtime);
    let refused_rows = sinks.stall.retry("writing to Milvus", "milvus", |_| {
        Ok(runtime.block_on(milvus.replace_isolating(&deletes, &rows))?)
    })?;
    let m = &sinks.metrics;
    m.sink_write("milvus", started.elapsed().as_secs_f64());
    m.sink("milvus", "delete", deletes.len() as u64);
    m.sink("milvus", "upsert", (rows.len() - refused_rows.len()) as u64);
    for r in refused_rows {
        let doc = rows[r.index].0.doc_id.clone();
        tracing::warn!(doc_id = %doc, reason = %r.reason, "Milvus refused a row; refusing the document's version");
        refused.entry(doc).or_insert(Refusal {
            stage: Stage::Sink,
            class: MILVUS_REFUSED,
            message: r.reason,
        });
    }
    Ok(())
}

/// Sends the record of a refused document version to the dead-letter topic, read back from the
/// document topic by its offset. When the topic no longer holds it (retention), a record keyed by
/// the document id with a null value stands in, and the message says so.
fn dead_letter(
    sinks: &mut Sinks,
    doc_id: &str,
    record: Option<RecordRef>,
    failure: &Failure<'_>,
) -> Result<()> {
    let topic = match record {
        Some(r) => topic_name(sinks, r.topic)?,
        None => sinks
            .topics
            .first()
            .map(String::as_str)
            .ok_or_else(|| anyhow!("no topics"))?,
    };
    if record.is_some_and(|r| sent_before(sinks, topic, r.partition, r.offset)) {
        return Ok(());
    }
    let topic = topic.to_string();
    let original = match record {
        Some(r) => PartitionReader::read_one(
            &sinks.kafka,
            &topic,
            r.partition,
            r.offset,
            READ_BACK_TIMEOUT,
        )
        .with_context(|| format!("reading back {topic} {}@{}", r.partition, r.offset))?,
        None => None,
    };
    let message;
    let (original, failure) = match original {
        Some(o) => (o, *failure),
        None => {
            message = format!(
                "{} (the original record of document {doc_id:?} is no longer on the topic)",
                failure.message
            );
            let stand_in = Record {
                topic: topic.clone(),
                partition: record.map_or(-1, |r| r.partition),
                offset: record.map_or(-1, |r| r.offset),
                key: Some(doc_id.as_bytes().to_vec()),
                value: None,
                headers: Vec::new(),
                timestamp_ms: None,
            };
            let f = Failure {
                message: &message,
                ..*failure
            };
            (stand_in, f)
        }
    };
    send_once(sinks, &original, &failure)
        .with_context(|| format!("dead-lettering the record of {doc_id:?}"))
}

/// The name of the topic of index `t`.
fn topic_name(sinks: &Sinks, t: usize) -> Result<&str> {
    sinks
        .topics
        .get(t)
        .map(String::as_str)
        .ok_or_else(|| anyhow!("a record of unknown topic {t}"))
}

/// Whether the record at `topic` `partition`@`offset` has a dead letter from before a restart
/// (logged when it has).
fn sent_before(sinks: &Sinks, topic: &str, partition: i32, offset: i64) -> bool {
    let sent = sinks
        .dlq_sent
        .contains_key(&(topic.to_string(), partition, offset));
    if sent {
        tracing::info!(
            topic,
            partition,
            offset,
            "already on the dead-letter topic (written before the restart)"
        );
    }
    sent
}

/// Dead-letters `record` unless it was before a restart; notes how far the topic reaches.
fn send_once(sinks: &mut Sinks, record: &Record, failure: &Failure<'_>) -> Result<()> {
    if record.offset >= 0 && sent_before(sinks, &record.topic, record.partition, record.offset) {
        return Ok(());
    }
    let dlq = &sinks.dlq;
    let (p, o) = sinks
        .stall
        .retry("writing to the dead-letter topic", "dlq", |_| {
            dlq.send(record, failure)
        })?;
    let next = sinks.dlq_next.entry(p).or_insert(o + 1);
    *next = (*next).max(o + 1);
    Ok(())
}
