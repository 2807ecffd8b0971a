//! `POST /v1/answer` end to end against a real OpenAI-compatible server, llama.cpp's
//! (llama-cpp-python, started by `deploy/start-llama.sh` with the tiny random-weight model of
//! `tests/fixtures/make_tiny_gguf.py`), with the real broker, pipeline, Milvus, model and query
//! node: a whole answer and a streamed one in the server's own wire shapes. The tiny model
//! writes noise, so the test holds the shapes: the status, the answer text, the model's name,
//! usage (whole answers: the server's streams carry none), the finish reason, the event order
//! retrieval → delta… → done with `done`'s answer the concatenated deltas, the citation flags,
//! and a prompt that fits the model's context. It fails, never skips, without the server
//! (`FRESHET_LLM_WIRE_URL`, `FRESHET_LLM_WIRE_MODEL`, set by `deploy/test.sh`).

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use freshet_tests::llm::sse_events;
use freshet_tests::Case;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(180);
const VISIBLE: Duration = Duration::from_secs(30);
/// Tokens of answer asked for: the tiny model is fast, but its noise says nothing.
const MAX_TOKENS: u64 = 12;
/// What llama-cpp-python may write past `max_tokens`: it finishes a UTF-8 character whose
/// first byte came within the limit (its vocabulary is bytes), and counts those tokens.
const UTF8_TAIL: u64 = 3;

/// The server under test: its base URL, its model and its context (tokens).
fn server() -> Result<(String, String, u64)> {
    let url = std::env::var("FRESHET_LLM_WIRE_URL").context(
        "FRESHET_LLM_WIRE_URL is not set: the base URL of llama.cpp's server \
         (http://127.0.0.1:PORT/v1), started by deploy/start-llama.sh; run the test with \
         deploy/test.sh, which starts it (deploy/install.sh --llama installs it)",
    )?;
    let model = std::env::var("FRESHET_LLM_WIRE_MODEL")
        .context("FRESHET_LLM_WIRE_MODEL is not set: the model the server serves (tiny)")?;
    // deploy/start-llama.sh's default context.
    let n_ctx = match std::env::var("FRESHET_LLM_WIRE_N_CTX") {
        Ok(n) => n
            .parse()
            .with_context(|| format!("FRESHET_LLM_WIRE_N_CTX={n:?} is not a number"))?,
        Err(_) => 4096,
    };
    Ok((url, model, n_ctx))
}

fn doc(id: &str, title: &str, text: &str) -> Value {
    json!({"op": "upsert", "id": id, "title": title, "text": text, "content_type": "text/plain",
           "source": format!("test://{id}"), "acl": "public"})
}

/// The flags of an answer: both arrays, whatever the noise cited.
fn ensure_flags(v: &Value) -> Result<()> {
    ensure!(
        v["invalid_citations"].is_array() && v["uncited_sentences"].is_array(),
        "no citation flags: {v}"
    );
    ensure!(
        v["citations"].is_array() && v["sentences"].is_array(),
        "{v}"
    );
    ensure!(v["refused"].is_boolean(), "{v}");
    Ok(())
}

fn ensure_finish(v: &Value) -> Result<()> {
    ensure!(
        matches!(v["finish_reason"].as_str(), Some("stop" | "length")),
        "finish_reason: {v}"
    );
    Ok(())
}

