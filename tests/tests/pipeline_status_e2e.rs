//! `GET /v1/status` of a real pipeline (broker, Milvus, model and binary): good records and bad
//! ones of two classes are published; the status then shows every partition read with lag 0,
//! freshness samples, the dead letters by class with the newest and their keys (a Chinese one
//! among them), and Kafka, Milvus and the model healthy. With `[metrics] status_keys` set it
//! needs one of them; `/metrics` does not. A later dead letter is counted once, a replayed one
//! shows as replayed, and Milvus taken away shows as a stall with Milvus unhealthy.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use freshet_tests::proxy::{host_port, TcpProxy};
use freshet_tests::{freshet_bin, http, Case};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(180);
const KEY: &str = "console-status-key";

fn status(case: &Case, bearer: Option<&str>) -> Result<(u16, String)> {
    let addr = format!("127.0.0.1:{}", case.metrics_port);
    let auth = bearer.map(|b| format!("Bearer {b}"));
    let headers: Vec<(&str, &str)> = auth
        .as_deref()
        .map(|a| vec![("authorization", a)])
        .unwrap_or_default();
    let r = http::request(&addr, "GET", "/v1/status", &headers, b"")?;
    Ok((r.status, r.body))
}

/// The status once `done` holds for it (within [`WAIT`]).
fn wait_status(case: &Case, what: &str, done: impl Fn(&Value) -> bool) -> Result<Value> {
    let deadline = Instant::now() + WAIT;
    loop {
        let (code, body) = status(case, Some(KEY))?;
        let v: Value = serde_json::from_str(&body).with_context(|| format!("{code}: {body}"))?;
        if code == 200 && done(&v) {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("/v1/status never showed {what}: {v:#}\n{}", case.log_tail());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// What is still missing from a status for the test to be done; empty when nothing is.
fn missing(v: &Value, partitions: i32, good: u64) -> Vec<String> {
    let mut out = Vec::new();
    if v["phase"] != "running" {
        out.push(format!("phase {}", v["phase"]));
    }
    let parts = v["partitions"].as_array().cloned().unwrap_or_default();
    let read: BTreeSet<i64> = parts
        .iter()
        .filter(|p| p["lag"] == 0 && p["committed"].as_i64().is_some())
        .filter_map(|p| p["partition"].as_i64())
        .collect();
    if read.len() != partitions as usize {
        out.push(format!("partitions at lag 0: {parts:?}"));
    }
    let records: u64 = v["freshness"]["samples"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["records"].as_u64())
        .sum();
    if records < good {
        out.push(format!("freshness records {records} < {good}"));
    }
    if v["dead_letters"]["total"] != 3 {
        out.push(format!("dead letters {}", v["dead_letters"]));
    }
    for service in ["kafka", "milvus", "model"] {
        if v["health"][service]["ok"] != true {
            out.push(format!("{service}: {}", v["health"][service]));
        }
    }
    out
}

#[test]
fn status_shows_lag_freshness_dead_letters_and_health() -> Result<()> {
    let mut case = Case::new("pipeline_status", 2)?;
    // Only the pipeline reaches Milvus through the proxy, to take it away later.
    let proxy = TcpProxy::start(&host_port(&freshet_tests::env("FRESHET_MILVUS_URL"))?)?;
    case.extra_env.push((
        "FRESHET_MILVUS_URL".into(),
        format!("http://{}", proxy.addr),
    ));
    case.extra_env
        .push(("FRESHET_METRICS_STATUS_KEYS".into(), format!("[\"{KEY}\"]")));
    let doc = |text: &str, acl_key: &str| {
        serde_json::to_vec(&json!({
            "title": "Gauge report", "text": text, "content_type": "text/plain",
            "source": "test://status", acl_key: ["group:hr"]
        }))
    };
    let good = 6u64;
    for i in 0..good {
        case.send(
            &format!("good-{i}"),
            Some(&doc(
                &format!("The river gauge {i} read a spring freshet."),
                "acl",
            )?),
        )?;
    }
    case.send("broken", Some(b"{not json"))?;
    case.send("acl-typo", Some(&doc("Marsh tide readings.", "ACL")?))?;
    case.send(
        "报告/水文.md",
        Some(&doc("河流三角洲的沉积物报告。", "acls")?),
    )?;
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;

    // The key is needed; the other routes are as before.
    let deadline = Instant::now() + WAIT;
    let v = loop {
        let (code, body) = status(&case, Some(KEY))?;
        ensure!(code == 200, "{code}: {body}");
        let v: Value = serde_json::from_str(&body).with_context(|| body.clone())?;
        let left = missing(&v, case.partitions, good);
        if left.is_empty() {
            break v;
        }
        if Instant::now() > deadline {
            case.keep = true;
            bail!(
                "/v1/status never showed everything: {left:?}\n{v:#}\n{}",
                case.log_tail()
            );
        }
        std::thread::sleep(Duration::from_secs(1));
    };
    let (code, body) = status(&case, None)?;
    ensure!(code == 401, "without a key: {code} {body}");
    let (code, _) = status(&case, Some("not-the-key"))?;
    ensure!(code == 401, "a wrong key: {code}");
    ensure!(case.endpoint("/readyz")?.0 == 200);
    ensure!(case.metric("freshet_pipeline_commits_total")? >= 1.0);

    // The console's shape.
    ensure!(
        v["generated_at_ms"].as_i64().unwrap_or(0) > 1_700_000_000_000,
        "{v}"
    );
    ensure!(
        v["phase_detail"].is_string() && v["notes"].is_object(),
        "{v}"
    );
    for p in v["partitions"].as_array().into_iter().flatten() {
        ensure!(p["topic"] == case.kafka.topic.as_str(), "{p}");
        ensure!(p["high_watermark"] == p["committed"], "{p}");
    }
    ensure!(v["freshness"]["window_s"] == 900, "{v}");
    for s in v["freshness"]["samples"].as_array().into_iter().flatten() {
        let (p50, max) = (s["p50_ms"].as_i64(), s["max_ms"].as_i64());
        ensure!(
            s["t_ms"].as_i64().is_some() && p50 <= max && p50 >= Some(0),
            "{s}"
        );
    }
    let dl = &v["dead_letters"];
    ensure!(
        dl["by_class"] == json!({"invalid_field": 2, "malformed_json": 1}),
        "{dl}"
    );
    ensure!(dl["error"].is_null() && dl["as_of_ms"].is_i64(), "{dl}");
    let latest = dl["latest"].as_array().cloned().unwrap_or_default();
    let keys: BTreeSet<&str> = latest.iter().filter_map(|l| l["key"].as_str()).collect();
    ensure!(
        keys == BTreeSet::from(["broken", "acl-typo", "报告/水文.md"]),
        "{latest:?}"
    );
    for l in &latest {
        ensure!(
            l["stage"] == "decode" && l["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{l}"
        );
        ensure!(l["offset"].is_i64() && l["time_ms"].is_i64(), "{l}");
        let source = l["source"].as_str().unwrap_or_default();
        ensure!(source.starts_with(&format!("{}/", case.kafka.topic)), "{l}");
        ensure!(l["replayed"] == false, "{l}");
    }
    let times: Vec<i64> = latest
        .iter()
        .filter_map(|l| l["time_ms"].as_i64())
        .collect();
    ensure!(
        times.windows(2).all(|w| w[0] >= w[1]),
        "newest first: {times:?}"
    );
    ensure!(
        v["health"]["model"]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("MiniLM")),
        "{v}"
    );

    // A later dead letter is read on from where the last read stopped and counted once.
    case.send("broken-2", Some(b"[1, 2"))?;
    let v = wait_status(&case, "the fourth dead letter", |v| {
        v["dead_letters"]["by_class"] == json!({"invalid_field": 2, "malformed_json": 2})
    })?;
    ensure!(v["dead_letters"]["total"] == 4, "{v}");
    ensure!(v["dead_letters"]["latest"][0]["key"] == "broken-2", "{v}");

    // A replayed dead letter shows as replayed: `freshet dlq replay` writes the misspelt
    // record back as it was, and the pipeline refuses it again (a fifth dead letter).
    let out = Command::new(freshet_bin())
        .args(["dlq", "replay", "--key", "acl-typo", "--yes"])
        .env_remove("FRESHET_CONFIG")
        .env("FRESHET_KAFKA_BROKERS", &case.kafka.brokers)
        .env("FRESHET_KAFKA_TOPIC", &case.kafka.topic)
        .env("FRESHET_KAFKA_DLQ_TOPIC", &case.kafka.dlq_topic)
        .env("FRESHET_KAFKA_GROUP_ID", &case.kafka.group_id)
        .env("FRESHET_LOG", "warn")
        .output()?;
    ensure!(out.status.success(), "replay: {out:?}");
    wait_status(&case, "the replay", |v| {
        let replayed: Vec<&Value> = v["dead_letters"]["latest"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|l| l["key"] == "acl-typo")
            .map(|l| &l["replayed"])
            .collect();
        v["dead_letters"]["total"] == 5 && replayed == [&json!(false), &json!(true)]
    })?;

    // Milvus away: the write stalls and the status says so; back, all is well again.
    proxy.cut();
    case.send(
        "good-late",
        Some(&doc("A late gauge reading after the flood.", "acl")?),
    )?;
    let v = wait_status(&case, "the Milvus stall", |v| {
        v["phase"] == "stalled" && v["health"]["milvus"]["ok"] == false
    })?;
    ensure!(
        v["health"]["milvus"]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("Milvus")),
        "{v}"
    );
    ensure!(v["health"]["kafka"]["ok"] == true, "{v}");
    proxy.restore();
    wait_status(&case, "the end of the stall", |v| {
        v["phase"] == "running" && v["health"]["milvus"]["ok"] == true
    })?;
    case.stop_pipeline()?;
    Ok(())
}
