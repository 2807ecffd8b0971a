//! The query node in integration tests: spawn the real `freshet-query` binary on a free port
//! against a [`Case`]'s index and collection, and the calls the tests make to it.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;

pub use crate::http::{request, Reply};
use crate::spawned::Spawned;
use crate::{free_port, workspace_root, Case};

/// The `freshet-query` binary built by `deploy/test.sh` (`FRESHET_QUERY_BIN` overrides).
pub fn query_bin() -> PathBuf {
    std::env::var("FRESHET_QUERY_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|_| workspace_root().join("target/debug/freshet-query"))
}

/// The finance ledger of the answer, chat and MCP tests: a document only `group:finance` may
/// see, whose figure must never reach another key's results, prompts or answers.
pub const LEDGER_TEXT: &str =
    "The estuary dredging budget is forty million crowns, kept confidential.";

/// `FRESHET_QUERY_KEYS` with two keys: `key-public` (public documents only) and `key-finance`
/// (`group:finance` too), for the tests of what each identity may see.
pub const PUBLIC_AND_FINANCE_KEYS: &str = r#"[{name = "public", key = "key-public", principals = []},
        {name = "finance", key = "key-finance", principals = ["group:finance"]}]"#;

/// A running query node (killed on drop).
pub struct QueryNode {
    pub addr: String,
    process: Spawned,
}

impl Case {
    /// Starts a query node for this case's index and collection; `settings` are extra
    /// `FRESHET_*` variables (e.g. `("FRESHET_QUERY_RERANK_BACKEND", "local")`).
    pub fn start_query(&self, settings: &[(&str, String)]) -> Result<QueryNode> {
        self.start_query_on(free_port(), settings)
    }

    /// [`Case::start_query`] listening on `port` (a node restarted where clients know it).
    pub fn start_query_on(&self, port: u16, settings: &[(&str, String)]) -> Result<QueryNode> {
        let addr = format!("127.0.0.1:{port}");
        let mut cmd = Command::new(query_bin());
        cmd.env("FRESHET_MILVUS_URL", &self.milvus_url)
            .env("FRESHET_MILVUS_COLLECTION", &self.collection)
            .env("FRESHET_TANTIVY_PATH", self.tantivy_path())
            .env("FRESHET_QUERY_LISTEN", &addr)
            .env("FRESHET_LOG", "info");
        for (k, v) in settings {
            cmd.env(k, v);
        }
        let log = self.dir.join(format!("query-{port}.log"));
        let process = Spawned::start("the query node", cmd, &addr, log, Duration::from_secs(60))?;
        Ok(QueryNode { addr, process })
    }
}

impl Case {
    /// Generates the latency stand-in cross-encoder of `tools/bench/make_latency_reranker.py`
    /// (the MiniLM-L6 encoder of `FRESHET_MODEL_DIR` with a random head: a real
    /// cross-encoder's cost, meaningless scores) in the case's directory; returns its model
    /// directory.
    pub fn latency_reranker(&self) -> Result<PathBuf> {
        let model = self.dir.join("latency-reranker");
        let python = std::env::var("FRESHET_PYTHON").unwrap_or_else(|_| "python3".into());
        let st = Command::new(&python)
            .arg(workspace_root().join("tools/bench/make_latency_reranker.py"))
            .arg(crate::env("FRESHET_MODEL_DIR"))
            .arg(&model)
            .status()
            .with_context(|| format!("running {python}"))?;
        if !st.success() {
            bail!("generating the latency reranker failed: {st}");
        }
        Ok(model)
    }

    /// Generates the stand-in cross-encoder of `tests/fixtures/make_standin_reranker.py` (its
    /// score is the number of passage tokens that also occur in the query) in the case's
    /// directory; returns its model directory.
    pub fn standin_reranker(&self) -> Result<PathBuf> {
        let model = self.dir.join("standin-reranker");
        let python = std::env::var("FRESHET_PYTHON").unwrap_or_else(|_| "python3".into());
        let st = Command::new(&python)
            .arg(workspace_root().join("tests/fixtures/make_standin_reranker.py"))
            .arg(&model)
            .status()
            .with_context(|| format!("running {python}"))?;
        if !st.success() {
            bail!("generating the stand-in reranker failed: {st}");
        }
        Ok(model)
    }
}

