//! Where the tools' requests go: a [`Backend`] answers the query node's own requests (a
//! retrieval, an answer, a document read) with the node's JSON answer or its error. Two
//! backends, one tool set: [`NodeBackend`] runs them in the node's engine for `/mcp`, with the
//! identity the HTTP request was admitted as; `remote::HttpBackend` sends them to a node's HTTP
//! API with a key, for `freshet-query mcp` on stdio.

use std::sync::Arc;

use futures::future::BoxFuture;
use rmcp::model::Extensions;
use serde_json::Value;

use crate::auth::Admission;
use crate::documents::ChunksQuery;
use crate::node::Node;

/// One request of a tool.
#[derive(Clone, Debug, PartialEq)]
pub enum Call {
    /// A `/v1/retrieve` body.
    Retrieve(Value),
    /// A `/v1/answer` body (answered whole).
    Answer(Value),
    /// A document read (`GET /v1/documents/{id}/chunks`).
    Chunks(ChunksQuery),
}

impl Call {
    /// The tool that makes it.
    pub fn tool(&self) -> &'static str {
        match self {
            Call::Retrieve(_) => "search",
            Call::Answer(_) => "answer",
            Call::Chunks(_) => "fetch",
        }
    }
}

/// Why a tool's request failed: the node's error code (`bad_request`, `not_found`,
/// `forbidden`, `unavailable`, `overloaded`, `timeout`, `llm_<class>` ...) and its message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolFailure {
    pub code: String,
    pub message: String,
}

impl ToolFailure {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> ToolFailure {
        ToolFailure {
            code: code.into(),
            message: message.into(),
        }
    }
}

impl From<freshet_service::ApiError> for ToolFailure {
    fn from(e: freshet_service::ApiError) -> ToolFailure {
        ToolFailure::new(e.code, e.message)
    }
}

/// Runs the tools' requests. `caller` is the MCP request's extensions (for `/mcp`, the HTTP
/// request's parts and so its admitted identity).
pub trait Backend: Send + Sync + 'static {
    fn run<'a>(
        &'a self,
        caller: &'a Extensions,
        call: Call,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>>;

    /// A call refused before it reached the backend (its arguments), to count.
    fn refused(&self, _tool: &str) {}
}

/// The node's engine, for `/mcp`: each call as the route it stands for would run it, for the
/// identity `/mcp`'s auth layer admitted, counted in `requests_total` as `mcp_<tool>`.
pub struct NodeBackend {
    pub node: Arc<Node>,
}

/// The identity `/mcp`'s auth layer admitted the HTTP request carrying this MCP request as.
fn admission(caller: &Extensions) -> Option<Arc<Admission>> {
    caller
        .get::<axum::http::request::Parts>()
        .and_then(|p| p.extensions.get::<Arc<Admission>>())
        .cloned()
}

fn to_value<T: serde::Serialize>(r: T) -> Result<Value, ToolFailure> {
    serde_json::to_value(r).map_err(|e| ToolFailure::new("internal", e.to_string()))
}

impl Backend for NodeBackend {
    fn run<'a>(
        &'a self,
        caller: &'a Extensions,
        call: Call,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>> {
        Box::pin(async move {
            let endpoint = format!("mcp_{}", call.tool());
            let Some(admission) = admission(caller) else {
                // Only a request through the auth layer reaches the engine.
                self.node
                    .engine
                    .metrics
                    .request(&endpoint, "unknown", "unauthorized");
                return Err(ToolFailure::new(
                    "unauthorized",
                    "the request carries no admitted identity",
                ));
            };
            let node = &self.node;
            let mut mode = "none";
            let result = match call {
                Call::Retrieve(body) => {
                    mode = "unknown";
                    let body = body.to_string();
                    crate::http::retrieve_for(node, &admission, body.as_bytes(), &mut mode)
                        .await
                        .map(|r| (!r.degraded.is_empty(), to_value(r)))
                }
                Call::Answer(body) => {
                    mode = "unknown";
                    let body = body.to_string();
                    crate::answer::http::answer_for(node, &admission, body.as_bytes(), &mut mode)
                        .await
                        .map(|r| (!r.degraded.is_empty(), to_value(r)))
                }
                Call::Chunks(q) => crate::documents::chunks_for(node, &admission, q)
                    .await
                    .map(|r| (false, to_value(r))),
            };
            let metrics = &node.engine.metrics;
            match result {
                Ok((degraded, v)) => {
                    let outcome = if degraded { "degraded" } else { "ok" };
                    metrics.request(&endpoint, mode, outcome);
                    v
                }
                Err(e) => {
                    metrics.request(&endpoint, mode, e.code);
                    Err(e.into())
                }
            }
        })
    }

    fn refused(&self, tool: &str) {
        self.node
            .engine
            .metrics
            .request(&format!("mcp_{tool}"), "unknown", "bad_request");
    }
}
