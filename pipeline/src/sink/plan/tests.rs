use std::collections::{BTreeMap, BTreeSet};

use freshet_operators::chunk::{ChunkChange, ChunkKind, ChunkerConfig, TokenCounter};
use freshet_operators::dataflow::{reference_deltas, ChunkDelta};
use freshet_operators::document::{ContentType, Document};
use freshet_operators::prepare::prepare;

use super::*;

/// Counts whitespace-separated words: enough to chunk the generated documents.
struct Words;

impl TokenCounter for Words {
    fn count(&self, text: &str) -> usize {
        text.split_whitespace().count()
    }
}

fn chunks(id: &str, paragraphs: &[&str], source: &str) -> Vec<Chunk> {
    let doc = Document {
        id: id.into(),
        title: String::new(),
        text: paragraphs.join("\n\n"),
        content_type: ContentType::PlainText,
        source: source.into(),
        metadata: BTreeMap::new(),
        acl: vec![],
    };
    let cfg = ChunkerConfig {
        max_tokens: 3,
        overlap_tokens: 0,
        ..ChunkerConfig::default()
    };
    prepare(doc, &cfg, &Words).expect("prepares")
}

fn upsert(c: &Chunk) -> SinkMsg {
    upsert_with(c, ChunkChange::NEW)
}

fn upsert_with(c: &Chunk, change: ChunkChange) -> SinkMsg {
    SinkMsg::Record(Box::new(SinkRecord::Upsert {
        chunk: c.clone(),
        vector: Some(vec![1.0]),
        change,
    }))
}

/// A chunk as the indexes store it: without its version stamp.
fn stored(c: &Chunk) -> Chunk {
    Chunk {
        doc_hash: String::new(),
        ..c.clone()
    }
}

const TP0: TopicPartition = TopicPartition {
    topic: 0,
    partition: 0,
};

fn no_lost() -> BTreeSet<String> {
    BTreeSet::new()
}

fn progress(records: &[(&str, i64)]) -> SinkMsg {
    SinkMsg::Progress {
        next_offsets: BTreeMap::from([(TP0, records.iter().map(|r| r.1).max().unwrap_or(0) + 1)]),
        timestamps_ms: vec![],
        refused: vec![],
        removals: vec![],
        records: records
            .iter()
            .map(|(d, o)| {
                (
                    d.to_string(),
                    RecordRef {
                        topic: 0,
                        partition: 0,
                        offset: *o,
                    },
                )
            })
            .collect(),
    }
}

#[test]
fn later_epochs_win_per_chunk_and_progress_merges() {
    let v1 = chunks("a", &["one two three", "four five six"], "s");
    let v2 = chunks("a", &["one two three", "seven eight"], "s");
    let epochs = vec![
        (
            5,
            vec![upsert(&v1[0]), upsert(&v1[1]), progress(&[("a", 3)])],
        ),
        (
            9,
            vec![
                upsert(&v2[0]),
                upsert(&v2[1]),
                SinkMsg::Record(Box::new(SinkRecord::Delete {
                    chunk_id: v1[1].chunk_id.clone(),
                    doc_id: "a".into(),
                })),
                progress(&[("a", 7)]),
            ],
        ),
    ];
    let b = collapse(epochs, &no_lost()).unwrap();
    assert_eq!(b.last_epoch, 9);
    assert_eq!(b.next_offsets, BTreeMap::from([(TP0, 8)]));
    let d = &b.docs["a"];
    assert_eq!(d.deletes.iter().collect::<Vec<_>>(), vec![&v1[1].chunk_id]);
    let ids: Vec<&String> = d.upserts.keys().collect();
    let mut want = vec![&v2[0].chunk_id, &v2[1].chunk_id];
    want.sort();
    assert_eq!(ids, want);
    assert_eq!(d.upserts[&v2[0].chunk_id].chunk, v2[0], "the later record");
    assert_eq!(b.records["a"].offset, 7);
    assert!(b.embed_refusals.is_empty());
}

