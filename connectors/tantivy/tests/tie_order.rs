//! Equal BM25 scores rank in chunk-id order, whatever the index's segments: two indexes of the
//! same chunks, written in other orders and commits (as a replica or the next run writes
//! them), answer a query identically, also where a tie crosses the k-th place (a tie that
//! ends within 4 × k + 16 hits).

use freshet_core::chunk::Chunk;
use freshet_tantivy::{ChunkFilter, ChunkIndexReader, ChunkIndexWriter, CommitPayload};

const HEAP: usize = 50_000_000;

/// `n` chunks of one text (equal scores for any query), ids `tie-000` …, and a few others
/// scoring higher and lower.
fn chunks(n: usize) -> Vec<Chunk> {
    let mut out: Vec<Chunk> = (0..n)
        .map(|i| Chunk {
            chunk_id: format!("tie-{i:03}"),
            ..freshet_core::testing::chunk(&format!("d{i}"), "glacier river delta")
        })
        .collect();
    out.push(Chunk {
        chunk_id: "top".into(),
        ..freshet_core::testing::chunk("dt", "glacier glacier")
    });
    out.push(Chunk {
        chunk_id: "low".into(),
        ..freshet_core::testing::chunk("dl", "glacier river delta basin canyon valley ridge")
    });
    out
}

/// A tie longer than that keeps tantivy's order: every hit is still there, with its score.
#[test]
fn a_tie_too_long_to_order_still_answers_whole() {
    let dir = tempfile::tempdir().unwrap();
    let mut all = chunks(150);
    all.reverse();
    let r = index(dir.path(), &all, 7);
    for k in [2, 10, 152] {
        let hits = r
            .search_bm25("glacier", k, &ChunkFilter::none())
            .expect("search");
        assert_eq!(hits.len(), k.min(152), "k = {k}");
        assert_eq!(hits[0].1.chunk_id, "top");
        assert!(hits.windows(2).all(|w| w[0].0 >= w[1].0), "k = {k}");
    }
}

/// An index of `chunks` written `per_commit` at a time, in this order.
fn index(dir: &std::path::Path, chunks: &[Chunk], per_commit: usize) -> ChunkIndexReader {
    let mut w = ChunkIndexWriter::open_or_create(dir, HEAP).expect("writer");
    for (i, batch) in chunks.chunks(per_commit).enumerate() {
        w.apply(batch, &[]).expect("apply");
        w.commit(&CommitPayload::new(Default::default(), i as u64 + 1))
            .expect("commit");
    }
    w.close().expect("close");
    ChunkIndexReader::open(dir).expect("reader")
}

fn ids(r: &ChunkIndexReader, q: &str, k: usize) -> Vec<String> {
    r.search_bm25(q, k, &ChunkFilter::none())
        .expect("search")
        .into_iter()
        .map(|(_, c)| c.chunk_id)
        .collect()
}

#[test]
fn ties_rank_by_chunk_id_in_any_segment_layout() {
    let ties = 12;
    let all = chunks(ties);
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // One index in one commit, the other backwards in commits of 7 (other segments, and the
    // ties held in the opposite order).
    let one = index(a.path(), &all, all.len());
    let mut reversed = all.clone();
    reversed.reverse();
    let other = index(b.path(), &reversed, 7);

    for k in [1, 2, 5, 12, 13, 14, 20] {
        let (x, y) = (ids(&one, "glacier", k), ids(&other, "glacier", k));
        assert_eq!(x, y, "k = {k}");
        let mut want = vec!["top".to_string()];
        want.extend((0..ties).map(|i| format!("tie-{i:03}")));
        want.push("low".into());
        want.truncate(k);
        assert_eq!(x, want, "k = {k}");
    }
}
