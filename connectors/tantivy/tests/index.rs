//! Real tantivy indexes in temporary directories.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use freshet_core::chunk::{Chunk, ChunkKind};
use freshet_tantivy::{
    analyze, analyze_zh, contains_cjk, ChunkFilter, ChunkIndexReader, ChunkIndexWriter,
    ChunkSchema, CommitPayload, Error, MAX_WRITER_THREADS, MIN_HEAP_PER_THREAD, SCHEMA_VERSION,
};

const HEAP: usize = 50_000_000;

fn chunk(id: &str, doc: &str, index: u32, text: &str) -> Chunk {
    Chunk {
        chunk_id: id.to_owned(),
        index,
        char_start: index * 100,
        char_end: index * 100 + text.chars().count() as u32,
        source: "test://source".to_owned(),
        ..freshet_core::testing::chunk(doc, text)
    }
}

fn payload(offset: i64, epoch: u64) -> CommitPayload {
    let mut offsets = BTreeMap::new();
    offsets.insert(
        "docs".to_owned(),
        BTreeMap::from([(0, offset), (1, offset + 10)]),
    );
    CommitPayload::new(offsets, epoch)
}

fn ids(hits: &[(f32, Chunk)]) -> Vec<&str> {
    hits.iter().map(|(_, c)| c.chunk_id.as_str()).collect()
}

#[test]
fn round_trip_is_exact_for_every_field() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = ChunkIndexWriter::open_or_create(dir.path(), HEAP).unwrap();
    let rich = Chunk {
        chunk_id: "0123456789abcdef0123456789abcdef".into(),
        doc_id: "doc/ü/𝄞 \"quoted\" \\ back".into(),
        kind: ChunkKind::Leaf,
        parent_id: Some("fedcba9876543210fedcba9876543210".into()),
        index: u32::MAX,
        char_start: 7,
        char_end: u32::MAX,
        section: vec![
            "Intro".into(),
            "Größe > \"x\"".into(),
            "".into(),
            "日本語".into(),
        ],
        text: "  Leading spaces, tabs\tand\nnewlines; emoji 🎉, CJK 東京都, RTL שלום  ".into(),
        token_count: 42,
        title: "Ünïcödé Title — with dash".into(),
        source: "s3://bucket/key with spaces?x=1".into(),
        metadata_json: r#"{"lang":"en","n":1.5,"nested":{"a":[1,2]},"tags":["x","y"]}"#.into(),
        acl: vec![
            "group:b".into(),
            "group:a".into(),
            "user:ö".into(),
            "group:b".into(),
        ],
        // the version stamp is not stored: a chunk reads back without it
        doc_hash: String::new(),
    };
    let bare = Chunk {
        chunk_id: "parent-chunk".into(),
        doc_id: "".into(),
        kind: ChunkKind::Parent,
        parent_id: None,
        index: 0,
        char_start: 0,
        char_end: 0,
        section: vec![],
        text: "".into(),
        token_count: 0,
        title: "".into(),
        source: "".into(),
        metadata_json: "not json at all".into(),
        acl: vec![],
        doc_hash: "".into(),
    };
    let stamped = Chunk {
        doc_hash: "ab".repeat(32),
        ..rich.clone()
    };
    w.apply(&[stamped, bare.clone()], &[]).unwrap();
    w.commit(&payload(1, 1)).unwrap();
    assert_eq!(w.get(&rich.chunk_id).unwrap().as_ref(), Some(&rich));
    assert_eq!(w.get(&bare.chunk_id).unwrap().as_ref(), Some(&bare));
    drop(w);

    let w = ChunkIndexWriter::open_or_create(dir.path(), HEAP).unwrap();
    let mut all = w.load_all().unwrap();
    all.sort();
    let mut expected = vec![rich.clone(), bare.clone()];
    expected.sort();
    assert_eq!(all, expected);

    let r = ChunkIndexReader::open(dir.path()).unwrap();
    assert_eq!(r.get(&rich.chunk_id).unwrap(), Some(rich.clone()));
    assert_eq!(r.chunks_of_doc(&rich.doc_id).unwrap(), vec![rich]);
    assert_eq!(r.chunks_of_doc("").unwrap(), vec![bare]);
}

