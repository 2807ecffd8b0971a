//! The query node's MCP server end to end, driven by the official `mcp` Python package
//! (`tests/fixtures/mcp_tools.py`, in `FRESHET_PYTHON`'s environment) over both transports,
//! streamable HTTP at `/mcp` and stdio (`freshet-query mcp --url`), against the real broker,
//! pipeline, Milvus and query node with API keys and the deterministic stand-in model: the
//! tools and their input schemas, `search` with a filter, `fetch` of a whole document, a page
//! and a chunk with its neighbours, `answer` with citations; a key without the group can
//! neither find nor fetch the private document and cannot tell it exists (its fetch answers
//! exactly as one of a document that does not exist); bad arguments are tool errors and the
//! same session then answers; a wrong key is refused (on `/mcp` a 401 before any MCP work);
//! a failing model makes `answer` a tool error and the session goes on.

use std::process::Command;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use freshet_tests::http::request;
use freshet_tests::llm::LiveStandIn;
use freshet_tests::query::{query_bin, LEDGER_TEXT, PUBLIC_AND_FINANCE_KEYS};
use freshet_tests::{env, workspace_root, Case};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(180);
const VISIBLE: Duration = Duration::from_secs(30);

fn doc(id: &str, title: &str, text: &str, acl: Value) -> Value {
    json!({"op": "upsert", "id": id, "title": title, "text": text, "content_type": "text/plain",
           "source": format!("test://{id}"), "metadata": {"lang": "en"}, "acl": acl})
}

