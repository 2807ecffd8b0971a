//! Query replicas, end to end with the real broker, pipeline, Milvus, model and query nodes:
//! the pipeline publishes its changelog (`[replication]`), replicas (`[replica]`) keep their own
//! index from it, and every replica converges to the pipeline's index exactly (the same chunk
//! records field by field, the same BM25 results) through edits, deletes, ACL changes and dead
//! letters; a replica SIGKILLed and restarted and a replica started late converge too;
//! `/v1/index/wait` on a replica answers for source offsets, so a write is searchable there
//! right after; and a replica never serves a state older than one it served before (watched
//! across its restart).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use freshet_operators::chunk::Chunk;
use freshet_tantivy::ChunkIndexReader;
use freshet_tests::query::{request, QueryNode};
use freshet_tests::{free_port, parse_metrics, Case};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(180);

/// Queries whose BM25 results every node must agree on, with the principals asked for.
const QUERIES: &[&str] = &[
    "heron estuary tide",
    "kingfisher river bank",
    "ledger budget crowns",
    "zephyrine lantern",
    "tide",
];
const PRINCIPALS: &[&[&str]] = &[&[], &["group:finance"], &["group:hr"]];

fn text(i: usize) -> String {
    let birds = ["heron", "kingfisher", "egret", "cormorant"];
    let bird = birds[i % birds.len()];
    format!(
        "Report {i} on the {bird}: the {bird} waits at the estuary when the tide turns. {}",
        "The river bank holds the tide line. ".repeat(i % 3 + 1)
    )
}

fn doc(text: &str, acl: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({"text": text, "acl": acl})).expect("json")
}

struct Replica {
    node: QueryNode,
    path: PathBuf,
}

fn start_replica(case: &Case, changelog: &str, path: &Path, port: u16) -> Result<Replica> {
    let node = case.start_query_on(
        port,
        &[
            ("FRESHET_QUERY_TRUST_REQUEST_PRINCIPALS", "true".into()),
            ("FRESHET_KAFKA_BROKERS", case.kafka.brokers.clone()),
            ("FRESHET_KAFKA_GROUP_ID", case.kafka.group_id.clone()),
            ("FRESHET_REPLICATION_CHANGELOG_TOPIC", changelog.into()),
            ("FRESHET_REPLICA_ENABLED", "true".into()),
            ("FRESHET_REPLICA_PATH", path.display().to_string()),
            ("FRESHET_QUERY_RELOAD_INTERVAL_MS", "20".into()),
        ],
    )?;
    node.wait_ready(Duration::from_secs(60))?;
    Ok(Replica {
        node,
        path: path.to_path_buf(),
    })
}

/// The offsets of the commit a node serves (`GET /v1/index`), `None` while it answers none.
fn served_offsets(addr: &str) -> Option<BTreeMap<String, BTreeMap<String, i64>>> {
    let r = request(addr, "GET", "/v1/index", &[], b"").ok()?;
    if r.status != 200 {
        return None;
    }
    serde_json::from_value(r.json().ok()?["offsets"].clone()).ok()
}

fn pipeline_offsets(case: &Case) -> Result<BTreeMap<String, BTreeMap<String, i64>>> {
    let payload = ChunkIndexReader::open(case.tantivy_path())?
        .last_payload()?
        .context("the pipeline has not committed")?;
    Ok(payload
        .offsets
        .into_iter()
        .map(|(t, ps)| (t, ps.into_iter().map(|(p, o)| (p.to_string(), o)).collect()))
        .collect())
}

fn chunks_at(path: &Path) -> Result<BTreeMap<String, Chunk>> {
    let all = ChunkIndexReader::open(path)?.load_all()?;
    let n = all.len();
    let by_id: BTreeMap<String, Chunk> = all.into_iter().map(|c| (c.chunk_id.clone(), c)).collect();
    ensure!(
        by_id.len() == n,
        "duplicate chunk ids in {}",
        path.display()
    );
    Ok(by_id)
}

/// (chunk id, BM25 score) of each result, in rank order; results of equal score (which an
/// index orders by its own document addresses) by chunk id.
fn bm25(node: &QueryNode, query: &str, principals: &[&str]) -> Result<Vec<(String, f64)>> {
    let v = node.retrieve(&json!({
        "query": query, "mode": "bm25", "k": 20, "principals": principals
    }))?;
    let mut hits: Vec<(String, f64)> = v["results"]
        .as_array()
        .context("no results")?
        .iter()
        .map(|h| {
            (
                h["chunk_id"].as_str().unwrap_or_default().to_string(),
                h["scores"]["bm25"]["score"].as_f64().unwrap_or(f64::NAN),
            )
        })
        .collect();
    hits.sort_by(|a, b| {
        let key = |s: f64| -(s * 1e4).round() as i64;
        key(a.1).cmp(&key(b.1)).then_with(|| a.0.cmp(&b.0))
    });
    Ok(hits)
}

