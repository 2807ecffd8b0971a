//! The filter expression Milvus evaluates inside a vector search agrees with
//! `ChunkFilter::matches`, the plain statement of what a filter means, on random chunks and
//! random filters: on the standalone server (`FRESHET_MILVUS_URL`) and on milvus-lite
//! (`FRESHET_MILVUS_LITE_URL`), both of which deploy/test.sh starts.

use std::collections::BTreeSet;
use std::time::Duration;

use freshet_core::chunk::{Chunk, ChunkKind};
use freshet_core::testing::{random_chunks, random_filter, Rng};
use freshet_milvus::{ConsistencyLevel, MilvusConfig, MilvusSink, SearchTuning};

const DIM: usize = 8;

fn vector(i: usize) -> Vec<f32> {
    let mut v: Vec<f32> = (0..DIM)
        .map(|d| ((i * 31 + d * 7) % 13) as f32 + 1.0)
        .collect();
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= n);
    v
}

fn url(var: &str) -> String {
    std::env::var(var)
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| panic!("{var} is not set: deploy/test.sh starts Milvus and sets it"))
}

async fn check(url: &str) {
    let cfg = MilvusConfig {
        url: url.to_owned(),
        collection: format!("freshet_t_filter_twin_{}", std::process::id()),
        dim: DIM,
        model_id: "test/filter-twin".to_owned(),
        timeout: Duration::from_secs(60),
        ..MilvusConfig::default()
    };
    let s = MilvusSink::connect(cfg).await.expect("connect");
    s.drop_collection().await.unwrap();
    s.ensure_collection().await.unwrap();
    let mut rng = Rng::new(20261124);
    // The collection holds leaves only (the sink refuses parents).
    let chunks: Vec<Chunk> = random_chunks(&mut rng, 300)
        .into_iter()
        .filter(|c| c.kind == ChunkKind::Leaf)
        .collect();
    let rows: Vec<(Chunk, Vec<f32>)> = chunks
        .iter()
        .enumerate()
        .map(|(i, c)| (c.clone(), vector(i)))
        .collect();
    s.upsert(&rows).await.unwrap();
    let mut nonempty = 0;
    for i in 0..150 {
        let f = random_filter(&mut rng);
        let want: BTreeSet<&str> = chunks
            .iter()
            .filter(|c| f.matches(c))
            .map(|c| c.chunk_id.as_str())
            .collect();
        let hits = s
            .search_with(
                &vector(0),
                chunks.len(),
                &f,
                ConsistencyLevel::Strong,
                SearchTuning {
                    ef: chunks.len(),
                    ..SearchTuning::default()
                },
            )
            .await
            .unwrap_or_else(|e| panic!("{url}: filter {i} {f:?}: {e}"));
        let got: BTreeSet<&str> = hits.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(got, want, "{url}: filter {i}: {f:?}");
        nonempty += usize::from(!want.is_empty());
    }
    assert!(nonempty > 50, "{nonempty} of 150 filters select something");
    s.drop_collection().await.unwrap();
}

#[tokio::test]
async fn search_filters_agree_with_matches_on_both_servers() {
    check(&url("FRESHET_MILVUS_URL")).await;
    check(&url("FRESHET_MILVUS_LITE_URL")).await;
}
