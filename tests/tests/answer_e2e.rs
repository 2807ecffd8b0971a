//! `POST /v1/answer` end to end with the real broker, pipeline, Milvus, model and query node,
//! and the deterministic stand-in language model (`freshet_llm::standin`): the prompt the model
//! receives (the packed passages with their numbers, the question, the refusal sentence in the
//! question's language; byte for byte the same for the same request), citations mapped to
//! their chunks and index commit, whole and streamed (the final event carries the citations),
//! refusal without a model call when nothing is visible, the model's refusal, flagged invalid
//! and uncited citations, grounding, a follow-up answered as its standalone question,
//! read-your-writes through `wait_for`, ACLs that keep a
//! restricted document's text out of the prompt, and the model's failures as 503s or an error
//! event.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use freshet_tests::llm::{sse_events, LiveStandIn};
use freshet_tests::query::{QueryNode, LEDGER_TEXT};
use freshet_tests::Case;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(180);
const VISIBLE: Duration = Duration::from_secs(30);

fn doc(id: &str, title: &str, text: &str, acl: Value) -> Value {
    json!({"op": "upsert", "id": id, "title": title, "text": text, "content_type": "text/plain",
           "source": format!("test://{id}"), "acl": acl})
}

fn answer(node: &QueryNode, body: &Value) -> Result<Value> {
    let r = node.post("/v1/answer", body)?;
    ensure!(r.status == 200, "answer {body} → {}: {}", r.status, r.body);
    r.json()
}

/// The user message of the stand-in's last chat request.
fn last_prompt(model: &LiveStandIn) -> Result<(String, String)> {
    let reqs = model.requests();
    let last = reqs.last().context("the model was never called")?;
    let m = &last["messages"];
    Ok((
        m[0]["content"].as_str().unwrap_or_default().to_owned(),
        m[1]["content"].as_str().unwrap_or_default().to_owned(),
    ))
}

fn start(case: &Case, model: &LiveStandIn, name: &str) -> Result<QueryNode> {
    let mut settings = model.node_settings(name);
    settings.push(("FRESHET_QUERY_TRUST_REQUEST_PRINCIPALS", "true".into()));
    let node = case.start_query(&settings)?;
    node.wait_ready(Duration::from_secs(60))?;
    Ok(node)
}

