//! `freshet-tools bench-answer`: what `/v1/answer` adds to a retrieval, measured from the
//! outside against a running node whose `[llm]` is a model that answers at once (the stand-in:
//! `freshet-tools llm-standin`), so that what remains is freshet's own: the prompt, the call and
//! relay, the citation check and the bigger response. For each query, in turn (one request at
//! a time, the order rotated so that neither kind always goes first): the retrieval an answer
//! makes (`/v1/retrieve` with the answer's `k` and `pack`), the whole answer, and the streamed
//! answer up to its first `delta` event. Reported: p50/p90/p99 of each, of the paired
//! differences (answer − retrieval, first delta − retrieval), and the node's own stage timings.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use futures::StreamExt;
use serde::Serialize;
use serde_json::{json, Value};

use crate::query_bench::{client, post, read_queries, Percentiles};

/// `freshet-tools bench-answer`.
#[derive(clap::Args)]
pub struct AnswerBenchArgs {
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    #[arg(long, env = "FRESHET_EVAL_API_KEY")]
    api_key: Option<String>,
    /// BEIR queries.jsonl (the `text` of each line is a question).
    #[arg(long, default_value = "../shared/datasets/scifact/queries.jsonl")]
    queries: PathBuf,
    /// Request fields of both, e.g. '{"mode":"hybrid"}' (`k` and `pack` default to the
    /// answer's: 8 and 3000 tokens).
    #[arg(long, default_value = "{}")]
    body: String,
    #[arg(long, default_value_t = 300)]
    requests: usize,
    #[arg(long, default_value_t = 30)]
    warmup: usize,
}

impl crate::Run for AnswerBenchArgs {
    /// Prints the report as JSON.
    fn run(self, _config: Option<&Path>) -> Result<i32> {
        let body: Value =
            serde_json::from_str(&self.body).context("--body must be a JSON object")?;
        let report = crate::query_bench::runtime()?.block_on(bench(&self, body))?;
        println!("{}", serde_json::to_string_pretty(&report)?);
        Ok(0)
    }
}

#[derive(Debug, Serialize)]
pub struct AnswerBenchReport {
    pub body: Value,
    pub requests: usize,
    pub refused: usize,
    /// Client-side latency of the retrieval an answer makes.
    pub retrieve_ms: Percentiles,
    /// Client-side latency of a whole answer.
    pub answer_ms: Percentiles,
    /// Client-side time to the first `delta` event of a streamed answer.
    pub first_delta_ms: Percentiles,
    /// Paired: answer − retrieval, per query.
    pub added_ms: Percentiles,
    /// Paired: first delta − retrieval, per query.
    pub added_first_token_ms: Percentiles,
    /// The node's timings of the whole answers: `prompt`, `llm` (the call to the model, its
    /// HTTP round trip included), `cite`, and `total` − `retrieval` (everything after the
    /// retrieval).
    pub node_prompt_ms: Percentiles,
    pub node_llm_ms: Percentiles,
    pub node_cite_ms: Percentiles,
    pub node_after_retrieval_ms: Percentiles,
}

async fn first_delta(
    client: &reqwest::Client,
    url: &str,
    key: Option<&str>,
    body: &Value,
) -> Result<f64> {
    let t = Instant::now();
    let mut req = client.post(url).json(body);
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let resp = req.send().await?;
    if !resp.status().is_success() {
        bail!("{}: {}", resp.status(), resp.text().await?);
    }
    let mut bytes = resp.bytes_stream();
    let mut seen = String::new();
    while let Some(chunk) = bytes.next().await {
        seen.push_str(&String::from_utf8_lossy(&chunk?));
        if seen.contains("event: delta") {
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            // Read the rest, as a client would, before the next request.
            while let Some(c) = bytes.next().await {
                c?;
            }
            return Ok(ms);
        }
    }
    bail!("the stream ended without a delta event: {seen}")
}

async fn bench(args: &AnswerBenchArgs, extra: Value) -> Result<AnswerBenchReport> {
    let queries = read_queries(&args.queries)?;
    let client = client(1)?;
    let base = args.url.trim_end_matches('/');
    let (retrieve_url, answer_url) = (format!("{base}/v1/retrieve"), format!("{base}/v1/answer"));
    let key = args.api_key.as_deref();
    let body_for = |i: usize| {
        let mut b = json!({"query": queries[i % queries.len()], "k": 8,
                           "pack": {"budget_tokens": 3000}});
        if let Some(o) = extra.as_object() {
            for (k, v) in o {
                b[k] = v.clone();
            }
        }
        b
    };
    for i in 0..args.warmup {
        post(&client, &answer_url, key, &body_for(i)).await?;
    }
    let mut r = AnswerBenchReport {
        body: extra.clone(),
        requests: args.requests,
        refused: 0,
        retrieve_ms: Default::default(),
        answer_ms: Default::default(),
        first_delta_ms: Default::default(),
        added_ms: Default::default(),
        added_first_token_ms: Default::default(),
        node_prompt_ms: Default::default(),
        node_llm_ms: Default::default(),
        node_cite_ms: Default::default(),
        node_after_retrieval_ms: Default::default(),
    };
    let (mut ret, mut ans, mut first) = (Vec::new(), Vec::new(), Vec::new());
    let (mut added, mut added_first) = (Vec::new(), Vec::new());
    let (mut prompt, mut llm, mut cite, mut after) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..args.requests {
        let body = body_for(i);
        let mut streamed = body.clone();
        streamed["stream"] = json!(true);
        let (mut rt, mut at, mut ft) = (0.0, 0.0, 0.0);
        for step in 0..3 {
            match (i + step) % 3 {
                0 => {
                    let t = Instant::now();
                    post(&client, &retrieve_url, key, &body).await?;
                    rt = t.elapsed().as_secs_f64() * 1000.0;
                }
                1 => {
                    let t = Instant::now();
                    let v = post(&client, &answer_url, key, &body).await?;
                    at = t.elapsed().as_secs_f64() * 1000.0;
                    let tm = &v["timings_ms"];
                    if v["refused"] == true {
                        r.refused += 1;
                    }
                    let get = |k: &str| tm[k].as_f64();
                    prompt.extend(get("prompt"));
                    llm.extend(get("llm"));
                    cite.extend(get("cite"));
                    if let (Some(total), Some(retrieval)) = (get("total"), get("retrieval")) {
                        after.push(total - retrieval);
                    }
                }
                _ => ft = first_delta(&client, &answer_url, key, &streamed).await?,
            }
        }
        ret.push(rt);
        ans.push(at);
        first.push(ft);
        added.push(at - rt);
        added_first.push(ft - rt);
    }
    r.retrieve_ms = Percentiles::of(ret);
    r.answer_ms = Percentiles::of(ans);
    r.first_delta_ms = Percentiles::of(first);
    r.added_ms = Percentiles::of(added);
    r.added_first_token_ms = Percentiles::of(added_first);
    r.node_prompt_ms = Percentiles::of(prompt);
    r.node_llm_ms = Percentiles::of(llm);
    r.node_cite_ms = Percentiles::of(cite);
    r.node_after_retrieval_ms = Percentiles::of(after);
    Ok(r)
}