#[test]
fn answers_whole_and_streamed_from_llama_cpp() -> Result<()> {
    let (url, model, n_ctx) = server()?;
    let mut case = Case::new("answer_llama", 1)?;
    case.start_pipeline()?;
    for (id, title, text) in [
        (
            "heron",
            "Heron report",
            "Herons wait at the estuary when the tide turns. They eat small fish.",
        ),
        (
            "salmon",
            "Salmon notes",
            "Salmon swim upstream to spawn in autumn. The estuary is their door.",
        ),
        (
            "egret",
            "Egret sighting",
            "Egrets stalk the estuary shallows at dawn, when the tide is low.",
        ),
    ] {
        case.send_json(id, &doc(id, title, text))?;
    }
    case.wait_indexed(WAIT)?;
    let node = case.start_query(&[
        ("FRESHET_LLM_BASE_URL", url.clone()),
        ("FRESHET_LLM_MODEL", model.clone()),
        ("FRESHET_LLM_RETRIES", "1".into()),
    ])?;
    node.wait_ready(Duration::from_secs(60))?;
    // A small k and packing budget: the tiny model reads about one token per byte.
    let retrieve = json!({"query": "heron estuary tide", "mode": "bm25", "k": 2,
                          "pack": {"budget_tokens": 200}});
    node.wait_for(&retrieve, VISIBLE, |ids| !ids.is_empty())?;
    let mut q = retrieve.clone();
    q["max_tokens"] = json!(MAX_TOKENS);
    q["temperature"] = json!(0);

    // Whole: the server's answer, its model, usage and finish reason, the flags.
    let r = node.post("/v1/answer", &q)?;
    ensure!(
        r.status == 200,
        "answer from {url} → {}: {}\nnode log:\n{}",
        r.status,
        r.body,
        node.log_tail()
    );
    let a = r.json()?;
    ensure!(a["answer"].is_string(), "{a}");
    ensure!(a["model"] == json!(model), "model: {a}");
    ensure_finish(&a)?;
    ensure_flags(&a)?;
    let passages = a["passages"].as_array().context("passages")?;
    ensure!(
        (1..=2).contains(&passages.len()) && passages[0]["doc_id"] == "heron",
        "{a}"
    );
    let usage = &a["usage"];
    let prompt = usage["prompt_tokens"].as_u64().context("usage")?;
    let completion = usage["completion_tokens"].as_u64().context("usage")?;
    ensure!(
        usage["total_tokens"].as_u64() == Some(prompt + completion)
            && completion <= MAX_TOKENS + UTF8_TAIL,
        "usage: {a}"
    );
    // The prompt holds the instructions and the passages (bytes, a few merged into words) and
    // fits the context with the answer.
    let passage_bytes: usize = passages
        .iter()
        .map(|p| p["text"].as_str().map_or(0, str::len))
        .sum();
    ensure!(
        prompt as usize > passage_bytes,
        "{prompt} prompt tokens for {passage_bytes} bytes of passages: {a}"
    );
    ensure!(
        prompt + MAX_TOKENS + UTF8_TAIL <= n_ctx,
        "the prompt ({prompt} tokens) and {MAX_TOKENS} of answer do not fit {n_ctx}"
    );

    // Streamed: retrieval, the deltas, done with the whole answer.
    let mut streamed = q.clone();
    streamed["stream"] = json!(true);
    let r = node.post("/v1/answer", &streamed)?;
    ensure!(r.status == 200, "{}: {}", r.status, r.body);
    ensure!(
        r.header("content-type")
            .is_some_and(|t| t.starts_with("text/event-stream")),
        "{}",
        r.head
    );
    let events = sse_events(&r.body)?;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    ensure!(
        names.len() >= 2
            && names[0] == "retrieval"
            && names[names.len() - 1] == "done"
            && names[1..names.len() - 1].iter().all(|n| *n == "delta"),
        "event order: {names:?}\n{}",
        r.body
    );
    ensure!(
        events[0].1["passages"][0]["chunk_id"] == passages[0]["chunk_id"],
        "{:?}",
        events[0]
    );
    let deltas: String = events
        .iter()
        .filter(|(n, _)| n == "delta")
        .map(|(_, v)| v["text"].as_str().unwrap_or_default())
        .collect();
    let done = &events[events.len() - 1].1;
    ensure!(
        done["answer"].as_str() == Some(deltas.as_str()),
        "done's answer is not the deltas {deltas:?}: {done}"
    );
    ensure!(done["model"] == json!(model), "model: {done}");
    ensure_finish(done)?;
    ensure_flags(done)?;
    // The server's streams carry no usage (it ignores stream_options.include_usage): what
    // there is must be well formed.
    ensure!(
        done["usage"].is_null()
            || done["usage"]["completion_tokens"].as_u64() <= Some(MAX_TOKENS + UTF8_TAIL),
        "usage: {done}"
    );
    ensure!(
        done["timings_ms"]["first_token"].is_number() || deltas.is_empty(),
        "{done}"
    );
    Ok(())
}
