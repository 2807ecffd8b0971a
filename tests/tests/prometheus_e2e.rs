//! The monitoring files against the live binaries: the real Prometheus (Debian's package,
//! `deploy/install-prometheus.sh`) scrapes a pipeline, an ingest service and two query nodes
//! and the quality canary (`freshet-tools canary`, two canary queries every second) with the
//! scrape configuration of `deploy/prometheus/prometheus.yml` (its targets replaced by the
//! test's ports, a 1 s interval) and evaluates `deploy/prometheus/alerts.yml`; traffic of
//! every kind the dashboard shows (documents through Kafka and the ingest service, refused
//! writes, a dead letter, retrievals in every mode, a bad request, answers whole and streamed
//! through the stand-in model, and a second node whose model fails: degraded retrievals and
//! failed answers). Then every expression of the Grafana dashboard must return data (and the
//! canaries their known answers: nDCG over 0.5, both answered), every
//! alert rule must evaluate without error, and every series an alert is built on (its metric
//! names with their `=` label matchers) must exist. A failure names each expression that
//! returned nothing. Without Prometheus the test fails and says how to install it.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use freshet_tests::ingest::IngestService;
use freshet_tests::llm::LiveStandIn;
use freshet_tests::prometheus::{dashboard_exprs, prometheus_bin, selectors, Prometheus};
use freshet_tests::query::QueryNode;
use freshet_tests::spawned::Spawned;
use freshet_tests::{free_port, freshet_bin, workspace_root, Case};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(180);
/// The dashboard's variables as the test fills them: Grafana's rate window for a 1 s scrape
/// interval, and every instance.
const VARIABLES: [(&str, &str); 4] = [
    ("$__rate_interval", "1m"),
    ("$pipeline", ".+"),
    ("$ingest", ".+"),
    ("$query", ".+"),
];

/// `text` with `from` replaced by `to`, which must occur exactly once (the configuration file
/// changed shape otherwise, and the test must be told).
fn replace_once(text: &str, from: &str, to: &str) -> Result<String> {
    ensure!(
        text.matches(from).count() == 1,
        "deploy/prometheus/prometheus.yml: expected `{from}` once"
    );
    Ok(text.replacen(from, to, 1))
}

