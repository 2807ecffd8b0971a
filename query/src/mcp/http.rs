//! `/mcp`: the MCP server on the node's API port, over streamable HTTP. Stateless (every POST
//! carries its own credential and is answered on its own, JSON when the call needs no stream),
//! so a node behind a load balancer needs no sticky sessions. The credential is checked
//! before any MCP work, by the node's [`crate::auth::Auth`] as for every other route (401, 429
//! in the route's JSON error); the admitted identity travels with the HTTP request to the
//! tools ([`super::NodeBackend`]), and its concurrency slot is held until the call is answered.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

use super::{McpServer, NodeBackend};
use crate::node::Node;

/// The `/mcp` router (nested into the node's API router).
pub fn router(node: Arc<Node>) -> Router<Arc<Node>> {
    let q = &node.engine.config.query;
    let hosts = &q.mcp_allowed_hosts;
    let mut config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_max_request_body_bytes(q.max_body_bytes);
    config = if hosts.iter().any(|h| h == "*") {
        config.disable_allowed_hosts()
    } else {
        config.with_allowed_hosts(hosts.iter().cloned())
    };
    let server = McpServer::new(Arc::new(NodeBackend { node: node.clone() }));
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    Router::new()
        .nest_service("/mcp", service)
        .layer(middleware::from_fn_with_state(node, admit))
}

/// The node's credential check, before the MCP service sees the request.
async fn admit(State(node): State<Arc<Node>>, mut request: Request, next: Next) -> Response {
    match node.auth.admit(request.headers()) {
        Ok(admission) => {
            request.extensions_mut().insert(Arc::new(admission));
            next.run(request).await
        }
        Err(e) => {
            node.engine.metrics.request("mcp", "none", e.code);
            e.into_response()
        }
    }
}