/// Waits until every replica serves the pipeline's last commit, then checks that each holds
/// the pipeline's chunks exactly and answers the BM25 queries as the pipeline's node does.
fn assert_converged(case: &Case, primary: &QueryNode, replicas: &[&Replica]) -> Result<()> {
    let want = pipeline_offsets(case)?;
    let deadline = Instant::now() + WAIT;
    for r in replicas {
        while served_offsets(&r.node.addr).as_ref() != Some(&want) {
            if Instant::now() > deadline {
                bail!(
                    "replica {} serves {:?}, the pipeline committed {want:?}; log:\n{}",
                    r.path.display(),
                    served_offsets(&r.node.addr),
                    r.node.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    while served_offsets(&primary.addr).as_ref() != Some(&want) {
        ensure!(Instant::now() < deadline, "the pipeline's node lags");
        std::thread::sleep(Duration::from_millis(50));
    }
    let expected = chunks_at(&case.tantivy_path())?;
    ensure!(!expected.is_empty(), "the pipeline's index is empty");
    for r in replicas {
        let got = chunks_at(&r.path)?;
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            expected.keys().collect::<Vec<_>>(),
            "chunk ids of replica {}",
            r.path.display()
        );
        for (id, c) in &expected {
            assert_eq!(
                &got[id],
                c,
                "record of {id} in replica {}",
                r.path.display()
            );
        }
    }
    for q in QUERIES {
        for p in PRINCIPALS {
            let want = bm25(primary, q, p)?;
            for r in replicas {
                let got = bm25(&r.node, q, p)?;
                let ids =
                    |v: &[(String, f64)]| v.iter().map(|(i, _)| i.clone()).collect::<Vec<_>>();
                assert_eq!(
                    ids(&got),
                    ids(&want),
                    "BM25 ranking of {q:?} as {p:?}: replica {got:?}, pipeline {want:?}"
                );
                // tantivy's term statistics count deleted documents until their segment is
                // merged, and the two indexes merge on their own schedules.
                for ((_, a), (_, b)) in got.iter().zip(&want) {
                    ensure!(
                        (a - b).abs() <= 0.1 * b.abs().max(1e-6),
                        "BM25 score of {q:?}: replica {a}, pipeline {b}"
                    );
                }
            }
        }
    }
    Ok(())
}

#[test]
fn replicas_converge_to_the_pipeline_index_exactly() -> Result<()> {
    let mut case = Case::new("replicas", 2)?;
    let changelog = format!("{}.changelog", case.kafka.topic);
    case.extra_env.push((
        "FRESHET_REPLICATION_CHANGELOG_TOPIC".into(),
        changelog.clone(),
    ));
    for i in 0..12 {
        case.send(&format!("doc-{i}"), Some(&doc(&text(i), json!("public"))))?;
    }
    let ledger = "The ledger budget is forty million crowns, kept confidential.";
    case.send("ledger", Some(&doc(ledger, json!(["group:finance"]))))?;
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;

    let trusted = [("FRESHET_QUERY_TRUST_REQUEST_PRINCIPALS", "true".to_string())];
    let primary = case.start_query(&trusted)?;
    primary.wait_ready(Duration::from_secs(60))?;
    let r1_port = free_port();
    let mut r1 = start_replica(&case, &changelog, &case.dir.join("replica-1"), r1_port)?;
    let r2 = start_replica(&case, &changelog, &case.dir.join("replica-2"), free_port())?;
    assert_converged(&case, &primary, &[&r1, &r2])?;

    // An edit, a delete, an ACL change and dead letters (a refused version removes its document).
    case.send(
        "doc-0",
        Some(&doc(
            "The heron report was rewritten: no tide.",
            json!("public"),
        )),
    )?;
    case.send("doc-1", None)?;
    case.send("doc-2", Some(&doc(&text(2), json!(["group:hr"]))))?;
    case.send("doc-3", Some(b"{not json"))?;
    case.send("never-indexed", Some(b"{\"text\": 3}"))?;
    case.send(
        "ledger",
        Some(&doc(
            &format!("{ledger} Revised."),
            json!(["group:finance"]),
        )),
    )?;

    // Read-your-writes through a replica: wait for the record's offset, then search.
    let (p, o) = case.send_at(
        "fresh",
        Some(&doc(
            "The zephyrine lantern glows at the estuary.",
            json!("public"),
        )),
    )?;
    let wait = format!(
        "/v1/index/wait?topic={}&partition={p}&offset={o}&timeout_ms=60000",
        case.kafka.topic
    );
    let r = r2.node.get(&wait)?;
    ensure!(
        r.status == 200,
        "wait on the replica: {} {}",
        r.status,
        r.body
    );
    let ids = r2
        .node
        .doc_ids(&json!({"query": "zephyrine lantern", "mode": "bm25", "k": 5}))?;
    ensure!(
        ids.contains(&"fresh".to_string()),
        "not visible after the wait: {ids:?}"
    );
    case.wait_indexed(WAIT)?;
    case.dlq_records(2, WAIT)?;
    assert_converged(&case, &primary, &[&r1, &r2])?;

    // r1 is SIGKILLed and restarted on the same port while a client watches what it serves:
    // the offsets it serves never go back.
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (stop, addr) = (stop.clone(), r1.node.addr.clone());
        std::thread::spawn(move || -> Result<usize> {
            let mut seen: Option<BTreeMap<String, BTreeMap<String, i64>>> = None;
            let mut answers = 0;
            while !stop.load(Ordering::SeqCst) {
                if let Some(now) = served_offsets(&addr) {
                    answers += 1;
                    if let Some(before) = &seen {
                        for (t, parts) in before {
                            for (p, o) in parts {
                                let o2 = now.get(t).and_then(|ps| ps.get(p)).copied();
                                ensure!(
                                    o2.is_some_and(|o2| o2 >= *o),
                                    "served offsets went back: {t}/{p} {o} → {o2:?}"
                                );
                            }
                        }
                    }
                    seen = Some(now);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok(answers)
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill(2) on the pid of a child this test started.
    unsafe {
        libc::kill(r1.node.pid() as i32, libc::SIGKILL);
    }
    for i in 4..8 {
        case.send(
            &format!("doc-{i}"),
            Some(&doc(
                &format!("{} Edited while a replica was down.", text(i)),
                json!("public"),
            )),
        )?;
    }
    case.send("doc-9", None)?;
    let path = r1.path.clone();
    drop(r1);
    r1 = start_replica(&case, &changelog, &path, r1_port)?;
    // A replica started late builds its index from the compacted topic.
    let r3 = start_replica(&case, &changelog, &case.dir.join("replica-3"), free_port())?;
    case.wait_indexed(WAIT)?;
    assert_converged(&case, &primary, &[&r1, &r2, &r3])?;
    stop.store(true, Ordering::SeqCst);
    let answers = watcher.join().expect("watcher thread")?;
    ensure!(answers > 10, "the watcher saw {answers} answers");

    // A replica holds no delete receipts (the changelog carries chunks): it says so, before
    // any key check, rather than answer an empty list that would read as "never deleted".
    let r = request(&r3.node.addr, "GET", "/v1/deletes", &[], b"")?;
    ensure!(
        r.status == 404 && r.body.contains("query replica") && r.body.contains("not_found"),
        "/v1/deletes on a replica: {} {}",
        r.status,
        r.body
    );

    // The replicas count what they did.
    let metrics = request(&r3.node.addr, "GET", "/metrics", &[], b"")?.body;
    ensure!(
        metrics.contains("freshet_query_replica_bootstraps_total{reason=\"new\"} 1"),
        "{metrics}"
    );
    // Every commit is timed, and the marker's read is stamped once per commit, no later than
    // the whole lag (read again should a commit land between the samples of one scrape).
    let mut tries = 0;
    loop {
        let metrics = parse_metrics(&request(&r3.node.addr, "GET", "/metrics", &[], b"")?.body);
        let commits = sample(&metrics, "freshet_query_replica_commits_total")?;
        ensure!(commits >= 1.0, "no replica commit counted: {metrics:?}");
        let mut counts = Vec::new();
        for h in [
            "replica_commit_seconds",
            "replica_read_lag_seconds",
            "replica_lag_seconds",
        ] {
            counts.push((h, sample(&metrics, &format!("freshet_query_{h}_count"))?));
        }
        if counts.iter().any(|(_, n)| *n != commits) {
            tries += 1;
            ensure!(tries < 10, "observations {counts:?} for {commits} commits");
            std::thread::sleep(Duration::from_millis(200));
            continue;
        }
        let read_lag = sample(&metrics, "freshet_query_replica_read_lag_seconds_sum")?;
        let lag = sample(&metrics, "freshet_query_replica_lag_seconds_sum")?;
        ensure!(
            read_lag <= lag,
            "the marker read ({read_lag} s in all) after the commit ({lag} s in all)"
        );
        return Ok(());
    }
}

/// The unlabelled sample `name` of a scrape.
fn sample(metrics: &BTreeMap<String, f64>, name: &str) -> Result<f64> {
    metrics
        .get(name)
        .copied()
        .with_context(|| format!("{name} not in the metrics: {metrics:?}"))
}