#[test]
fn apply_commit_reopen_and_payload() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut w = ChunkIndexWriter::open_or_create(dir.path(), HEAP).unwrap();
        assert_eq!(w.last_payload().unwrap(), None);
        assert_eq!(w.count(), 0);
        let cs: Vec<Chunk> = (0..10)
            .map(|i| chunk(&format!("c{i}"), &format!("d{}", i % 3), i, "some text"))
            .collect();
        w.apply(&cs, &[]).unwrap();
        // Not visible before commit.
        assert_eq!(w.count(), 0);
        w.commit(&payload(100, 7)).unwrap();
        assert_eq!(w.count(), 10);
        // Uncommitted changes are lost on drop.
        w.apply(&[chunk("lost", "d", 0, "x")], &["c0".to_owned()])
            .unwrap();
    }
    let w = ChunkIndexWriter::open_or_create(dir.path(), HEAP).unwrap();
    assert_eq!(w.count(), 10);
    assert!(w.get("lost").unwrap().is_none());
    let p = w.last_payload().unwrap().unwrap();
    assert_eq!(p.schema_version, SCHEMA_VERSION);
    assert_eq!(p.epoch, 7);
    assert_eq!(p.offsets["docs"][&0], 100);
    assert_eq!(p.offsets["docs"][&1], 110);
    assert!(p.opstamp.is_some(), "the writer stamps its opstamp");
    assert_eq!(
        p,
        CommitPayload {
            opstamp: p.opstamp,
            ..payload_with_time(100, 7, p.committed_at_ms)
        }
    );
    let r = ChunkIndexReader::open(dir.path()).unwrap();
    assert_eq!(r.last_payload().unwrap(), Some(p));
    let d1 = r.chunks_of_doc("d1").unwrap();
    assert_eq!(
        d1.iter().map(|c| c.index).collect::<Vec<_>>(),
        vec![1, 4, 7]
    );
}

/// Segments staged before a commit become visible and durable with it, in the order the changes
/// were applied; staged changes are dropped by a rollback and by a writer closed without a
/// commit.
#[test]
fn staged_segments_wait_for_the_commit() {
    let dir = tempfile::tempdir().unwrap();
    let committed = || ChunkIndexReader::open(dir.path()).unwrap();
    let mut w = ChunkIndexWriter::open_or_create(dir.path(), HEAP).unwrap();
    w.apply(
        &[chunk("a", "d1", 0, "alpha"), chunk("b", "d1", 1, "beta")],
        &[],
    )
    .unwrap();
    w.commit(&payload(1, 1)).unwrap();

    w.apply(&[chunk("c", "d2", 0, "gamma")], &["a".to_owned()])
        .unwrap();
    w.stage().unwrap();
    let r = committed();
    assert!(
        r.get("c").unwrap().is_none(),
        "a staged chunk is not committed"
    );
    assert!(
        r.get("a").unwrap().is_some(),
        "a staged delete is not committed"
    );
    // Changes after a stage apply on top of it: a staged chunk written again and another
    // deleted, then one more stage and a change left to the commit.
    let c2 = chunk("c", "d2", 0, "gamma again");
    w.apply(std::slice::from_ref(&c2), &["b".to_owned()])
        .unwrap();
    w.stage().unwrap();
    w.apply(&[chunk("d", "d3", 0, "delta")], &[]).unwrap();
    w.commit(&payload(2, 2)).unwrap();
    let r = committed();
    assert_eq!(r.last_payload().unwrap().unwrap().epoch, 2);
    assert!(r.get("a").unwrap().is_none());
    assert!(r.get("b").unwrap().is_none());
    assert_eq!(r.get("c").unwrap(), Some(c2));
    assert!(r.get("d").unwrap().is_some());
    assert_eq!(w.count(), 2);
    assert_eq!(w.live_chunk_counts(&["c"]).unwrap()["c"], 1);

    // A rollback drops what was staged.
    w.apply(&[chunk("e", "d4", 0, "epsilon")], &["c".to_owned()])
        .unwrap();
    w.stage().unwrap();
    w.rollback().unwrap();
    w.commit(&payload(3, 3)).unwrap();
    assert!(w.get("e").unwrap().is_none());
    assert!(w.get("c").unwrap().is_some());

    // So does a writer closed without a commit.
    w.apply(&[chunk("f", "d5", 0, "zeta")], &[]).unwrap();
    w.stage().unwrap();
    w.close().unwrap();
    let w = ChunkIndexWriter::open_or_create(dir.path(), HEAP).unwrap();
    assert!(w.get("f").unwrap().is_none());
    assert_eq!(w.count(), 2);
    assert_eq!(w.last_payload().unwrap().unwrap().epoch, 3);
}

fn payload_with_time(offset: i64, epoch: u64, at: u64) -> CommitPayload {
    let mut p = payload(offset, epoch);
    p.committed_at_ms = at;
    p
}

