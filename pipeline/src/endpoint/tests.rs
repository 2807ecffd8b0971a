//! The endpoint's tests: readiness, the routes, `/v1/status` and its access rule.

use super::*;
use crate::metrics::Metrics;

fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let r = reqwest::blocking::get(format!("http://{addr}{path}")).unwrap();
    (r.status().as_u16(), r.text().unwrap())
}

#[test]
fn readiness_follows_the_start_and_the_stop() {
    let r = Readiness::new();
    r.step("loading the Milvus collection c");
    assert!(r
        .check()
        .unwrap_err()
        .contains("loading the Milvus collection c"));
    r.workers_starting(2);
    r.worker_reading();
    assert!(r.check().unwrap_err().contains("1 of 2 workers"));
    r.worker_reading();
    assert_eq!(r.check(), Ok(()));
    r.stopping();
    assert_eq!(r.check(), Err("stopping".into()));
    r.failed("milvus down");
    assert!(r.check().unwrap_err().contains("milvus down"));
}

#[test]
fn the_endpoint_serves_metrics_health_and_readiness() {
    let metrics = Metrics::new();
    metrics.commits.inc();
    let ready = Readiness::new();
    ready.step("opening the tantivy index");
    let addr = serve("127.0.0.1:0", metrics.registry.clone(), ready.clone(), None).unwrap();
    let (status, body) = get(addr, "/metrics");
    assert_eq!(status, 200);
    assert!(body.contains("freshet_pipeline_commits_total 1"), "{body}");
    assert_eq!(get(addr, "/healthz"), (200, "ok\n".into()));
    let (status, body) = get(addr, "/readyz");
    assert_eq!(status, 503);
    assert!(body.contains("opening the tantivy index"), "{body}");
    ready.workers_starting(1);
    ready.worker_reading();
    assert_eq!(get(addr, "/readyz"), (200, r#"{"ready":true}"#.into()));
    assert_eq!(get(addr, "/nope").0, 404);
}

fn status_source(keys: &[&str]) -> (StatusSource, crate::status::Board) {
    let board = crate::status::Board::default();
    let kafka = freshet_kafka::KafkaConfig {
        // Nothing listens there: the dead letters cannot be read.
        brokers: "127.0.0.1:9".into(),
        ..Default::default()
    };
    let source = StatusSource {
        board: board.clone(),
        kafka,
        keys: keys
            .iter()
            .enumerate()
            .map(|(i, k)| (format!("k{i}"), freshet_config::Secret::from(*k)))
            .collect(),
    };
    (source, board)
}

fn get_with(addr: SocketAddr, path: &str, bearer: Option<&str>) -> (u16, String) {
    let client = reqwest::blocking::Client::new();
    let mut req = client.get(format!("http://{addr}{path}"));
    if let Some(b) = bearer {
        req = req.bearer_auth(b);
    }
    let r = req.send().unwrap();
    (r.status().as_u16(), r.text().unwrap())
}

#[test]
fn the_phase_names_a_stall_and_its_cause() {
    let r = Readiness::new();
    assert_eq!(r.phase().name, "starting");
    assert!(!r.phase().preflight_done);
    r.workers_starting(1);
    assert_eq!(r.phase().name, "workers");
    r.worker_reading();
    let p = r.phase();
    assert_eq!(p.name, "running");
    assert!(
        p.preflight_done && p.detail.starts_with("running for"),
        "{p:?}"
    );
    r.stalled("writing to Milvus: connection refused");
    let p = r.phase();
    assert_eq!(p.name, "stalled");
    assert!(p.detail.contains("connection refused"), "{p:?}");
    r.resumed();
    assert_eq!(r.phase().name, "running");
    r.failed("milvus down");
    assert_eq!(r.phase().name, "failed");
}

#[test]
fn status_answers_the_console_shape_with_a_key() {
    let metrics = Metrics::new();
    let ready = Readiness::new();
    ready.note("census", Some("most of the corpus is Thai".into()));
    ready.workers_starting(1);
    ready.worker_reading();
    let (source, board) = status_source(&["s3cret", "other"]);
    board.lag("docs", 0, Some(120), 125);
    board.durable(freshet_operators::clock::now_ms() as i64, [180, 410]);
    board.model_loaded("all-MiniLM-L6-v2");
    let addr = serve("127.0.0.1:0", metrics.registry.clone(), ready, Some(source)).unwrap();

    let (status, body) = get_with(addr, "/v1/status", None);
    assert_eq!(status, 401, "{body}");
    assert_eq!(get_with(addr, "/v1/status", Some("wrong")).0, 401);
    // The other routes need no key.
    assert_eq!(get(addr, "/healthz").0, 200);
    assert_eq!(get(addr, "/metrics").0, 200);

    let (status, body) = get_with(addr, "/v1/status", Some("other"));
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(
        v["generated_at_ms"].as_i64().unwrap() > 1_700_000_000_000,
        "{v}"
    );
    assert_eq!(v["phase"], "running");
    assert!(v["phase_detail"].is_string());
    assert_eq!(v["notes"]["census"], "most of the corpus is Thai");
    assert_eq!(
        v["partitions"],
        serde_json::json!([{"topic": "docs", "partition": 0, "committed": 120,
                            "high_watermark": 125, "lag": 5}])
    );
    assert_eq!(v["freshness"]["window_s"], 900);
    let sample = &v["freshness"]["samples"][0];
    assert_eq!(
        (&sample["p50_ms"], &sample["max_ms"], &sample["records"]),
        (
            &serde_json::json!(180),
            &serde_json::json!(410),
            &serde_json::json!(2)
        )
    );
    assert!(sample["t_ms"].is_i64());
    let dl = &v["dead_letters"];
    assert_eq!(dl["total"], 0);
    assert!(
        dl["by_class"].is_object() && dl["latest"].is_array(),
        "{dl}"
    );
    assert!(dl["error"].is_string(), "the broker is not there: {dl}");
    for service in ["kafka", "milvus", "model"] {
        let h = &v["health"][service];
        assert!(
            h["ok"].is_boolean() && h["detail"].is_string(),
            "{service}: {h}"
        );
    }
    assert_eq!(v["health"]["model"]["detail"], "all-MiniLM-L6-v2");
    assert_eq!(v["health"]["milvus"]["ok"], true, "collection loaded");
}

#[test]
fn status_without_keys_answers_on_loopback_only() {
    let ready = Readiness::new();
    let registry = Metrics::new().registry;
    // Beyond loopback: refused with what to set; the other routes are unchanged.
    let (source, _) = status_source(&[]);
    let addr = serve("0.0.0.0:0", registry.clone(), ready.clone(), Some(source)).unwrap();
    let local = SocketAddr::from(([127, 0, 0, 1], addr.port()));
    let (status, body) = get(local, "/v1/status");
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("status_keys"), "{body}");
    assert_eq!(get(local, "/healthz").0, 200);
    assert_eq!(get(local, "/metrics").0, 200);
    assert_eq!(get(local, "/readyz").0, 503);

    // On loopback: open (the dead letters cannot be read here, the rest is shown).
    let (source, _) = status_source(&[]);
    let addr = serve("127.0.0.1:0", registry, ready, Some(source)).unwrap();
    let (status, body) = get(addr, "/v1/status");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""phase":"starting""#), "{body}");
}

#[test]
fn watch_has_no_status_route() {
    let addr = serve(
        "127.0.0.1:0",
        Metrics::new().registry,
        Readiness::new(),
        None,
    )
    .unwrap();
    assert_eq!(get(addr, "/v1/status").0, 404);
}
