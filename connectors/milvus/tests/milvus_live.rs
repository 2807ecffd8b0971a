//! Live tests against a running Milvus (2.3.5 standalone or milvus-lite 3.2.2).
//!
//! Built with the `live` feature only; under it they need FRESHET_MILVUS_URL (e.g.
//! `http://127.0.0.1:19530`; deploy/test.sh starts Milvus and sets it) and fail without it.
//! Each test uses its own collection
//! (`freshet_t_<test>_<pid>`) and drops it at the start and the end.

mod common;
use common::url;

use std::collections::BTreeSet;
use std::time::Duration;

use freshet_core::chunk::{Chunk, ChunkKind};
use freshet_core::testing::unit_vector;
use freshet_milvus::{ChunkFilter, Error, MilvusConfig, MilvusSink};

const DIM: usize = 384;

fn cfg(url: &str, test: &str) -> MilvusConfig {
    MilvusConfig {
        url: url.to_owned(),
        collection: format!("freshet_t_{test}_{}", std::process::id()),
        dim: DIM,
        model_id: "test/model-a".to_owned(),
        timeout: Duration::from_secs(60),
        ..MilvusConfig::default()
    }
}

async fn fresh_sink(cfg: MilvusConfig) -> MilvusSink {
    let s = MilvusSink::connect(cfg).await.expect("connect");
    s.drop_collection().await.expect("drop old collection");
    s.ensure_collection().await.expect("ensure_collection");
    s
}

fn chunk(id: &str, doc: &str) -> Chunk {
    Chunk {
        chunk_id: id.to_owned(),
        source: "test://src".to_owned(),
        ..freshet_core::testing::chunk(doc, &format!("text of {id}"))
    }
}

fn id(i: u64) -> String {
    format!("{:032x}", i.wrapping_mul(0x2545_F491_4F6C_DD1D))
}

fn ids_of(hits: &[(String, f32)]) -> BTreeSet<String> {
    hits.iter().map(|(i, _)| i.clone()).collect()
}

#[tokio::test]
async fn ensure_is_idempotent_and_checks_dim_and_model() {
    let url = url();
    let c = cfg(&url, "ensure");
    let s = fresh_sink(c.clone()).await;
    // Again, on the same and on a new connection.
    s.ensure_collection().await.expect("second ensure");
    MilvusSink::connect(c.clone())
        .await
        .unwrap()
        .ensure_collection()
        .await
        .expect("ensure from a new client");

    let other_dim = MilvusSink::connect(MilvusConfig {
        dim: DIM + 1,
        ..c.clone()
    })
    .await
    .unwrap();
    match other_dim.ensure_collection().await {
        Err(e @ Error::DimensionMismatch { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains(&DIM.to_string()) && msg.contains(&(DIM + 1).to_string()),
                "{msg}"
            );
        }
        other => panic!("expected DimensionMismatch, got {other:?}"),
    }
    let other_model = MilvusSink::connect(MilvusConfig {
        model_id: "test/model-b".into(),
        ..c.clone()
    })
    .await
    .unwrap();
    match other_model.ensure_collection().await {
        Err(e @ Error::ModelMismatch { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("test/model-a") && msg.contains("test/model-b"),
                "{msg}"
            );
        }
        other => panic!("expected ModelMismatch, got {other:?}"),
    }
    let h = s.health().await.unwrap();
    eprintln!("server: {h:?}");
    assert!(h.healthy);
    s.drop_collection().await.unwrap();
}

