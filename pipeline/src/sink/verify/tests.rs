use std::time::Duration;

use freshet_operators::testing::chunk;

use super::*;

fn payload(next: i64) -> CommitPayload {
    CommitPayload::new(
        BTreeMap::from([("docs".to_owned(), BTreeMap::from([(0, next)]))]),
        next as u64,
    )
}

fn open(dir: &tempfile::TempDir) -> ChunkIndexWriter {
    ChunkIndexWriter::open_or_create(dir.path(), 50_000_000).expect("open")
}

fn live_ids(w: &ChunkIndexWriter) -> Vec<String> {
    let mut ids: Vec<String> = w
        .load_all()
        .expect("load")
        .into_iter()
        .map(|c| c.chunk_id)
        .collect();
    ids.sort();
    ids
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[test]
fn tally_counts_absent_doubled_and_documents_with_more() {
    let (a, b, c) = (chunk("d", "a"), chunk("d", "b"), chunk("d", "c"));
    let e = chunk("e", "e");
    let expected: Expected<'_> = BTreeMap::from([("d", vec![&a, &b, &c]), ("e", vec![&e])]);
    let chunk_counts = BTreeMap::from([
        (a.chunk_id.clone(), 1),
        (b.chunk_id.clone(), 2),
        (e.chunk_id.clone(), 1),
    ]);
    // d: a once, b twice, c absent = 3 matched; 3 live: nothing more. e: 2 live for 1 matched.
    let doc_counts = BTreeMap::from([("d".to_owned(), 3), ("e".to_owned(), 2)]);
    let (found, extra) = tally(&expected, &chunk_counts, &doc_counts);
    assert_eq!(found.absent, vec![c.chunk_id.clone()]);
    assert_eq!(found.doubled, vec![b.chunk_id.clone()]);
    assert!(found.stale.is_empty());
    assert_eq!(extra, vec!["e"]);
    assert_eq!(
        sorted(
            found
                .rewrite(&expected)
                .into_iter()
                .map(|c| c.chunk_id)
                .collect()
        ),
        sorted(vec![b.chunk_id.clone(), c.chunk_id.clone()])
    );

    let right = BTreeMap::from([
        (a.chunk_id.clone(), 1),
        (b.chunk_id.clone(), 1),
        (c.chunk_id.clone(), 1),
        (e.chunk_id.clone(), 1),
    ]);
    let docs = BTreeMap::from([("d".to_owned(), 3), ("e".to_owned(), 1)]);
    let (found, extra) = tally(&expected, &right, &docs);
    assert!(found.is_empty() && extra.is_empty());
}

/// A commit whose index kept a chunk that the document's new version left (here by leaving its
/// delete out of what tantivy was given, as a lost delete or a dataflow that never sent it
/// would): the check names it, the repair deletes it under the same payload, and nothing else
/// changes.
#[test]
fn a_stale_chunk_is_found_and_deleted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut w = open(&dir);
    let (old_a, kept, other) = (
        chunk("d", "part one, first version"),
        chunk("d", "part two"),
        chunk("e", "another document"),
    );
    w.apply(&[old_a.clone(), kept.clone(), other.clone()], &[])
        .expect("apply");
    w.commit(&payload(1)).expect("commit");

    // The next version replaces part one and moves part two.
    let new_a = chunk("d", "part one, second version");
    let moved = Chunk {
        char_start: 30,
        ..kept.clone()
    };
    w.apply(&[new_a.clone(), moved.clone()], &[])
        .expect("apply");
    w.commit(&payload(2)).expect("commit");
    assert!(w.get(&old_a.chunk_id).expect("get").is_some());

    let stall = crate::stall::for_tests(Duration::from_secs(5));
    let metrics = Metrics::new();
    let expected: Expected<'_> = BTreeMap::from([("d", vec![&new_a, &moved])]);
    let found =
        check_and_repair(&mut w, &stall, &metrics, &expected, &payload(2), None).expect("repair");
    assert_eq!(found.stale, vec![old_a.chunk_id.clone()]);
    assert!(found.absent.is_empty() && found.doubled.is_empty());
    assert_eq!(
        live_ids(&w),
        sorted(vec![
            new_a.chunk_id.clone(),
            moved.chunk_id.clone(),
            other.chunk_id
        ])
    );
    assert_eq!(
        w.get(&moved.chunk_id).expect("get").map(|c| c.char_start),
        Some(30)
    );
    let last = w.last_payload().expect("payload").expect("a commit");
    assert_eq!((last.offsets, last.epoch), (payload(2).offsets, 2));
    assert!(metrics
        .encode()
        .contains(r#"freshet_pipeline_index_repairs_total{sink="tantivy",finding="stale"} 1"#));

    // A commit that holds its documents is left alone and counts nothing more.
    let found =
        check_and_repair(&mut w, &stall, &metrics, &expected, &payload(2), None).expect("check");
    assert!(found.is_empty());
    assert!(metrics
        .encode()
        .contains(r#"freshet_pipeline_index_repairs_total{sink="tantivy",finding="stale"} 1"#));
}

/// A chunk of the version that the index lacks is written again, also one the batch did not
/// rewrite (unchanged); a deleted document's chunks that stayed are deleted.
#[test]
fn absent_chunks_are_written_and_a_deleted_documents_deleted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut w = open(&dir);
    let (a, unchanged) = (chunk("d", "alpha"), chunk("d", "unchanged"));
    let gone = chunk("g", "a deleted document");
    w.apply(std::slice::from_ref(&gone), &[]).expect("apply");
    w.commit(&payload(1)).expect("commit");
    let stall = crate::stall::for_tests(Duration::from_secs(5));
    let metrics = Metrics::new();
    let expected: Expected<'_> = BTreeMap::from([("d", vec![&a, &unchanged]), ("g", vec![])]);
    let found =
        check_and_repair(&mut w, &stall, &metrics, &expected, &payload(1), None).expect("repair");
    assert_eq!(
        found.absent,
        vec![a.chunk_id.clone(), unchanged.chunk_id.clone()]
    );
    assert_eq!(found.stale, vec![gone.chunk_id.clone()]);
    assert_eq!(live_ids(&w), sorted(vec![a.chunk_id, unchanged.chunk_id]));
}

/// A repair's changes go to the publisher before the repair is committed, and the repair commit
/// carries the position the publisher returned (a replica mirrors the repaired index, and a
/// crash before the repair commit leaves them past the last commit's position).
#[test]
fn a_repair_is_published_before_it_is_committed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut w = open(&dir);
    let (a, stale) = (chunk("d", "alpha"), chunk("d", "left over"));
    w.apply(std::slice::from_ref(&stale), &[]).expect("apply");
    let mut first = payload(1);
    first.changelog_next = Some(10);
    w.commit(&first).expect("commit");
    let stall = crate::stall::for_tests(Duration::from_secs(5));
    let metrics = Metrics::new();
    let expected: Expected<'_> = BTreeMap::from([("d", vec![&a])]);
    let mut published: Vec<(Vec<String>, Vec<String>, Option<i64>)> = Vec::new();
    let mut publish = |upserts: &[Chunk], deletes: &[String]| {
        // still the batch's commit when the changes go out
        let held = w_payload(&dir);
        published.push((
            upserts.iter().map(|c| c.chunk_id.clone()).collect(),
            deletes.to_vec(),
            held,
        ));
        Ok(Some(14))
    };
    let found = check_and_repair(
        &mut w,
        &stall,
        &metrics,
        &expected,
        &first,
        Some(&mut publish),
    )
    .expect("repair");
    assert_eq!(found.absent, vec![a.chunk_id.clone()]);
    assert_eq!(
        published,
        vec![(
            vec![a.chunk_id.clone()],
            vec![stale.chunk_id.clone()],
            Some(10)
        )]
    );
    let last = w.last_payload().expect("payload").expect("a commit");
    assert_eq!((last.epoch, last.changelog_next), (1, Some(14)));
    assert_eq!(live_ids(&w), vec![a.chunk_id.clone()]);

    // A commit that needs no repair publishes nothing.
    let mut calls = 0;
    let mut count = |_: &[Chunk], _: &[String]| {
        calls += 1;
        Ok(None)
    };
    let found = check_and_repair(&mut w, &stall, &metrics, &expected, &last, Some(&mut count))
        .expect("check");
    assert!(found.is_empty());
    assert_eq!(calls, 0);

    // A publish that fails stops the repair before its commit.
    let (b, c) = (chunk("f", "beta"), chunk("f", "gamma"));
    let expected: Expected<'_> = BTreeMap::from([("f", vec![&b, &c])]);
    let mut failing =
        |_: &[Chunk], _: &[String]| -> Result<Option<i64>> { Err(anyhow!("broker gone")) };
    let e = check_and_repair(
        &mut w,
        &stall,
        &metrics,
        &expected,
        &last,
        Some(&mut failing),
    )
    .expect_err("a failed publish");
    assert!(format!("{e:#}").contains("broker gone"), "{e:#}");
    assert!(w.get(&b.chunk_id).expect("get").is_none());
}

/// The payload of the last commit in the index at `dir`, read by another reader.
fn w_payload(dir: &tempfile::TempDir) -> Option<i64> {
    freshet_tantivy::ChunkIndexReader::open(dir.path())
        .expect("reader")
        .last_payload()
        .expect("payload")
        .and_then(|p| p.changelog_next)
}
