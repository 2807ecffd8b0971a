//! Whether the server is up and healthy, and its version.

use milvus::v2::prelude::{CheckHealthRequest, GetServerVersionRequest};

use crate::columns::bounded;
use crate::error::Result;
use crate::metrics::Op;
use crate::sink::MilvusSink;

/// What [`MilvusSink::health`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerHealth {
    pub healthy: bool,
    /// Server version string (`v2.3.5-lite`, `milvus_lite-3.2.2`, ...).
    pub version: String,
    /// Why the server considers itself unhealthy, if it says.
    pub reasons: Vec<String>,
}

impl MilvusSink {
    /// Asks the server whether it is healthy (CheckHealth) and for its version (bounded by
    /// `timeout`).
    pub async fn health(&self) -> Result<ServerHealth> {
        bounded(self.cfg.timeout, async {
            let req = GetServerVersionRequest::builder().build()?;
            let version = self
                .rpc(Op::Health, self.client.server_version(req))
                .await?
                .version()
                .to_owned();
            let req = CheckHealthRequest::builder().build()?;
            match self.rpc(Op::Health, self.client.check_health(req)).await {
                Ok(h) => Ok(ServerHealth {
                    healthy: h.is_healthy(),
                    version,
                    reasons: h.reasons().to_vec(),
                }),
                // Answered the version call but not CheckHealth: reachable, assume serving.
                Err(e) => {
                    tracing::debug!(error = %e, "CheckHealth failed; server answered GetVersion");
                    Ok(ServerHealth {
                        healthy: true,
                        version,
                        reasons: vec![format!("CheckHealth unavailable: {e}")],
                    })
                }
            }
        })
        .await
    }
}
