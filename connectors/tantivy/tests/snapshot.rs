//! Snapshots: one pinned commit per series of reads, with that commit's payload.

use std::collections::BTreeMap;

use freshet_core::chunk::{Chunk, ChunkKind};
use freshet_tantivy::{ChunkFilter, ChunkIndexReader, ChunkIndexWriter, CommitPayload};

const HEAP: usize = 50_000_000;

fn chunk(doc: &str, version: &str, index: u32, acl: &[&str]) -> Chunk {
    Chunk {
        chunk_id: format!("{doc}-{version}-{index}"),
        index,
        acl: acl.iter().map(|a| a.to_string()).collect(),
        ..freshet_core::testing::chunk(doc, &format!("glacier melt {version} part {index}"))
    }
}

fn payload(offset: i64, epoch: u64) -> CommitPayload {
    CommitPayload::new(
        BTreeMap::from([("docs".to_owned(), BTreeMap::from([(0, offset)]))]),
        epoch,
    )
}

fn ids(chunks: &[Chunk]) -> Vec<String> {
    let mut v: Vec<String> = chunks.iter().map(|c| c.chunk_id.clone()).collect();
    v.sort();
    v
}

#[test]
fn a_snapshot_keeps_reading_its_commit_after_a_new_one_is_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = ChunkIndexWriter::open_or_create(dir.path(), HEAP).unwrap();
    let v1: Vec<Chunk> = (0..3).map(|i| chunk("d", "v1", i, &[])).collect();
    w.apply(&v1, &[]).unwrap();
    w.commit(&payload(5, 1)).unwrap();

    let r = ChunkIndexReader::open_manual(dir.path()).unwrap();
    let s1 = r.reload().unwrap();
    assert_eq!(s1.payload().map(|p| p.epoch), Some(1));

    // The next version of "d": restricted, other chunks.
    let v2: Vec<Chunk> = (0..3).map(|i| chunk("d", "v2", i, &["group:hr"])).collect();
    w.apply(&v2, &ids(&v1)).unwrap();
    w.commit(&payload(9, 2)).unwrap();

    // Not reloaded yet: snapshots are of commit 1, whose payload they know, although commit 2
    // is on disk.
    let before = r.snapshot().unwrap();
    assert_eq!(before.generation(), s1.generation());
    assert_eq!(before.payload().map(|p| p.offsets["docs"][&0]), Some(5));
    assert_eq!(r.last_payload().unwrap().map(|p| p.epoch), Some(2));

    let s2 = r.reload().unwrap();
    assert_ne!(s2.generation(), s1.generation());
    assert_eq!(s2.payload().map(|p| p.epoch), Some(2));
    assert_eq!(r.snapshot().unwrap().payload().map(|p| p.epoch), Some(2));

    // Every read of the old snapshot still sees commit 1.
    let everyone = ChunkFilter::none().principals(Vec::<String>::new());
    let wanted: Vec<String> = ids(&v1).into_iter().chain(ids(&v2)).collect();
    assert_eq!(ids(&s1.get_many(&wanted).unwrap()), ids(&v1));
    assert_eq!(
        ids(&s1.window("d", ChunkKind::Leaf, 0, 9).unwrap()),
        ids(&v1)
    );
    assert_eq!(ids(&s1.chunks_of_doc("d").unwrap()), ids(&v1));
    let found = s1.search_bm25("glacier", 10, &everyone).unwrap();
    assert_eq!(found.len(), 3);
    assert_eq!(s1.count_matching(&everyone).unwrap(), 3);
    assert_eq!(s1.existing_matching(&wanted, &everyone).unwrap().len(), 3);
    // The new one sees commit 2 only, and the caller without the principal nothing of it.
    assert_eq!(ids(&s2.get_many(&wanted).unwrap()), ids(&v2));
    assert!(s2.search_bm25("glacier", 10, &everyone).unwrap().is_empty());
    assert!(s2.existing_matching(&wanted, &everyone).unwrap().is_empty());
    let hr = ChunkFilter::none().principals(["group:hr"]);
    assert_eq!(s2.existing_matching(&wanted, &hr).unwrap().len(), 3);
    assert_eq!(
        s2.existing_matching(&wanted, &ChunkFilter::none())
            .unwrap()
            .len(),
        3
    );
}

#[test]
fn a_self_reloading_reader_knows_the_payload_of_the_newest_commit() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = ChunkIndexWriter::open_or_create(dir.path(), HEAP).unwrap();
    let r = ChunkIndexReader::open(dir.path()).unwrap();
    assert_eq!(r.snapshot().unwrap().payload(), None, "no commit yet");
    w.apply(&[chunk("d", "v1", 0, &[])], &[]).unwrap();
    w.commit(&payload(3, 7)).unwrap();
    let s = r.reload().unwrap();
    assert_eq!(s.payload().map(|p| p.epoch), Some(7));
    assert_eq!(r.snapshot().unwrap().payload().map(|p| p.epoch), Some(7));
}

#[test]
fn a_window_reads_only_the_neighbours_of_a_long_document() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = ChunkIndexWriter::open_or_create(dir.path(), HEAP).unwrap();
    let mut chunks: Vec<Chunk> = (0..2000).map(|i| chunk("long", "v1", i, &[])).collect();
    // a parent with an index inside the window, and another document's chunk
    chunks.push(Chunk {
        kind: ChunkKind::Parent,
        ..chunk("long", "parent", 1000, &[])
    });
    chunks.push(chunk("other", "v1", 1000, &[]));
    w.apply(&chunks, &[]).unwrap();
    w.commit(&payload(1, 1)).unwrap();
    let r = ChunkIndexReader::open_manual(dir.path()).unwrap();
    let s = r.reload().unwrap();

    let before = s.stored_reads();
    let got = s.window("long", ChunkKind::Leaf, 999, 1001).unwrap();
    assert_eq!(s.stored_reads() - before, 3, "only the window is read");
    let idx: Vec<u32> = got.iter().map(|c| c.index).collect();
    assert_eq!(idx, [999, 1000, 1001]);
    assert!(got
        .iter()
        .all(|c| c.doc_id == "long" && c.kind == ChunkKind::Leaf));
    let parents = s.window("long", ChunkKind::Parent, 0, u32::MAX).unwrap();
    assert_eq!(ids(&parents), ["long-parent-1000"]);
    assert_eq!(s.window("long", ChunkKind::Leaf, 0, 0).unwrap().len(), 1);
    assert!(s
        .window("long", ChunkKind::Leaf, 5000, 6000)
        .unwrap()
        .is_empty());
    assert!(s.window("none", ChunkKind::Leaf, 0, 10).unwrap().is_empty());
}
