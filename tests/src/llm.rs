//! The deterministic OpenAI-compatible stand-in model (`freshet_llm::standin`) in a test
//! process: served on its own runtime's threads while the test goes on synchronously.

use anyhow::{Context, Result};
use freshet_llm::standin::StandIn;
use serde_json::Value;

/// A running stand-in (stopped when dropped).
pub struct LiveStandIn {
    standin: StandIn,
    // Dropped last: the server's tasks run on it.
    _runtime: tokio::runtime::Runtime,
}

impl LiveStandIn {
    /// Serves the stand-in on a free port of 127.0.0.1.
    pub fn start() -> Result<LiveStandIn> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .context("starting the stand-in's runtime")?;
        let standin = runtime
            .block_on(StandIn::start())
            .context("starting the stand-in model")?;
        Ok(LiveStandIn {
            standin,
            _runtime: runtime,
        })
    }

    /// Its OpenAI-compatible base (`http://127.0.0.1:<port>/v1`).
    pub fn base_url(&self) -> String {
        self.standin.base_url()
    }

    /// Every chat request body it received, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.standin.requests()
    }

    /// The `[llm]` settings of a query node that asks it, as model `model` (a script name).
    pub fn node_settings(&self, model: &str) -> Vec<(&'static str, String)> {
        vec![
            ("FRESHET_LLM_BASE_URL", self.base_url()),
            ("FRESHET_LLM_MODEL", model.to_owned()),
            ("FRESHET_LLM_RETRIES", "1".to_owned()),
            ("FRESHET_LLM_BACKOFF_INITIAL_MS", "10".to_owned()),
            ("FRESHET_LLM_DEADLINE_MS", "5000".to_owned()),
            ("FRESHET_LLM_STREAM_IDLE_TIMEOUT_MS", "1000".to_owned()),
        ]
    }
}

/// The events of a server-sent event stream: `(event, data as JSON)`.
pub fn sse_events(body: &str) -> Result<Vec<(String, Value)>> {
    let mut out = Vec::new();
    for block in body.split("\n\n") {
        let mut name = String::from("message");
        let mut data = String::new();
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("event:") {
                name = v.trim().to_owned();
            } else if let Some(v) = line.strip_prefix("data:") {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(v.strip_prefix(' ').unwrap_or(v));
            }
        }
        if !data.is_empty() {
            let v = serde_json::from_str(&data)
                .with_context(|| format!("event {name}: data is not JSON: {data}"))?;
            out.push((name, v));
        }
    }
    Ok(out)
}