#[test]
fn a_failed_record_fails_the_batch() {
    let e = collapse(
        vec![(
            1,
            vec![SinkMsg::Record(Box::new(SinkRecord::Failed {
                error: "model gone".into(),
            }))],
        )],
        &no_lost(),
    )
    .unwrap_err();
    assert_eq!(e, "model gone");
}

/// Each epoch's refused record is listed once, with that epoch's record; the document is
/// refused only while its final version holds the refused text.
#[test]
fn embed_refusals_name_their_epoch_record() {
    let bad = chunks("a", &["one BAD three"], "s");
    let good = chunks("a", &["one two three"], "s");
    let rejected = |c: &Chunk| {
        SinkMsg::Record(Box::new(SinkRecord::Rejected {
            chunk: c.clone(),
            error: "cannot embed".into(),
        }))
    };
    let delete = |c: &Chunk| {
        SinkMsg::Record(Box::new(SinkRecord::Delete {
            chunk_id: c.chunk_id.clone(),
            doc_id: "a".into(),
        }))
    };
    let b = collapse(
        vec![
            (
                1,
                vec![rejected(&bad[0]), rejected(&bad[0]), progress(&[("a", 10)])],
            ),
            (
                2,
                vec![delete(&bad[0]), upsert(&good[0]), progress(&[("a", 11)])],
            ),
        ],
        &no_lost(),
    )
    .unwrap();
    assert_eq!(
        b.embed_refusals,
        vec![EmbedRefusal {
            doc_id: "a".into(),
            record: Some(RecordRef {
                topic: 0,
                partition: 0,
                offset: 10
            }),
            error: "cannot embed".into(),
        }]
    );
    assert_eq!(
        b.docs["a"].embed_error, None,
        "the fixed version is written"
    );
    let b = collapse(
        vec![(1, vec![rejected(&bad[0]), progress(&[("a", 10)])])],
        &no_lost(),
    )
    .unwrap();
    assert_eq!(b.docs["a"].embed_error.as_deref(), Some("cannot embed"));
}

/// The sink messages of document `id` going from `v1` to `v2` (the reference deltas).
fn version_msgs(id: &str, v1: &[Chunk], v2: &[Chunk]) -> Vec<SinkMsg> {
    let before = BTreeMap::from([(id.to_string(), v1.to_vec())]);
    let after = BTreeMap::from([(id.to_string(), v2.to_vec())]);
    reference_deltas(&before, &after)
        .into_iter()
        .map(|d| match d {
            ChunkDelta::Upsert { chunk, change } => upsert_with(&chunk, change),
            ChunkDelta::Delete { chunk_id, doc_id } => {
                SinkMsg::Record(Box::new(SinkRecord::Delete { chunk_id, doc_id }))
            }
        })
        .collect()
}

/// The deltas of a new version name every chunk id the old one has: what a refused version
/// must remove is all in them.
#[test]
fn removals_cover_every_chunk_of_the_old_and_the_new_version() {
    let v1 = chunks("a", &["one two three", "four five six"], "s");
    let v2 = chunks("a", &["one two three", "seven eight"], "x");
    let msgs = version_msgs("a", &v1, &v2);
    let b = collapse(vec![(1, msgs)], &no_lost()).unwrap();
    let mut want: Vec<String> = v1.iter().chain(&v2).map(|c| c.chunk_id.clone()).collect();
    want.sort();
    want.dedup();
    assert_eq!(want.len(), 3, "the first paragraph keeps its id");
    assert_eq!(removals(&b.docs["a"]), want);
}

/// Tiny deterministic generator for the model test below.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// What the model double refuses: a text with `BAD` cannot be embedded, a row whose source
/// starts with `refuse` is refused by the vector index.
fn embeddable(c: &Chunk) -> bool {
    !c.text.contains("BAD")
}

fn storable(c: &Chunk) -> bool {
    !c.source.starts_with("refuse")
}