#[test]
fn answers_cite_their_passages_whole_and_streamed() -> Result<()> {
    let mut case = Case::new("answer", 1)?;
    case.start_pipeline()?;
    case.send_json(
        "heron",
        &doc(
            "heron",
            "Heron report",
            "Herons wait at the estuary when the tide turns. They eat small fish.",
            json!("public"),
        ),
    )?;
    case.send_json(
        "salmon",
        &doc(
            "salmon",
            "Salmon notes",
            "Salmon swim upstream to spawn in autumn. The estuary is their door.",
            json!("public"),
        ),
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
    let node = start(&case, &model, "standin")?;
    let q = json!({"query": "heron estuary tide", "mode": "bm25", "k": 3, "principals": []});
    node.wait_for(&q, VISIBLE, |ids| !ids.is_empty())?;

    // A whole answer: its [n] map to the packed passages, which are the retrieval's results.
    let a = answer(&node, &q)?;
    let retrieved = node.retrieve(&q)?;
    let passages = a["passages"].as_array().context("passages")?;
    ensure!(!passages.is_empty(), "{a}");
    for p in passages {
        let n = p["number"].as_u64().context("number")? as usize;
        let hit = retrieved["results"]
            .as_array()
            .and_then(|r| r.iter().find(|h| h["chunk_id"] == p["chunk_id"]))
            .with_context(|| format!("passage {n} is no result: {p}"))?;
        ensure!(
            hit["doc_id"] == p["doc_id"] && hit["text"] == p["text"],
            "{p} vs {hit}"
        );
        ensure!(p["doc_id"] != "ledger", "restricted passage {p}");
    }
    ensure!(passages[0]["doc_id"] == "heron", "{a}");
    ensure!(
        a["refused"] == false && a["refusal_reason"].is_null(),
        "{a}"
    );
    let text = a["answer"].as_str().context("answer")?;
    ensure!(
        text.contains("Herons wait at the estuary") && text.contains("[1]"),
        "{a}"
    );
    let cites = a["citations"].as_array().context("citations")?;
    ensure!(
        !cites.is_empty() && cites.iter().all(|c| c["number"].as_u64() >= Some(1)),
        "{a}"
    );
    ensure!(
        cites[0]["start"].as_u64().is_some() && passages[0]["cited"] == true,
        "{a}"
    );
    ensure!(
        a["invalid_citations"] == json!([]) && a["uncited_sentences"] == json!([]),
        "{a}"
    );
    ensure!(
        a["model"] == "standin" && a["usage"]["completion_tokens"].as_u64() > Some(0),
        "{a}"
    );
    ensure!(a["index"]["epoch"] == retrieved["index"]["epoch"], "{a}");
    for stage in ["retrieval", "bm25", "prompt", "llm", "cite", "total"] {
        ensure!(a["timings_ms"][stage].is_number(), "no {stage} timing: {a}");
    }
    // The prompt: fixed instructions with the exact refusal, the numbered passages, the
    // question, the task; byte for byte the same for the same request.
    let (system, user) = last_prompt(&model)?;
    ensure!(system.starts_with("You answer questions using only the numbered passages"));
    ensure!(
        system.ends_with("\"The passages do not contain the answer.\""),
        "{system}"
    );
    let p1 = user
        .find("[1] Heron report")
        .context("passage 1 in the prompt")?;
    let qpos = user
        .find("Question: heron estuary tide")
        .context("question")?;
    ensure!(
        p1 < qpos && user.ends_with("if they do not contain the answer."),
        "{user}"
    );
    ensure!(
        !user.contains("forty million"),
        "restricted text in the prompt: {user}"
    );
    answer(&node, &q)?;
    ensure!(
        last_prompt(&model)? == (system.clone(), user.clone()),
        "prompt not deterministic"
    );

    // With the principal, the restricted passage reaches the prompt (so the check above can
    // fail).
    let finance = json!({"query": "estuary dredging budget", "mode": "bm25",
                         "principals": ["group:finance"]});
    let f = answer(&node, &finance)?;
    ensure!(last_prompt(&model)?.1.contains("forty million"), "{f}");
    let hidden = answer(
        &node,
        &json!({"query": "estuary dredging budget", "mode": "bm25",
                                        "principals": []}),
    )?;
    ensure!(!hidden.to_string().contains("forty million"), "{hidden}");
    ensure!(!last_prompt(&model)?.1.contains("forty million"));

    // A follow-up is answered as the standalone question it is rewritten into, and the
    // transformations' options reach the retrieval.
    let followup = json!({"query": "What does it say about the tide?", "mode": "bm25",
        "history": [{"role": "user", "content": "Which report covers the estuary birds?"},
                    {"role": "assistant", "content": "The Heron Report covers them."}],
        "transform": {"multi_query": 2}});
    let c = answer(&node, &followup)?;
    let standalone = "What does The Heron Report say about the tide?";
    ensure!(c["question"] == standalone, "{c}");
    ensure!(c["transform"]["standalone_query"] == standalone, "{c}");
    ensure!(
        c["transform"]["queries"]
            .as_array()
            .is_some_and(|q| q.len() == 3),
        "{c}"
    );
    ensure!(last_prompt(&model)?
        .1
        .contains(&format!("Question: {standalone}")));
    ensure!(c["passages"][0]["doc_id"] == "heron", "{c}");

    // Streamed: retrieval first, then the text, then the whole answer with its citations.
    let mut streamed = q.clone();
    streamed["stream"] = json!(true);
    let r = node.post("/v1/answer", &streamed)?;
    ensure!(r.status == 200, "{}", r.body);
    ensure!(
        r.header("content-type")
            .is_some_and(|t| t.starts_with("text/event-stream")),
        "{}",
        r.head
    );
    let events = sse_events(&r.body)?;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    ensure!(
        names.first() == Some(&"retrieval") && names.last() == Some(&"done"),
        "{names:?}"
    );
    ensure!(
        names.iter().filter(|n| **n == "delta").count() >= 2,
        "{names:?}"
    );
    let deltas: String = events
        .iter()
        .filter(|(n, _)| n == "delta")
        .map(|(_, v)| v["text"].as_str().unwrap_or_default())
        .collect();
    let done = &events.last().context("done")?.1;
    ensure!(
        done["answer"] == a["answer"] && deltas == text,
        "{deltas:?} vs {done}"
    );
    ensure!(
        done["citations"] == a["citations"] && done["passages"] == a["passages"],
        "{done}"
    );
    ensure!(events[0].1["passages"][0]["chunk_id"] == passages[0]["chunk_id"]);
    ensure!(done["timings_ms"]["first_token"].is_number(), "{done}");

    // Nothing visible: the node refuses itself, in the question's language, without a call.
    let calls = model.requests().len();
    for (query, refusal) in [
        ("heron estuary", "The passages do not contain the answer."),
        ("苍鹭在河口等待", "所提供的资料中没有答案。"),
    ] {
        let none = json!({"query": query, "mode": "bm25", "filter": {"doc_id": "nothing"}});
        for stream in [false, true] {
            let mut body = none.clone();
            body["stream"] = json!(stream);
            let r = node.post("/v1/answer", &body)?;
            ensure!(r.status == 200, "{}", r.body);
            let v = if stream {
                sse_events(&r.body)?.pop().context("done")?.1
            } else {
                r.json()?
            };
            ensure!(v["answer"] == refusal && v["refused"] == true, "{v}");
            ensure!(
                v["refusal_reason"] == "no_passages" && v["passages"] == json!([]),
                "{v}"
            );
        }
    }
    ensure!(
        model.requests().len() == calls,
        "the model was called without passages"
    );

    // Passages that do not hold the answer: the model refuses (the stand-in: no shared word).
    let m = answer(
        &node,
        &json!({"query": "comets orbit", "mode": "vector", "k": 2}),
    )?;
    ensure!(
        m["refused"] == true && m["refusal_reason"] == "model",
        "{m}"
    );
    ensure!(
        m["passages"].as_array().is_some_and(|p| !p.is_empty()),
        "{m}"
    );

    // Grounding: each cited statement checked by a second call.
    let mut g = q.clone();
    g["grounding"] = json!(true);
    let calls = model.requests().len();
    let gv = answer(&node, &g)?;
    ensure!(
        model.requests().len() == calls + 2,
        "grounding made no second call"
    );
    let statements = gv["grounding"]["statements"]
        .as_array()
        .context("grounding")?;
    ensure!(!statements.is_empty(), "{gv}");
    ensure!(statements.iter().all(|s| s["supported"] == true), "{gv}");

    // Read your writes: the answer waits for the offset a new document was written at.
    let (partition, offset) = case.send_at(
        "egret",
        Some(
            doc(
                "egret",
                "Egret sighting",
                "Egrets stalk the estuary shallows at dawn.",
                json!("public"),
            )
            .to_string()
            .as_bytes(),
        ),
    )?;
    let w = answer(
        &node,
        &json!({"query": "egrets stalk shallows", "mode": "bm25",
        "wait_for": [{"topic": case.kafka.topic, "partition": partition, "offset": offset,
                      "timeout_ms": 60000}]}),
    )?;
    ensure!(w["passages"][0]["doc_id"] == "egret", "{w}");

    // Metrics.
    let metrics = node.get("/metrics")?.body;
    for line in [
        "freshet_query_answers_total{outcome=\"answered\"}",
        "freshet_query_answers_total{outcome=\"no_passages\"}",
        "freshet_query_answers_total{outcome=\"model\"}",
        "freshet_query_llm_requests_total{outcome=\"ok\"}",
        "freshet_query_answer_citations_total{validity=\"valid\"}",
    ] {
        ensure!(metrics.contains(line), "no {line} in\n{metrics}");
    }
    Ok(())
}

/// Flawed answers are flagged; a failing model is a 503 (whole) or an `error` event (streamed)
/// after the retrieval event; a node without `[llm]` answers 503 and says what to set.
#[test]
fn flawed_answers_are_flagged_and_failures_are_clear() -> Result<()> {
    let mut case = Case::new("answer_faults", 1)?;
    case.start_pipeline()?;
    case.send_json(
        "heron",
        &doc(
            "heron",
            "Heron report",
            "Herons wait at the estuary when the tide turns. They eat small fish.",
            json!("public"),
        ),
    )?;
    case.wait_indexed(WAIT)?;
    let model = LiveStandIn::start()?;
    let q = json!({"query": "heron estuary tide", "mode": "bm25"});

    let flawed = start(&case, &model, "standin-invalid-citation")?;
    flawed.wait_for(&q, VISIBLE, |ids| !ids.is_empty())?;
    let a = answer(&flawed, &q)?;
    let invalid = a["invalid_citations"].as_array().context("invalid")?;
    ensure!(invalid.len() == 1 && invalid[0]["number"] == 2, "{a}");
    ensure!(a["uncited_sentences"] == json!([1]), "{a}");
    drop(flawed);

    let uncited = start(&case, &model, "standin-uncited")?;
    let a = answer(&uncited, &q)?;
    let s = a["uncited_sentences"].as_array().context("uncited")?;
    ensure!(s.len() == 1, "{a}");
    let i = s[0].as_u64().context("index")? as usize;
    ensure!(
        a["sentences"][i]["text"] == "This statement cites nothing.",
        "{a}"
    );
    drop(uncited);

    let failing = start(&case, &model, "standin-500")?;
    let r = failing.post("/v1/answer", &q)?;
    ensure!(r.status == 503, "{}", r.body);
    let e = r.json()?;
    ensure!(e["error"]["code"] == "llm_server_error", "{e}");
    let mut streamed = q.clone();
    streamed["stream"] = json!(true);
    let r = failing.post("/v1/answer", &streamed)?;
    let events = sse_events(&r.body)?;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    ensure!(names == ["retrieval", "error"], "{names:?}");
    ensure!(
        events[1].1["error"]["code"] == "llm_server_error",
        "{events:?}"
    );
    drop(failing);

    let stalling = start(&case, &model, "standin-stall-after-1")?;
    let r = stalling.post("/v1/answer", &streamed)?;
    let events = sse_events(&r.body)?;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    ensure!(names == ["retrieval", "delta", "error"], "{names:?}");
    ensure!(events[2].1["error"]["code"] == "llm_timeout", "{events:?}");
    drop(stalling);

    let without = case.start_query(&[])?;
    without.wait_ready(Duration::from_secs(60))?;
    let r = without.post("/v1/answer", &q)?;
    ensure!(
        r.status == 503 && r.body.contains("[llm] base_url"),
        "{}",
        r.body
    );
    Ok(())
}