#[test]
fn empty_commit_updates_payload() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = ChunkIndexWriter::open_or_create(dir.path(), HEAP).unwrap();
    w.commit(&payload(1, 1)).unwrap();
    w.commit(&payload(2, 2)).unwrap();
    assert_eq!(w.last_payload().unwrap().unwrap().epoch, 2);
    let mut bad = payload(3, 3);
    bad.schema_version = SCHEMA_VERSION + 1;
    assert!(matches!(
        w.commit(&bad),
        Err(Error::SchemaVersionMismatch { .. })
    ));
}

#[test]
fn delete_and_upsert_semantics() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = ChunkIndexWriter::open_or_create(dir.path(), HEAP).unwrap();
    w.apply(
        &[chunk("a", "d", 0, "alpha"), chunk("b", "d", 1, "beta")],
        &[],
    )
    .unwrap();
    w.commit(&payload(1, 1)).unwrap();

    // Delete one.
    w.apply(&[], &["a".to_owned(), "never-existed".to_owned()])
        .unwrap();
    w.commit(&payload(2, 2)).unwrap();
    assert_eq!(w.count(), 1);
    assert!(w.get("a").unwrap().is_none());

    // Upsert replaces: no duplicate.
    let mut b2 = chunk("b", "d", 1, "beta version two");
    b2.title = "changed".into();
    w.apply(&[b2.clone()], &[]).unwrap();
    w.commit(&payload(3, 3)).unwrap();
    assert_eq!(w.count(), 1);
    assert_eq!(w.get("b").unwrap(), Some(b2.clone()));

    // An id both deleted and upserted ends up present.
    let b3 = chunk("b", "d", 1, "beta three");
    w.apply(std::slice::from_ref(&b3), &["b".to_owned()])
        .unwrap();
    w.commit(&payload(4, 4)).unwrap();
    assert_eq!(w.count(), 1);
    assert_eq!(w.get("b").unwrap(), Some(b3));

    // The same id twice in one batch: last wins, stored once.
    let first = chunk("c", "d", 2, "first");
    let last = chunk("c", "d", 2, "last");
    w.apply(&[first, last.clone()], &[]).unwrap();
    w.commit(&payload(5, 5)).unwrap();
    assert_eq!(w.count(), 2);
    assert_eq!(w.get("c").unwrap(), Some(last));
}

#[test]
fn get_many_across_segments_skips_deleted_and_replaced_chunks() {
    let dir = tempfile::tempdir().unwrap();
    // Two indexing threads: commits may write two segments each.
    let mut w = ChunkIndexWriter::open_or_create_with_threads(dir.path(), HEAP, 2).unwrap();
    let first: Vec<Chunk> = (0..20)
        .map(|i| chunk(&format!("c{i}"), "d1", i, &format!("first {i}")))
        .collect();
    w.apply(&first, &[]).unwrap();
    w.commit(&payload(1, 1)).unwrap();
    let c3 = chunk("c3", "d1", 3, "replaced three");
    w.apply(
        &[c3.clone(), chunk("n1", "d2", 0, "new one")],
        &["c5".to_owned()],
    )
    .unwrap();
    w.commit(&payload(2, 2)).unwrap();
    let r = ChunkIndexReader::open(dir.path()).unwrap();

    let want: Vec<String> = ["c3", "c5", "n1", "c19", "nope", "c3", ""]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut got = r.get_many(&want).unwrap();
    got.sort_by(|a, b| a.chunk_id.cmp(&b.chunk_id));
    let got_ids: Vec<&str> = got.iter().map(|c| c.chunk_id.as_str()).collect();
    // c5 deleted, "nope" and "" never existed; c3 (asked for twice) once, in its new version.
    assert_eq!(got_ids, ["c19", "c3", "n1"]);
    assert_eq!(got[0], first[19]);
    assert_eq!(got[1], c3);
    assert!(r.get_many(&[]).unwrap().is_empty());
    // The existence check agrees without loading documents.
    assert_eq!(r.existing(&want).unwrap(), ["c19", "c3", "n1"]);
    assert!(r.existing(&[]).unwrap().is_empty());
}

