//! The sealing policy against a running Milvus 2.3.5 standalone: a collection written in small
//! batches gets sealed, indexed segments under the policy, and keeps growing (brute-force)
//! segments without it.
//!
//! Built with the `live` feature only; needs FRESHET_MILVUS_URL (deploy/test.sh starts Milvus
//! and sets it) and fails without it. Each collection is `freshet_t_seal_<name>_<pid>`,
//! dropped at the start and the end.

mod common;
use common::url;

use std::time::{Duration, Instant};

use freshet_core::chunk::Chunk;
use freshet_core::testing::unit_vector;
use freshet_metrics::{encode, Registrar};
use freshet_milvus::{LoadedSegment, MilvusConfig, MilvusSink, SealMetrics, Sealer};

const DIM: usize = 384;
const BATCH: u64 = 100;
const BATCHES: u64 = 30;

fn cfg(name: &str, flush_rows: u64) -> MilvusConfig {
    MilvusConfig {
        url: url(),
        collection: format!("freshet_t_seal_{name}_{}", std::process::id()),
        dim: DIM,
        model_id: "test/model-a".to_owned(),
        timeout: Duration::from_secs(60),
        flush_rows,
        flush_interval: Duration::ZERO,
        ..MilvusConfig::default()
    }
}

fn rows(batch: u64) -> Vec<(Chunk, Vec<f32>)> {
    (batch * BATCH..(batch + 1) * BATCH)
        .map(|i| {
            let id = format!("{:032x}", i.wrapping_mul(0x2545_F491_4F6C_DD1D));
            let chunk = Chunk {
                chunk_id: id,
                source: "test://seal".to_owned(),
                ..freshet_core::testing::chunk(&format!("doc{i}"), &format!("text {i}"))
            };
            (chunk, unit_vector(i, DIM))
        })
        .collect()
}

/// Streams BATCHES small inserts into `cfg`'s fresh collection, telling `sealer` (if any).
async fn stream(cfg: &MilvusConfig, sealer: Option<&Sealer>) -> MilvusSink {
    let s = MilvusSink::connect(cfg.clone()).await.expect("connect");
    s.drop_collection().await.expect("drop old collection");
    s.ensure_collection().await.expect("ensure_collection");
    for b in 0..BATCHES {
        let r = rows(b);
        s.upsert(&r).await.expect("upsert");
        if let Some(sealer) = sealer {
            sealer.wrote(r.len() as u64);
        }
    }
    s
}

fn sealed_indexed_rows(segs: &[LoadedSegment]) -> i64 {
    segs.iter()
        .filter(|s| !s.growing && !s.index_name.is_empty())
        .map(|s| s.rows)
        .sum()
}

#[tokio::test]
async fn a_streamed_collection_is_sealed_and_indexed_under_the_policy_only() {
    let total = (BATCH * BATCHES) as i64;
    // Milvus indexes no segment under 1024 rows (queryNode.segment.minSegmentNumRowsToEnableIndex).
    let with = cfg("on", 1200);
    let mut r = Registrar::new("sealtest");
    let metrics = SealMetrics::register(&mut r);
    let registry = r.finish();
    let sealer = Sealer::start(with.clone(), None, Some(metrics))
        .expect("start")
        .expect("the policy flushes");
    let sealed = stream(&with, Some(&sealer)).await;
    let without = cfg("off", 0);
    assert!(Sealer::start(without.clone(), None, None)
        .unwrap()
        .is_none());
    let growing = stream(&without, None).await;

    // Flushes at 1200 rows (and again at 1200 more, or covering all written while the first
    // ran) seal at least 2400 rows, which Milvus indexes and hands to the query node.
    let deadline = Instant::now() + Duration::from_secs(90);
    let segs = loop {
        let segs = sealed.loaded_segments().await.expect("segments");
        if sealed_indexed_rows(&segs) >= 2400 || Instant::now() > deadline {
            break segs;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(
        sealed_indexed_rows(&segs) >= 2400,
        "under the policy the streamed rows are sealed and indexed: {segs:?}"
    );
    assert_eq!(sealed.count().await.unwrap(), total as u64);
    let text = encode(&registry);
    let value = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} not in\n{text}"))
    };
    let ok = value(r#"freshet_sealtest_milvus_flushes_total{trigger="rows",outcome="ok"}"#);
    assert!((1..=2).contains(&ok), "{text}");
    assert!(
        value("freshet_sealtest_milvus_unflushed_rows") < 1200,
        "{text}"
    );

    eprintln!("under the policy: {segs:?}");
    // Milvus 2.3.5 lists only the sealed segments a query node holds; growing ones are not
    // listed. Without the policy the rows are all there, none of them sealed.
    let segs = growing.loaded_segments().await.expect("segments");
    eprintln!("without it: {segs:?}");
    assert!(
        segs.iter().all(|s| s.growing),
        "without the policy nothing is sealed: {segs:?}"
    );
    assert_eq!(growing.count().await.unwrap(), total as u64);
    drop(sealer);
    sealed.drop_collection().await.unwrap();
    growing.drop_collection().await.unwrap();
}
