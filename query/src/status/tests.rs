//! The status route's parts: the pipeline's status fetched from a fake pipeline serving the
//! documented shape (ok, refused key, unreachable, slow, not JSON, not configured), the
//! sampled commit ages, and the index part of a real tantivy index.

use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use axum::Router;
use serde_json::{json, Value};

use super::*;
use crate::config::{Config, QueryConfig};

/// The pipeline's `/v1/status` in the shape the pipeline serves.
fn pipeline_status() -> Value {
    json!({
        "generated_at_ms": 1764143000000u64,
        "phase": "running", "phase_detail": "reading", "notes": {"census": "ok"},
        "partitions": [{"topic": "docs", "partition": 0, "committed": 120,
                        "high_watermark": 125, "lag": 5}],
        "freshness": {"window_s": 900, "samples": [
            {"t_ms": 1764142990000u64, "p50_ms": 180, "max_ms": 410, "records": 12}]},
        "dead_letters": {"by_class": {"unparseable": 3, "too_large": 1}, "total": 4,
            "latest": [{"offset": 7, "time_ms": 1764142000000u64, "key": "doc-1",
                        "class": "unparseable", "stage": "parse", "message": "bad json",
                        "source": "docs/0@41", "replayed": false}]},
        "health": {"kafka": {"ok": true, "detail": "2 brokers"},
                   "milvus": {"ok": true, "detail": "ok"},
                   "model": {"ok": true, "detail": "all-MiniLM-L6-v2"}}
    })
}

