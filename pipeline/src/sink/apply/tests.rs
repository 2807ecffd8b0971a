//! The requests the driver's steps build from one batch, in the order it builds them: what each
//! service is asked to write of the refused documents and of the rest.

use std::collections::BTreeMap;

use freshet_operators::chunk::{Chunk, ChunkChange};
use freshet_operators::testing::chunk;

use super::*;
use crate::dlq::Refused;
use crate::sink::plan::{DocChanges, EmbedRefusal, RecordRef, Row, TopicPartition};
use crate::sink::refusals::RowRefusal;

const TEXT_ONLY: ChunkChange = ChunkChange {
    embedded: false,
    attributes: false,
    placement: true,
};

fn at(offset: i64) -> RecordRef {
    RecordRef {
        topic: 0,
        partition: 0,
        offset,
    }
}

fn row(c: &Chunk, change: ChunkChange, vector: Option<Vec<f32>>) -> (String, Row) {
    let row = Row {
        chunk: c.clone(),
        vector,
        change,
    };
    (c.chunk_id.clone(), row)
}

fn refused_before_sink(offset: i64) -> Refused {
    Refused {
        at: at(offset),
        key: Some(b"k".to_vec()),
        value: Some(b"{".to_vec()),
        headers: Vec::new(),
        timestamp_ms: None,
        class: "malformed_json".into(),
        stage: "decode".into(),
        message: "bad".into(),
    }
}

/// The chunks of the batch: `a` written (a new leaf and one that only moved), `b` refused by
/// the embedder, `m` to be refused by Milvus.
struct Chunks {
    a1: Chunk,
    a2: Chunk,
    b1: Chunk,
    m1: Chunk,
}

fn chunks() -> Chunks {
    Chunks {
        a1: chunk("a", "alpha one"),
        a2: chunk("a", "alpha two"),
        b1: chunk("b", "beta"),
        m1: chunk("m", "mu"),
    }
}

fn batch(c: &Chunks) -> Batch {
    let v = Some(vec![0.5_f32; 3]);
    let docs = BTreeMap::from([
        (
            "a".to_string(),
            DocChanges {
                deletes: ["a-old".to_string()].into(),
                upserts: BTreeMap::from([
                    row(&c.a1, ChunkChange::NEW, v.clone()),
                    row(&c.a2, TEXT_ONLY, v.clone()),
                ]),
                embed_error: None,
            },
        ),
        (
            "b".to_string(),
            DocChanges {
                deletes: ["b-old".to_string()].into(),
                upserts: BTreeMap::from([row(&c.b1, ChunkChange::NEW, None)]),
                embed_error: Some("too long".into()),
            },
        ),
        (
            "m".to_string(),
            DocChanges {
                deletes: Default::default(),
                upserts: BTreeMap::from([row(&c.m1, ChunkChange::NEW, v)]),
                embed_error: None,
            },
        ),
    ]);
    Batch {
        last_epoch: 4,
        next_offsets: BTreeMap::from([(
            TopicPartition {
                topic: 0,
                partition: 0,
            },
            10,
        )]),
        timestamps_ms: Vec::new(),
        docs,
        records: BTreeMap::from([("b".to_string(), at(8)), ("m".to_string(), at(9))]),
        embed_refusals: vec![EmbedRefusal {
            doc_id: "b".into(),
            record: Some(at(8)),
            error: "too long".into(),
        }],
        refused: vec![refused_before_sink(3), refused_before_sink(7)],
        removals_asked: BTreeMap::new(),
    }
}

/// The refusals once Milvus has refused `m`'s row (and `b`'s, already refused by the embedder).
fn refusals(batch: &Batch) -> Refusals {
    let mut refused = Refusals::of_embedder(batch);
    let milvus = |doc: &str| RowRefusal {
        doc_id: doc.into(),
        reason: "field too long".into(),
    };
    refused.add_milvus(vec![milvus("m"), milvus("b")]);
    refused
}

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