/// deploy/prometheus/prometheus.yml for the test's ports: a 1 s interval, the alert rules by
/// absolute path.
fn scrape_config(pipeline: u16, ingest: &str, queries: &[&str], canary: &str) -> Result<String> {
    let dir = workspace_root().join("deploy/prometheus");
    let text = std::fs::read_to_string(dir.join("prometheus.yml"))?;
    let text = replace_once(&text, "scrape_interval: 15s", "scrape_interval: 1s")?;
    let text = replace_once(&text, "evaluation_interval: 15s", "evaluation_interval: 1s")?;
    let rules = dir.join("alerts.yml");
    let text = replace_once(
        &text,
        "  - alerts.yml",
        &format!("  - {}", json!(rules.display().to_string())),
    )?;
    let text = replace_once(
        &text,
        r#"targets: ["127.0.0.1:9464"]"#,
        &format!(r#"targets: ["127.0.0.1:{pipeline}"]"#),
    )?;
    let text = replace_once(
        &text,
        r#"targets: ["127.0.0.1:8090"]"#,
        &format!("targets: {}", json!([ingest])),
    )?;
    let text = replace_once(
        &text,
        r#"targets: ["127.0.0.1:8080"]"#,
        &format!("targets: {}", json!(queries)),
    )?;
    replace_once(
        &text,
        r#"targets: ["127.0.0.1:9465"]"#,
        &format!("targets: {}", json!([canary])),
    )
}

/// Runs `freshet-tools canary` against `node` every second with two canary queries whose
/// answers the traffic indexed.
fn start_canary(case: &Case, node: &QueryNode) -> Result<(Spawned, String)> {
    let queries = case.dir.join("canaries.jsonl");
    std::fs::write(
        &queries,
        [
            json!({"query": "heron estuary tide", "mode": "bm25",
                   "relevant": {"heron": 2, "heron-copy": 1}}),
            json!({"query": "salmon spawn upstream", "mode": "hybrid", "relevant": ["salmon"]}),
        ]
        .iter()
        .map(|l| format!("{l}\n"))
        .collect::<String>(),
    )?;
    let addr = format!("127.0.0.1:{}", free_port());
    let mut cmd = Command::new(freshet_bin().with_file_name("freshet-tools"));
    cmd.arg("canary")
        .arg("--queries")
        .arg(&queries)
        .args(["--node", &format!("http://{}", node.addr)])
        .args(["--interval-s", "1", "--listen", &addr]);
    let log = case.dir.join("canary.log");
    let canary = Spawned::start("the canary", cmd, &addr, log, Duration::from_secs(30))?;
    Ok((canary, addr))
}

fn doc(id: &str, title: &str, text: &str) -> Value {
    json!({"id": id, "title": title, "text": text, "content_type": "text/plain",
           "source": format!("test://{id}"), "acl": "public"})
}

fn ok(node: &QueryNode, path: &str, body: &Value) -> Result<String> {
    let r = node.post(path, body)?;
    ensure!(r.status == 200, "{path} {body} → {}: {}", r.status, r.body);
    Ok(r.body)
}

/// The services the test runs and Prometheus scrapes.
struct Services {
    ingest: IngestService,
    nodes: Vec<QueryNode>,
}

/// Starts the ingest service and two query nodes, and sends every kind of traffic the
/// dashboard shows.
fn traffic(case: &mut Case, standin: &LiveStandIn) -> Result<Services> {
    let key = ("X-API-Key", "secret");
    let ingest = case.start_ingest(&[(
        "FRESHET_INGEST_KEYS",
        r#"[{name = "all", key = "secret", id_prefixes = ["*"], may_grant = ["*"], may_publish_public = true, may_delete = true}]"#
            .into(),
    )])?;
    // One document through Kafka, so that the query nodes find an index to open.
    case.send_json(
        "kingfisher",
        &json!({"op": "upsert", "id": "kingfisher", "title": "Kingfisher note",
                "text": "Kingfishers dive for fish from a perch over the river.",
                "content_type": "text/plain", "source": "test://kingfisher", "acl": "public"}),
    )?;
    case.wait_indexed(WAIT)?;
    let mut answering = standin.node_settings("standin");
    answering.push(("FRESHET_QUERY_TRUST_REQUEST_PRINCIPALS", "true".into()));
    let node = case.start_query(&answering)?;
    // The second node's model answers 500: its transformations fall back (degraded) and its
    // answers fail (llm_server_error).
    let failing = case.start_query(&standin.node_settings("standin-500"))?;
    for n in [&node, &failing] {
        n.wait_ready(Duration::from_secs(60))?;
    }

    // Through the ingest service, after the nodes started (their visibility delay is observed):
    // two documents of the same text (the embedding cache's hit), a delete, a refused write
    // (400) and an unauthenticated one (401).
    let ndjson = ("Content-Type", "application/x-ndjson");
    let text = "Herons wait at the estuary when the tide turns. They eat small fish.";
    let batch = [
        doc("heron", "Heron report", text),
        doc("heron-copy", "Heron report", text),
        doc(
            "salmon",
            "Salmon notes",
            "Salmon swim upstream to spawn in autumn. The estuary is their door.",
        ),
    ];
    let body: String = batch.iter().map(|d| format!("{d}\n")).collect();
    ingest.write(
        "POST",
        "/v1/documents:batch",
        &[ndjson, key],
        body.as_bytes(),
    )?;
    ingest.write("DELETE", "/v1/documents/kingfisher", &[key], b"")?;
    let refused = ingest.call(
        "PUT",
        "/v1/documents/a",
        &[("Content-Type", "application/json"), key],
        b"{\"text\":",
    )?;
    ensure!(refused.status == 400, "{} {}", refused.status, refused.body);
    let unauthorized = ingest.call("POST", "/v1/documents:batch", &[ndjson], b"{\"id\":\"a\"}")?;
    ensure!(unauthorized.status == 401, "{}", unauthorized.status);
    // One dead letter: a record that is not JSON, straight to Kafka.
    case.send("broken", Some(b"{not json".as_slice()))?;
    case.wait_indexed(WAIT)?;

    let q = json!({"query": "heron estuary tide", "mode": "bm25", "k": 3});
    node.wait_for(&q, WAIT, |ids| ids.iter().any(|i| i == "heron"))?;
    for mode in ["hybrid", "bm25", "vector"] {
        ok(
            &node,
            "/v1/retrieve",
            &json!({"query": "salmon spawn upstream", "mode": mode, "k": 3}),
        )?;
    }
    let bad = node.post("/v1/retrieve", &json!({"query": 5}))?;
    ensure!(bad.status == 400, "{} {}", bad.status, bad.body);
    ok(&node, "/v1/answer", &q)?;
    let mut streamed = q.clone();
    streamed["stream"] = json!(true);
    ok(&node, "/v1/answer", &streamed)?;

    let transformed = json!({"query": "What happened to them later?", "k": 3,
        "history": [{"role": "user", "content": "Which birds wait at the estuary?"},
                    {"role": "assistant", "content": "Herons do."}],
        "transform": {"multi_query": 2}});
    let degraded: Value = serde_json::from_str(&ok(&failing, "/v1/retrieve", &transformed)?)?;
    ensure!(
        degraded["degraded"]
            .as_array()
            .is_some_and(|d| !d.is_empty()),
        "not degraded: {degraded}"
    );
    let failed = failing.post("/v1/answer", &q)?;
    ensure!(failed.status == 503, "{} {}", failed.status, failed.body);
    Ok(Services {
        ingest,
        nodes: vec![node, failing],
    })
}

/// Polls `check` every second until it finds nothing missing or `timeout` passes; the last
/// list of what is missing.
fn until_complete(
    timeout: Duration,
    mut check: impl FnMut() -> Result<Vec<String>>,
) -> Result<Vec<String>> {
    let deadline = Instant::now() + timeout;
    loop {
        let missing = check()?;
        if missing.is_empty() || Instant::now() > deadline {
            return Ok(missing);
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[test]
fn every_dashboard_and_alert_expression_has_data_from_the_live_binaries() -> Result<()> {
    // Fail first, and clearly, when Prometheus is not installed.
    prometheus_bin()?;
    let dashboard_path = std::env::var("FRESHET_TEST_DASHBOARD")
        .map(PathBuf::from)
        .unwrap_or_else(|_| workspace_root().join("deploy/grafana/dashboards/freshet.json"));
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(&dashboard_path)
            .with_context(|| format!("reading {}", dashboard_path.display()))?,
    )?;
    let panels = dashboard_exprs(&dashboard);
    ensure!(
        panels.len() > 20,
        "only {} dashboard expressions",
        panels.len()
    );
    let alerts_yml =
        std::fs::read_to_string(workspace_root().join("deploy/prometheus/alerts.yml"))?;
    let alert_count = alerts_yml
        .lines()
        .filter(|l| l.trim_start().starts_with("- alert:"))
        .count();

    let mut case = Case::new("prometheus", 1)?;
    case.start_pipeline()?;
    let standin = LiveStandIn::start()?;
    let services = traffic(&mut case, &standin)?;
    let (_canary, canary_addr) = start_canary(&case, &services.nodes[0])?;
    let queries: Vec<&str> = services.nodes.iter().map(|n| n.addr.as_str()).collect();
    let config = scrape_config(
        case.metrics_port,
        &services.ingest.addr,
        &queries,
        &canary_addr,
    )?;
    let config_path = case.dir.join("prometheus.yml");
    std::fs::write(&config_path, config)?;
    let prometheus = Prometheus::start(&config_path, &case.dir)?;

    // Every target up: the pipeline, the ingest service, both query nodes, the canary.
    let targets = 3 + queries.len();
    let down = until_complete(Duration::from_secs(30), || {
        let up = prometheus.query(r#"up{job=~"freshet-.*"} == 1"#)?;
        Ok(if up.len() == targets {
            Vec::new()
        } else {
            vec![format!("{} of {targets} targets up", up.len())]
        })
    })?;
    ensure!(
        down.is_empty(),
        "{down:?}: {:?}; log: {}",
        prometheus.api("/api/v1/targets", &[])?,
        prometheus.log_tail()
    );

    // Every dashboard expression returns data (rates need two scrapes in their window: polled
    // for up to 30 s).
    let exprs: Vec<(String, String)> = panels
        .iter()
        .map(|(title, e)| {
            let e = VARIABLES
                .iter()
                .fold(e.clone(), |e, (var, value)| e.replace(var, value));
            (title.clone(), e)
        })
        .collect();
    for (title, e) in &exprs {
        ensure!(
            !e.contains('$'),
            "panel {title:?}: an unknown variable in {e}"
        );
    }
    let empty_panels = until_complete(Duration::from_secs(30), || {
        let mut missing = Vec::new();
        for (title, e) in &exprs {
            if prometheus.query(e)?.is_empty() {
                missing.push(format!("panel {title:?}: {e}"));
            }
        }
        Ok(missing)
    })?;

    // The canaries found their known answers.
    let canary_low = until_complete(Duration::from_secs(30), || {
        let mut missing = Vec::new();
        for e in [
            "freshet_canary_answered_queries == 2",
            "freshet_canary_ndcg > 0.5",
            "freshet_canary_recall > 0.5",
        ] {
            if prometheus.query(e)?.is_empty() {
                missing.push(format!(
                    "canary: {e}: {:?}",
                    prometheus.query("{job=\"freshet-canary\"}")?
                ));
            }
        }
        Ok(missing)
    })?;

    for e in ["freshet_canary_ndcg", "freshet_canary_recall"] {
        let v = prometheus.query(e)?;
        eprintln!(
            "{e}: {}",
            v.first().map_or(Value::Null, |s| s["value"][1].clone())
        );
    }

    // Every alert rule loaded and evaluated without error, and every series it is built on
    // exists.
    let rules = prometheus.api("/api/v1/rules", &[("type", "alert")])?;
    let alerts: Vec<Value> = rules["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .collect();
    ensure!(
        alerts.len() == alert_count,
        "Prometheus loaded {} alert rules, alerts.yml has {alert_count}: {}",
        alerts.len(),
        prometheus.log_tail()
    );
    let unhealthy = until_complete(Duration::from_secs(15), || {
        let rules = prometheus.api("/api/v1/rules", &[("type", "alert")])?;
        Ok(rules["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .filter(|r| r["health"] != "ok")
            .map(|r| {
                format!(
                    "alert {}: health {} {}",
                    r["name"], r["health"], r["lastError"]
                )
            })
            .collect())
    })?;
    let mut empty_series = Vec::new();
    for rule in &alerts {
        let expr = rule["query"].as_str().context("an alert without a query")?;
        let found = selectors(expr);
        ensure!(
            !found.is_empty(),
            "alert {}: no series in {expr}",
            rule["name"]
        );
        for sel in found {
            if prometheus.query(&sel)?.is_empty() {
                empty_series.push(format!("alert {}: {sel}", rule["name"]));
            }
        }
    }

    let problems: Vec<String> = empty_panels
        .into_iter()
        .chain(canary_low)
        .chain(unhealthy)
        .chain(empty_series)
        .collect();
    if !problems.is_empty() {
        case.keep = true;
        bail!(
            "{} problems among {} dashboard expressions and {} alerts: no data or an error:\n  {}\n\
             (Prometheus data and logs kept in {})",
            problems.len(),
            exprs.len(),
            alerts.len(),
            problems.join("\n  "),
            case.dir.display()
        );
    }
    drop(prometheus);
    case.stop_pipeline()?;
    Ok(())
}
