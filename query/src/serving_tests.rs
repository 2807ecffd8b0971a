use std::path::Path;
use std::time::Instant;

use freshet_core::chunk::Chunk;
use freshet_embedding::{EmbeddingConfig, Provider};
use freshet_llm::standin::StandIn;
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
        embedding: None,
    }
}

/// `[embedding]` settings of the stand-in's `dim`-dimensional model (another model id per
/// dimension).
fn standin_model(standin: &StandIn, dim: usize) -> EmbeddingConfig {
    EmbeddingConfig {
        provider: Provider::Openai,
        base_url: standin.base_url(),
        model: format!("standin-dim-{dim}"),
        ..EmbeddingConfig::default()
    }
}

fn named_model(standin: &StandIn, dim: usize) -> Option<serde_json::Value> {
    Some(serde_json::to_value(standin_model(standin, dim)).unwrap())
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

/// Milvus on a port nothing listens on: the collection never answers. The node's own
/// `[embedding]` is the stand-in's 4-dimensional model.
fn opener(standin: &StandIn, metrics: &Metrics) -> Opener {
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
        reload_notify: false,
        bm25: Bm25Params::default(),
        milvus,
        models: Arc::new(QueryModels::new(
            standin_model(standin, 4),
            crate::config::QueryConfig::default(),
            metrics.clone(),
        )),
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
    let standin = StandIn::start().await.unwrap();
    let s = Serving::start(
        &pointer,
        PathBuf::new(),
        opener(&standin, &metrics),
        metrics,
    )
    .unwrap();
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
    let (standin, metrics) = (StandIn::start().await.unwrap(), Metrics::new());
    let s = Serving::start(
        &pointer,
        PathBuf::new(),
        opener(&standin, &metrics),
        metrics,
    )
    .unwrap();
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
    let (standin, metrics) = (StandIn::start().await.unwrap(), Metrics::new());
    let e = Serving::start(
        &dir.path().join("none.json"),
        PathBuf::new(),
        opener(&standin, &metrics),
        metrics,
    )
    .err()
    .expect("refused");
    let e = format!("{e:#}");
    assert!(e.contains("freshet reindex switch"), "{e}");
}

/// The model of the generation being opened (`None` when none is).
fn opening_dim(s: &Serving) -> Option<usize> {
    let o = s.opening.lock().unwrap().clone()?;
    o.embedders().map(|p| p.dim())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_generation_is_opened_with_its_own_query_model_and_unloads_it() {
    let dir = tempfile::tempdir().unwrap();
    let pointer = dir.path().join("serving.json");
    let standin = StandIn::start().await.unwrap();
    let mut a = generation(dir.path(), "a");
    let mut b = generation(dir.path(), "b");
    a.embedding = named_model(&standin, 8);
    b.embedding = named_model(&standin, 16);
    write_index(&a.tantivy_path, "chunk-a", "id-a");
    write_index(&b.tantivy_path, "chunk-b", "id-b");
    point(&pointer, &a);
    let metrics = Metrics::new();
    let s = Serving::start(
        &pointer,
        PathBuf::new(),
        opener(&standin, &metrics),
        metrics.clone(),
    )
    .unwrap();
    // a is searched with a's model, not the node's own (4 dimensions), which is not loaded.
    let served = s.current();
    let pool = served.embedders().unwrap();
    assert_eq!(pool.dim(), 8);
    assert_eq!(pool.embed_query("glacier", &|| false).unwrap().len(), 8);
    assert_eq!(metrics.query_models.get(), 1);

    // The pointer names b: b's model is loaded beside a's while b is opened; requests still
    // pin a with a's model.
    point(&pointer, &b);
    eventually("b opened with its model", || opening_dim(&s) == Some(16));
    assert_eq!(metrics.query_models.get(), 2);
    let pinned = s.current();
    assert_eq!(pinned.generation_name().as_deref(), Some("a"));
    assert_eq!(pinned.embedders().unwrap().dim(), 8);

    // Back to a: b is dropped, and its model with it once its background tasks end.
    point(&pointer, &a);
    eventually("b no longer opened", || {
        s.state().unwrap().opening.is_none()
    });
    eventually("b's model unloaded", || metrics.query_models.get() == 1);

    // A generation whose model cannot be loaded is reported and never served.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut c = generation(dir.path(), "c");
    write_index(&c.tantivy_path, "chunk-c", "id-c");
    c.embedding = Some(
        serde_json::to_value(EmbeddingConfig {
            base_url: format!("http://127.0.0.1:{dead}/v1"),
            connect_timeout_ms: 200,
            timeout_ms: 200,
            deadline_ms: 400,
            ..standin_model(&standin, 32)
        })
        .unwrap(),
    );
    point(&pointer, &c);
    eventually("c's model failure reported", || {
        s.state()
            .unwrap()
            .opening
            .is_some_and(|o| o.generation == "c" && o.model.is_some())
    });
    assert_eq!(s.current().generation_name().as_deref(), Some("a"));
    assert_eq!(metrics.query_models.get(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generations_of_one_model_share_its_query_model() {
    let standin = StandIn::start().await.unwrap();
    let metrics = Metrics::new();
    let models = QueryModels::new(
        standin_model(&standin, 4),
        crate::config::QueryConfig::default(),
        metrics.clone(),
    );
    let dir = tempfile::tempdir().unwrap();
    let mut a = generation(dir.path(), "a");
    let node_default = models.pool_for(None).unwrap();
    // Naming the node's own settings, or the same model with settings that do not change its
    // vectors, shares the model loaded.
    a.embedding = Some(serde_json::to_value(standin_model(&standin, 4)).unwrap());
    assert!(Arc::ptr_eq(
        &node_default,
        &models.pool_for(Some(&a)).unwrap()
    ));
    a.embedding = Some(
        serde_json::to_value(EmbeddingConfig {
            batch_size: 7,
            ..standin_model(&standin, 4)
        })
        .unwrap(),
    );
    assert!(Arc::ptr_eq(
        &node_default,
        &models.pool_for(Some(&a)).unwrap()
    ));
    assert_eq!(metrics.query_models.get(), 1);
    // Another model is another pool; every pool dropped unloads its model.
    a.embedding = named_model(&standin, 8);
    let other = models.pool_for(Some(&a)).unwrap();
    assert_eq!(other.dim(), 8);
    assert_eq!(metrics.query_models.get(), 2);
    drop((node_default, other));
    assert_eq!(metrics.query_models.get(), 0);
    // Settings this node cannot read are refused with what to do.
    a.embedding = Some(serde_json::json!({"no_such_setting": 1}));
    let e = format!("{:#}", models.pool_for(Some(&a)).err().unwrap());
    assert!(e.contains("freshet reindex switch"), "{e}");
}
