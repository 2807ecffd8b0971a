//! Which documents of a batch get a delete receipt, and what it says.

use super::*;
use crate::sink::plan::{DocChanges, RemovalAsked};
use crate::sink::refusals::RowRefusal;

fn at(offset: i64) -> RecordRef {
    RecordRef {
        topic: 0,
        partition: 2,
        offset,
    }
}

fn asked(doc: &str, offset: i64, refused: Option<&str>) -> (String, RemovalAsked) {
    let r = RemovalAsked {
        doc_id: doc.into(),
        at: at(offset),
        timestamp_ms: Some(1_000 + offset),
        refused: refused.map(str::to_string),
    };
    (doc.into(), r)
}

#[test]
fn deletes_refusals_and_unknown_ids_get_receipts_and_a_later_upsert_supersedes_a_delete() {
    // "gone": deleted; "never": a delete of a document the index never held; "bad": a refused
    // record naming it; "back": deleted, then upserted again in the same batch; "emb": its
    // new version's text refused by the model; "mil": a row refused by Milvus.
    let mut batch = Batch {
        removals_asked: [
            asked("gone", 1, None),
            asked("never", 2, None),
            asked("bad", 3, Some("malformed_json")),
            asked("back", 4, None),
        ]
        .into_iter()
        .collect(),
        ..Batch::default()
    };
    for (doc, offset) in [
        ("gone", 1),
        ("never", 2),
        ("bad", 3),
        ("back", 9),
        ("emb", 10),
        ("mil", 11),
    ] {
        batch.records.insert(doc.into(), at(offset));
    }
    batch.docs.insert(
        "emb".into(),
        DocChanges {
            embed_error: Some("too long".into()),
            ..DocChanges::default()
        },
    );
    let mut refused = Refusals::of_embedder(&batch);
    refused.add_milvus(vec![RowRefusal {
        doc_id: "mil".into(),
        reason: "too big".into(),
    }]);
    let topics = vec!["docs".to_string()];

    let got = of_batch(&batch, &refused, &topics);
    type Summary<'a> = (&'a str, &'a str, Option<&'a str>, Option<i64>, Option<i64>);
    let summary: Vec<Summary<'_>> = got
        .iter()
        .map(|r| {
            (
                r.doc_id.as_str(),
                r.cause.as_str(),
                r.class.as_deref(),
                r.source.as_ref().map(|s| s.offset),
                r.source_timestamp_ms,
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                "bad",
                "refused",
                Some("malformed_json"),
                Some(3),
                Some(1_003)
            ),
            ("emb", "refused", Some("embedding_failed"), Some(10), None),
            ("gone", "delete", None, Some(1), Some(1_001)),
            ("mil", "refused", Some("milvus_refused"), Some(11), None),
            ("never", "delete", None, Some(2), Some(1_002)),
        ]
    );
    let src = got[2].source.as_ref().unwrap();
    assert_eq!((src.topic.as_str(), src.partition), ("docs", 2));
}