/// A fake pipeline endpoint on a free port: `/v1/status` answers `reply` to the bearer key
/// `key` (any caller when `None`) after `delay`, 401 to others.
async fn fake_pipeline(
    key: Option<&'static str>,
    delay: Duration,
    reply: (StatusCode, String),
) -> String {
    let app = Router::new().route(
        "/v1/status",
        get(move |h: HeaderMap| async move {
            tokio::time::sleep(delay).await;
            let given = h.get("authorization").and_then(|v| v.to_str().ok());
            match key {
                Some(k) if given != Some(&format!("Bearer {k}")) => (
                    StatusCode::UNAUTHORIZED,
                    r#"{"error":{"code":"unauthorized"}}"#.to_string(),
                ),
                _ => reply.clone(),
            }
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    format!("http://{addr}")
}

fn config(url: &str, key: &str) -> QueryConfig {
    QueryConfig {
        pipeline_url: url.into(),
        pipeline_status_key: key.into(),
        pipeline_timeout_ms: 500,
        ..QueryConfig::default()
    }
}

async fn fetch(c: &QueryConfig) -> PipelinePart {
    StatusSources::new(c, &|_| None)
        .unwrap()
        .pipeline_part()
        .await
}

fn ok_reply() -> (StatusCode, String) {
    (StatusCode::OK, pipeline_status().to_string())
}

#[tokio::test]
async fn the_pipeline_status_is_passed_on_with_its_key() {
    let url = fake_pipeline(Some("s3cret"), Duration::ZERO, ok_reply()).await;
    let got = fetch(&config(&url, "s3cret")).await;
    assert_eq!(got.state, "ok", "{got:?}");
    assert_eq!(got.status, Some(pipeline_status()));
    assert_eq!(got.url, format!("{url}/v1/status"));
    // A trailing slash in the setting asks the same URL.
    assert_eq!(
        fetch(&config(&format!("{url}/"), "s3cret")).await.state,
        "ok"
    );
}

#[tokio::test]
async fn a_refused_or_missing_key_is_unauthorized_and_says_what_to_set() {
    let url = fake_pipeline(Some("s3cret"), Duration::ZERO, ok_reply()).await;
    let wrong = fetch(&config(&url, "other")).await;
    assert_eq!(wrong.state, "unauthorized");
    assert!(wrong.detail.contains("refused"), "{}", wrong.detail);
    assert_eq!(wrong.status, None);
    let none = fetch(&config(&url, "")).await;
    assert_eq!(none.state, "unauthorized");
    assert!(
        none.detail.contains("pipeline_status_key"),
        "{}",
        none.detail
    );
}

#[tokio::test]
async fn an_absent_slow_or_broken_pipeline_is_reported_not_fatal() {
    // Nothing listens on this port (bound, then closed).
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let down = fetch(&config(&closed, "")).await;
    assert_eq!(down.state, "unreachable", "{down:?}");

    let slow = fake_pipeline(None, Duration::from_secs(5), ok_reply()).await;
    let got = fetch(&config(&slow, "")).await;
    assert_eq!(got.state, "unreachable");
    assert!(got.detail.contains("pipeline_timeout_ms"), "{}", got.detail);

    for reply in [
        (StatusCode::OK, "<html>not json</html>".to_string()),
        (StatusCode::OK, "[1, 2]".to_string()),
        (StatusCode::INTERNAL_SERVER_ERROR, "{}".to_string()),
    ] {
        let url = fake_pipeline(None, Duration::ZERO, reply.clone()).await;
        let got = fetch(&config(&url, "")).await;
        assert_eq!((got.state, got.status), ("error", None), "{reply:?}");
    }

    let big = "x".repeat(pipeline::MAX_STATUS_BYTES + 1);
    let url = fake_pipeline(None, Duration::ZERO, (StatusCode::OK, big)).await;
    let got = fetch(&config(&url, "")).await;
    assert_eq!(got.state, "error");
    assert!(got.detail.contains("larger"), "{}", got.detail);
}

#[tokio::test]
async fn without_a_pipeline_url_the_part_says_what_to_set() {
    let got = fetch(&QueryConfig::default()).await;
    assert_eq!(got.state, "not_configured");
    assert!(got.detail.contains("pipeline_url"));
    let shown = serde_json::to_value(&got).unwrap();
    assert_eq!(shown["state"], "not_configured");
    assert!(shown.get("status").is_none());
}

#[test]
fn pipeline_settings_that_look_wrong_stop_the_node() {
    let load = |toml: &str| {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("freshet.toml");
        std::fs::write(&file, toml).unwrap();
        Config::load_with_env(Some(&file), &[]).map(|_| ())
    };
    assert!(load("[query]\npipeline_url = \"http://127.0.0.1:9464\"\n").is_ok());
    assert!(load(
        "[query]\npipeline_url = \"https://pipe.example\"\npipeline_status_key = \"k\"\n"
    )
    .is_ok());
    for (toml, expect) in [
        ("[query]\npipeline_url = \"127.0.0.1:9464\"\n", "http"),
        ("[query]\npipeline_url = \"ftp://h/\"\n", "http(s)"),
        ("[query]\npipeline_url = \"http://h:1/?x=1\"\n", "base URL"),
        (
            "[query]\npipeline_status_key = \"k\"\n",
            "pipeline_url is empty",
        ),
        (
            "[query]\npipeline_url = \"http://pipe.example:9464\"\npipeline_status_key = \"k\"\n",
            "pipeline_allow_insecure_http",
        ),
        (
            "[query]\npipeline_url = \"http://127.0.0.1:1\"\npipeline_timeout_ms = 0\n",
            "pipeline_timeout_ms",
        ),
    ] {
        let e = format!("{:#}", load(toml).unwrap_err());
        assert!(e.contains(expect), "{toml}: {e}");
    }
    // A key file that cannot be read stops the node at start.
    let c = QueryConfig {
        pipeline_status_key_file: "/nonexistent/key".into(),
        ..config("http://127.0.0.1:1", "")
    };
    assert!(StatusSources::new(&c, &|_| None).is_err());
    let c = QueryConfig {
        pipeline_status_key_env: "PIPE_KEY".into(),
        ..config("http://127.0.0.1:1", "")
    };
    assert!(StatusSources::new(&c, &|_| None).is_err());
    assert!(StatusSources::new(&c, &|_| Some("k".into())).is_ok());
}

#[test]
fn commit_ages_are_kept_for_the_window_only() {
    let h = AgeHistory::default();
    let window = ages::WINDOW.as_millis() as u64;
    h.record(1_000, 0, 0);
    h.record(2_000, 1, 1_500);
    assert_eq!(
        h.samples()
            .iter()
            .map(|s| (s.epoch, s.age_ms))
            .collect::<Vec<_>>(),
        [(0, 0), (1, 500)]
    );
    h.record(2_000 + window, 2, 2_000 + window - 40);
    let left: Vec<u64> = h.samples().iter().map(|s| s.t_ms).collect();
    assert_eq!(left, [2_000, 2_000 + window]);
}

#[test]
fn the_index_part_counts_documents_and_chunks_of_the_commit_served() {
    use freshet_tantivy::{Bm25Params, ChunkIndexWriter, CommitPayload};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("index");
    let mut w = ChunkIndexWriter::open_or_create(&path, 50_000_000).unwrap();
    let ix = Indexes::new(crate::metrics::Metrics::new());
    let none = tantivy_part(&ix);
    assert_eq!(
        (none["ok"].clone(), none["chunks"].clone()),
        (json!(false), Value::Null)
    );

    let chunk = |doc: &str, i: u32| freshet_core::chunk::Chunk {
        chunk_id: format!("{doc}-{i}"),
        index: i,
        ..freshet_core::testing::chunk(doc, "text")
    };
    w.apply(&[chunk("a", 0), chunk("a", 1), chunk("b", 0)], &[])
        .unwrap();
    w.commit(&CommitPayload::new(
        [("docs".into(), [(0, 7)].into())].into(),
        3,
    ))
    .unwrap();
    ix.reload_tick(&path, Bm25Params::default());
    let t = tantivy_part(&ix);
    assert_eq!(
        (t["documents"].clone(), t["chunks"].clone()),
        (json!(2), json!(3))
    );
    let now = freshet_core::clock::now_ms();
    let i = index_part(&ix, now);
    assert_eq!(i["epoch"], 3);
    assert_eq!(i["offsets"], json!({"docs": {"0": 7}}));
    assert!(i["age_ms"].as_u64().is_some());
}
