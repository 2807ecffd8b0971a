//! The loads of a retrieval against a real tantivy index whose commit changes between the
//! search and the loads: a request reads the snapshot it searched, and a chunk it may not see
//! never reaches the answer, whatever a (stale) vector route names.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use freshet_core::chunk::{Chunk, ChunkKind};
use freshet_tantivy::{ChunkIndexReader, ChunkIndexWriter, CommitPayload, Snapshot};
use serde_json::json;

use super::{Candidate, Loads, Timer};
use crate::config::QueryConfig;
use crate::metrics::Metrics;
use crate::overload::Job;
use crate::request::{parse, Plan};
use crate::visible::Gate;

const HR: &[&str] = &["group:hr"];

/// Chunk `i` of document `doc` in `version` (its id and text name both), in one section.
fn leaf(doc: &str, version: &str, i: u32, acl: &[&str], parent: Option<&str>) -> Chunk {
    Chunk {
        chunk_id: format!("{doc}-{version}-{i}"),
        index: i,
        char_start: i * 100,
        char_end: i * 100 + 50,
        parent_id: parent.map(str::to_owned),
        acl: acl.iter().map(|a| a.to_string()).collect(),
        ..freshet_core::testing::chunk(doc, &format!("glacier melt {version} part {i}"))
    }
}

fn parent(doc: &str, version: &str, acl: &[&str]) -> Chunk {
    Chunk {
        kind: ChunkKind::Parent,
        ..leaf(doc, version, 0, acl, None)
    }
    .with_id(format!("{doc}-{version}-parent"))
}

trait WithId {
    fn with_id(self, id: String) -> Self;
}
impl WithId for Chunk {
    fn with_id(mut self, id: String) -> Chunk {
        self.chunk_id = id;
        self
    }
}

/// A document of `n` leaves under one parent, in `version`, visible to `acl`.
fn document(doc: &str, version: &str, n: u32, acl: &[&str]) -> Vec<Chunk> {
    let p = parent(doc, version, acl);
    let mut out: Vec<Chunk> = (0..n)
        .map(|i| leaf(doc, version, i, acl, Some(&p.chunk_id)))
        .collect();
    out.push(p);
    out
}

fn plan(body: serde_json::Value) -> Plan {
    let mut plan = parse(body.to_string().as_bytes())
        .unwrap()
        .plan(&QueryConfig::default(), false)
        .unwrap();
    // a caller without principals: public documents only
    plan.filter.principals = Some(Vec::new());
    plan
}

fn loads(snapshot: Snapshot, plan: &Plan, metrics: &Metrics) -> Loads {
    Loads {
        snapshot: Arc::new(snapshot),
        generation: crate::indexes::Indexes::new(metrics.clone()),
        gate: Gate::new(&plan.filter, metrics.clone()),
        job: Job::detached(Instant::now() + Duration::from_secs(60), metrics.clone()),
    }
}

fn timer(metrics: &Metrics) -> Timer {
    Timer {
        timings: Default::default(),
        metrics: metrics.clone(),
    }
}

/// Every chunk an answer made of these candidates would carry.
fn returned(cands: &[Candidate]) -> BTreeSet<String> {
    cands
        .iter()
        .flat_map(|c| std::iter::once(&c.chunk).chain(&c.passage))
        .map(|c| c.chunk_id.clone())
        .collect()
}

/// An index with public version v1 of "d" (and "e"), a manual reader on its commit.
fn index() -> (tempfile::TempDir, ChunkIndexWriter, ChunkIndexReader) {
    let dir = tempfile::tempdir().unwrap();
    let mut w = ChunkIndexWriter::open_or_create(dir.path(), 50_000_000).unwrap();
    let mut v1 = document("d", "v1", 6, &[]);
    v1.extend(document("e", "v1", 2, &[]));
    w.apply(&v1, &[]).unwrap();
    w.commit(&CommitPayload::new(Default::default(), 1))
        .unwrap();
    let r = ChunkIndexReader::open_manual(dir.path()).unwrap();
    (dir, w, r)
}

/// Restricts "d": version v2 (other ids), visible to group:hr only, replaces v1.
fn restrict(w: &mut ChunkIndexWriter) {
    let old: Vec<String> = document("d", "v1", 6, &[])
        .into_iter()
        .map(|c| c.chunk_id)
        .collect();
    w.apply(&document("d", "v2", 6, HR), &old).unwrap();
    w.commit(&CommitPayload::new(Default::default(), 2))
        .unwrap();
}

#[tokio::test]
async fn a_request_reads_the_snapshot_it_searched_while_a_restriction_lands() {
    let (_dir, mut w, r) = index();
    let pinned = r.reload().unwrap();
    let metrics = Metrics::new();

    for body in [
        json!({"query": "glacier", "mode": "hybrid", "expand": {"top_m": 5, "window": 2}}),
        json!({"query": "glacier", "mode": "hybrid", "parents": true}),
    ] {
        let plan = plan(body);
        // The BM25 route searched the pinned commit, where "d" is public ...
        let bm25 = pinned
            .search_bm25(&plan.query, plan.bm25_top_k, &plan.filter)
            .unwrap();
        assert!(bm25.iter().any(|(_, c)| c.doc_id == "d"));
        // ... then "d" is restricted and the node loads the new commit, before this request
        // loads its vector hits, parents and neighbours. Milvus, written first, names v2.
        restrict(&mut w);
        let served = r.reload().unwrap();
        assert_eq!(served.payload().map(|p| p.epoch), Some(2));
        let vector: Vec<(String, f32)> = (0..6).map(|i| (format!("d-v2-{i}"), 0.9)).collect();

        let l = loads(pinned.clone(), &plan, &metrics);
        let mut t = timer(&metrics);
        let mut cands = l.fetch_and_fuse(&plan, bm25, vector, &mut t).await.unwrap();
        if plan.parents {
            cands = l.to_parents(cands).await.unwrap();
            assert!(cands.iter().all(|c| c.chunk.kind == ChunkKind::Parent));
        }
        if let Some(e) = &plan.expand {
            cands = l.expand(cands, e).await.unwrap();
            assert!(cands.iter().any(|c| c.passage.len() > 1), "expanded");
        }
        let got = returned(&cands);
        assert!(!got.is_empty());
        assert!(
            got.iter().all(|id| !id.contains("-v2-")),
            "a chunk of the restricted version: {got:?}"
        );
        // put v1 back for the next request
        let v2: Vec<String> = document("d", "v2", 6, HR)
            .into_iter()
            .map(|c| c.chunk_id)
            .collect();
        w.apply(&document("d", "v1", 6, &[]), &v2).unwrap();
        w.commit(&CommitPayload::new(Default::default(), 3))
            .unwrap();
        r.reload().unwrap();
    }
}

