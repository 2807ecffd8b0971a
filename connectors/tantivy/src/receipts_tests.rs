//! The receipts log: a receipt exists if and only if its commit does.

use std::collections::BTreeMap;

use freshet_core::testing::chunk as test_chunk;

use super::*;
use crate::{ChunkIndexReader, ChunkIndexWriter, CommitPayload};

fn receipt(doc: &str, chunks: u64) -> DeleteReceipt {
    DeleteReceipt {
        doc_id: doc.into(),
        cause: cause::DELETE.into(),
        class: None,
        source: Some(SourceRecord {
            topic: "docs".into(),
            partition: 0,
            offset: 7,
        }),
        source_timestamp_ms: Some(1_000),
        chunks_removed: chunks,
        opstamp: 0,
        epoch: 0,
        completed_at_ms: 0,
    }
}

fn payload(epoch: u64) -> CommitPayload {
    CommitPayload::new(
        BTreeMap::from([("docs".into(), BTreeMap::from([(0, epoch as i64)]))]),
        epoch,
    )
}

fn all() -> ReceiptQuery {
    ReceiptQuery {
        limit: usize::MAX,
        ..ReceiptQuery::default()
    }
}

fn docs(n: &[Numbered]) -> Vec<&str> {
    n.iter().map(|n| n.receipt.doc_id.as_str()).collect()
}

#[test]
fn a_commit_stamps_its_receipts_and_readers_see_them_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = ChunkIndexWriter::open_or_create(dir.path(), 50_000_000).unwrap();
    let chunk = test_chunk("a", "some text about a");
    w.apply(std::slice::from_ref(&chunk), &[]).unwrap();
    w.commit(&payload(1)).unwrap();
    let r = ChunkIndexReader::open_manual(dir.path()).unwrap();
    let before = r.reload().unwrap();

    w.apply(&[], std::slice::from_ref(&chunk.chunk_id)).unwrap();
    let p = payload(2);
    w.commit_with_receipts(&p, &[receipt("a", 1)]).unwrap();
    let last = w.last_payload().unwrap().unwrap();
    let op = last.opstamp.expect("the commit carries its opstamp");

    let got = w.delete_receipts(&all()).unwrap();
    assert_eq!(got.len(), 1);
    let g = &got[0];
    assert_eq!((g.seq, g.receipt.opstamp, g.receipt.epoch), (0, op, 2));
    assert_eq!(g.receipt.completed_at_ms, p.committed_at_ms);
    assert_eq!(g.receipt.chunks_removed, 1);

    // A reader serving the commit before sees no receipt; once reloaded it does, with the
    // document gone from that same snapshot.
    assert!(r.delete_receipts(&before, &all()).unwrap().is_empty());
    let after = r.reload().unwrap();
    assert_eq!(docs(&r.delete_receipts(&after, &all()).unwrap()), ["a"]);
    assert!(after.get_many(&[chunk.chunk_id]).unwrap().is_empty());
}

#[test]
fn receipts_of_a_commit_that_never_happened_are_never_shown_and_are_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut w = ChunkIndexWriter::open_or_create(dir.path(), 50_000_000).unwrap();
        w.commit_with_receipts(&payload(1), &[receipt("kept", 0)])
            .unwrap();
        let committed = w.last_payload().unwrap().unwrap().opstamp.unwrap();
        // As if the process died between writing the receipts and the commit.
        w.receipts
            .append(&[DeleteReceipt {
                opstamp: committed + 5,
                ..receipt("ghost", 3)
            }])
            .unwrap();
        assert_eq!(docs(&w.delete_receipts(&all()).unwrap()), ["kept"]);
    }
    let text = std::fs::read_to_string(dir.path().join(RECEIPTS_FILE)).unwrap();
    assert!(text.contains("ghost"));
    let w = ChunkIndexWriter::open_or_create(dir.path(), 50_000_000).unwrap();
    let text = std::fs::read_to_string(dir.path().join(RECEIPTS_FILE)).unwrap();
    assert!(!text.contains("ghost"), "cut off at open: {text}");
    assert_eq!(docs(&w.delete_receipts(&all()).unwrap()), ["kept"]);
}

