//! Overload, end to end with the real pipeline, Milvus and query node: a request past its
//! deadline stops its blocking work (a local cross-encoder with a real one's cost) and frees
//! its slot, and a request that finds every slot taken and the line full is refused at once
//! with 503 `overloaded` and `Retry-After`, instead of piling up.

use std::time::{Duration, Instant};

use anyhow::{anyhow, ensure, Result};
use freshet_tests::query::QueryNode;
use freshet_tests::{cpu_seconds, Case, RIVER_WORDS};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(180);

fn metric(node: &QueryNode, line_start: &str) -> Result<f64> {
    let text = node.get("/metrics")?.body;
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix(line_start))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0))
}

fn long_text(d: usize) -> String {
    (0..12)
        .map(|p| {
            let words: Vec<&str> = (0..120)
                .map(|i| RIVER_WORDS[(d * 11 + p * 5 + i * 3) % RIVER_WORDS.len()])
                .collect();
            format!("River gauge note {d}.{p}: {}.", words.join(" "))
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

#[test]
fn a_timed_out_request_stops_its_work_and_excess_load_is_refused_at_once() -> Result<()> {
    let mut case = Case::new("overload", 1)?;
    for d in 0..24 {
        case.send_json(
            &format!("gauge{d}"),
            &json!({"op": "upsert", "id": format!("gauge{d}"), "title": "River gauges",
                    "text": long_text(d), "acl": "public"}),
        )?;
    }
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;
    let model = case.latency_reranker()?;
    let reranker = [
        ("FRESHET_QUERY_RERANK_BACKEND", "local".to_string()),
        (
            "FRESHET_QUERY_RERANK_MODEL_DIR",
            model.display().to_string(),
        ),
        ("FRESHET_QUERY_EMBEDDER_THREADS", "1".into()),
        ("FRESHET_QUERY_MAX_RERANK_CANDIDATES", "200".into()),
    ];
    let cheap = json!({"query": "river gauge", "mode": "bm25", "k": 3});
    // 150 passages of ~250 tokens for a cross-encoder on one thread: seconds of work, even on
    // a fast idle machine (60 took 1.5 s on one).
    let slow = json!({"query": "river gauge sediment flow", "mode": "bm25", "k": 60,
                      "bm25_top_k": 150, "rerank": {"candidates": 150}});

    // How long the slow request takes when it may finish (however slow the machine: no
    // request timeout of the node's cuts it short).
    let full = {
        let mut untimed = reranker.to_vec();
        untimed.push(("FRESHET_QUERY_REQUEST_TIMEOUT_MS", "600000".to_string()));
        let node = case.start_query(&untimed)?;
        node.wait_ready(Duration::from_secs(60))?;
        node.wait_for(&cheap, WAIT, |ids| !ids.is_empty())?;
        let warm = node.post(
            "/v1/retrieve",
            &json!({"query": "river gauge", "mode": "bm25", "k": 1, "rerank": {"candidates": 1}}),
        )?;
        ensure!(warm.status == 200, "warm-up: {} {}", warm.status, warm.body);
        let t = Instant::now();
        let r = node.post("/v1/retrieve", &slow)?;
        ensure!(
            r.status == 200,
            "the slow request, untimed: {} {}",
            r.status,
            r.body
        );
        t.elapsed()
    };
    eprintln!("the slow request takes {full:?} to the end");
    ensure!(
        full > Duration::from_millis(2500),
        "the slow request is not slow enough to tell ({full:?})"
    );

    let mut settings = reranker.to_vec();
    settings.extend([
        ("FRESHET_QUERY_REQUEST_TIMEOUT_MS", "800".to_string()),
        ("FRESHET_QUERY_MAX_RUNNING_RETRIEVALS", "1".into()),
        ("FRESHET_QUERY_MAX_WAITING_RETRIEVALS", "0".into()),
    ]);
    let node = case.start_query(&settings)?;
    node.wait_ready(Duration::from_secs(60))?;
    node.wait_for(&cheap, WAIT, |ids| !ids.is_empty())?;
    // Warm the cross-encoder up (its first run loads the graph).
    let warm = node.post(
        "/v1/retrieve",
        &json!({"query": "river gauge", "mode": "bm25", "k": 1, "rerank": {"candidates": 1}}),
    )?;
    ensure!(warm.status == 200, "warm-up: {} {}", warm.status, warm.body);

    let addr = node.addr.clone();
    let started = Instant::now();
    let slow_request = std::thread::spawn(move || {
        freshet_tests::query::request(
            &addr,
            "POST",
            "/v1/retrieve",
            &[],
            slow.to_string().as_bytes(),
        )
    });
    std::thread::sleep(Duration::from_millis(300));

    // Every slot is taken and nobody may wait: refused at once.
    let asked = Instant::now();
    let refused = node.post("/v1/retrieve", &cheap)?;
    let took = asked.elapsed();

    let slow_reply = slow_request
        .join()
        .map_err(|_| anyhow!("the slow request's thread panicked"))??;
    let timed_out_after = started.elapsed();
    // Its work stops within a rerank batch or so, and the slot comes free.
    let freed = Instant::now();
    while metric(&node, "freshet_query_retrievals_running ")? > 0.0
        && freed.elapsed() < Duration::from_secs(3)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let slot_free_after = freed.elapsed();
    let cpu0 = cpu_seconds(node.pid())?;
    std::thread::sleep(Duration::from_millis(1500));
    let cpu = cpu_seconds(node.pid())? - cpu0;
    eprintln!(
        "excess request: {} in {took:?}; slow request: {} after {timed_out_after:?}; slot free \
         {slot_free_after:?} later; CPU in the next 1.5 s: {cpu:.2} s",
        refused.status, slow_reply.status
    );

    ensure!(
        refused.status == 503,
        "an excess request: {} {}",
        refused.status,
        refused.body
    );
    let body: Value = refused.json()?;
    ensure!(body["error"]["code"] == "overloaded", "{}", refused.body);
    ensure!(refused.header("retry-after").is_some(), "{}", refused.head);
    ensure!(took < Duration::from_millis(250), "refused after {took:?}");
    ensure!(
        slow_reply.status == 503 && slow_reply.json()?["error"]["code"] == "timeout",
        "the slow request: {} {}",
        slow_reply.status,
        slow_reply.body
    );
    ensure!(
        slot_free_after < Duration::from_secs(3),
        "the timed-out request still holds its slot after {slot_free_after:?}"
    );
    ensure!(
        cpu < 0.3,
        "the node kept working for nobody: {cpu:.2} CPU s"
    );
    ensure!(
        metric(
            &node,
            "freshet_query_cancelled_work_total{stage=\"rerank\"} "
        )? >= 1.0
    );
    ensure!(
        metric(
            &node,
            "freshet_query_overload_rejections_total{reason=\"queue_full\"} "
        )? == 1.0
    );
    // And the next request runs.
    let next = node.post("/v1/retrieve", &cheap)?;
    ensure!(next.status == 200, "{} {}", next.status, next.body);
    case.stop_pipeline()?;
    Ok(())
}
