//! Tests of the document route's parameters and of what it reads through the caller's
//! principals.

use freshet_core::chunk::{Chunk, ChunkKind};

use super::*;
use crate::metrics::Metrics;

fn doc(doc_id: &str, n: u32, acl: &[&str]) -> Vec<Chunk> {
    (0..n)
        .map(|i| {
            let mut c = freshet_core::testing::chunk(doc_id, &format!("chunk {i} of {doc_id}"));
            c.index = i;
            c.acl = acl.iter().map(|a| a.to_string()).collect();
            c.metadata_json = format!(r#"{{"page_start":{p},"page_end":{p}}}"#, p = i + 1);
            c
        })
        .collect()
}

fn index() -> IndexInfo {
    IndexInfo {
        epoch: 1,
        committed_at_ms: 0,
        age_ms: 0,
        generation: None,
    }
}

fn gate(principals: &[&str]) -> Gate {
    Gate::new(
        &visible_to(principals.iter().map(|p| p.to_string()).collect()),
        Metrics::new(),
    )
}

fn query(doc_id: &str, qs: &str) -> ChunksQuery {
    ChunksQuery::parse(doc_id.into(), Some(qs)).unwrap()
}

#[test]
fn parameters_are_checked() {
    let q = query("d", "around=abc&neighbours=2&from=3&limit=7");
    assert_eq!(q.around.as_deref(), Some("abc"));
    assert_eq!((q.neighbours, q.from, q.limit), (2, 3, 7));
    let d = ChunksQuery::parse("d".into(), None).unwrap();
    assert_eq!(
        (d.around, d.neighbours, d.from, d.limit),
        (None, 1, 0, DEFAULT_LIMIT)
    );
    for (qs, needle) in [
        ("neighbours=many", "whole number"),
        ("neighbours=51", "at most 50"),
        ("limit=0", "at least 1"),
        ("limit=1001", "at most 1000"),
        ("around=", "around is empty"),
        ("colour=red", "unknown parameter"),
    ] {
        let e = ChunksQuery::parse("d".into(), Some(qs)).unwrap_err();
        assert!(e.contains(needle), "{qs}: {e}");
    }
    assert!(ChunksQuery::parse(String::new(), None).is_err());
}

#[test]
fn a_whole_document_in_order_a_page_at_a_time() {
    let mut all = doc("d", 5, &[]);
    all.reverse();
    let r = select(&all, &query("d", "limit=2&from=1"), &gate(&[]), index()).unwrap();
    let idx: Vec<u32> = r.chunks.iter().map(|c| c.index).collect();
    assert_eq!(idx, vec![1, 2]);
    assert_eq!((r.total_chunks, r.next_from), (5, Some(3)));
    assert_eq!(r.chunks[0].page_start, Some(2));
    assert_eq!(r.title, "Title of d");
    let last = select(&all, &query("d", "from=3"), &gate(&[]), index()).unwrap();
    assert_eq!(last.chunks.len(), 2);
    assert_eq!(last.next_from, None);
}

#[test]
fn a_chunk_with_its_neighbours_of_its_kind() {
    let mut all = doc("d", 6, &[]);
    let mut parent = freshet_core::testing::chunk("d", "a parent");
    parent.kind = ChunkKind::Parent;
    parent.index = 2;
    all.push(parent);
    let centre = all[3].chunk_id.clone();
    let r = select(
        &all,
        &query("d", &format!("around={centre}&neighbours=1")),
        &gate(&[]),
        index(),
    )
    .unwrap();
    let idx: Vec<u32> = r.chunks.iter().map(|c| c.index).collect();
    assert_eq!(idx, vec![2, 3, 4]);
    assert!(r.chunks.iter().all(|c| c.kind == "leaf"));
    let edge = all[0].chunk_id.clone();
    let r = select(
        &all,
        &query("d", &format!("around={edge}&neighbours=2")),
        &gate(&[]),
        index(),
    )
    .unwrap();
    assert_eq!(r.chunks.len(), 3);
}

/// A document the principals may not see reads exactly as one that does not exist, whole or
/// by one of its chunks.
#[test]
fn a_hidden_document_is_a_missing_one() {
    let all = doc("secret", 3, &["group:a"]);
    let around = format!("around={}", all[1].chunk_id);
    for qs in ["", around.as_str()] {
        assert!(select(&all, &query("secret", qs), &gate(&["group:a"]), index()).is_some());
        assert!(select(&all, &query("secret", qs), &gate(&["group:b"]), index()).is_none());
        assert!(select(&all, &query("secret", qs), &gate(&[]), index()).is_none());
        assert!(select(&[], &query("secret", qs), &gate(&["group:b"]), index()).is_none());
    }
    let hidden = not_found(&query("secret", ""));
    let missing = not_found(&query("secret", ""));
    assert_eq!(
        (hidden.status, hidden.message),
        (missing.status, missing.message)
    );
    // A chunk id of another document does not read this one.
    let other = doc("other", 2, &[]);
    let mut both = all.clone();
    both.extend(other.clone());
    let q = query("secret", &format!("around={}", other[0].chunk_id));
    assert!(select(&both, &q, &gate(&["group:a"]), index()).is_none());
}
