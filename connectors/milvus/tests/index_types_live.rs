//! Each vector index type against a running Milvus 2.3.5 standalone: a collection of each
//! (`[milvus] index_type`) receives the same seeded, clustered vectors, is flushed, indexed and
//! searched; recall@10 against the FLAT collection's exact answers must be high, and the FLAT
//! collection's answers must be the exact ones computed here. A collection whose index type
//! differs from the setting is refused by the writer and searched through its own index by a
//! reader.
//!
//! Built with the `live` feature only; needs FRESHET_MILVUS_URL (deploy/test.sh starts Milvus
//! and sets it) and fails without it. Each collection is `freshet_t_index_<type>_<pid>`,
//! dropped at the start and the end.

mod common;
use common::url;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use freshet_core::chunk::Chunk;
use freshet_milvus::{
    ChunkFilter, ConsistencyLevel, Error, IndexType, MilvusConfig, MilvusSink, SearchTuning,
};

const DIM: usize = 64;
const ROWS: u64 = 4000;
const CLUSTERS: u64 = 40;
const QUERIES: u64 = 100;
const K: usize = 10;
const NLIST: u32 = 64;
/// A quarter of the clusters: an IVF search that reads them all would prove nothing.
const TUNING: SearchTuning = SearchTuning { ef: 64, nprobe: 16 };

fn cfg(index_type: IndexType) -> MilvusConfig {
    MilvusConfig {
        url: url(),
        collection: format!("freshet_t_index_{index_type}_{}", std::process::id()),
        dim: DIM,
        model_id: "test/model-a".to_owned(),
        timeout: Duration::from_secs(60),
        flush_rows: 0,
        flush_interval: Duration::ZERO,
        index_type,
        ivf_nlist: NLIST,
        ..MilvusConfig::default()
    }
}

/// splitmix64: the test's own seeded numbers.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `DIM` standard normal numbers (Box-Muller) from `seed`.
fn gaussian(seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..DIM)
        .map(|_| {
            let u1 = ((next(&mut s) >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
            let u2 = (next(&mut s) >> 11) as f64 / (1u64 << 53) as f64;
            ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
        })
        .collect()
}

fn normalized(v: Vec<f32>) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.into_iter().map(|x| x / n).collect()
}

/// `base` plus Gaussian noise of norm about `scale`, as a unit vector.
fn near(base: &[f32], scale: f32, seed: u64) -> Vec<f32> {
    let sigma = scale / (DIM as f32).sqrt();
    normalized(
        base.iter()
            .zip(gaussian(seed))
            .map(|(b, g)| b + sigma * g)
            .collect(),
    )
}

/// Row `i`: near one of `CLUSTERS` centres, as embeddings of related texts are.
fn vector(i: u64) -> Vec<f32> {
    let centre = normalized(gaussian(0xC0FFEE ^ (i % CLUSTERS)));
    near(&centre, 0.8, 0x5EED ^ i.wrapping_mul(0x2545_F491_4F6C_DD1D))
}

fn id(i: u64) -> String {
    format!("{:032x}", i.wrapping_mul(0x2545_F491_4F6C_DD1D))
}

fn rows() -> Vec<(Chunk, Vec<f32>)> {
    (0..ROWS)
        .map(|i| {
            let chunk = Chunk {
                chunk_id: id(i),
                source: "test://index".to_owned(),
                ..freshet_core::testing::chunk(&format!("doc{i}"), &format!("text {i}"))
            };
            (chunk, vector(i))
        })
        .collect()
}

/// Query `q`: a row plus noise.
fn query(q: u64) -> Vec<f32> {
    near(&vector(q.wrapping_mul(7919) % ROWS), 0.3, q ^ 0xABCD)
}

