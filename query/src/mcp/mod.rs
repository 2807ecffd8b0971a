//! The query node as a Model Context Protocol server (the official Rust SDK, `rmcp`): three
//! tools an agent calls, `search` (retrieval with filters), `fetch` (a document's chunks, or a
//! chunk with its neighbours) and `answer` (a cited answer), defined once over a [`Backend`].
//! Two transports: streamable HTTP at `/mcp` on the node's own port, behind the same
//! authentication as every other route (`http.rs`), and stdio (`freshet-query mcp`), which
//! carries each call to a node's HTTP API with the caller's key (`remote.rs`). Either way an
//! agent sees exactly what its credential may see.
//!
//! `args.rs` holds the tools' input schemas and validation, `shape.rs` their results (structured
//! content plus a short text rendering), `backend.rs` where the calls run. Every failure about
//! one call (bad arguments, a document not found, the model or an index down, overload) is a
//! tool error (`isError: true`) with the node's error code and message; the session goes on.

pub mod args;
pub mod backend;
pub mod http;
pub mod remote;
pub mod shape;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{json, Value};

pub use backend::{Backend, Call, NodeBackend, ToolFailure};

/// What the server tells an agent about itself.
pub const INSTRUCTIONS: &str = "freshet searches a continuously updated document index. \
Use `search` to find passages (each with doc_id, chunk_id, title, source, pages, score and text), \
`fetch` to read a document or the chunks around a result, and `answer` for an answer with [n] \
citations. You see only the documents your credential may see.";

/// The tools, their descriptions and input schemas.
pub fn tools() -> Vec<Tool> {
    let read_only = ToolAnnotations::new().read_only(true).destructive(false);
    vec![
        Tool::new(
            "search",
            "Hybrid (keyword + semantic) search over the indexed documents you may see. Returns \
             the best passages, best first, each with doc_id, chunk_id, title, source, pages, \
             score and text. Narrow with `filter` (metadata conditions) and `mode`.",
            Arc::new(Default::default()),
        )
        .with_input_schema::<args::SearchArgs>()
        .with_title("Search documents")
        .with_annotations(read_only.clone()),
        Tool::new(
            "fetch",
            "Read a document by doc_id: its chunks in order (a page of `limit` chunks from \
             `from`), or, with `chunk_id`, that chunk with `neighbours` chunks on each side. A \
             document you may not see is reported exactly as one that does not exist.",
            Arc::new(Default::default()),
        )
        .with_input_schema::<args::FetchArgs>()
        .with_title("Read a document")
        .with_annotations(read_only.clone()),
        Tool::new(
            "answer",
            "Answer a question from the documents you may see with the node's language model. \
             The answer marks its sources as [n]; `citations` lists each cited passage (doc_id, \
             chunk_id, title, source, pages, text). It says so when the documents do not hold \
             the answer.",
            Arc::new(Default::default()),
        )
        .with_input_schema::<args::AnswerArgs>()
        .with_title("Answer with citations")
        .with_annotations(read_only),
    ]
}

/// The MCP server over a backend.
pub struct McpServer<B> {
    backend: Arc<B>,
}

impl<B> Clone for McpServer<B> {
    fn clone(&self) -> Self {
        McpServer {
            backend: self.backend.clone(),
        }
    }
}

/// A tool error: the code and message as text, and as `{"error": {code, message}}`.
pub fn tool_error(f: &ToolFailure) -> CallToolResult {
    let mut r = CallToolResult::error(vec![ContentBlock::text(format!(
        "{}: {}",
        f.code, f.message
    ))]);
    r.structured_content = Some(json!({"error": {"code": f.code, "message": f.message}}));
    r
}

/// A tool's result: `structured` plus its text rendering.
fn tool_ok<T: serde::Serialize>(structured: &T, text: String) -> CallToolResult {
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = serde_json::to_value(structured).ok();
    r
}

/// The request a tool call stands for, or why its arguments are wrong.
pub fn plan_call(
    name: &str,
    arguments: Option<serde_json::Map<String, Value>>,
) -> Result<Call, String> {
    match name {
        "search" => Ok(Call::Retrieve(
            args::parse::<args::SearchArgs>(name, arguments)?.body()?,
        )),
        "answer" => Ok(Call::Answer(
            args::parse::<args::AnswerArgs>(name, arguments)?.body()?,
        )),
        "fetch" => Ok(Call::Chunks(
            args::parse::<args::FetchArgs>(name, arguments)?.query()?,
        )),
        other => Err(format!(
            "unknown tool {other:?}: the tools are search, fetch, answer"
        )),
    }
}

/// A backend's answer to `call` as the tool's result.
pub fn shape_result(call: &Call, answer: Result<Value, ToolFailure>) -> CallToolResult {
    let shaped = answer.and_then(|v| {
        let r = match call {
            Call::Retrieve(_) => shape::search(v).map(|r| tool_ok(&r, shape::render_search(&r))),
            Call::Answer(_) => shape::answer(v).map(|r| tool_ok(&r, shape::render_answer(&r))),
            Call::Chunks(_) => shape::fetch(v).map(|r| tool_ok(&r, shape::render_fetch(&r))),
        };
        r.map_err(|m| ToolFailure::new("internal", m))
    });
    shaped.unwrap_or_else(|f| tool_error(&f))
}

impl<B: Backend> McpServer<B> {
    pub fn new(backend: Arc<B>) -> McpServer<B> {
        McpServer { backend }
    }

    /// Runs one tool call: every failure is a tool error.
    pub async fn call(
        &self,
        caller: &rmcp::model::Extensions,
        name: &str,
        arguments: Option<serde_json::Map<String, Value>>,
    ) -> CallToolResult {
        let call = match plan_call(name, arguments) {
            Ok(c) => c,
            Err(message) => {
                self.backend.refused(name);
                return tool_error(&ToolFailure::new("bad_request", message));
            }
        };
        let answer = self.backend.run(caller, call.clone()).await;
        if let Err(f) = &answer {
            tracing::debug!(tool = call.tool(), code = %f.code, message = %f.message, "MCP tool error");
        }
        shape_result(&call, answer)
    }
}

impl<B: Backend> ServerHandler for McpServer<B> {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("freshet", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools().into_iter().find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        Ok(self
            .call(&context.extensions, &request.name, request.arguments)
            .await
            .into())
    }
}