#[tokio::test]
async fn vector_hits_the_snapshot_holds_restricted_are_dropped_and_counted() {
    let (_dir, mut w, r) = index();
    restrict(&mut w);
    let snapshot = r.reload().unwrap();
    let metrics = Metrics::new();
    // A Milvus that has not applied the restriction yet names v2's chunks (and an id no
    // commit has): none of them reaches the answer, in either fetch path.
    let vector: Vec<(String, f32)> = (0..6)
        .map(|i| (format!("d-v2-{i}"), 0.9))
        .chain([("e-v1-0".to_string(), 0.5), ("nowhere".to_string(), 0.4)])
        .collect();
    for body in [
        json!({"query": "glacier", "mode": "vector"}),
        json!({"query": "glacier", "mode": "vector", "expand": {"top_m": 5, "window": 2}}),
    ] {
        let plan = plan(body);
        let l = loads(snapshot.clone(), &plan, &metrics);
        let mut t = timer(&metrics);
        let mut cands = l
            .fetch_and_fuse(&plan, Vec::new(), vector.clone(), &mut t)
            .await
            .unwrap();
        if let Some(e) = &plan.expand {
            cands = l.expand(cands, e).await.unwrap();
        }
        assert_eq!(
            returned(&cands),
            BTreeSet::from(["e-v1-0".to_string(), "e-v1-1".to_string()])
                .into_iter()
                .filter(|id| plan.expand.is_some() || id == "e-v1-0")
                .collect()
        );
        // the ranks count only what is returned
        assert_eq!(cands[0].scores.vector.map(|s| s.rank), Some(1));
    }
    let text = metrics.encode();
    // lazy path: 7 not in the snapshot with a visible chunk; loaded path: 6 refused + 1 absent
    assert!(
        text.contains("freshet_query_chunks_dropped_total{reason=\"missing\"} 8"),
        "{text}"
    );
    assert!(
        text.contains("freshet_query_chunks_dropped_total{reason=\"acl\"} 6"),
        "{text}"
    );
}

#[tokio::test]
async fn expansion_reads_only_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = ChunkIndexWriter::open_or_create(dir.path(), 50_000_000).unwrap();
    // 3,000 chunks of one document in one section; only chunk 1500 says "glacier".
    let long: Vec<Chunk> = (0..3000)
        .map(|i| {
            let mut c = leaf("long", "v1", i, &[], None);
            if i != 1500 {
                c.text = format!("plain filler number {i}");
            }
            c
        })
        .collect();
    w.apply(&long, &[]).unwrap();
    w.commit(&CommitPayload::new(Default::default(), 1))
        .unwrap();
    let r = ChunkIndexReader::open_manual(dir.path()).unwrap();
    let snapshot = r.reload().unwrap();
    let metrics = Metrics::new();
    let plan =
        plan(json!({"query": "glacier", "mode": "bm25", "expand": {"top_m": 1, "window": 2}}));
    let bm25 = snapshot
        .search_bm25(&plan.query, plan.bm25_top_k, &plan.filter)
        .unwrap();
    assert_eq!(bm25.len(), 1);
    let l = loads(snapshot, &plan, &metrics);
    let cands = l
        .fetch_and_fuse(&plan, bm25, Vec::new(), &mut timer(&metrics))
        .await
        .unwrap();
    let before = l.snapshot.stored_reads();
    let cands = l
        .expand(cands, plan.expand.as_ref().unwrap())
        .await
        .unwrap();
    let idx: Vec<u32> = cands[0].passage.iter().map(|c| c.index).collect();
    assert_eq!(idx, [1498, 1499, 1500, 1501, 1502]);
    assert_eq!(
        l.snapshot.stored_reads() - before,
        5,
        "the window, not the document"
    );
}

#[tokio::test]
async fn loads_stop_once_the_request_is_cancelled() {
    let (_dir, _w, r) = index();
    let snapshot = r.reload().unwrap();
    let metrics = Metrics::new();
    let plan = plan(json!({"query": "glacier", "mode": "vector", "parents": true}));
    let l = loads(snapshot, &plan, &metrics);
    l.job.cancel();
    let vector = vec![("d-v1-0".to_string(), 0.9)];
    let r = l
        .fetch_and_fuse(&plan, Vec::new(), vector, &mut timer(&metrics))
        .await;
    assert!(matches!(r, Err(super::RetrieveError::TimedOut)));
    assert!(metrics
        .encode()
        .contains("freshet_query_cancelled_work_total{stage=\"fetch\"} 1"));
}
