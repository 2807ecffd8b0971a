use std::path::Path;
use std::time::Instant;

use freshet_core::chunk::Chunk;
use freshet_tantivy::{ChunkFilter, ChunkIndexWriter, CommitPayload};

use super::*;

fn write_index(path: &Path, chunk_id: &str, index_id: &str) {
    let chunk = Chunk {
        chunk_id: chunk_id.into(),
        ..freshet_core::testing::chunk(chunk_id, "glacier ice")
    };
    let mut w = ChunkIndexWriter::open_or_create(path, 50_000_000).unwrap();
    w.apply(&[chunk], &[]).unwrap();
    let mut payload = CommitPayload::new(Default::default(), 1);
    payload.index_id = Some(index_id.into());
    w.commit(&payload).unwrap();
}

fn generation(dir: &Path, name: &str) -> Generation {
    Generation {
        name: name.into(),
        tantivy_path: dir.join(name),
        milvus_collection: format!("chunks_{name}"),
        index_id: format!("id-{name}"),
    }
}

fn point(pointer: &Path, g: &Generation) {
    ServingPointer {
        serving: g.clone(),
        switched_at_ms: 1,
        previous: None,
    }
    .write_atomic(pointer)
    .unwrap();
}

/// Milvus on a port nothing listens on: the collection never answers.
fn opener() -> Opener {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let milvus = MilvusConfig {
        url: format!("http://127.0.0.1:{port}"),
        timeout: Duration::from_millis(200),
        ..MilvusConfig::default()
    };
    Opener {
        reload_interval: Duration::from_millis(5),
        bm25: Bm25Params::default(),
        milvus,
        runtime: tokio::runtime::Handle::current(),
    }
}

fn found(s: &Serving) -> Vec<String> {
    s.current()
        .snapshot()
        .map(|snap| {
            snap.search_bm25("glacier", 10, &ChunkFilter::none())
                .unwrap()
                .into_iter()
                .map(|(_, c)| c.chunk_id)
                .collect()
        })
        .unwrap_or_default()
}

fn eventually(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generation_whose_collection_does_not_answer_is_opened_but_never_served() {
    let dir = tempfile::tempdir().unwrap();
    let pointer = dir.path().join("serving.json");
    let (a, b) = (generation(dir.path(), "a"), generation(dir.path(), "b"));
    write_index(&a.tantivy_path, "chunk-a", "id-a");
    write_index(&b.tantivy_path, "chunk-b", "id-b");
    point(&pointer, &a);
    let metrics = Metrics::new();
    let s = Serving::start(&pointer, PathBuf::new(), opener(), metrics).unwrap();
    eventually("generation a loaded", || found(&s) == ["chunk-a"]);
    assert_eq!(s.state().unwrap().serving.as_deref(), Some("a"));

    // The pointer names b: the node opens it beside a, but b's collection never answers, so
    // every request still reads a.
    point(&pointer, &b);
    eventually("b being opened", || {
        s.state()
            .unwrap()
            .opening
            .is_some_and(|o| o.generation == "b" && o.status.milvus.is_some())
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(s.current().generation_name().as_deref(), Some("a"));
    assert_eq!(found(&s), ["chunk-a"]);

    // An unreadable pointer changes nothing but is reported.
    std::fs::write(&pointer, b"{not json").unwrap();
    eventually("pointer error reported", || {
        s.state().unwrap().pointer_error.is_some()
    });
    assert_eq!(found(&s), ["chunk-a"]);

    // Back to a: the generation being opened is dropped.
    point(&pointer, &a);
    eventually("b no longer opened", || {
        let st = s.state().unwrap();
        st.opening.is_none() && st.pointer_error.is_none()
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tantivy_index_of_another_index_id_is_not_served() {
    let dir = tempfile::tempdir().unwrap();
    let pointer = dir.path().join("serving.json");
    let mut a = generation(dir.path(), "a");
    write_index(&a.tantivy_path, "chunk-a", "id-other");
    a.index_id = "id-a".into();
    point(&pointer, &a);
    let s = Serving::start(&pointer, PathBuf::new(), opener(), Metrics::new()).unwrap();
    eventually("the mismatch reported", || {
        s.status()
            .tantivy
            .is_some_and(|t| t.contains("id-other") && t.contains("check the pointer"))
    });
    assert!(found(&s).is_empty(), "served an index of another id");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_pointer_stops_the_start_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let e = Serving::start(
        &dir.path().join("none.json"),
        PathBuf::new(),
        opener(),
        Metrics::new(),
    )
    .err()
    .expect("refused");
    let e = format!("{e:#}");
    assert!(e.contains("freshet reindex switch"), "{e}");
}
