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

/// Commits `epoch` (one chunk) to the index at `path`.
fn commit(path: &std::path::Path, epoch: u64) {
    use freshet_tantivy::{ChunkIndexWriter, CommitPayload};
    let mut w = ChunkIndexWriter::open_or_create(path, 50_000_000).unwrap();
    let id = format!("c{epoch}");
    w.apply(&[freshet_core::testing::chunk(&id, "glacier ice")], &[])
        .unwrap();
    w.commit(&CommitPayload::new(Default::default(), epoch))
        .unwrap();
}

/// How long until `ix` serves `epoch` (`None`: not within `limit`).
fn served_within(ix: &Indexes, epoch: u64, limit: Duration) -> Option<Duration> {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if ix.freshness().epoch == epoch {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    None
}

fn reloads(ix: &Indexes, trigger: &str) -> u64 {
    ix.metrics
        .index_reloads
        .get_or_create(&TriggerLabels {
            trigger: trigger.into(),
        })
        .get()
}

#[test]
fn a_commit_is_served_on_its_file_notification_without_waiting_for_the_poll() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("index");
    commit(&path, 1);
    let ix = Indexes::new(Metrics::new());
    // A poll interval far longer than the test may take: only a notification can wake it.
    let poll = Duration::from_secs(600);
    ix.spawn_tantivy_reloader(path.clone(), poll, Bm25Params::default(), true);
    assert!(served_within(&ix, 1, Duration::from_secs(10)).is_some());
    for epoch in 2..=4 {
        commit(&path, epoch);
        let took = served_within(&ix, epoch, Duration::from_secs(10));
        assert!(took.is_some(), "commit {epoch} not served without a poll");
    }
    assert!(reloads(&ix, "notify") >= 3, "{}", reloads(&ix, "notify"));
    ix.stop();
}

#[test]
fn without_notifications_the_poll_serves_every_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("index");
    commit(&path, 1);
    let ix = Indexes::new(Metrics::new());
    let poll = Duration::from_millis(30);
    ix.spawn_tantivy_reloader(path.clone(), poll, Bm25Params::default(), false);
    assert!(served_within(&ix, 1, Duration::from_secs(10)).is_some());
    for epoch in 2..=4 {
        commit(&path, epoch);
        let took = served_within(&ix, epoch, Duration::from_secs(10));
        assert!(took.is_some(), "commit {epoch} not served by the poll");
    }
    assert_eq!(reloads(&ix, "notify"), 0);
    assert!(reloads(&ix, "poll") >= 3);
    ix.stop();
}

/// A watch follows the directory it was set on: an index re-created in place is watched anew
/// (within a poll interval) and its commits are then served on notification.
#[test]
fn an_index_recreated_in_place_is_watched_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("index");
    commit(&path, 1);
    let mut watch = crate::reload::CommitWatch::new(&path, true);
    let short = Duration::from_millis(50);
    // The first wait sets the watch up and looks once at once.
    assert_eq!(watch.wait(short), crate::reload::Wake::Notified);
    assert!(watch.watching());
    assert_eq!(watch.wait(short), crate::reload::Wake::Polled);
    std::fs::remove_dir_all(&path).unwrap();
    commit(&path, 1);
    // Woken by the removal or by the poll; then the new directory is watched.
    let _ = watch.wait(short);
    let _ = watch.wait(short);
    assert!(watch.watching());
    while watch.wait(short) == crate::reload::Wake::Notified {}
    commit(&path, 2);
    assert_eq!(
        watch.wait(Duration::from_secs(10)),
        crate::reload::Wake::Notified
    );
}
