use std::time::Duration;

use freshet_operators::testing::chunk;

use super::*;

fn ids(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

fn payload(next: i64) -> CommitPayload {
    CommitPayload::new(
        BTreeMap::from([("docs".to_owned(), BTreeMap::from([(0, next)]))]),
        next as u64,
    )
}

#[test]
fn findings_from_live_counts() {
    let (a, b, c) = (chunk("d", "a"), chunk("d", "b"), chunk("d", "c"));
    let upserts = vec![a.clone(), b.clone(), c.clone()];
    // `b` is deleted and upserted in one batch: present is right. `x` and `y` are deletes.
    let deletes = ids(&["x", "y", &b.chunk_id]);
    let counts = BTreeMap::from([
        (a.chunk_id.clone(), 1),
        (b.chunk_id.clone(), 2),
        ("y".to_owned(), 1),
    ]);
    let found = Findings::from_counts(&upserts, &deletes, &counts);
    assert_eq!(found.stale, ids(&["y"]));
    assert_eq!(found.absent, vec![c.chunk_id.clone()]);
    assert_eq!(found.doubled, vec![b.chunk_id.clone()]);
    let mut again: Vec<String> = found
        .rewrite(&upserts)
        .into_iter()
        .map(|c| c.chunk_id)
        .collect();
    again.sort();
    let mut want = vec![b.chunk_id.clone(), c.chunk_id.clone()];
    want.sort();
    assert_eq!(again, want);

    let right = BTreeMap::from([
        (a.chunk_id.clone(), 1),
        (b.chunk_id.clone(), 1),
        (c.chunk_id.clone(), 1),
    ]);
    assert!(Findings::from_counts(&upserts, &deletes, &right).is_empty());
}

/// A commit that lost one delete of its batch (written here by leaving the id out of what
/// tantivy was given): the check names it, the repair deletes it under the same payload, and
/// the rest of the index is untouched.
#[test]
fn a_lost_delete_is_found_and_written_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut w = ChunkIndexWriter::open_or_create(dir.path(), 50_000_000).expect("open");
    let (old_a, kept, other) = (
        chunk("d", "part one, first version"),
        chunk("d", "part two"),
        chunk("e", "another document"),
    );
    w.apply(&[old_a.clone(), kept.clone(), other.clone()], &[])
        .expect("apply");
    w.commit(&payload(1)).expect("commit");

    // The next version replaces part one and moves part two; its delete of the old part one
    // does not reach tantivy.
    let new_a = chunk("d", "part one, second version");
    let moved = Chunk {
        char_start: 30,
        ..kept.clone()
    };
    let upserts = vec![new_a.clone(), moved.clone()];
    let deletes = ids(&[&old_a.chunk_id]);
    w.apply(&upserts, &[]).expect("apply");
    w.commit(&payload(2)).expect("commit");
    assert!(w.get(&old_a.chunk_id).expect("get").is_some());

    let stall = crate::stall::for_tests(Duration::from_secs(5));
    let metrics = Metrics::new();
    let found = check_and_repair(&mut w, &stall, &metrics, (&upserts, &deletes), &payload(2))
        .expect("repair");
    assert_eq!(found.stale, deletes);
    assert!(found.absent.is_empty() && found.doubled.is_empty());
    assert!(w.get(&old_a.chunk_id).expect("get").is_none());
    let mut live: Vec<String> = w
        .load_all()
        .expect("load")
        .into_iter()
        .map(|c| c.chunk_id)
        .collect();
    live.sort();
    let mut want = vec![new_a.chunk_id, moved.chunk_id.clone(), other.chunk_id];
    want.sort();
    assert_eq!(live, want);
    assert_eq!(
        w.get(&moved.chunk_id).expect("get").map(|c| c.char_start),
        Some(30)
    );
    let last = w.last_payload().expect("payload").expect("a commit");
    assert_eq!((last.offsets, last.epoch), (payload(2).offsets, 2));
    assert!(metrics
        .encode()
        .contains(r#"freshet_pipeline_index_repairs_total{sink="tantivy",finding="stale"} 1"#));

    // A commit that holds its batch is left alone and counts nothing.
    let found = check_and_repair(&mut w, &stall, &metrics, (&upserts, &deletes), &payload(2))
        .expect("check");
    assert!(found.is_empty());
}

/// An upsert that did not reach tantivy is written again.
#[test]
fn an_absent_upsert_is_written_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut w = ChunkIndexWriter::open_or_create(dir.path(), 50_000_000).expect("open");
    let a = chunk("d", "alpha");
    w.commit(&payload(1)).expect("commit");
    let stall = crate::stall::for_tests(Duration::from_secs(5));
    let metrics = Metrics::new();
    let found = check_and_repair(
        &mut w,
        &stall,
        &metrics,
        (std::slice::from_ref(&a), &[]),
        &payload(1),
    )
    .expect("repair");
    assert_eq!(found.absent, vec![a.chunk_id.clone()]);
    assert_eq!(w.get(&a.chunk_id).expect("get"), Some(a));
}