/// The sink of `apply.rs` with both indexes as one map of stored records (no version stamp):
/// what `apply` does, minus the I/O. Counts the records it writes.
#[derive(Default)]
struct Model {
    index: BTreeMap<String, Chunk>,
    lost: BTreeSet<String>,
    written: usize,
}

impl Model {
    fn apply(&mut self, epochs: Vec<(Time, Vec<SinkMsg>)>, dlq: &mut Vec<(String, i64)>) {
        let batch = collapse(epochs, &self.lost).unwrap();
        for r in &batch.embed_refusals {
            dlq.push((r.doc_id.clone(), r.record.map_or(-1, |r| r.offset)));
        }
        for (doc, d) in &batch.docs {
            let refused = d.embed_error.is_some()
                || d.upserts.values().any(|r| {
                    r.chunk.kind == ChunkKind::Leaf
                        && r.vector.is_some()
                        && r.vector_row_changed()
                        && !storable(&r.chunk)
                });
            if refused {
                for id in removals(d) {
                    self.index.remove(&id);
                }
                if d.embed_error.is_none() {
                    dlq.push((doc.clone(), batch.records.get(doc).map_or(-1, |r| r.offset)));
                }
                self.lost.insert(doc.clone());
            } else {
                for id in &d.deletes {
                    self.index.remove(id);
                }
                for (id, r) in &d.upserts {
                    if r.text_record_changed() {
                        self.index.insert(id.clone(), stored(&r.chunk));
                        self.written += 1;
                    } else {
                        assert_eq!(
                            self.index.get(id),
                            Some(&stored(&r.chunk)),
                            "a record left unwritten must be the one the index holds"
                        );
                    }
                }
                self.lost.remove(doc);
            }
        }
    }
}

/// A new version that keeps some chunks as they were writes only the others; one whose
/// placement alone moved is written to the text index, not to the vector index.
#[test]
fn a_kept_chunk_is_not_written_and_a_moved_one_only_to_tantivy() {
    let v1 = chunks("a", &["one two three", "four five six", "seven eight"], "s");
    let v2 = chunks("a", &["one two three", "nine ten", "seven eight"], "s");
    let msgs = version_msgs("a", &v1, &v2);
    let b = collapse(vec![(1, msgs.clone())], &no_lost()).unwrap();
    let d = &b.docs["a"];
    let row = |text: &str| d.upserts.values().find(|r| r.chunk.text == text).unwrap();
    assert_eq!(v2.len(), 3, "one chunk per paragraph: {v2:?}");
    let first = row("one two three");
    assert!(!first.text_record_changed() && !first.vector_row_changed());
    let new = row("nine ten");
    assert!(new.text_record_changed() && new.vector_row_changed());
    let moved = row("seven eight");
    assert!(moved.text_record_changed(), "its position moved");
    assert!(
        !moved.vector_row_changed(),
        "Milvus does not store positions"
    );
    // the same batch for a lost document writes everything
    let lost = BTreeSet::from(["a".to_string()]);
    let b = collapse(vec![(1, msgs)], &lost).unwrap();
    assert!(b.docs["a"]
        .upserts
        .values()
        .all(|r| r.change == ChunkChange::NEW));
}

