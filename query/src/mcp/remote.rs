//! `freshet-query mcp --url <node>`: the MCP server on stdin/stdout for an agent runtime to
//! launch, carrying each tool call to a query node's HTTP API (`/v1/retrieve`, `/v1/answer`,
//! `/v1/documents/{id}/chunks`) with the caller's key (`FRESHET_API_KEY`). It holds no index,
//! model or Milvus of its own: the node decides what the key may see, as for any client.
//! Standard output is the protocol; logs go to standard error.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use futures::future::BoxFuture;
use rmcp::model::Extensions;
use rmcp::ServiceExt;
use serde_json::Value;

use super::backend::{Backend, Call, ToolFailure};
use super::McpServer;

/// A query node's HTTP API.
pub struct HttpBackend {
    client: reqwest::Client,
    base: reqwest::Url,
    key: Option<String>,
}

impl HttpBackend {
    /// The node at `base` (`http(s)://host:port`), called with `key` when given; each request
    /// may take `timeout`.
    pub fn new(base: &str, key: Option<String>, timeout: Duration) -> Result<HttpBackend> {
        let base = reqwest::Url::parse(base)
            .with_context(|| format!("--url {base:?} is not a URL (http://host:port)"))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            bail!("--url {base} must be an http:// or https:// URL of the query node");
        }
        if key.as_deref().is_some_and(str::is_empty) {
            bail!("FRESHET_API_KEY is set but empty: set the key, or unset it for a node without auth");
        }
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .context("building the HTTP client")?;
        Ok(HttpBackend { client, base, key })
    }

    /// The URL of `segments` under the base URL's path.
    fn url(&self, segments: &[&str]) -> Result<reqwest::Url, ToolFailure> {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .map_err(|_| ToolFailure::new("internal", "the node URL cannot be a base"))?
            .pop_if_empty()
            .extend(segments);
        Ok(url)
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Result<Value, ToolFailure> {
        let req = match &self.key {
            Some(k) => req.bearer_auth(k),
            None => req,
        };
        let resp = req.send().await.map_err(|e| {
            let why = if e.is_timeout() {
                "timeout"
            } else {
                "unavailable"
            };
            let mut chain = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                chain.push_str(&format!(": {s}"));
                source = s.source();
            }
            ToolFailure::new(
                why,
                format!("the query node at {} did not answer: {chain}", self.base),
            )
        })?;
        let status = resp.status();
        let body: Value = resp.json().await.map_err(|e| {
            ToolFailure::new(
                "unavailable",
                format!("the query node's answer ({status}) is not JSON: {e}"),
            )
        })?;
        if status.is_success() {
            return Ok(body);
        }
        let field = |k: &str| {
            body.pointer(&format!("/error/{k}"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        Err(ToolFailure::new(
            field("code").unwrap_or_else(|| format!("http_{}", status.as_u16())),
            field("message").unwrap_or_else(|| body.to_string()),
        ))
    }
}

impl Backend for HttpBackend {
    fn run<'a>(
        &'a self,
        _caller: &'a Extensions,
        call: Call,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>> {
        Box::pin(async move {
            match call {
                Call::Retrieve(body) => {
                    let url = self.url(&["v1", "retrieve"])?;
                    self.send(self.client.post(url).json(&body)).await
                }
                Call::Answer(body) => {
                    let url = self.url(&["v1", "answer"])?;
                    self.send(self.client.post(url).json(&body)).await
                }
                Call::Chunks(q) => {
                    let url = self.url(&["v1", "documents", &q.doc_id, "chunks"])?;
                    let query = super::args::query_string(&q);
                    self.send(self.client.get(url).query(&query)).await
                }
            }
        })
    }
}

/// Serves MCP on stdin/stdout until the client closes it.
pub async fn serve_stdio(backend: HttpBackend) -> Result<()> {
    tracing::info!(node = %backend.base, key = backend.key.is_some(), "MCP server on stdio");
    let server = McpServer::new(Arc::new(backend));
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .context("starting the MCP session on stdio")?;
    running
        .waiting()
        .await
        .context("the MCP session on stdio failed")?;
    Ok(())
}
