//! What the query node's HTTP handlers share: the retrieval engine, and who may call it
//! ([`Auth`], apart from the engine: a retrieval never looks at credentials, only at the
//! principals its plan carries).

use std::sync::Arc;

use crate::auth::Auth;
use crate::retrieve::Engine;

/// The node behind the routers (`http.rs`, `wait.rs`).
pub struct Node {
    pub engine: Arc<Engine>,
    pub auth: Auth,
    /// What `GET /v1/status` reads beside the engine.
    pub status: crate::status::StatusSources,
}
