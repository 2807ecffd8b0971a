//! The console (`/console/`) in a real browser: Debian's headless chromium driven through its
//! chromedriver by Python's `selenium` (`tests/fixtures/console_browser.py`, in
//! `FRESHET_PYTHON`'s environment), against the real broker, pipeline, Milvus, model and query
//! node with API keys and an admin key. It loads the page, shows the 401 message without a key,
//! searches with a key in each mode (per-route ranks and scores, highlighted terms, also for a
//! Chinese query), asks the answer endpoint (the deterministic stand-in model), opens a document
//! from its result, reads the status page (counts, the pipeline's lag, freshness plot and dead
//! letters fetched through the node, the served commit's age plot; an API key is refused there
//! when admin keys are set), and checks that a key without the finance group does not see the
//! private document. The pipeline's status
//! comes from its `GET /v1/status` (`[query] pipeline_url`). Screenshots are kept under the
//! run directory's `artifacts/console/` (`FRESHET_RUN_DIR`), named in the test output.
//!
//! The browser is not optional: without chromium, chromedriver or selenium the test fails.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use freshet_tests::llm::LiveStandIn;
use freshet_tests::query::{LEDGER_TEXT, PUBLIC_AND_FINANCE_KEYS};
use freshet_tests::{env, workspace_root, Case};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(180);
const VISIBLE: Duration = Duration::from_secs(30);
const ADMIN_KEY: &str = "key-admin";

fn doc(id: &str, title: &str, text: &str, acl: Value) -> Value {
    json!({"op": "upsert", "id": id, "title": title, "text": text, "content_type": "text/plain",
           "source": format!("test://{id}"), "acl": acl})
}

/// A report of several chunks on glaciers.
fn glacier_report() -> String {
    [
        "Glacier melt feeds the rivers of the valley every summer",
        "Meltwater lakes form at the glacier snout as the ice retreats",
        "Surveyors measure the glacier front each autumn with stakes and drones",
        "The melt season now starts three weeks earlier than a century ago",
        "Sediment carried by the melt colours the river a milky green",
    ]
    .iter()
    .map(|s| {
        (0..6)
            .map(|i| format!("{s}, as the record of year {i} shows. "))
            .collect::<String>()
    })
    .collect::<Vec<_>>()
    .join("\n\n")
}

const CHINESE_TEXT: &str = "全球变暖使高山冰川加速融化。冰川融水补给下游河流，\
    但冰川退缩也让夏季径流在几十年后减少。科学家每年测量冰川末端的位置。";