/// A report of several chunks: paragraphs on distinct subjects.
fn long_report() -> String {
    let subjects = [
        "Herons wait at the estuary when the tide turns, standing still in the shallows",
        "Cormorants dive for eels under the old railway bridge during the winter months",
        "Oystercatchers probe the mudflats for cockles while the water is low and calm",
        "Curlews call across the salt marsh at dawn before they feed along the creeks",
        "Little egrets arrived on this coast two decades ago and now breed in the willows",
        "Avocets sweep their curved bills through the lagoon water for tiny shrimp",
        "Redshanks are the sentinels of the marsh, shouting at every walker and dog",
        "Brent geese graze the eelgrass beds in their thousands from October to March",
    ];
    subjects
        .iter()
        .map(|s| {
            let mut p = String::new();
            for i in 0..6 {
                p.push_str(&format!("{s}, as the survey of season {i} recorded. "));
            }
            p
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

fn structured<'a>(r: &'a Value, what: &str) -> Result<&'a Value> {
    ensure!(r["isError"] != true, "{what} failed: {r}");
    r.get("structuredContent")
        .with_context(|| format!("{what}: no structuredContent in {r}"))
}

fn error_text(r: &Value) -> String {
    r["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn doc_ids(r: &Value) -> Vec<String> {
    r["structuredContent"]["results"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|h| h["doc_id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// What one transport got, checked.
fn check_transport(name: &str, t: &Value) -> Result<()> {
    let f = &t["finance"];
    // The tools and their input schemas.
    let tools = f["tools"].as_array().context("tools")?;
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    ensure!(names == ["search", "fetch", "answer"], "{name}: {names:?}");
    let schema = |n: &str| &tools[names.iter().position(|x| *x == n).unwrap_or(0)]["inputSchema"];
    ensure!(
        schema("search")["required"] == json!(["query"])
            && schema("search")["properties"]["filter"].is_object()
            && schema("search")["properties"]["k"]["type"]
                .to_string()
                .contains("integer"),
        "{name}: {}",
        schema("search")
    );
    ensure!(
        schema("fetch")["required"] == json!(["doc_id"])
            && schema("fetch")["properties"]["neighbours"].is_object(),
        "{name}: {}",
        schema("fetch")
    );
    ensure!(
        schema("answer")["required"] == json!(["question"]),
        "{name}: {}",
        schema("answer")
    );
    ensure!(
        tools
            .iter()
            .all(|t| t["description"].as_str().is_some_and(|d| d.len() > 40)),
        "{name}: {tools:?}"
    );

    // search with a filter: ids, title, source, score, text; another language's filter: none.
    let s = structured(&f["search"], "search")?;
    let top = &s["results"][0];
    ensure!(
        top["doc_id"] == "birds"
            && top["title"] == "Estuary birds"
            && top["source"] == "test://birds"
            && top["score"].as_f64().is_some()
            && top["chunk_id"].as_str().is_some_and(|c| c.len() == 32)
            && top["text"].as_str().is_some_and(|t| t.contains("Herons")),
        "{name}: {s}"
    );
    ensure!(
        error_text(&f["search"]).contains("Estuary birds (test://birds"),
        "{name}: {}",
        f["search"]
    );
    ensure!(
        doc_ids(&f["search_other_lang"]).is_empty(),
        "{name}: {}",
        f["search_other_lang"]
    );
    ensure!(
        doc_ids(&f["secret_search"]).contains(&"ledger".to_owned()),
        "{name}: {}",
        f["secret_search"]
    );

    // fetch: the whole document in order, a page, a chunk with its neighbours.
    let whole = structured(&f["fetch_whole"], "fetch")?;
    let chunks = whole["chunks"].as_array().context("chunks")?;
    let idx: Vec<u64> = chunks.iter().filter_map(|c| c["index"].as_u64()).collect();
    ensure!(
        idx.len() >= 3 && idx == (0..idx.len() as u64).collect::<Vec<_>>(),
        "{name}: {whole}"
    );
    ensure!(
        whole["total_chunks"] == idx.len()
            && whole["title"] == "Estuary birds"
            && chunks[0]["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("Herons"))
            && chunks.last().unwrap()["text"]
                .as_str()
                .is_some_and(|t| t.contains("Brent geese")),
        "{name}: {whole}"
    );
    let page = structured(&f["fetch_page"], "fetch page")?;
    ensure!(
        page["chunks"].as_array().map(Vec::len) == Some(2) && page["next_from"] == 2,
        "{name}: {page}"
    );
    let around = structured(&f["fetch_around"], "fetch around")?;
    let mid = idx[idx.len() / 2];
    let got: Vec<u64> = around["chunks"]
        .as_array()
        .context("chunks")?
        .iter()
        .filter_map(|c| c["index"].as_u64())
        .collect();
    ensure!(got == [mid - 1, mid, mid + 1], "{name}: {around}");
    ensure!(
        structured(&f["fetch_secret"], "fetch ledger")?["chunks"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("forty million")),
        "{name}: {}",
        f["fetch_secret"]
    );

    // answer: the text with [n], the cited passages.
    let a = structured(&f["answer"], "answer")?;
    ensure!(
        a["answer"]
            .as_str()
            .is_some_and(|t| t.contains("Herons wait at the estuary") && t.contains("[1]"))
            && a["refused"] == false
            && a["citations"][0]["number"] == 1
            && a["citations"][0]["doc_id"] == "birds"
            && a["citations"][0]["chunk_id"].as_str().is_some(),
        "{name}: {a}"
    );
    ensure!(
        error_text(&f["answer"]).contains("Sources:\n[1] Estuary birds"),
        "{name}: {}",
        f["answer"]
    );

    // The public key: no trace of the ledger, and it cannot tell the ledger exists.
    let p = &t["public"];
    ensure!(
        p["secret_search"]["isError"] != true
            && !doc_ids(&p["secret_search"]).contains(&"ledger".to_owned()),
        "{name}: {}",
        p["secret_search"]
    );
    ensure!(
        !p["secret_search"].to_string().contains("forty million"),
        "{name}: {}",
        p["secret_search"]
    );
    for (hidden, missing) in [
        ("fetch_secret", "fetch_missing"),
        ("fetch_secret_chunk", "fetch_missing_chunk"),
    ] {
        let (h, m) = (&p[hidden], &p[missing]);
        ensure!(
            h["isError"] == true && m["isError"] == true,
            "{name}: {h} {m}"
        );
        ensure!(
            error_text(h).starts_with("not_found: ")
                && error_text(h).replace("ledger", "X")
                    == error_text(m).replace("no-such-document", "X")
                && h["structuredContent"]["error"]["code"]
                    == m["structuredContent"]["error"]["code"],
            "{name}: a hidden document reads unlike a missing one: {h} {m}"
        );
        ensure!(!h.to_string().contains("forty million"), "{name}: {h}");
    }

    // Bad arguments: tool errors saying what is wrong; the session answers the next call.
    for (call, needle) in [
        ("bad_k", "k: invalid type"),
        ("no_query", "missing field `query`"),
    ] {
        let r = &p[call];
        ensure!(
            r["isError"] == true
                && error_text(r).starts_with("bad_request: invalid arguments for search")
                && error_text(r).contains(needle),
            "{name}: {call}: {r}"
        );
    }
    ensure!(
        doc_ids(&p["after_bad"]).first().map(String::as_str) == Some("birds"),
        "{name}: {}",
        p["after_bad"]
    );
    Ok(())
}

#[test]
fn agents_use_search_fetch_and_answer_over_http_and_stdio() -> Result<()> {
    let mut case = Case::new("mcp", 1)?;
    case.start_pipeline()?;
    case.send_json(
        "birds",
        &doc("birds", "Estuary birds", &long_report(), json!("public")),
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
    case.wait_indexed(WAIT)?;
    let model = LiveStandIn::start()?;
    let mut settings = model.node_settings("standin");
    settings.push(("FRESHET_QUERY_KEYS", PUBLIC_AND_FINANCE_KEYS.into()));
    let node = case.start_query(&settings)?;
    node.wait_ready(Duration::from_secs(60))?;
    node.wait_for_as(
        Some("key-finance"),
        &json!({"query": "estuary", "mode": "bm25", "k": 5}),
        VISIBLE,
        |ids| ids.iter().any(|d| d == "birds") && ids.iter().any(|d| d == "ledger"),
    )?;

    // /mcp refuses a missing or wrong key before any MCP work, as every route does.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
    for auth in [None, Some("Bearer not-a-key")] {
        let mut headers = vec![
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ];
        if let Some(a) = auth {
            headers.push(("Authorization", a));
        }
        let r = request(&node.addr, "POST", "/mcp", &headers, init.as_bytes())?;
        ensure!(
            r.status == 401 && r.json()?["error"]["code"] == "unauthorized",
            "{auth:?}: {} {}",
            r.status,
            r.body
        );
    }

    let python = env("FRESHET_PYTHON");
    let script = workspace_root().join("tests/fixtures/mcp_tools.py");
    let run = Command::new(&python)
        .arg(&script)
        .arg(format!("http://{}", node.addr))
        .arg(query_bin())
        .args(["key-finance", "key-public"])
        .output()
        .with_context(|| format!("running {python}"))?;
    ensure!(
        run.status.success(),
        "{} failed ({}): {}\n{}",
        script.display(),
        run.status,
        String::from_utf8_lossy(&run.stderr),
        node.log_tail()
    );
    let out: Value = serde_json::from_slice(&run.stdout).context("the script's report")?;
    check_transport("http", &out["http"])?;
    check_transport("stdio", &out["stdio"])?;

    // A wrong key: the HTTP client cannot even start its session; over stdio (the key
    // travels with each call) the call is a tool error naming the refusal.
    // (The client reports the 401 checked above as an error response, without its status.)
    let http = &out["http"]["wrong_key"];
    ensure!(
        http["raised"].as_str().is_some_and(|e| e.contains("Error"))
            && http.get("tool_result").is_none(),
        "{http}"
    );
    let stdio = &out["stdio"]["wrong_key"]["tool_result"];
    ensure!(
        stdio["isError"] == true && error_text(stdio).starts_with("unauthorized: "),
        "{stdio}"
    );

    // The calls over /mcp are counted as the node's requests.
    let m = request(&node.addr, "GET", "/metrics", &[], b"")?;
    for line in [
        r#"freshet_query_requests_total{endpoint="mcp_search",mode="hybrid",outcome="ok"}"#,
        r#"freshet_query_requests_total{endpoint="mcp_fetch",mode="none",outcome="not_found"}"#,
        r#"freshet_query_requests_total{endpoint="mcp_search",mode="unknown",outcome="bad_request"}"#,
        r#"freshet_query_requests_total{endpoint="documents",mode="none",outcome="not_found"}"#,
    ] {
        ensure!(m.body.contains(line), "{line} not in\n{}", m.body);
    }
    drop(node);

    // A model that fails: the answer is a tool error with the model's failure class, and the
    // same session then answers a search.
    let mut settings = model.node_settings("standin-500");
    settings.push((
        "FRESHET_QUERY_KEYS",
        r#"[{name = "public", key = "key-public", principals = []}]"#.into(),
    ));
    let failing = case.start_query(&settings)?;
    failing.wait_ready(Duration::from_secs(60))?;
    let run = Command::new(&python)
        .arg(&script)
        .arg("outage")
        .arg(format!("http://{}", failing.addr))
        .arg(query_bin())
        .arg("key-public")
        .output()
        .with_context(|| format!("running {python}"))?;
    ensure!(
        run.status.success(),
        "{} outage failed ({}): {}\n{}",
        script.display(),
        run.status,
        String::from_utf8_lossy(&run.stderr),
        failing.log_tail()
    );
    let out: Value = serde_json::from_slice(&run.stdout).context("the outage report")?;
    for name in ["http", "stdio"] {
        let a = &out[name]["answer"];
        ensure!(
            a["isError"] == true
                && error_text(a).starts_with("llm_server_error: ")
                && a["structuredContent"]["error"]["code"] == "llm_server_error",
            "{name}: {a}"
        );
        ensure!(
            doc_ids(&out[name]["search_after"])
                .first()
                .map(String::as_str)
                == Some("birds"),
            "{name}: {}",
            out[name]["search_after"]
        );
    }
    drop(failing);
    drop(model);
    Ok(())
}