#[test]
fn milvus_is_asked_for_the_changed_rows_of_documents_not_refused() {
    let c = chunks();
    let batch = batch(&c);
    let refused = Refusals::of_embedder(&batch);
    assert_eq!(refused.docs().collect::<Vec<_>>(), vec!["b"]);
    let write = VectorWrite::build(&batch, &refused).unwrap();
    assert_eq!(write.epoch, 4);
    assert_eq!(write.deletes, vec!["a-old".to_string()]);
    let rows: Vec<&str> = write
        .rows
        .iter()
        .map(|(c, _)| c.chunk_id.as_str())
        .collect();
    // a2 only moved (tantivy's), b1 is refused
    assert_eq!(rows, vec![c.a1.chunk_id.as_str(), c.m1.chunk_id.as_str()]);
}

#[test]
fn a_leaf_to_write_without_a_vector_fails_the_batch() {
    let c = chunks();
    let mut batch = batch(&c);
    batch.docs.get_mut("b").unwrap().embed_error = None;
    let e = VectorWrite::build(&batch, &Refusals::default())
        .err()
        .expect("b1 has no vector");
    assert!(e.to_string().contains("without a vector"), "{e}");
}

#[test]
fn a_refused_document_is_removed_whole_and_keeps_its_first_refusal() {
    let c = chunks();
    let batch = batch(&c);
    let refused = refusals(&batch);
    assert_eq!(refused.docs().collect::<Vec<_>>(), vec!["b", "m"]);
    let at_sink: Vec<(&str, &str)> = refused.at_sink().map(|(d, r)| (d, r.class)).collect();
    assert_eq!(at_sink, vec![("m", "milvus_refused")]);
    let removal = Removal::build(&batch, &refused);
    assert_eq!(
        sorted(removal.ids),
        sorted(vec![
            "b-old".into(),
            c.b1.chunk_id.clone(),
            c.m1.chunk_id.clone()
        ])
    );
}

#[test]
fn dead_letters_go_in_order_and_skip_records_already_durable() {
    let c = chunks();
    let batch = batch(&c);
    let refused = refusals(&batch);
    let durable_before = BTreeMap::from([(
        TopicPartition {
            topic: 0,
            partition: 0,
        },
        5,
    )]);
    let letters: Vec<(String, i64, String)> = DeadLetter::build(&batch, &refused, &durable_before)
        .into_iter()
        .map(|l| match l {
            DeadLetter::Refused(r) => (r.class.clone(), r.at.offset, r.stage.clone()),
            DeadLetter::Version {
                doc_id,
                record,
                failure,
            } => (
                format!("{}:{doc_id}", failure.class),
                record.map_or(-1, |r| r.offset),
                failure.stage.to_string(),
            ),
        })
        .collect();
    assert_eq!(
        letters,
        vec![
            ("malformed_json".into(), 7, "decode".into()),
            ("embedding_failed:b".into(), 8, "embed".into()),
            ("milvus_refused:m".into(), 9, "sink".into()),
        ]
    );
}

#[test]
fn tantivy_deletes_the_refused_documents_and_writes_the_rest() {
    let c = chunks();
    let batch = batch(&c);
    let refused = refusals(&batch);
    let removed = Removal::build(&batch, &refused).ids;
    let payload = CommitPayload::new(Default::default(), batch.last_epoch);
    let commit = TextCommit::build(&batch, &refused, removed.clone(), payload, Vec::new());
    let mut deletes = removed;
    deletes.push("a-old".into());
    assert_eq!(commit.deletes, deletes);
    let upserts: Vec<&str> = commit.upserts.iter().map(|c| c.chunk_id.as_str()).collect();
    let mut a = vec![c.a1.chunk_id.as_str(), c.a2.chunk_id.as_str()];
    a.sort();
    assert_eq!(
        upserts, a,
        "both of a's chunks, the one that only moved included"
    );
    let expected: BTreeMap<&str, Vec<&str>> = commit
        .expected
        .iter()
        .map(|(d, cs)| (*d, cs.iter().map(|c| c.chunk_id.as_str()).collect()))
        .collect();
    assert_eq!(
        expected,
        BTreeMap::from([("a", a), ("b", vec![]), ("m", vec![])])
    );
}
