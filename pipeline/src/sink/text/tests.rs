//! A batch's segment built ahead of its commit ([`TextIndex::stage_ahead`]): the commit records
//! exactly its own changes, whatever was staged, and nothing staged is visible or durable
//! before it.

use std::collections::BTreeMap;
use std::time::Duration;

use freshet_operators::testing::chunk;

use super::*;

fn payload(next: i64) -> CommitPayload {
    CommitPayload::new(
        BTreeMap::from([("docs".to_owned(), BTreeMap::from([(0, next)]))]),
        next as u64,
    )
}

/// An index at `dir` holding `e` in its first commit, behind a [`TextIndex`] with its own
/// metrics.
fn text_index(dir: &tempfile::TempDir, e: &Chunk) -> (TextIndex, Metrics) {
    let mut w = ChunkIndexWriter::open_or_create(dir.path(), 50_000_000).expect("open");
    w.apply(std::slice::from_ref(e), &[]).expect("apply");
    w.commit(&payload(1)).expect("commit");
    let metrics = Metrics::new();
    let stall = crate::stall::for_tests(Duration::from_secs(5));
    (TextIndex::new(w, stall, metrics.clone()), metrics)
}

/// The commit of `upserts` (one document each, by their doc ids) and of `deletes`, with the
/// documents `gone` holding nothing.
fn commit<'a>(
    upserts: &'a [Chunk],
    deletes: &[String],
    gone: &[&'a str],
    next: i64,
) -> TextCommit<'a> {
    let mut expected: Expected<'a> = BTreeMap::new();
    for c in upserts {
        expected.entry(c.doc_id.as_str()).or_default().push(c);
    }
    for doc in gone {
        expected.entry(doc).or_default();
    }
    TextCommit {
        upserts: upserts.to_vec(),
        deletes: deletes.to_vec(),
        expected,
        payload: payload(next),
        receipts: Vec::new(),
    }
}

fn call(text: &mut TextIndex, commit: &TextCommit<'_>) {
    text.call(Committing {
        commit,
        changelog: None,
    })
    .expect("commit");
}

fn live_ids(text: &TextIndex) -> Vec<String> {
    let mut ids: Vec<String> = text
        .writer
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

/// What the read-back found to repair (`index_repairs_total`): none when the commit held
/// exactly its changes.
fn repairs(metrics: &Metrics) -> usize {
    metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with("freshet_pipeline_index_repairs_total{") && !l.ends_with(" 0"))
        .count()
}

fn stages(metrics: &Metrics) -> bool {
    metrics
        .encode()
        .contains("freshet_pipeline_tantivy_stage_seconds_count 1\n")
}

#[test]
fn a_segment_staged_ahead_is_recorded_by_its_commit_and_unseen_before() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (e, a1, a2) = (chunk("e", "east"), chunk("a", "alpha"), chunk("a", "again"));
    let (mut text, metrics) = text_index(&dir, &e);
    let (ups, dels) = (vec![a1.clone(), a2.clone()], vec![e.chunk_id.clone()]);

    text.stage_ahead(&ups, &dels);
    assert!(stages(&metrics), "the batch was staged");
    // Staged, not committed: the index still holds its last commit.
    assert_eq!(live_ids(&text), vec![e.chunk_id.clone()]);

    call(&mut text, &commit(&ups, &dels, &["e"], 2));
    assert_eq!(
        live_ids(&text),
        sorted(vec![a1.chunk_id.clone(), a2.chunk_id.clone()])
    );
    let last = text
        .writer
        .last_payload()
        .expect("payload")
        .expect("a commit");
    assert_eq!(last.epoch, 2);
    assert_eq!(repairs(&metrics), 0);
}

/// Milvus refused a document after its text was staged: the commit holds the batch without
/// it, and nothing needed repairing (the staged segment was dropped, not committed and mended).
#[test]
fn a_commit_whose_changes_differ_from_the_staged_ones_drops_them() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (e, a, m) = (chunk("e", "east"), chunk("a", "alpha"), chunk("m", "mu"));
    let (mut text, metrics) = text_index(&dir, &e);

    text.stage_ahead(&[a.clone(), m.clone()], &[]);
    assert!(stages(&metrics));
    let ups = vec![a.clone()];
    call(&mut text, &commit(&ups, &[], &["m"], 2));
    assert_eq!(
        live_ids(&text),
        sorted(vec![a.chunk_id.clone(), e.chunk_id.clone()])
    );
    assert_eq!(repairs(&metrics), 0);

    // The next batch, committed without a stage, starts from that commit.
    let b = chunk("b", "beta");
    let ups = vec![b.clone()];
    call(
        &mut text,
        &commit(&ups, std::slice::from_ref(&a.chunk_id), &["a"], 3),
    );
    assert_eq!(
        live_ids(&text),
        sorted(vec![b.chunk_id.clone(), e.chunk_id.clone()])
    );
    assert_eq!(repairs(&metrics), 0);
}

/// A stage that no commit took (its batch failed after it) is not taken by the next batch's.
#[test]
fn a_stage_left_over_from_a_failed_batch_is_dropped() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (e, a, b) = (chunk("e", "east"), chunk("a", "alpha"), chunk("b", "beta"));
    let (mut text, metrics) = text_index(&dir, &e);

    text.stage_ahead(std::slice::from_ref(&a), std::slice::from_ref(&e.chunk_id));
    // The batch again, or another: staged on top of the first, whose fate is unknown.
    let ups = vec![b.clone()];
    text.stage_ahead(&ups, &[]);
    call(&mut text, &commit(&ups, &[], &[], 2));
    assert_eq!(
        live_ids(&text),
        sorted(vec![b.chunk_id.clone(), e.chunk_id.clone()])
    );
    assert_eq!(repairs(&metrics), 0);
}

/// A process that stops after the stage (a crash before the commit) leaves nothing of it.
#[test]
fn a_staged_segment_is_not_durable() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (e, a) = (chunk("e", "east"), chunk("a", "alpha"));
    let (mut text, metrics) = text_index(&dir, &e);
    text.stage_ahead(std::slice::from_ref(&a), std::slice::from_ref(&e.chunk_id));
    assert!(stages(&metrics));
    drop(text);

    let w = ChunkIndexWriter::open_or_create(dir.path(), 50_000_000).expect("reopen");
    let ids: Vec<String> = w
        .load_all()
        .expect("load")
        .into_iter()
        .map(|c| c.chunk_id)
        .collect();
    assert_eq!(ids, vec![e.chunk_id.clone()]);
    assert_eq!(w.last_payload().expect("payload").map(|p| p.epoch), Some(1));
}