fn artifacts_dir(case: &Case) -> PathBuf {
    std::env::var("FRESHET_RUN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| case.dir.clone())
        .join("artifacts")
        .join("console")
}

/// The result list of one search in the report, by document id.
fn ids(search: &Value) -> Vec<&str> {
    search["results"]
        .as_array()
        .map(|r| r.iter().filter_map(|h| h["doc_id"].as_str()).collect())
        .unwrap_or_default()
}

/// The routes a result shows a rank and score for.
fn routes(hit: &Value) -> Vec<&str> {
    hit["scores"]
        .as_object()
        .map(|s| s.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

fn has_numbers(hit: &Value, route: &str) -> bool {
    let s = &hit["scores"][route];
    s["rank"].as_str().is_some_and(|r| r.parse::<u32>().is_ok())
        && s["score"]
            .as_str()
            .is_some_and(|v| v.parse::<f64>().is_ok())
}

fn check_modes(r: &Value) -> Result<()> {
    ensure!(
        r["no_key"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("401 unauthorized") && m.contains("key")),
        "no key: {}",
        r["no_key"]
    );
    ensure!(ids(&r["no_key"]).is_empty(), "{}", r["no_key"]);

    for (mode, want) in [
        ("hybrid", ["bm25", "vector", "fused"].as_slice()),
        ("bm25", ["bm25"].as_slice()),
        ("vector", ["vector"].as_slice()),
        ("hybrid_again", ["bm25", "vector", "fused"].as_slice()),
    ] {
        let s = &r[mode];
        let top = &s["results"][0];
        ensure!(top["doc_id"] == "glaciers", "{mode}: {s}");
        let got: Vec<&str> = routes(top).into_iter().filter(|x| *x != "final").collect();
        let mut want_sorted = want.to_vec();
        want_sorted.sort();
        ensure!(
            got == want_sorted,
            "{mode}: routes {got:?}, want {want:?}: {s}"
        );
        for route in want.iter().chain(&["final"]) {
            ensure!(
                has_numbers(top, route) || *route == "final",
                "{mode}: {route} {top}"
            );
        }
        let meta = s["meta"].as_str().unwrap_or_default();
        let mode_name = mode.trim_end_matches("_again");
        ensure!(
            meta.contains(&format!("mode {mode_name}"))
                && meta.contains("total")
                && meta.contains("commit "),
            "{mode}: meta {meta:?}"
        );
    }
    // Highlights: the query's words and their stems (melt, glacier), not other words.
    let marks: Vec<String> = r["hybrid"]["results"][0]["marks"]
        .as_array()
        .context("marks")?
        .iter()
        .filter_map(|m| m.as_str().map(str::to_lowercase))
        .collect();
    ensure!(
        marks.iter().any(|m| m == "glacier") && marks.iter().any(|m| m == "melt"),
        "{marks:?}"
    );
    ensure!(
        marks
            .iter()
            .all(|m| m.starts_with("glacier") || m.starts_with("melt")),
        "{marks:?}"
    );
    // The Chinese query: the Chinese document, its words marked (no spaces to split on).
    let zh = &r["chinese"];
    ensure!(zh["results"][0]["doc_id"] == "bingchuan", "{zh}");
    let zh_marks: Vec<&str> = zh["results"][0]["marks"]
        .as_array()
        .context("marks")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    ensure!(
        zh_marks.contains(&"冰川") && zh_marks.iter().any(|m| m.contains("融化")),
        "{zh_marks:?}"
    );
    ensure!(
        zh_marks.iter().all(|m| m.chars().count() <= 4),
        "whole sentences marked: {zh_marks:?}"
    );
    Ok(())
}

fn check_document(r: &Value) -> Result<()> {
    let d = &r["document"];
    let idx: Vec<u64> = d["indexes"]
        .as_array()
        .context("indexes")?
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    ensure!(
        idx.len() >= 3 && idx == (0..idx.len() as u64).collect::<Vec<_>>(),
        "{d}"
    );
    ensure!(
        d["title"] == "Glaciers of the valley"
            && d["meta"].as_str().is_some_and(|m| m.contains("glaciers"))
            && d["hits"].as_array().is_some_and(|h| !h.is_empty()),
        "{d}"
    );
    let texts = d["texts"].as_array().context("texts")?;
    ensure!(
        texts[0]
            .as_str()
            .is_some_and(|t| t.starts_with("Glacier melt"))
            && texts
                .last()
                .and_then(Value::as_str)
                .is_some_and(|t| t.contains("Sediment")),
        "{d}"
    );
    Ok(())
}

fn check_status(r: &Value) -> Result<()> {
    let refused = &r["status_with_api_key"];
    ensure!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("401") && m.contains("admin key")),
        "{refused}"
    );
    let s = &r["status"];
    ensure!(s["message"] == "", "{s}");
    let row = |table: &str, name: &str| -> Option<String> {
        s[table]
            .as_array()?
            .iter()
            .find_map(|r| (r[0] == name).then(|| r[1].as_str().unwrap_or_default().to_owned()))
    };
    // The three documents (the admin's status counts all of them, the private one too).
    ensure!(
        row("indexes", "tantivy documents").as_deref() == Some("3")
            && row("indexes", "node ready").as_deref() == Some("yes"),
        "{s}"
    );
    ensure!(
        row("indexes", "milvus vectors").is_some_and(|v| v.parse::<u64>().is_ok_and(|n| n >= 3)),
        "{s}"
    );
    ensure!(
        row("commit", "offsets").is_some_and(|o| o.contains("/0: ")),
        "{s}"
    );
    let health = s["health"].to_string();
    for part in [
        "✓ node tantivy",
        "✓ node milvus",
        "✓ node model",
        "✓ pipeline kafka",
        "✓ pipeline milvus",
        "✓ pipeline model",
    ] {
        ensure!(health.contains(part), "{part} not in {health}");
    }
    ensure!(
        s["pipeline"]
            .as_str()
            .is_some_and(|p| p.contains("state: ok") && p.contains("phase: running")),
        "{s}"
    );
    // The plots: points of the pipeline's freshness and of the served commit's age.
    ensure!(
        s["freshness_points"].as_u64() >= Some(1) && s["freshness_lines"].as_u64() >= Some(1),
        "{s}"
    );
    ensure!(s["age_points"].as_u64() >= Some(2), "{s}");
    // Lag per partition, and the dead letter with its key, class and message.
    ensure!(
        s["partitions"]
            .as_array()
            .is_some_and(|p| p.len() >= 2 && p[1][1] == "0"),
        "{s}"
    );
    ensure!(
        s["dlq_classes"]
            .as_str()
            .is_some_and(|c| c.contains("malformed_json 1")),
        "{s}"
    );
    let latest = s["dlq_latest"].as_array().context("dlq_latest")?;
    ensure!(
        latest
            .iter()
            .any(|d| d[1] == "broken" && d[2] == "malformed_json" && d[4] != ""),
        "{s}"
    );
    Ok(())
}

#[test]
fn the_console_searches_opens_documents_and_shows_status_in_a_browser() -> Result<()> {
    for tool in ["chromium", "chromedriver"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .status()?
            .success();
        ensure!(
            found,
            "{tool} is not installed: apt-get install chromium chromium-driver (deploy/install.sh \
             does, unless --no-browser); the console's browser test cannot run without it"
        );
    }
    let mut case = Case::new("console", 1)?;
    case.start_pipeline()?;
    case.send_json(
        "glaciers",
        &doc(
            "glaciers",
            "Glaciers of the valley",
            &glacier_report(),
            json!("public"),
        ),
    )?;
    case.send_json(
        "bingchuan",
        &doc("bingchuan", "冰川融化", CHINESE_TEXT, json!("public")),
    )?;
    case.send_json(
        "ledger",
        &doc(
            "ledger",
            "Finance ledger",
            LEDGER_TEXT,
            json!(["group:finance"]),
        ),
    )?;
    // A record that is not JSON: a dead letter the status page lists.
    case.send("broken", Some(b"{ this is not json"))?;
    case.wait_indexed(WAIT)?;

    // The deterministic stand-in language model answers the console's Answer button.
    let model = LiveStandIn::start()?;
    let mut settings = model.node_settings("standin");
    settings.extend([
        ("FRESHET_QUERY_KEYS", PUBLIC_AND_FINANCE_KEYS.into()),
        ("FRESHET_QUERY_ADMIN_KEYS", format!(r#"["{ADMIN_KEY}"]"#)),
        (
            "FRESHET_QUERY_PIPELINE_URL",
            format!("http://127.0.0.1:{}", case.metrics_port),
        ),
    ]);
    let node = case.start_query(&settings)?;
    node.wait_ready(Duration::from_secs(60))?;
    node.wait_for_as(
        Some("key-finance"),
        &json!({"query": "glacier dredging 冰川", "mode": "bm25", "k": 5}),
        VISIBLE,
        |ids| {
            ["glaciers", "bingchuan", "ledger"]
                .iter()
                .all(|d| ids.iter().any(|i| i == d))
        },
    )?;

    let artifacts = artifacts_dir(&case);
    let python = env("FRESHET_PYTHON");
    let script = workspace_root().join("tests/fixtures/console_browser.py");
    let run = Command::new(&python)
        .arg(&script)
        .arg(format!("http://{}", node.addr))
        .arg(&artifacts)
        .args(["key-finance", "key-public", ADMIN_KEY])
        .output()
        .with_context(|| format!("running {python}"))?;
    let shots: Vec<PathBuf> = std::fs::read_dir(&artifacts)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    println!("console screenshots in {}:", artifacts.display());
    for s in &shots {
        println!("  {}", s.display());
    }
    ensure!(
        run.status.success(),
        "{} failed ({}): {}\n{}",
        script.display(),
        run.status,
        String::from_utf8_lossy(&run.stderr),
        node.log_tail()
    );
    let report: Value = serde_json::from_slice(&run.stdout).context("the script's report")?;
    let named = report["screenshots"].as_array().context("screenshots")?;
    ensure!(
        named.len() >= 10
            && named.iter().all(|p| p
                .as_str()
                .is_some_and(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 1000))),
        "screenshots: {named:?}"
    );

    check_modes(&report)?;
    // The finance key finds the private document; the public key does not.
    ensure!(
        ids(&report["private"]).first() == Some(&"ledger"),
        "{}",
        report["private"]
    );
    ensure!(
        !ids(&report["public_private"]).contains(&"ledger")
            && !report["public_private"]
                .to_string()
                .contains("forty million"),
        "{}",
        report["public_private"]
    );
    // The answer endpoint: the model's answer citing the glacier report.
    let a = &report["answer"];
    ensure!(
        a["heading"] == "Answer"
            && a["answer"]
                .as_str()
                .is_some_and(|t| t.contains("[1]") && t.to_lowercase().contains("glacier"))
            && a["passages"].as_array().is_some_and(|p| p.iter().any(|x| x
                .as_str()
                .is_some_and(|x| x.starts_with("[1] Glaciers of the valley")))),
        "{a}"
    );
    check_document(&report)?;
    check_status(&report)?;
    Ok(())
}
