use super::*;

#[test]
fn reload_follows_commits_and_an_index_recreated_in_place() {
    use freshet_core::chunk::Chunk;
    use freshet_tantivy::{ChunkFilter, ChunkIndexWriter, CommitPayload};

    let chunk = |id: &str, text: &str| Chunk {
        chunk_id: id.into(),
        ..freshet_core::testing::chunk(id, text)
    };
    let found = |ix: &Indexes| -> Vec<String> {
        let r = ix.snapshot().expect("a commit served");
        r.search_bm25("glacier", 10, &ChunkFilter::none())
            .unwrap()
            .into_iter()
            .map(|(_, c)| c.chunk_id)
            .collect()
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("index");
    let ix = Indexes::new(Metrics::new());
    let bm25 = Bm25Params::default();

    ix.reload_tick(&path, bm25);
    assert!(ix.status().tantivy.is_some(), "no index yet: not ready");

    let mut w = ChunkIndexWriter::open_or_create(&path, 50_000_000).unwrap();
    w.apply(&[chunk("old", "glacier ice")], &[]).unwrap();
    let offsets = [("docs".to_string(), [(1, 7)].into())].into();
    w.commit(&CommitPayload::new(offsets, 5)).unwrap();
    drop(w);
    assert_eq!(ix.served_offset("docs", 1), None);
    ix.reload_tick(&path, bm25);
    assert_eq!(ix.status().tantivy, None);
    assert_eq!(ix.freshness().epoch, 5);
    assert_eq!(ix.served_offset("docs", 1), Some(7));
    assert_eq!(ix.served_offset("docs", 0), None);
    assert_eq!(found(&ix), ["old"]);

    // Re-created in place: while the directory is gone the node says so; once a new,
    // uncommitted index is there it serves that (empty), not the deleted one.
    std::fs::remove_dir_all(&path).unwrap();
    ix.reload_tick(&path, bm25);
    assert!(ix.status().tantivy.is_some(), "index directory gone");
    let mut w = ChunkIndexWriter::open_or_create(&path, 50_000_000).unwrap();
    ix.reload_tick(&path, bm25);
    assert_eq!(ix.status().tantivy, None);
    assert_eq!(ix.freshness(), Freshness::default());
    assert_eq!(
        ix.served_offset("docs", 1),
        None,
        "the deleted index's offsets"
    );
    assert!(found(&ix).is_empty(), "served the deleted index");

    w.apply(&[chunk("new", "glacier melt")], &[]).unwrap();
    w.commit(&CommitPayload::new(Default::default(), 1))
        .unwrap();
    ix.reload_tick(&path, bm25);
    assert_eq!(ix.freshness().epoch, 1);
    assert_eq!(found(&ix), ["new"]);
}