/// Random histories of versions (some with a text the model cannot embed, some with a source
/// the vector index refuses), deletes and identical re-sends, grouped into epochs and write
/// batches, with restarts: the index always ends equal to a clean sequential run, where a
/// refused version removes its document.
#[test]
fn refusals_converge_to_the_sequential_reference() {
    let pool = [
        "alpha beta gamma",
        "delta epsilon zeta eta theta",
        "iota kappa",
        "lambda BAD mu",
        "nu xi omicron pi rho",
        "sigma tau upsilon",
    ];
    let mut writes = 0;
    for seed in 1..200u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut belief: BTreeMap<String, Vec<Chunk>> = BTreeMap::new();
        let mut sink = Model::default();
        let mut reference: BTreeMap<String, Vec<Chunk>> = BTreeMap::new();
        let mut dlq = Vec::new();
        let mut offset = 0i64;
        let mut last: BTreeMap<String, Option<Vec<Chunk>>> = BTreeMap::new();
        for _batch in 0..12 {
            let mut epochs = Vec::new();
            for e in 0..1 + rng.below(3) {
                let mut updates: BTreeMap<String, (i64, Option<Vec<Chunk>>)> = BTreeMap::new();
                for _ in 0..1 + rng.below(3) {
                    let doc = format!("d{}", rng.below(4));
                    let version = match rng.below(6) {
                        0 => None,
                        1 if last.contains_key(&doc) => last[&doc].clone(),
                        _ => {
                            let n = 1 + rng.below(3);
                            let paras: Vec<&str> =
                                (0..n).map(|_| pool[rng.below(pool.len())]).collect();
                            let source = if rng.below(5) == 0 {
                                "refuse://x"
                            } else {
                                "ok://x"
                            };
                            Some(chunks(&doc, &paras, source))
                        }
                    };
                    offset += 1;
                    // the clean run, record by record
                    match &version {
                        Some(c) if c.iter().all(|c| embeddable(c) && storable(c)) => {
                            reference.insert(doc.clone(), c.clone());
                        }
                        _ => {
                            reference.remove(&doc);
                        }
                    }
                    last.insert(doc.clone(), version.clone());
                    updates.insert(doc, (offset, version));
                }
                // the dataflow: deltas between what it believed and the epoch's versions
                let before = belief.clone();
                for (doc, (_, v)) in &updates {
                    match v {
                        Some(c) if !c.is_empty() => {
                            belief.insert(doc.clone(), c.clone());
                        }
                        _ => {
                            belief.remove(doc);
                        }
                    }
                }
                let mut msgs: Vec<SinkMsg> = reference_deltas(&before, &belief)
                    .into_iter()
                    .map(|d| match d {
                        ChunkDelta::Upsert { chunk, .. } if !embeddable(&chunk) => {
                            SinkMsg::Record(Box::new(SinkRecord::Rejected {
                                chunk,
                                error: "cannot embed".into(),
                            }))
                        }
                        ChunkDelta::Upsert { chunk, change } => upsert_with(&chunk, change),
                        ChunkDelta::Delete { chunk_id, doc_id } => {
                            SinkMsg::Record(Box::new(SinkRecord::Delete { chunk_id, doc_id }))
                        }
                    })
                    .collect();
                let refs: Vec<(&str, i64)> =
                    updates.iter().map(|(d, (o, _))| (d.as_str(), *o)).collect();
                msgs.push(progress(&refs));
                epochs.push((e as u64 + 1, msgs));
            }
            sink.apply(epochs, &mut dlq);
            if rng.below(4) == 0 {
                // restart: the dataflow is rebuilt from what the index holds (no stamps), and
                // the sink starts with nothing lost
                belief.clear();
                for c in sink.index.values() {
                    belief.entry(c.doc_id.clone()).or_default().push(c.clone());
                }
                sink.lost.clear();
            }
        }
        let want: BTreeMap<String, Chunk> = reference
            .into_values()
            .flatten()
            .map(|c| (c.chunk_id.clone(), stored(&c)))
            .collect();
        assert_eq!(sink.index, want, "seed {seed}");
        writes += sink.written;
        assert!(
            dlq.iter().all(|(_, o)| *o > 0),
            "every refusal names its record"
        );
    }
    assert!(writes > 0);
}

#[test]
fn commit_offsets_are_named_by_topic() {
    let topics = vec!["documents".to_string(), "pg.public.t".to_string()];
    let tp = |topic, partition| TopicPartition { topic, partition };
    let offsets = BTreeMap::from([(tp(0, 0), 5), (tp(0, 3), 7), (tp(1, 0), 2), (tp(2, 0), 9)]);
    assert_eq!(
        by_topic_name(&topics, &offsets),
        BTreeMap::from([
            ("documents".to_string(), BTreeMap::from([(0, 5), (3, 7)])),
            ("pg.public.t".to_string(), BTreeMap::from([(0, 2)])),
        ])
    );
}