#[test]
fn a_rollback_cuts_off_the_receipts_of_the_failed_commit() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = ChunkIndexWriter::open_or_create(dir.path(), 50_000_000).unwrap();
    w.commit(&payload(1)).unwrap();
    let committed = w.last_payload().unwrap().unwrap().opstamp.unwrap();
    w.receipts
        .append(&[DeleteReceipt {
            opstamp: committed + 1,
            ..receipt("ghost", 1)
        }])
        .unwrap();
    w.rollback().unwrap();
    w.commit_with_receipts(&payload(2), &[receipt("real", 1)])
        .unwrap();
    let got = w.delete_receipts(&all()).unwrap();
    assert_eq!(docs(&got), ["real"]);
    assert_eq!(got[0].seq, 0);
}

#[test]
fn a_torn_tail_is_ignored_and_cut_off_and_damage_before_a_sound_line_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(RECEIPTS_FILE);
    let log = ReceiptLog::open(dir.path(), 10).unwrap();
    log.append(&[receipt("a", 1), receipt("b", 2)]).unwrap();
    let sound = std::fs::read(&path).unwrap();

    // Cut short in the middle of a line.
    let mut torn = sound.clone();
    torn.extend_from_slice(&encode(&receipt("c", 1)).unwrap().as_bytes()[..20]);
    std::fs::write(&path, &torn).unwrap();
    assert_eq!(docs(&read(dir.path(), 10, &all()).unwrap()), ["a", "b"]);
    ReceiptLog::open(dir.path(), 10).unwrap();
    assert_eq!(
        std::fs::read(&path).unwrap(),
        sound,
        "the torn tail is cut off"
    );

    // A whole line whose checksum fails, then a sound one: damage.
    let lines: Vec<&str> = std::str::from_utf8(&sound).unwrap().lines().collect();
    let damaged = format!("{}\n{}\n", lines[0].replace("\"a\"", "\"x\""), lines[1]);
    std::fs::write(&path, damaged).unwrap();
    let e = read(dir.path(), 10, &all()).unwrap_err().to_string();
    assert!(e.contains("damaged at line 1"), "{e}");
    assert!(ReceiptLog::open(dir.path(), 10).is_err());
}

#[test]
fn queries_filter_by_document_time_and_place_and_page() {
    let dir = tempfile::tempdir().unwrap();
    let log = ReceiptLog::open(dir.path(), 0).unwrap();
    let at = |doc: &str, op: u64, ms: u64| DeleteReceipt {
        opstamp: op,
        completed_at_ms: ms,
        ..receipt(doc, 1)
    };
    log.append(&[
        at("a", 1, 100),
        at("b", 1, 100),
        at("a", 2, 200),
        at("c", 3, 300),
    ])
    .unwrap();
    let q = |doc: Option<&str>, since: Option<u64>, after: Option<u64>, limit: usize| {
        let q = ReceiptQuery {
            doc_id: doc.map(str::to_string),
            since_ms: since,
            after_seq: after,
            limit,
        };
        read(dir.path(), 2, &q).unwrap()
    };
    // Up to opstamp 2: "c" is not covered yet.
    assert_eq!(docs(&q(None, None, None, 10)), ["a", "b", "a"]);
    assert_eq!(
        q(Some("a"), None, None, 10)
            .iter()
            .map(|n| n.seq)
            .collect::<Vec<_>>(),
        [0, 2]
    );
    assert_eq!(docs(&q(None, Some(150), None, 10)), ["a"]);
    let first = q(None, None, None, 2);
    assert_eq!(docs(&first), ["a", "b"]);
    assert_eq!(docs(&q(None, None, Some(first[1].seq), 2)), ["a"]);
}
