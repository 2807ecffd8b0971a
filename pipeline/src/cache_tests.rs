//! The live set, compaction at start by size, and the command's refusals.

use freshet_operators::chunk::ChunkKind;
use freshet_operators::testing::chunk;

use super::*;

fn leaf(doc: &str, text: &str) -> Chunk {
    chunk(doc, text)
}

fn parent(doc: &str, text: &str) -> Chunk {
    Chunk {
        kind: ChunkKind::Parent,
        chunk_id: format!("{doc}-parent"),
        ..chunk(doc, text)
    }
}

/// A cache holding the vectors of `texts` under model `m`.
fn cache_of(dir: &std::path::Path, texts: &[&str]) -> DiskCache {
    let mut c = DiskCache::open(dir.join("cache.log")).unwrap();
    let entries: Vec<([u8; 32], Vec<f32>)> = texts
        .iter()
        .map(|t| (cache_key("m", t), vec![1.0; 256]))
        .collect();
    use freshet_operators::embed::VectorCache;
    c.put_many(&entries).unwrap();
    c
}

#[test]
fn the_live_set_is_the_embedded_input_of_every_leaf_under_the_cache_id() {
    let chunks = [leaf("a", "one"), leaf("b", "two"), parent("a", "whole")];
    let live = live_keys("m", &chunks);
    assert_eq!(live.len(), 2);
    assert!(live.contains(&cache_key("m", &embed_input(&chunks[0]))));
    assert!(!live.contains(&cache_key("other-model", &embed_input(&chunks[0]))));
    assert!(!live.contains(&cache_key("m", &embed_input(&chunks[2]))));
}

#[test]
fn at_start_the_cache_is_compacted_only_past_its_size_and_never_below_its_live_entries() {
    let dir = tempfile::tempdir().unwrap();
    let indexed = [leaf("a", "kept text"), leaf("b", "other kept text")];
    let live_texts: Vec<String> = indexed.iter().map(embed_input).collect();
    let mut texts: Vec<&str> = live_texts.iter().map(String::as_str).collect();
    texts.extend(["dead one", "dead two", "dead three"]);
    let mut c = cache_of(dir.path(), &texts);
    let metrics = Metrics::new();
    let size = c.file_len();

    // Off (0), and within the limit: nothing happens, the size is reported.
    for max in [0, size] {
        assert!(compact_at_start(&mut c, max, "m", &indexed, &metrics)
            .unwrap()
            .is_none());
    }
    assert_eq!(metrics.embedding_cache_bytes.get(), size as i64);
    assert_eq!(metrics.embedding_cache_entries.get(), 5);
    // An index without chunks (a new one, about to be filled): left alone.
    assert!(compact_at_start(&mut c, 1, "m", &[], &metrics)
        .unwrap()
        .is_none());
    assert_eq!(c.len(), 5);

    // Over: the dead entries go; still over a tiny limit, the live ones stay.
    let done = compact_at_start(&mut c, 1, "m", &indexed, &metrics)
        .unwrap()
        .expect("compacted");
    assert_eq!((done.entries_before, done.entries_after), (5, 2));
    assert_eq!(c.len(), 2);
    let keys: Vec<[u8; 32]> = live_texts.iter().map(|t| cache_key("m", t)).collect();
    assert!(c.get(&keys).unwrap().iter().all(Option::is_some));
    assert_eq!(metrics.embedding_cache_compactions.get(), 1);
    assert_eq!(metrics.embedding_cache_dropped.get(), 3);
    assert_eq!(metrics.embedding_cache_entries.get(), 2);
    assert_eq!(metrics.embedding_cache_bytes.get(), c.file_len() as i64);
}

#[test]
fn the_command_refuses_a_cache_a_pipeline_holds_and_a_missing_or_empty_index() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.pipeline.embedding_cache_path = dir.path().join("cache.log");
    config.tantivy.path = dir.path().join("index");

    let e = compact_offline(&config, false).unwrap_err().to_string();
    assert!(e.contains("no embedding cache"), "{e}");

    let held = cache_of(dir.path(), &["a text"]);
    let e = compact_offline(&config, false).unwrap_err().to_string();
    assert!(e.contains("held by a running pipeline"), "{e}");
    drop(held);

    let e = format!("{:#}", compact_offline(&config, false).unwrap_err());
    assert!(e.contains("[tantivy] path"), "{e}");

    let mut w = freshet_tantivy::ChunkIndexWriter::open_or_create(&config.tantivy.path, 50_000_000)
        .unwrap();
    w.commit(&freshet_tantivy::CommitPayload::new(Default::default(), 1))
        .unwrap();
    let e = compact_offline(&config, false).unwrap_err().to_string();
    assert!(e.contains("holds no chunk"), "{e}");
    assert_eq!(
        DiskCache::open(dir.path().join("cache.log")).unwrap().len(),
        1
    );
}