#[test]
fn reader_sees_writer_commits() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = ChunkIndexWriter::open_or_create(dir.path(), HEAP).unwrap();
    w.commit(&payload(0, 0)).unwrap();
    let r = ChunkIndexReader::open(dir.path()).unwrap();
    assert_eq!(r.count(), 0);

    w.apply(&[chunk("a", "d", 0, "the quick brown fox")], &[])
        .unwrap();
    assert_eq!(r.count(), 0);
    w.commit(&payload(1, 1)).unwrap();
    r.reload().unwrap();
    assert_eq!(r.count(), 1);
    assert_eq!(
        ids(&r.search_bm25("fox", 10, &ChunkFilter::none()).unwrap()),
        ["a"]
    );

    // Without an explicit reload the reader catches up on its own (OnCommitWithDelay).
    w.apply(&[chunk("b", "d", 1, "lazy dog")], &[]).unwrap();
    w.commit(&payload(2, 2)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while r.count() != 2 {
        assert!(
            Instant::now() < deadline,
            "reader did not pick up the commit"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn manual_reader_follows_an_index_recreated_at_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("index");
    let mut w = ChunkIndexWriter::open_or_create(&path, HEAP).unwrap();
    w.apply(&[chunk("old", "d", 0, "glacier ice")], &[])
        .unwrap();
    w.commit(&payload(10, 5)).unwrap();
    drop(w);
    let r = ChunkIndexReader::open_manual(&path).unwrap();
    let glacier = |r: &ChunkIndexReader| {
        ids(&r.search_bm25("glacier", 10, &ChunkFilter::none()).unwrap())
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(glacier(&r), ["old"]);

    // The directory is deleted and a new index is created in its place (a re-index).
    std::fs::remove_dir_all(&path).unwrap();
    assert!(r.last_payload().is_err(), "no index at the path any more");
    let mut w = ChunkIndexWriter::open_or_create(&path, HEAP).unwrap();
    assert_eq!(
        r.last_payload().unwrap(),
        None,
        "reads the new, empty index"
    );
    r.reload().unwrap();
    assert_eq!(r.count(), 0);
    assert!(glacier(&r).is_empty(), "the deleted index is not served");

    w.apply(&[chunk("new", "d", 0, "glacier melt")], &[])
        .unwrap();
    w.commit(&payload(1, 1)).unwrap();
    assert_eq!(r.last_payload().unwrap().unwrap().epoch, 1);
    r.reload().unwrap();
    assert_eq!(glacier(&r), ["new"]);
}

#[test]
fn opening_errors() {
    let dir = tempfile::tempdir().unwrap();
    // Reader never creates.
    assert!(matches!(
        ChunkIndexReader::open(dir.path().join("missing")),
        Err(Error::NotFound(_))
    ));
    assert!(matches!(
        ChunkIndexReader::open(dir.path()),
        Err(Error::NotFound(_))
    ));
    assert!(matches!(
        ChunkIndexWriter::open_or_create(dir.path(), 1_000_000),
        Err(Error::InvalidArgument(_))
    ));
    // Threads: 1 to MAX_WRITER_THREADS, each with tantivy's minimum heap.
    for (heap, threads) in [
        (HEAP, 0),
        (HEAP * 10, MAX_WRITER_THREADS + 1),
        (MIN_HEAP_PER_THREAD * 2 - 1, 2),
    ] {
        let r = ChunkIndexWriter::open_or_create_with_threads(dir.path(), heap, threads);
        assert!(
            matches!(r, Err(Error::InvalidArgument(_))),
            "heap {heap}, {threads} threads: {r:?}"
        );
    }

    let w = ChunkIndexWriter::open_or_create(dir.path(), HEAP).unwrap();
    // One writer per index.
    let second = ChunkIndexWriter::open_or_create(dir.path(), HEAP);
    assert!(second.is_err(), "second writer must fail on the lock");
    w.close().unwrap();

    // Another schema version on disk.
    std::fs::write(
        dir.path().join("freshet_schema.json"),
        format!(r#"{{"schema_version":{}}}"#, SCHEMA_VERSION + 1),
    )
    .unwrap();
    match ChunkIndexWriter::open_or_create(dir.path(), HEAP) {
        Err(Error::SchemaVersionMismatch {
            found, expected, ..
        }) => {
            assert_eq!((found, expected), (SCHEMA_VERSION + 1, SCHEMA_VERSION));
        }
        other => panic!("expected a schema version mismatch, got {other:?}"),
    }
    let msg = ChunkIndexReader::open(dir.path()).unwrap_err().to_string();
    assert!(msg.contains("schema version"), "{msg}");

    // An index of the layout before the Chinese fields (version 1) is refused too.
    std::fs::write(
        dir.path().join("freshet_schema.json"),
        r#"{"schema_version":1,"analyzer":"freshet_en"}"#,
    )
    .unwrap();
    assert!(matches!(
        ChunkIndexReader::open(dir.path()),
        Err(Error::SchemaVersionMismatch { found: 1, .. })
    ));

    // No version file at all.
    std::fs::remove_file(dir.path().join("freshet_schema.json")).unwrap();
    assert!(matches!(
        ChunkIndexReader::open(dir.path()),
        Err(Error::NotAChunkIndex { .. })
    ));
}

fn acl_chunk(id: &str, acl: &[&str], text: &str) -> Chunk {
    let mut c = chunk(id, id, 0, text);
    c.acl = acl.iter().map(|s| s.to_string()).collect();
    c
}

#[test]
fn acl_filter() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = ChunkIndexWriter::open_or_create(dir.path(), HEAP).unwrap();
    w.apply(
        &[
            acl_chunk("public", &[], "budget report"),
            acl_chunk("finance", &["group:finance"], "budget report"),
            acl_chunk("hr", &["group:hr", "user:alice"], "budget report"),
            // A principal spelled like the public marker is not public.
            acl_chunk("tricky", &["__public__"], "budget report"),
        ],
        &[],
    )
    .unwrap();
    w.commit(&payload(1, 1)).unwrap();
    let r = ChunkIndexReader::open(dir.path()).unwrap();
    let visible = |principals: Option<&[&str]>| {
        let mut f = ChunkFilter::none();
        if let Some(p) = principals {
            f = f.principals(p.iter().copied());
        }
        let mut v: Vec<String> = r
            .search_bm25("budget", 10, &f)
            .unwrap()
            .into_iter()
            .map(|(_, c)| c.chunk_id)
            .collect();
        v.sort();
        v
    };
    assert_eq!(visible(None), ["finance", "hr", "public", "tricky"]);
    assert_eq!(visible(Some(&[])), ["public"]);
    assert_eq!(visible(Some(&["group:finance"])), ["finance", "public"]);
    assert_eq!(
        visible(Some(&["user:alice", "group:nobody"])),
        ["hr", "public"]
    );
    assert_eq!(visible(Some(&["__public__"])), ["public", "tricky"]);
    // Counting applies the same filter.
    let count = |f: &ChunkFilter| r.count_matching(f).unwrap();
    assert_eq!(count(&ChunkFilter::none()), 4);
    assert_eq!(
        count(&ChunkFilter::none().principals(Vec::<String>::new())),
        1
    );
    assert_eq!(count(&ChunkFilter::none().principals(["group:finance"])), 2);
    assert_eq!(
        count(&ChunkFilter::none().principals(["user:alice", "group:finance"])),
        3
    );
    // Top-k is computed after the filter: k=1 still finds the visible one.
    let hits = r
        .search_bm25("budget", 1, &ChunkFilter::none().principals(["group:hr"]))
        .unwrap();
    assert_eq!(hits.len(), 1);
    assert!(["hr", "public"].contains(&hits[0].1.chunk_id.as_str()));
}

#[test]
fn metadata_doc_and_kind_filters() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = ChunkIndexWriter::open_or_create(dir.path(), HEAP).unwrap();
    let mut en = chunk("en", "d-en", 0, "shared words here");
    en.metadata_json =
        r#"{"lang":"en","year":2020,"draft":false,"tags":["a","b"],"dotted.key":"v","score":0.5}"#
            .into();
    let mut de = chunk("de", "d-de", 0, "shared words here");
    de.metadata_json = r#"{"lang":"de","year":2021,"draft":true,"tags":["b"]}"#.into();
    let mut parent = chunk("p", "d-en", 0, "shared words here");
    parent.kind = ChunkKind::Parent;
    parent.metadata_json = r#"{"lang":"EN"}"#.into();
    w.apply(&[en, de, parent], &[]).unwrap();
    w.commit(&payload(1, 1)).unwrap();
    let r = ChunkIndexReader::open(dir.path()).unwrap();
    let q = |f: ChunkFilter| {
        let mut v: Vec<String> = r
            .search_bm25("shared words", 10, &f)
            .unwrap()
            .into_iter()
            .map(|(_, c)| c.chunk_id)
            .collect();
        v.sort();
        v
    };
    let f = ChunkFilter::none;
    assert_eq!(q(f().metadata_eq("lang", r#""en""#)), ["en"]);
    assert_eq!(q(f().metadata_eq("lang", r#""EN""#)), ["p"]);
    assert_eq!(q(f().metadata_eq("year", "2020")), ["en"]);
    assert_eq!(q(f().metadata_eq("year", "2021.0")), ["de"]);
    assert!(
        q(f().metadata_eq("year", r#""2020""#)).is_empty(),
        "string != number"
    );
    assert_eq!(q(f().metadata_eq("draft", "true")), ["de"]);
    assert_eq!(q(f().metadata_eq("score", "0.5")), ["en"]);
    assert_eq!(q(f().metadata_eq("tags", r#""b""#)), ["de", "en"]);
    assert_eq!(
        q(f()
            .metadata_eq("tags", r#""b""#)
            .metadata_eq("lang", r#""de""#)),
        ["de"]
    );
    assert_eq!(q(f().metadata_eq("dotted.key", r#""v""#)), ["en"]);
    assert_eq!(
        q(f().metadata_in("lang", [r#""en""#, r#""de""#, r#""zz""#])),
        ["de", "en"]
    );
    assert_eq!(q(f().metadata_in("year", ["2021", "1999"])), ["de"]);
    assert!(q(f().metadata_in("lang", Vec::<String>::new())).is_empty());
    assert!(q(f().metadata_eq("missing", r#""en""#)).is_empty());
    assert!(matches!(
        r.search_bm25("shared", 10, &f().metadata_eq("lang", "en")),
        Err(Error::InvalidFilter(_))
    ));
    assert!(matches!(
        r.search_bm25("shared", 10, &f().metadata_eq("lang", "[1]")),
        Err(Error::InvalidFilter(_))
    ));

    assert_eq!(q(f().doc_ids(["d-en"])), ["en", "p"]);
    assert_eq!(q(f().doc_ids(["d-en", "d-de"])), ["de", "en", "p"]);
    assert!(q(f().doc_ids(Vec::<String>::new())).is_empty());
    assert_eq!(q(f().kinds([ChunkKind::Parent])), ["p"]);
    assert_eq!(q(f().kinds([ChunkKind::Leaf]).doc_ids(["d-en"])), ["en"]);
    assert!(q(f().kinds([])).is_empty());
}

#[test]
fn hostile_queries_never_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = ChunkIndexWriter::open_or_create(dir.path(), HEAP).unwrap();
    w.apply(
        &[
            chunk("t", "d", 0, "alpha thalassemia is a blood disorder"),
            chunk(
                "u",
                "d",
                1,
                "unbalanced parentheses appear here: a:b field syntax",
            ),
        ],
        &[],
    )
    .unwrap();
    w.commit(&payload(1, 1)).unwrap();
    let r = ChunkIndexReader::open(dir.path()).unwrap();
    let hostile = [
        "alpha (+)- thalassemia",
        "AND OR NOT",
        "\"unbalanced",
        "a:b",
        "title:foo AND -bar",
        "*",
        "?",
        "[1 TO 5]",
        "{}",
        "\\",
        "((((",
        "~2 ^3",
        "",
        "   ",
        "\0\u{1}\u{ffff}",
        "🎉🎉🎉",
        "東京都の天気",
        "\"",
        "*:*",
        "[1 TO 2]",
        "。，",
        "。",
        "（）【】《》、",
        "北京 AND (大学",
        "text_zh:北京",
        &"長".repeat(10_000),
        &"x".repeat(100_000),
        &"word ".repeat(5_000),
    ];
    for q in hostile {
        let res = r.search_bm25(q, 5, &ChunkFilter::none().principals(["x"]));
        assert!(
            res.is_ok(),
            "query {:?} failed: {:?}",
            &q[..q.len().min(40)],
            res
        );
    }
    assert_eq!(
        ids(&r
            .search_bm25("alpha (+)- thalassemia", 5, &ChunkFilter::none())
            .unwrap())[0],
        "t"
    );
    for no_terms in ["AND OR NOT", "。，", "\"", "*:*"] {
        assert!(
            r.search_bm25(no_terms, 5, &ChunkFilter::none())
                .unwrap()
                .is_empty(),
            "{no_terms:?}"
        );
    }
    assert_eq!(
        ids(&r
            .search_bm25("\"unbalanced", 5, &ChunkFilter::none())
            .unwrap()),
        ["u"]
    );
    assert_eq!(
        ids(&r.search_bm25("a:b", 5, &ChunkFilter::none()).unwrap()),
        ["u"]
    );
    assert!(r
        .search_bm25("alpha", 0, &ChunkFilter::none())
        .unwrap()
        .is_empty());
}

#[test]
fn stemming_stop_words_title_and_section() {
    assert_eq!(analyze("Running runs RUN ran"), ["run", "ran"]);
    assert_eq!(analyze("the and of"), Vec::<String>::new());

    let dir = tempfile::tempdir().unwrap();
    let mut w = ChunkIndexWriter::open_or_create(dir.path(), HEAP).unwrap();
    let mut in_title = chunk("title", "d1", 0, "nothing relevant in the body text at all");
    in_title.title = "Gardening".into();
    let in_body = chunk(
        "body",
        "d2",
        0,
        "gardening nothing relevant in the body at all",
    );
    let mut in_section = chunk("section", "d3", 0, "a body that never names its topic");
    in_section.section = vec!["Guides".into(), "Composting at home".into()];
    w.apply(
        &[
            chunk("s", "d", 0, "She runs every morning"),
            chunk("o", "d", 1, "Unrelated content about cooking"),
            in_title,
            in_body,
            in_section,
        ],
        &[],
    )
    .unwrap();
    w.commit(&payload(1, 1)).unwrap();
    let r = ChunkIndexReader::open(dir.path()).unwrap();
    assert_eq!(
        ids(&r.search_bm25("running", 10, &ChunkFilter::none()).unwrap()),
        ["s"]
    );
    assert_eq!(
        ids(&r.search_bm25("RUN", 10, &ChunkFilter::none()).unwrap()),
        ["s"]
    );
    let g = r
        .search_bm25("gardening", 10, &ChunkFilter::none())
        .unwrap();
    assert_eq!(ids(&g), ["title", "body"]);
    assert!(g[0].0 > g[1].0);
    // Title, section path and text are searched as one field.
    assert_eq!(
        ids(&r
            .search_bm25("composted guide", 10, &ChunkFilter::none())
            .unwrap()),
        ["section"]
    );
    assert_eq!(
        ids(&r.search_bm25("d2", 10, &ChunkFilter::none()).unwrap()),
        ["body"]
    );
}

#[test]
fn cjk_and_odd_text_do_not_crash() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = ChunkIndexWriter::open_or_create(dir.path(), HEAP).unwrap();
    let cjk = chunk(
        "cjk",
        "d",
        0,
        "東京都は日本の首都です。東京 タワー 서울은 한국의 수도입니다 北京",
    );
    let long = chunk("long", "d", 1, &"長".repeat(10_000));
    let mut weird = chunk("weird", "d", 2, "\0\u{1}\u{feff}\u{200b}𝄞");
    weird.title = "\u{202e}reversed".into();
    w.apply(&[cjk.clone(), long.clone(), weird.clone()], &[])
        .unwrap();
    w.commit(&payload(1, 1)).unwrap();
    let r = ChunkIndexReader::open(dir.path()).unwrap();
    assert_eq!(r.get("cjk").unwrap(), Some(cjk));
    assert_eq!(r.get("long").unwrap(), Some(long));
    assert_eq!(r.get("weird").unwrap(), Some(weird));
    // Whitespace-separated CJK runs are whole tokens.
    assert_eq!(
        ids(&r.search_bm25("北京", 10, &ChunkFilter::none()).unwrap()),
        ["cjk"]
    );
    r.search_bm25("東京都は日本の首都です", 10, &ChunkFilter::none())
        .unwrap();
}

#[test]
fn zh_analyzer_segments_words() {
    // jieba search mode: dictionary words plus the dictionary words inside longer ones.
    let terms = analyze_zh("我们在北京大学学习自然语言处理");
    for t in [
        "我们",
        "北京",
        "大学",
        "北京大学",
        "学习",
        "自然语言",
        "自然",
        "语言",
        "处理",
    ] {
        assert!(terms.iter().any(|x| x == t), "{t} missing from {terms:?}");
    }
    assert!(!terms.iter().any(|x| x == "我们在北京大学学习自然语言处理"));
    // Latin words are lowercased, punctuation and whitespace dropped.
    assert_eq!(analyze_zh("BERT 模型"), ["bert", "模型"]);
    assert_eq!(analyze_zh("BERT模型，训练。"), ["bert", "模型", "训练"]);
    assert!(analyze_zh("。，  ！？（）\t\n").is_empty());
    // Traditional and simplified characters are one term, and traditional text is segmented
    // into words as simplified text is.
    assert_eq!(
        analyze_zh("欲窮千里目，更上一層樓"),
        analyze_zh("欲穷千里目，更上一层楼")
    );
    assert!(analyze_zh("頭髮和發展").iter().any(|t| t == "头发"));
    assert!(analyze_zh("頭髮和發展").iter().any(|t| t == "发展"));
    assert!(analyze_zh("").is_empty());
    assert!(contains_cjk("BERT 模型"));
    assert!(contains_cjk("タワー"));
    assert!(!contains_cjk("plain English, naïve café — 한국어 。，"));

    // Only fields containing CJK get a Chinese copy: English-only chunks pay nothing.
    let s = ChunkSchema::new();
    let en = chunk("en", "d", 0, "English only");
    let d = s.to_document(&en);
    assert!(d.get_first(s.text_zh).is_none() && d.get_first(s.title_zh).is_none());
    let mut zh = chunk("zh", "d", 0, "中文正文");
    let d = s.to_document(&zh);
    assert!(d.get_first(s.text_zh).is_some() && d.get_first(s.title_zh).is_none());
    zh.title = "中文标题".into();
    assert!(s.to_document(&zh).get_first(s.title_zh).is_some());
}

#[test]
fn chinese_english_and_mixed_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = ChunkIndexWriter::open_or_create(dir.path(), HEAP).unwrap();
    let zh = chunk(
        "zh",
        "d-zh",
        0,
        "我们在北京大学学习自然语言处理。自然语言处理是人工智能的一个重要方向。",
    );
    let en = chunk("en", "d-en", 0, "She runs BERT every morning on a laptop");
    let mixed = chunk("mixed", "d-mixed", 0, "BERT 模型在文本分类任务上表现很好");
    let mut zh_title = chunk("zh_title", "d-t", 0, "An English body about translation");
    zh_title.title = "机器翻译综述".into();
    w.apply(
        &[zh.clone(), en.clone(), mixed.clone(), zh_title.clone()],
        &[],
    )
    .unwrap();
    w.commit(&payload(1, 1)).unwrap();
    let r = ChunkIndexReader::open(dir.path()).unwrap();
    let none = ChunkFilter::none();
    let search = |q: &str| r.search_bm25(q, 10, &none).unwrap();

    // Chinese query: the Chinese chunk first, with a positive score; never the English one.
    let hits = search("自然语言处理");
    assert_eq!(ids(&hits)[0], "zh");
    assert!(hits[0].0 > 0.0);
    assert!(!ids(&hits).contains(&"en"), "{:?}", ids(&hits));
    let hits = search("北京的大学");
    assert_eq!(ids(&hits), ["zh"]);
    assert!(hits[0].0 > 0.0);

    // A query sharing only one Chinese word with the index finds only the chunk holding it.
    assert_eq!(ids(&search("模型")), ["mixed"]);
    assert_eq!(ids(&search("训练模型")), ["mixed"]);
    assert_eq!(ids(&search("文本分类")), ["mixed"]);

    // English still goes through the stemming analyzer.
    assert_eq!(ids(&search("running")), ["en"]);
    assert_eq!(ids(&search("laptops")), ["en"]);

    // A mixed query works on both sides: the chunk matching both parts first.
    let hits = search("BERT 模型");
    assert_eq!(ids(&hits), ["mixed", "en"]);
    assert!(hits[1].0 > 0.0);

    // A Chinese word only in the title is found through title_zh.
    assert_eq!(ids(&search("机器翻译")), ["zh_title"]);
    // Traditional text is found by a simplified query and the other way round.
    assert_eq!(ids(&search("機器翻譯")), ["zh_title"]);
    assert_eq!(ids(&search("北京大學")), ["zh"]);

    // Filters still apply to Chinese queries.
    assert!(r
        .search_bm25("模型", 10, &ChunkFilter::none().doc_ids(["d-zh"]))
        .unwrap()
        .is_empty());

    // The _zh fields are not stored: chunks round-trip exactly.
    for c in [zh, en, mixed, zh_title] {
        assert_eq!(r.get(&c.chunk_id).unwrap(), Some(c));
    }

    // Hostile input against an index with Chinese fields filled.
    for q in [
        "alpha (+)- thalassemia",
        "\"",
        "\\",
        "。，",
        "，",
        "AND OR NOT",
        "*:*",
        "[1 TO 2]",
        "自然语言处理 AND (NOT",
        "text_zh:模型",
        "模型~2 ^3",
    ] {
        let res = r.search_bm25(q, 5, &none);
        assert!(res.is_ok(), "query {q:?} failed: {res:?}");
    }
    assert!(search("。，").is_empty());
    assert_eq!(ids(&search("模型~2 ^3")), ["mixed"]);
}

#[test]
fn load_all_100k_is_fast() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = ChunkIndexWriter::open_or_create(dir.path(), 100_000_000).unwrap();
    let n = 100_000u32;
    let batch: Vec<Chunk> = (0..n)
        .map(|i| {
            let mut c = chunk(
                &format!("{i:032x}"),
                &format!("doc-{}", i / 20),
                i % 20,
                "A typical chunk of a few hundred bytes of English text, repeated so the \
                 doc store has realistic blocks to decompress when everything is loaded back.",
            );
            c.acl = vec![format!("group:{}", i % 7)];
            c.metadata_json = format!(r#"{{"n":{i},"lang":"en"}}"#);
            c
        })
        .collect();
    for part in batch.chunks(20_000) {
        w.apply(part, &[]).unwrap();
    }
    w.commit(&payload(n as i64, 1)).unwrap();
    let t = Instant::now();
    let all = w.load_all().unwrap();
    let took = t.elapsed();
    assert_eq!(all.len(), n as usize);
    eprintln!("load_all of {n} chunks took {took:?}");
    // Generous bound for an unoptimised test build on a small machine.
    assert!(took < Duration::from_secs(30), "load_all took {took:?}");
}
