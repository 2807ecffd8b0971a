//! The filter tantivy applies inside a search agrees with `ChunkFilter::matches`, the plain
//! statement of what a filter means, on random chunks and random filters.

use std::collections::BTreeSet;

use freshet_core::testing::{random_chunks, random_filter, Rng};
use freshet_tantivy::{ChunkIndexReader, ChunkIndexWriter, CommitPayload};

#[test]
fn search_filters_agree_with_matches() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(20261124);
    let chunks = random_chunks(&mut rng, 300);
    let mut w = ChunkIndexWriter::open_or_create(dir.path(), 50_000_000).unwrap();
    w.apply(&chunks, &[]).unwrap();
    w.commit(&CommitPayload::new(Default::default(), 1))
        .unwrap();
    let r = ChunkIndexReader::open(dir.path()).unwrap();
    let mut nonempty = 0;
    for i in 0..400 {
        let f = random_filter(&mut rng);
        let want: BTreeSet<&str> = chunks
            .iter()
            .filter(|c| f.matches(c))
            .map(|c| c.chunk_id.as_str())
            .collect();
        let hits = r
            .search_bm25("river", chunks.len(), &f)
            .unwrap_or_else(|e| panic!("filter {i} {f:?}: {e}"));
        let got: BTreeSet<&str> = hits.iter().map(|(_, c)| c.chunk_id.as_str()).collect();
        assert_eq!(got, want, "filter {i}: {f:?}");
        nonempty += usize::from(!want.is_empty());
    }
    assert!(nonempty > 150, "{nonempty} of 400 filters select something");
}