/// The exact top `K` of `q` by cosine similarity, computed here.
fn exact(q: &[f32], rows: &[(Chunk, Vec<f32>)]) -> Vec<String> {
    let mut scored: Vec<(f32, &str)> = rows
        .iter()
        .map(|(c, v)| {
            (
                v.iter().zip(q).map(|(a, b)| a * b).sum(),
                c.chunk_id.as_str(),
            )
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    scored
        .iter()
        .take(K)
        .map(|(_, id)| id.to_string())
        .collect()
}

fn recall(got: &[String], truth: &[String]) -> f64 {
    let truth: HashSet<&String> = truth.iter().collect();
    got.iter().filter(|g| truth.contains(g)).count() as f64 / truth.len().max(1) as f64
}

/// A fresh collection of `index_type` holding `rows`, flushed, indexed and loaded.
async fn filled(index_type: IndexType, rows: &[(Chunk, Vec<f32>)]) -> MilvusSink {
    let s = MilvusSink::connect(cfg(index_type)).await.expect("connect");
    s.drop_collection().await.expect("drop old collection");
    s.ensure_collection().await.expect("ensure_collection");
    for part in rows.chunks(1000) {
        s.upsert(part).await.expect("upsert");
    }
    s.flush().await.expect("flush");
    // Indexed, and the indexed segments handed to the query node.
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let info = s.describe_vector_index().await.expect("describe index");
        let info = info.expect("the collection has a vector index");
        assert!(info.failure.is_empty(), "{index_type}: {}", info.failure);
        let segs = s.loaded_segments().await.expect("segments");
        // Milvus 2.3 builds no index files for FLAT (its segments are searched as raw data, so
        // the query node names no index for them).
        let searchable: i64 = segs
            .iter()
            .filter(|g| !g.growing && (index_type == IndexType::Flat || !g.index_name.is_empty()))
            .map(|g| g.rows)
            .sum();
        if info.indexed_rows >= ROWS as i64 && searchable >= ROWS as i64 {
            assert_eq!(info.index_type, Some(index_type), "{info:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{index_type}: not indexed and loaded within 180 s: {info:?} {segs:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    s
}

async fn top(s: &MilvusSink, q: &[f32]) -> Vec<String> {
    top_with(s, q, TUNING).await
}

async fn top_with(s: &MilvusSink, q: &[f32], tuning: SearchTuning) -> Vec<String> {
    s.search_with(
        q,
        K,
        &ChunkFilter::default(),
        ConsistencyLevel::Strong,
        tuning,
    )
    .await
    .expect("search")
    .into_iter()
    .map(|(id, _)| id)
    .collect()
}

#[tokio::test]
async fn each_index_type_finds_the_exact_neighbours_closely() {
    let rows = rows();
    let queries: Vec<Vec<f32>> = (0..QUERIES).map(query).collect();

    let flat = filled(IndexType::Flat, &rows).await;
    let mut truth = Vec::new();
    let mut flat_recall = 0.0;
    for q in &queries {
        let got = top(&flat, q).await;
        flat_recall += recall(&got, &exact(q, &rows));
        truth.push(got);
    }
    flat_recall /= QUERIES as f64;
    eprintln!("flat: recall@{K} against the exact answers {flat_recall:.4}");
    // Ties at the tenth place aside, FLAT is exact.
    assert!(flat_recall >= 0.99, "flat: recall {flat_recall}");

    for (index_type, floor) in [
        (IndexType::Hnsw, 0.9),
        (IndexType::IvfFlat, 0.9),
        (IndexType::IvfSq8, 0.8),
    ] {
        let s = filled(index_type, &rows).await;
        let info = s.describe_vector_index().await.unwrap().unwrap();
        let expected_param = match index_type {
            IndexType::Hnsw => ("M", "16"),
            _ => ("nlist", "64"),
        };
        assert_eq!(
            info.params.get(expected_param.0).map(String::as_str),
            Some(expected_param.1),
            "{info:?}"
        );
        assert_eq!(s.searched_index().index_type, index_type);
        let mut sum = 0.0;
        for (q, t) in queries.iter().zip(&truth) {
            sum += recall(&top(&s, q).await, t);
        }
        let r = sum / QUERIES as f64;
        eprintln!("{index_type}: recall@{K} against flat {r:.4}");
        assert!(r >= floor, "{index_type}: recall@{K} {r} < {floor}");
        if index_type.is_ivf() {
            // nprobe reaches Milvus: one cluster of 64 finds fewer of the neighbours.
            let one = SearchTuning {
                nprobe: 1,
                ..TUNING
            };
            let mut sum = 0.0;
            for (q, t) in queries.iter().zip(&truth) {
                sum += recall(&top_with(&s, q, one).await, t);
            }
            let low = sum / QUERIES as f64;
            eprintln!("{index_type}: recall@{K} at nprobe 1: {low:.4}");
            assert!(low < r, "{index_type}: nprobe 1 {low} against 16 {r}");
        }
        if index_type != IndexType::IvfSq8 {
            s.drop_collection().await.unwrap();
            continue;
        }

        // The same collection under another index_type: the writer refuses it, naming both
        // types; a reader searches it through its own index.
        let other = MilvusConfig {
            index_type: IndexType::Hnsw,
            ..cfg(IndexType::IvfSq8)
        };
        let w = MilvusSink::connect(other.clone()).await.unwrap();
        match w.ensure_collection().await {
            Err(e @ Error::IndexMismatch { .. }) => {
                let m = e.to_string();
                assert!(
                    m.contains("IVF_SQ8") && m.contains("\"hnsw\"") && m.contains("drop"),
                    "{m}"
                );
            }
            other => panic!("an ivf_sq8 collection under index_type hnsw: {other:?}"),
        }
        let r = MilvusSink::connect(other).await.unwrap();
        assert_eq!(r.searched_index().index_type, IndexType::Hnsw);
        r.check_collection().await.expect("check_collection");
        assert_eq!(r.searched_index().index_type, IndexType::IvfSq8);
        assert_eq!(r.searched_index().nlist, NLIST);
        let mut sum = 0.0;
        for (q, t) in queries.iter().zip(&truth) {
            sum += recall(&top(&r, q).await, t);
        }
        let reader = sum / QUERIES as f64;
        assert!(reader >= floor, "reader: recall@{K} {reader}");
        s.drop_collection().await.unwrap();
    }
    flat.drop_collection().await.unwrap();
}

/// A collection without a vector index (made by other means, or met between the pipeline's
/// creation of a collection and of its index): a reader refuses it, the writer gives it the
/// configured index.
#[tokio::test]
async fn a_collection_without_an_index_is_refused_by_readers_and_indexed_by_the_writer() {
    use milvus::v2::prelude::CreateCollectionRequest;
    let c = MilvusConfig {
        collection: format!("freshet_t_index_none_{}", std::process::id()),
        ..cfg(IndexType::IvfFlat)
    };
    let s = MilvusSink::connect(c.clone()).await.expect("connect");
    s.drop_collection().await.expect("drop old collection");
    let req = CreateCollectionRequest::builder()
        .collection_name(c.collection.clone())
        .schema(freshet_milvus::schema::collection_schema(&c))
        .properties(freshet_milvus::schema::properties(&c))
        .build()
        .unwrap();
    s.client().create_collection(req).await.expect("create");
    assert_eq!(s.describe_vector_index().await.expect("describe"), None);
    match s.check_collection().await {
        Err(e @ Error::NotFreshetCollection { .. }) => {
            assert!(e.to_string().contains("no index"), "{e}")
        }
        other => panic!("a collection without an index, read: {other:?}"),
    }
    s.ensure_collection().await.expect("ensure_collection");
    let info = s.describe_vector_index().await.unwrap().expect("an index");
    assert_eq!(info.index_type, Some(IndexType::IvfFlat), "{info:?}");
    s.check_collection().await.expect("check_collection");
    assert_eq!(s.searched_index().index_type, IndexType::IvfFlat);
    s.drop_collection().await.unwrap();
}
