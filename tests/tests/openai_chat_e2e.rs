//! The OpenAI-compatible chat API end to end, driven by the official `openai` Python package
//! (`tests/fixtures/openai_chat.py`, in `FRESHET_PYTHON`'s environment) against the real
//! broker, pipeline, Milvus and query node, with the deterministic stand-in model: the model
//! list (a configured assistant and the default), a whole completion and a stream in OpenAI's
//! shapes with the citations in the `freshet` member and as `[n]` in the text, a conversation
//! answered as its standalone question with the client's system message kept from the model,
//! the node's refusal as an ordinary message, API keys and their principals (a key without the
//! group gets no restricted text through the chat route, whole or streamed), and OpenAI-shaped
//! errors for an unknown model, a bad key, forbidden principals and unsupported requests, and
//! a failing model as a 503 or, mid-stream, an error chunk without `[DONE]`.

use std::process::Command;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use freshet_tests::http::request;
use freshet_tests::llm::LiveStandIn;
use freshet_tests::query::{LEDGER_TEXT, PUBLIC_AND_FINANCE_KEYS};
use freshet_tests::{env, workspace_root, Case};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(180);
const VISIBLE: Duration = Duration::from_secs(30);
const ASSISTANT: &str = "freshet-bm25";
const SECRET: &str = "forty million";

fn doc(id: &str, title: &str, text: &str, acl: Value) -> Value {
    json!({"op": "upsert", "id": id, "title": title, "text": text, "content_type": "text/plain",
           "source": format!("test://{id}"), "acl": acl})
}