/// Document ids (`metadata.doc_id`) of a Pathway answer (`[{"text", "metadata", "dist"}]`).
pub fn pathway_doc_ids(r: &Reply) -> Result<Vec<String>> {
    Ok(r.json()?
        .as_array()
        .ok_or_else(|| anyhow!("the Pathway answer is not an array: {}", r.body))?
        .iter()
        .map(|h| {
            h["metadata"]["doc_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect())
}

impl QueryNode {
    /// Waits until `/readyz` says both indexes are reachable.
    pub fn wait_ready(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let r = self.get("/readyz")?;
            if r.status == 200 {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("not ready: {}; log:\n{}", r.body, self.log_tail());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits until `GET /v1/index` names `generation` (docs/reindex.md) as the one served.
    pub fn wait_generation(&self, generation: &str, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let r = self.get("/v1/index")?;
            if r.status == 200 && r.json()?["generation"] == generation {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "generation {generation} not served: {}\n{}",
                    r.body,
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The process id of the node.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    pub fn log_tail(&self) -> String {
        self.process.log_tail()
    }

    pub fn get(&self, path: &str) -> Result<Reply> {
        request(&self.addr, "GET", path, &[], b"")
    }

    pub fn post(&self, path: &str, body: &Value) -> Result<Reply> {
        request(&self.addr, "POST", path, &[], body.to_string().as_bytes())
    }

    /// `POST /v1/retrieve`, which must succeed; returns the response JSON.
    pub fn retrieve(&self, body: &Value) -> Result<Value> {
        self.retrieve_as(None, body)
    }

    /// `POST /v1/retrieve` with `Authorization: Bearer <key>` when a key is given, which must
    /// succeed; returns the response JSON.
    pub fn retrieve_as(&self, key: Option<&str>, body: &Value) -> Result<Value> {
        let bearer = key.map(|k| format!("Bearer {k}"));
        let mut headers = vec![("Content-Type", "application/json")];
        if let Some(b) = &bearer {
            headers.push(("Authorization", b.as_str()));
        }
        let r = request(
            &self.addr,
            "POST",
            "/v1/retrieve",
            &headers,
            body.to_string().as_bytes(),
        )?;
        if r.status != 200 {
            bail!("retrieve {body} → {}: {}", r.status, r.body);
        }
        r.json()
    }

    /// Document ids of the results of `retrieve(body)`, in rank order.
    pub fn doc_ids(&self, body: &Value) -> Result<Vec<String>> {
        self.doc_ids_as(None, body)
    }

    /// Document ids of the results of `retrieve_as(key, body)`, in rank order.
    pub fn doc_ids_as(&self, key: Option<&str>, body: &Value) -> Result<Vec<String>> {
        Ok(self.retrieve_as(key, body)?["results"]
            .as_array()
            .ok_or_else(|| anyhow!("no results array"))?
            .iter()
            .map(|h| h["doc_id"].as_str().unwrap_or_default().to_owned())
            .collect())
    }

    /// Document ids (`metadata.doc_id`) of a `POST /pathway/v1/retrieve` answer, which must
    /// succeed.
    pub fn pathway_doc_ids(&self, body: &Value) -> Result<Vec<String>> {
        let r = self.post("/pathway/v1/retrieve", body)?;
        if r.status != 200 {
            bail!("pathway retrieve {body} → {}: {}", r.status, r.body);
        }
        pathway_doc_ids(&r)
    }

    /// Polls until `pred(doc ids of retrieve(body))` holds.
    pub fn wait_for(
        &self,
        body: &Value,
        timeout: Duration,
        pred: impl Fn(&[String]) -> bool,
    ) -> Result<Vec<String>> {
        self.wait_for_as(None, body, timeout, pred)
    }

    /// Polls until `pred(doc ids of retrieve_as(key, body))` holds.
    pub fn wait_for_as(
        &self,
        key: Option<&str>,
        body: &Value,
        timeout: Duration,
        pred: impl Fn(&[String]) -> bool,
    ) -> Result<Vec<String>> {
        let deadline = Instant::now() + timeout;
        loop {
            // A node still connecting to Milvus answers 503 (`not connected yet`): ask again
            // until the deadline, then report the last answer.
            let ids = match self.doc_ids_as(key, body) {
                Ok(ids) => ids,
                Err(e) if Instant::now() < deadline => {
                    eprintln!("retrieving again: {e:#}");
                    std::thread::sleep(Duration::from_millis(200));
                    continue;
                }
                Err(e) => return Err(e),
            };
            if pred(&ids) {
                return Ok(ids);
            }
            if Instant::now() > deadline {
                bail!("condition not met for {body}: last results {ids:?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
