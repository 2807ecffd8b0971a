//! Listing and counting documents (not chunks) in a real index: each document once, however
//! many of its chunks pass the filter, across segments, without deleted chunks.

use std::collections::BTreeMap;

use freshet_core::chunk::Chunk;
use freshet_tantivy::{ChunkFilter, ChunkIndexReader, ChunkIndexWriter, CommitPayload};

const HEAP: usize = 50_000_000;

fn chunk(doc: &str, index: u32, acl: &[&str]) -> Chunk {
    let text = format!("chunk {index} of {doc}");
    Chunk {
        chunk_id: format!("{doc}-{index}"),
        index,
        source: format!("docs/{doc}.md"),
        metadata_json: format!(r#"{{"n":{index}}}"#),
        acl: acl.iter().map(|a| a.to_string()).collect(),
        ..freshet_core::testing::chunk(doc, &text)
    }
}

fn payload(offset: i64) -> CommitPayload {
    CommitPayload::new(
        BTreeMap::from([("docs".to_owned(), BTreeMap::from([(0, offset)]))]),
        offset as u64,
    )
}

#[test]
fn each_document_once_across_segments_and_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = ChunkIndexWriter::open_or_create(dir.path(), HEAP).unwrap();
    // Two segments: "a" has chunks in both.
    w.apply(
        &[
            chunk("a", 0, &[]),
            chunk("a", 1, &[]),
            chunk("b", 0, &["group:hr"]),
        ],
        &[],
    )
    .unwrap();
    w.commit(&payload(1)).unwrap();
    w.apply(
        &[chunk("a", 2, &[]), chunk("c", 0, &[]), chunk("c", 1, &[])],
        &[],
    )
    .unwrap();
    w.commit(&payload(2)).unwrap();
    let r = ChunkIndexReader::open(dir.path()).unwrap();
    r.reload().unwrap();
    assert_eq!(r.count_matching(&ChunkFilter::none()).unwrap(), 6);
    assert_eq!(r.count_documents_matching(&ChunkFilter::none()).unwrap(), 3);
    let docs = |f: &ChunkFilter| -> Vec<(String, String)> {
        r.documents_matching(f)
            .unwrap()
            .into_iter()
            .map(|c| (c.doc_id, c.source))
            .collect()
    };
    let public = ChunkFilter::none().principals(Vec::<String>::new());
    assert_eq!(
        docs(&public),
        [
            ("a".into(), "docs/a.md".into()),
            ("c".into(), "docs/c.md".into())
        ]
    );
    assert_eq!(r.count_documents_matching(&public).unwrap(), 2);
    let hr = ChunkFilter::none().principals(["group:hr"]);
    assert_eq!(r.count_documents_matching(&hr).unwrap(), 3);
    // The filter applies per chunk: a document is listed when one of its chunks passes, with
    // that chunk.
    let second = ChunkFilter::none().metadata_eq("n", "2");
    let found = r.documents_matching(&second).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!((found[0].doc_id.as_str(), found[0].index), ("a", 2));
    assert!(r
        .documents_matching(&ChunkFilter::none().sources(Vec::<String>::new()))
        .unwrap()
        .is_empty());
    // A document whose chunks are all deleted is gone.
    w.apply(&[], &["c-0".to_owned(), "c-1".to_owned()]).unwrap();
    w.commit(&payload(3)).unwrap();
    r.reload().unwrap();
    assert_eq!(r.count_documents_matching(&public).unwrap(), 1);
    assert_eq!(docs(&public), [("a".into(), "docs/a.md".into())]);
}