/// A collection an older freshet created (field layout 1, before `acl_public`) is refused with
/// an error that says what to do, before anything is written to it.
#[tokio::test]
async fn an_older_layout_is_refused_with_what_to_do() {
    use freshet_milvus::schema;
    use milvus::v2::prelude::CreateCollectionRequest;
    let url = url();
    let c = cfg(&url, "layout");
    let s = MilvusSink::connect(c.clone()).await.unwrap();
    s.drop_collection().await.unwrap();
    let mut props = schema::properties(&c);
    props.insert(schema::P_LAYOUT.to_owned(), "1".to_owned());
    s.client()
        .create_collection(
            CreateCollectionRequest::builder()
                .collection_name(c.collection.clone())
                .description(schema::description(&c))
                .schema(schema::collection_schema(&c))
                .properties(props)
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
    for result in [s.ensure_collection().await, s.check_collection().await] {
        match result {
            Err(e @ Error::LayoutOutdated { .. }) => {
                let msg = e.to_string();
                assert!(
                    msg.contains("layout 1") && msg.contains("drop the collection"),
                    "{msg}"
                );
            }
            other => panic!("expected LayoutOutdated, got {other:?}"),
        }
    }
    s.drop_collection().await.unwrap();
    s.ensure_collection().await.expect("a new collection");
    s.check_collection().await.expect("checks");
    s.drop_collection().await.unwrap();
}

#[tokio::test]
async fn upsert_get_search_replace_delete_flush_list() {
    let url = url();
    let c = MilvusConfig {
        max_batch_rows: 7, // exercise batching
        ..cfg(&url, "crud")
    };
    let s = fresh_sink(c).await;
    let n = 40u64;
    let rows: Vec<(Chunk, Vec<f32>)> = (0..n)
        .map(|i| {
            (
                chunk(&id(i), &format!("doc-{}", i % 4)),
                unit_vector(i, DIM),
            )
        })
        .collect();
    s.upsert(&rows).await.unwrap();
    assert_eq!(s.count().await.unwrap(), n);
    assert_eq!(s.count_by_doc("doc-1").await.unwrap(), n / 4);

    // get_doc_ids: order of the request, missing ids left out, duplicates once.
    let want = vec![id(3), "missing".to_owned(), id(0), id(3)];
    assert_eq!(
        s.get_doc_ids(&want).await.unwrap(),
        vec![(id(3), "doc-3".to_owned()), (id(0), "doc-0".to_owned())]
    );

    // Nearest neighbour of a stored vector is itself, cosine ~ 1.
    for i in [0u64, 17, 39] {
        let hits = s
            .search(&unit_vector(i, DIM), 5, &ChunkFilter::none())
            .await
            .unwrap();
        assert_eq!(hits.len(), 5);
        assert_eq!(hits[0].0, id(i), "hits: {hits:?}");
        assert!((hits[0].1 - 1.0).abs() < 1e-3, "score {}", hits[0].1);
        assert!(
            hits.windows(2).all(|w| w[0].1 >= w[1].1),
            "sorted by similarity"
        );
        assert!(hits[1].1 < 0.5, "random vectors are far apart");
    }

    // Upsert of an existing id replaces it (also when the id repeats within one call).
    let replaced = (chunk(&id(5), "doc-new"), unit_vector(1000, DIM));
    let stale = (chunk(&id(6), "doc-stale"), unit_vector(2000, DIM));
    let latest = (chunk(&id(6), "doc-latest"), unit_vector(3000, DIM));
    s.upsert(&[replaced.clone(), stale, latest]).await.unwrap();
    assert_eq!(s.count().await.unwrap(), n, "no duplicates after upsert");
    assert_eq!(
        s.get_doc_ids(&[id(5), id(6)]).await.unwrap(),
        vec![(id(5), "doc-new".into()), (id(6), "doc-latest".into())]
    );
    let hits = s
        .search(&unit_vector(1000, DIM), 1, &ChunkFilter::none())
        .await
        .unwrap();
    assert_eq!(hits[0].0, id(5));
    assert!((hits[0].1 - 1.0).abs() < 1e-3);
    let hits = s
        .search(&unit_vector(5, DIM), 3, &ChunkFilter::none())
        .await
        .unwrap();
    assert!(
        !hits.iter().any(|(i, sc)| i == &id(5) && *sc > 0.99),
        "old vector gone: {hits:?}"
    );

    // Delete (missing ids are fine).
    let gone: Vec<String> = (0..10).map(id).chain(["nope".to_owned()]).collect();
    s.delete(&gone).await.unwrap();
    s.delete(&[]).await.unwrap();
    assert_eq!(s.count().await.unwrap(), n - 10);
    assert!(s.get_doc_ids(&gone).await.unwrap().is_empty());
    let hits = s
        .search(&unit_vector(0, DIM), 3, &ChunkFilter::none())
        .await
        .unwrap();
    assert!(
        !hits.iter().any(|(i, _)| i == &id(0)),
        "deleted ids are not found"
    );

    s.flush().await.unwrap();
    let listed = s.list_chunk_ids().await.unwrap();
    let expected: Vec<String> = {
        let mut v: Vec<String> = (10..n).map(id).collect();
        v.sort();
        v
    };
    assert_eq!(listed, expected);

    // Input checks.
    assert!(matches!(
        s.upsert(&[(chunk("x", "d"), vec![0.0; DIM - 1])]).await,
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        s.upsert(&[(chunk(&"x".repeat(65), "d"), unit_vector(1, DIM))])
            .await,
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        s.search(&[1.0; 3], 1, &ChunkFilter::none()).await,
        Err(Error::InvalidInput(_))
    ));
    assert!(s
        .search(&unit_vector(1, DIM), 0, &ChunkFilter::none())
        .await
        .unwrap()
        .is_empty());
    s.drop_collection().await.unwrap();
}

#[tokio::test]
async fn filters_inside_milvus() {
    let url = url();
    let s = fresh_sink(cfg(&url, "filters")).await;
    let hostile = "q\"uo'te \\ back\nnl\ttab\0nul é🎉 \" or 1==1 or \"";
    let mk = |i: u64, doc: &str, acl: &[&str], meta: &str, kind: ChunkKind| {
        let mut c = chunk(&id(i), doc);
        c.acl = acl.iter().map(|s| s.to_string()).collect();
        c.metadata_json = meta.to_owned();
        c.kind = kind;
        // All vectors close to one direction so every row is a candidate.
        let mut v = unit_vector(7, DIM);
        v[0] += 0.01 * i as f32;
        (c, v)
    };
    let leaf = ChunkKind::Leaf;
    s.upsert(&[
        mk(
            1,
            "d-public",
            &[],
            r#"{"lang":"en","year":2020,"draft":false}"#,
            leaf,
        ),
        mk(
            2,
            "d-fin",
            &["group:finance"],
            r#"{"lang":"de","year":2021,"draft":true}"#,
            leaf,
        ),
        mk(
            3,
            "d-hr",
            &["group:hr", "user:alice"],
            r#"{"lang":"en","year":2021.5}"#,
            leaf,
        ),
        mk(
            4,
            hostile,
            &[hostile],
            &serde_json::json!({"lang": hostile, "we\"ird key": "v"}).to_string(),
            leaf,
        ),
        mk(5, "d-nometa", &[], "not json", leaf),
    ])
    .await
    .unwrap();
    let q = |f: ChunkFilter| {
        let s = &s;
        async move {
            let hits = s
                .search(&unit_vector(7, DIM), 10, &f)
                .await
                .expect("search");
            ids_of(&hits)
        }
    };
    let set = |v: &[u64]| v.iter().map(|i| id(*i)).collect::<BTreeSet<_>>();
    let f = ChunkFilter::none;

    assert_eq!(q(f()).await, set(&[1, 2, 3, 4, 5]));
    // ACL: empty acl is public; otherwise it must intersect the principals.
    assert_eq!(q(f().principals(Vec::<String>::new())).await, set(&[1, 5]));
    assert_eq!(q(f().principals(["group:finance"])).await, set(&[1, 2, 5]));
    assert_eq!(
        q(f().principals(["user:alice", "group:none"])).await,
        set(&[1, 3, 5])
    );
    assert_eq!(q(f().principals([hostile])).await, set(&[1, 4, 5]));
    assert_eq!(q(f().principals(["\" or 1==1 or \""])).await, set(&[1, 5]));
    // Metadata.
    assert_eq!(q(f().metadata_eq("lang", r#""en""#)).await, set(&[1, 3]));
    assert_eq!(q(f().metadata_eq("year", "2021")).await, set(&[2]));
    assert_eq!(q(f().metadata_eq("year", "2021.5")).await, set(&[3]));
    assert_eq!(q(f().metadata_eq("draft", "true")).await, set(&[2]));
    assert_eq!(
        q(f().metadata_eq("lang", serde_json::to_string(hostile).unwrap())).await,
        set(&[4])
    );
    assert_eq!(q(f().metadata_eq("we\"ird key", r#""v""#)).await, set(&[4]));
    assert!(q(f().metadata_eq("missing", r#""x""#)).await.is_empty());
    // `in`: long lists (Milvus 2.3.5 rejected an `or` chain of this length in a search) and
    // mixed value types.
    let mut langs: Vec<String> = (0..200).map(|i| format!("\"l{i}\"")).collect();
    langs.insert(100, r#""de""#.to_owned());
    assert_eq!(q(f().metadata_in("lang", langs)).await, set(&[2]));
    assert_eq!(
        q(f().metadata_in("year", ["2020", r#""2021""#, "2021.5", "true", "1999"])).await,
        set(&[1, 3])
    );
    assert_eq!(
        q(f().metadata_in("draft", ["false", r#""x""#, "7"])).await,
        set(&[1])
    );
    assert!(matches!(
        s.search(&unit_vector(7, DIM), 5, &f().metadata_eq("lang", "en"))
            .await,
        Err(Error::InvalidFilter(_))
    ));
    // Documents and kinds.
    assert_eq!(
        q(f().doc_ids(["d-hr", hostile, "nope"])).await,
        set(&[3, 4])
    );
    assert!(q(f().doc_ids(Vec::<String>::new())).await.is_empty());
    // Only leaves are stored, so a leaf condition is always true and a parent-only one never.
    assert_eq!(q(f().kinds([ChunkKind::Leaf])).await, set(&[1, 2, 3, 4, 5]));
    assert!(q(f().kinds([ChunkKind::Parent])).await.is_empty());
    let parent = mk(6, "d-parent", &[], "{}", ChunkKind::Parent);
    match s.upsert(&[parent]).await {
        Err(Error::InvalidInput(m)) => assert!(m.contains("only leaf chunks"), "{m}"),
        other => panic!("a parent chunk was accepted: {other:?}"),
    }
    assert_eq!(q(f()).await, set(&[1, 2, 3, 4, 5]));
    // Combined.
    assert_eq!(
        q(f()
            .principals(["group:hr"])
            .metadata_eq("lang", r#""en""#)
            .doc_ids(["d-hr", "d-public"]))
        .await,
        set(&[1, 3])
    );
    assert_eq!(s.count_by_doc(hostile).await.unwrap(), 1);
    assert_eq!(
        s.get_doc_ids(&[id(4)]).await.unwrap(),
        vec![(id(4), hostile.to_owned())]
    );
    s.drop_collection().await.unwrap();
}

#[tokio::test]
async fn list_ids_paginates_across_segments() {
    let url = url();
    let c = MilvusConfig {
        page_size: 100,
        max_batch_rows: 300,
        ..cfg(&url, "pages")
    };
    let s = fresh_sink(c).await;
    let n = 1050u64;
    let all: Vec<(Chunk, Vec<f32>)> = (0..n)
        .map(|i| (chunk(&id(i), "d"), unit_vector(i, DIM)))
        .collect();
    for (k, part) in all.chunks(400).enumerate() {
        s.upsert(part).await.unwrap();
        if k % 2 == 0 {
            s.flush().await.unwrap(); // sealed and growing segments
        }
    }
    let mut expected: Vec<String> = (0..n).map(id).collect();
    expected.sort();
    assert_eq!(s.list_chunk_ids().await.unwrap(), expected);
    // Batched delete (page_size ids per request) and get.
    let del: Vec<String> = (0..n).step_by(2).map(id).collect();
    s.delete(&del).await.unwrap();
    assert_eq!(s.count().await.unwrap(), n / 2);
    assert_eq!(s.get_doc_ids(&expected).await.unwrap().len() as u64, n / 2);
    assert_eq!(s.list_chunk_ids().await.unwrap().len() as u64, n / 2);
    s.drop_collection().await.unwrap();
}

/// Heavier: 20k rows with the default batch and page sizes (4096-id delete expressions, several
/// list pages). `cargo test -p freshet-milvus --test milvus_live -- --ignored`.
#[tokio::test]
#[ignore = "slow; run with --ignored"]
async fn bulk_default_sizes() {
    let url = url();
    let s = fresh_sink(cfg(&url, "bulk")).await;
    let n = 20_000u64;
    let t = std::time::Instant::now();
    let all: Vec<(Chunk, Vec<f32>)> = (0..n)
        .map(|i| {
            let mut c = chunk(&id(i), &format!("doc-{}", i / 10));
            c.acl = vec![format!("group:{}", i % 5)];
            c.metadata_json = format!(r#"{{"n":{i},"lang":"en"}}"#);
            (c, unit_vector(i, DIM))
        })
        .collect();
    s.upsert(&all).await.unwrap();
    eprintln!("upsert {n}: {:?}", t.elapsed());
    let t = std::time::Instant::now();
    s.flush().await.unwrap();
    eprintln!("flush: {:?}", t.elapsed());
    let t = std::time::Instant::now();
    let listed = s.list_chunk_ids().await.unwrap();
    eprintln!("list {}: {:?}", listed.len(), t.elapsed());
    assert_eq!(listed.len() as u64, n);
    let hits = s
        .search(
            &unit_vector(123, DIM),
            10,
            &ChunkFilter::none().principals(["group:3"]),
        )
        .await
        .unwrap();
    assert_eq!(hits[0].0, id(123));
    let t = std::time::Instant::now();
    let del: Vec<String> = (0..n).filter(|i| i % 3 == 0).map(id).collect();
    s.delete(&del).await.unwrap();
    eprintln!("delete {}: {:?}", del.len(), t.elapsed());
    assert_eq!(s.count().await.unwrap(), n - del.len() as u64);
    assert_eq!(
        s.list_chunk_ids().await.unwrap().len() as u64,
        n - del.len() as u64
    );
    s.drop_collection().await.unwrap();
}

/// Rows refused for their content are left out and reported, the rest is written: checked on
/// the standalone server and, when `FRESHET_MILVUS_LITE_URL` is set, on milvus-lite. The
/// collection has a narrower `source` than freshet's layout, so Milvus itself refuses the rows
/// whose source is longer (this crate's checks know only the layout's limits).
#[tokio::test]
async fn refused_rows_are_isolated_and_the_rest_is_written() {
    let url = url();
    let mut urls = vec![url];
    urls.extend(std::env::var("FRESHET_MILVUS_LITE_URL").ok());
    for url in urls {
        let c = MilvusConfig {
            max_batch_rows: 8, // two insert batches, each bisected
            ..cfg(&url, "isolate")
        };
        let s = MilvusSink::connect(c).await.expect("connect");
        s.drop_collection().await.unwrap();
        let narrow = freshet_milvus::schema::FieldLimits {
            source_max_len: 100,
            ..freshet_milvus::schema::FieldLimits::LAYOUT
        };
        s.ensure_collection_with(&narrow).await.expect("create");
        let mut rows: Vec<(Chunk, Vec<f32>)> = (0..13)
            .map(|i| (chunk(&id(i), &format!("doc-{i}")), unit_vector(i, DIM)))
            .collect();
        rows[2].0.source = "s".repeat(100); // at the limit: written
        rows[3].0.source = "s".repeat(101);
        rows[9].0.source = "s".repeat(5000);
        rows[10].0.source = "s".repeat(101);
        rows[6].1[0] = f32::NAN; // refused by this crate before sending
        let before = id(100);
        s.upsert(&[(chunk(&before, "old"), unit_vector(100, DIM))])
            .await
            .unwrap();
        let refused = s
            .replace_isolating(std::slice::from_ref(&before), &rows)
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        let indexes: Vec<usize> = refused.iter().map(|r| r.index).collect();
        assert_eq!(indexes, vec![3, 6, 9, 10], "{url}: {refused:?}");
        assert!(refused[1].reason.contains("NaN"), "{:?}", refused[1]);
        assert!(
            refused[0].reason.contains("101") || refused[0].reason.contains("length"),
            "{url}: {:?}",
            refused[0]
        );
        let stored: BTreeSet<String> = s.list_chunk_ids().await.unwrap().into_iter().collect();
        let expected: BTreeSet<String> = rows
            .iter()
            .enumerate()
            .filter(|(i, _)| !indexes.contains(i))
            .map(|(_, r)| r.0.chunk_id.clone())
            .collect();
        assert_eq!(stored, expected, "{url}");
        // the plain replace refuses the call on a row of its own checks, before writing
        let e = s.replace(&[], &rows[6..7]).await.unwrap_err();
        assert!(e.refuses_input(), "{e}");
        s.drop_collection().await.unwrap();
    }
}
