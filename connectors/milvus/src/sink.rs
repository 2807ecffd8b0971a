//! [`MilvusSink`]: one collection on one Milvus server, and the connection to it. Its
//! operations live by role: `collection` (create, check, load, drop), `write` (checks, deletes,
//! inserts with refused rows isolated), `read` (ids, counts, filtered search), `health`;
//! `columns` holds what they share.

use std::sync::{Arc, Mutex};

use milvus::v2::prelude::{ClientV2, ConnectConfig, TelemetryConfig};

use crate::collection::SearchedIndex;
use crate::columns::bounded;
use crate::config::MilvusConfig;
use crate::error::{Error, Result};
use crate::metrics::{recorded, MilvusMetrics, Op};
use crate::read::MAX_QUERY_WINDOW;

/// Writes chunk vectors to one Milvus collection and searches them.
///
/// Holds one gRPC client (cheap to share by reference across tasks). Telemetry of the SDK is
/// switched off.
#[derive(Clone)]
pub struct MilvusSink {
    pub(crate) client: ClientV2,
    pub(crate) cfg: MilvusConfig,
    metrics: Option<MilvusMetrics>,
    /// The collection's vector index, once read from Milvus (`ensure_collection`,
    /// `check_collection`); until then searches assume the configured one.
    searched: Arc<Mutex<Option<SearchedIndex>>>,
}

impl std::fmt::Debug for MilvusSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MilvusSink")
            .field("url", &self.cfg.url)
            .field("collection", &self.cfg.collection)
            .field("dim", &self.cfg.dim)
            .field("model_id", &self.cfg.model_id)
            .finish_non_exhaustive()
    }
}

impl MilvusSink {
    /// Connects (waits up to `cfg.timeout` for the server to answer). Does not touch the
    /// collection: call [`MilvusSink::ensure_collection`] before writing.
    pub async fn connect(cfg: MilvusConfig) -> Result<Self> {
        cfg.validate()?;
        if cfg.dim == 0 {
            return Err(Error::InvalidInput("dim must be positive".into()));
        }
        if cfg.collection.is_empty() {
            return Err(Error::InvalidInput("collection name is empty".into()));
        }
        if cfg.page_size == 0 || cfg.page_size > MAX_QUERY_WINDOW {
            return Err(Error::InvalidInput(format!(
                "page_size must be in 1..={MAX_QUERY_WINDOW}, got {}",
                cfg.page_size
            )));
        }
        if cfg.max_batch_rows == 0 {
            return Err(Error::InvalidInput(
                "max_batch_rows must be positive".into(),
            ));
        }
        let mut cc = ConnectConfig::new()
            .uri(cfg.url.clone())
            .connect_timeout(cfg.timeout)
            .rpc_timeout(cfg.timeout)
            // The SDK reports client metrics to the server by default (ClientTelemetry
            // heartbeat); freshet does not.
            .telemetry(TelemetryConfig::new().enabled(false));
        if let Some(t) = &cfg.token {
            cc = cc.token(t.expose().to_owned());
        }
        let client = bounded(cfg.timeout, async { Ok(ClientV2::new(&cc).await?) }).await?;
        Ok(MilvusSink {
            client,
            cfg,
            metrics: None,
            searched: Arc::new(Mutex::new(None)),
        })
    }

    /// This sink, recording its calls to Milvus in `metrics`.
    pub fn with_metrics(mut self, metrics: MilvusMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Runs `call` (one call to Milvus of kind `op`), recorded in the sink's metrics if it has
    /// them. The call is boxed: an SDK call's future is large, and held inline in the nested
    /// futures of a collection check it overflows a runtime thread's stack in debug builds.
    pub(crate) fn rpc<'a, T: 'a, E: Into<Error> + 'a>(
        &'a self,
        op: Op,
        call: impl std::future::Future<Output = std::result::Result<T, E>> + 'a,
    ) -> impl std::future::Future<Output = Result<T>> + 'a {
        recorded(self.metrics.as_ref(), op, Box::pin(call))
    }

    /// The configuration this sink was connected with.
    pub fn config(&self) -> &MilvusConfig {
        &self.cfg
    }

    /// The underlying SDK client (for operations this crate does not wrap).
    pub fn client(&self) -> &ClientV2 {
        &self.client
    }

    /// The vector index searches go through: the collection's as last read from Milvus, or
    /// the configured one before it was read.
    pub fn searched_index(&self) -> SearchedIndex {
        self.searched
            .lock()
            .ok()
            .and_then(|g| *g)
            .unwrap_or_else(|| SearchedIndex::configured(&self.cfg))
    }

    pub(crate) fn set_searched(&self, index: SearchedIndex) {
        if let Ok(mut g) = self.searched.lock() {
            *g = Some(index);
        }
    }

    pub(crate) fn coll(&self) -> &str {
        &self.cfg.collection
    }

    pub(crate) fn timeout_ms(&self) -> i64 {
        self.cfg.timeout.as_millis().min(i64::MAX as u128) as i64
    }
}