/// The content of a completion's message.
fn content(c: &Value) -> &str {
    c["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
}

/// Every message the stand-in model was sent, as text.
fn prompts(model: &LiveStandIn) -> String {
    model
        .requests()
        .iter()
        .map(|r| r["messages"].to_string())
        .collect()
}

#[test]
fn openai_clients_get_cited_answers_under_the_nodes_identities() -> Result<()> {
    let mut case = Case::new("openai_chat", 1)?;
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
    settings.push((
        "FRESHET_ANSWER_ASSISTANTS",
        format!(
            r#"[{{name = "{ASSISTANT}", description = "BM25 over the reports", options = {{mode = "bm25", k = 3}}}}]"#
        ),
    ));
    let node = case.start_query(&settings)?;
    node.wait_ready(Duration::from_secs(60))?;
    // Both documents searchable for the finance key.
    node.wait_for_as(
        Some("key-finance"),
        &json!({"query": "estuary", "mode": "bm25", "k": 5}),
        VISIBLE,
        |ids| ids.len() == 2,
    )?;

    let python = env("FRESHET_PYTHON");
    let script = workspace_root().join("tests/fixtures/openai_chat.py");
    let run = Command::new(&python)
        .arg(&script)
        .arg(format!("http://{}/v1", node.addr))
        .args(["key-public", "key-finance", ASSISTANT])
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

    // The models: the configured assistant, then the default.
    let ids: Vec<&str> = out["models"]
        .as_array()
        .context("models")?
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    ensure!(ids == [ASSISTANT, "freshet"], "{}", out["models"]);
    ensure!(
        out["model"]["description"] == "BM25 over the reports"
            && out["model"]["owned_by"] == "freshet",
        "{}",
        out["model"]
    );

    // A whole completion: OpenAI's shape, the answer with [n], the citations beside it.
    let w = &out["whole"];
    ensure!(
        w["object"] == "chat.completion" && w["model"] == ASSISTANT,
        "{w}"
    );
    ensure!(
        w["id"].as_str().is_some_and(|i| i.starts_with("chatcmpl-")),
        "{w}"
    );
    let text = content(w);
    ensure!(
        text.contains("Herons wait at the estuary") && text.contains("[1]"),
        "{w}"
    );
    ensure!(
        w["choices"][0]["finish_reason"] == "stop"
            && w["choices"][0]["message"]["role"] == "assistant",
        "{w}"
    );
    ensure!(w["usage"]["completion_tokens"].as_u64() > Some(0), "{w}");
    let f = &w["freshet"];
    ensure!(
        f["mode"] == "bm25" && f["refused"] == false && f["model"] == "standin",
        "{f}"
    );
    ensure!(f.get("answer").is_none(), "{f}");
    ensure!(
        f["passages"][0]["doc_id"] == "heron" && f["passages"][0]["cited"] == true,
        "{f}"
    );
    ensure!(
        f["citations"].as_array().is_some_and(|c| !c.is_empty())
            && f["citations"][0]["number"] == 1,
        "{f}"
    );
    ensure!(f["index"]["epoch"].as_u64().is_some(), "{f}");
    ensure!(
        out["whole_typed"]["content"] == text
            && out["whole_typed"]["citations"] == f["citations"]
            && out["whole_typed"]["total_tokens"].as_u64() > Some(0),
        "{}",
        out["whole_typed"]
    );
    // The node's prompt, not the client's: the system message is freshet's.
    let last = model.requests().last().cloned().context("no model call")?;
    ensure!(last["model"] == "standin", "{last}");

    // Streamed: a role chunk, the text, the last chunk with finish_reason and the citations,
    // then the usage chunk.
    let chunks = out["stream"].as_array().context("stream")?;
    ensure!(chunks.len() >= 4, "{chunks:?}");
    ensure!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk" && c["id"] == chunks[0]["id"]),
        "{chunks:?}"
    );
    ensure!(
        chunks[0]["choices"][0]["delta"]["role"] == "assistant",
        "{}",
        chunks[0]
    );
    let streamed: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    ensure!(streamed == text, "{streamed:?} vs {text:?}");
    let usage = chunks.last().context("usage chunk")?;
    ensure!(
        usage["choices"] == json!([]) && usage["usage"]["total_tokens"].as_u64() > Some(0),
        "{usage}"
    );
    let fin = &chunks[chunks.len() - 2];
    ensure!(fin["choices"][0]["finish_reason"] == "stop", "{fin}");
    ensure!(
        fin["freshet"]["citations"] == f["citations"]
            && fin["freshet"]["passages"] == f["passages"],
        "{fin}"
    );
    ensure!(
        chunks[..chunks.len() - 2]
            .iter()
            .all(|c| c["choices"][0]["finish_reason"].is_null()),
        "{chunks:?}"
    );

    // A conversation: answered as its standalone question; the client's system message never
    // reaches the model.
    let c = &out["followup"];
    let standalone = "What does The Heron Report say about the tide?";
    ensure!(c["freshet"]["question"] == standalone, "{c}");
    ensure!(c["freshet"]["passages"][0]["doc_id"] == "heron", "{c}");
    ensure!(
        !prompts(&model).contains("pineapple"),
        "a client's system message reached the model"
    );
    let last = model.requests().last().cloned().context("no model call")?;
    ensure!(
        last["messages"][0]["content"]
            .as_str()
            .is_some_and(|s| s.starts_with("You answer questions using only the numbered passages")),
        "{last}"
    );

    // The default assistant: the [answer] defaults (hybrid).
    ensure!(
        out["default"]["model"] == "freshet" && out["default"]["freshet"]["mode"] == "hybrid",
        "{}",
        out["default"]
    );

    // Nothing visible: the refusal sentence as an ordinary message.
    let r = &out["refusal"];
    ensure!(
        content(r) == "The passages do not contain the answer."
            && r["choices"][0]["finish_reason"] == "stop",
        "{r}"
    );
    ensure!(
        r["freshet"]["refused"] == true && r["freshet"]["refusal_reason"] == "no_passages",
        "{r}"
    );

    // ACLs: the public key's answers, whole and streamed, and the prompts they made, hold no
    // restricted text; the finance key's do (so the check can fail).
    let public = out["budget_public"].to_string() + &out["budget_public_stream"].to_string();
    ensure!(
        !public.contains(SECRET),
        "restricted text for the public key: {public}"
    );
    let finance = &out["budget_finance"];
    ensure!(
        finance["freshet"]["passages"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["doc_id"] == "ledger")),
        "{finance}"
    );
    ensure!(content(finance).contains(SECRET), "{finance}");
    let calls = model.requests();
    let finance_calls = calls
        .iter()
        .filter(|r| r["messages"].to_string().contains(SECRET))
        .count();
    ensure!(
        finance_calls == 1,
        "{finance_calls} model calls held the secret"
    );

    // Errors in OpenAI's shape.
    for (name, class, status, kind, code, param) in [
        (
            "forbidden",
            "PermissionDeniedError",
            403,
            "permission_error",
            "forbidden",
            None,
        ),
        (
            "bad_key",
            "AuthenticationError",
            401,
            "authentication_error",
            "unauthorized",
            None,
        ),
        (
            "unknown_model",
            "NotFoundError",
            404,
            "invalid_request_error",
            "model_not_found",
            Some("model"),
        ),
        (
            "unknown_model_get",
            "NotFoundError",
            404,
            "invalid_request_error",
            "model_not_found",
            Some("model"),
        ),
        (
            "n2",
            "BadRequestError",
            400,
            "invalid_request_error",
            "bad_request",
            Some("n"),
        ),
        (
            "tools",
            "BadRequestError",
            400,
            "invalid_request_error",
            "bad_request",
            Some("tools"),
        ),
        (
            "image",
            "BadRequestError",
            400,
            "invalid_request_error",
            "bad_request",
            Some("messages[0].content[0].type"),
        ),
        (
            "last_not_user",
            "BadRequestError",
            400,
            "invalid_request_error",
            "bad_request",
            Some("messages"),
        ),
        (
            "too_many_tokens",
            "BadRequestError",
            400,
            "invalid_request_error",
            "bad_request",
            Some("max_tokens"),
        ),
    ] {
        let e = &out[name];
        ensure!(
            e["class"] == class && e["status"] == status && e["type"] == kind && e["code"] == code,
            "{name}: {e}"
        );
        ensure!(e["param"].as_str() == param, "{name}: {e}");
        ensure!(
            e["body"]["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{name}: {e}"
        );
    }

    // Requests counted by endpoint.
    let metrics = request(
        &node.addr,
        "GET",
        "/metrics",
        &[("Authorization", "Bearer key-public")],
        b"",
    )?
    .body;
    for line in [
        "freshet_query_requests_total{endpoint=\"chat_completions\",mode=\"bm25\",outcome=\"ok\"}",
        "freshet_query_requests_total{endpoint=\"models\",mode=\"none\",outcome=\"ok\"}",
        "freshet_query_requests_total{endpoint=\"chat_completions\",mode=\"unknown\",outcome=\"model_not_found\"}",
    ] {
        ensure!(metrics.contains(line), "no {line} in\n{metrics}");
    }
    drop(node);

    // A model that fails: a 503 in OpenAI's shape; mid-stream, an error chunk and no [DONE].
    let chat = |node: &freshet_tests::query::QueryNode, stream: bool| {
        let body = json!({"model": "freshet", "stream": stream,
            "messages": [{"role": "user", "content": "When do herons wait at the estuary?"}],
            "freshet": {"mode": "bm25"}})
        .to_string();
        request(
            &node.addr,
            "POST",
            "/v1/chat/completions",
            &[
                ("Authorization", "Bearer key-public"),
                ("Content-Type", "application/json"),
            ],
            body.as_bytes(),
        )
    };
    let keys = r#"[{name = "public", key = "key-public", principals = []}]"#;
    let mut settings = model.node_settings("standin-500");
    settings.push(("FRESHET_QUERY_KEYS", keys.into()));
    let failing = case.start_query(&settings)?;
    failing.wait_ready(Duration::from_secs(60))?;
    let r = chat(&failing, false)?;
    let e = r.json()?;
    ensure!(
        r.status == 503
            && e["error"]["code"] == "llm_server_error"
            && e["error"]["type"] == "server_error",
        "{}",
        r.body
    );
    drop(failing);
    let mut settings = model.node_settings("standin-stall-after-1");
    settings.push(("FRESHET_QUERY_KEYS", keys.into()));
    let stalling = case.start_query(&settings)?;
    stalling.wait_ready(Duration::from_secs(60))?;
    let r = chat(&stalling, true)?;
    ensure!(r.status == 200, "{}", r.body);
    let data: Vec<&str> = r
        .body
        .split("\n\n")
        .filter_map(|block| block.lines().find_map(|l| l.strip_prefix("data: ")))
        .collect();
    ensure!(data.len() == 3 && !r.body.contains("[DONE]"), "{}", r.body);
    let last: Value = serde_json::from_str(data[2])?;
    ensure!(
        last["error"]["code"] == "llm_timeout" && last["error"]["type"] == "server_error",
        "{last}"
    );
    let piece: Value = serde_json::from_str(data[1])?;
    ensure!(
        piece["choices"][0]["delta"]["content"]
            .as_str()
            .is_some_and(|t| !t.is_empty()),
        "{piece}"
    );
    Ok(())
}
