//! [`MilvusSink`]: the vector side of the index.

use std::collections::{HashMap, HashSet};

use milvus::v2::prelude::{
    CheckHealthRequest, ClientV2, ConnectConfig, ConsistencyLevel, CreateCollectionRequest,
    CreateIndexRequest, DescribeCollectionRequest, DescribeIndexRequest, DropCollectionRequest,
    FieldData, FlushRequest, GetServerVersionRequest, HasCollectionRequest, Ids,
    LoadCollectionRequest, QueryRequest, QueryResults, SearchRequest, SearchVectors,
    TelemetryConfig,
};

use crate::config::MilvusConfig;
use crate::error::{Error, Result};
use crate::expr::{excludes_all_stored, filter_expr, ids_expr, quote, ChunkFilter};
use crate::schema::{
    self, FieldLimits, EXPECTED_FIELDS, F_CHUNK_ID, F_DOC_ID, F_VECTOR, LAYOUT_VERSION, P_LAYOUT,
    P_MODEL_ID,
};

/// Milvus' limit on `offset + limit` of one query / `topk` of one search.
pub const MAX_QUERY_WINDOW: usize = 16_384;
/// Default lower bound of HNSW `ef` at search time (raised to `k` when `k` is larger). Raised
/// from 64 while chasing build-to-build variation of SciFact results, which turned out to come
/// from Milvus 2.3's approximate interim index on growing segments (turned off by
/// `deploy/start-milvus.sh`); it stayed at 256 (recall@50 0.999 against `ef` 4,096 at 107k
/// chunks; 0.995 at 128, 0.981 at 64).
pub const DEFAULT_SEARCH_EF: usize = 256;
/// Largest HNSW `ef` Milvus accepts.
pub const MAX_SEARCH_EF: usize = 32_768;

/// What [`MilvusSink::health`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerHealth {
    pub healthy: bool,
    /// Server version string (`v2.3.5-lite`, `milvus_lite-3.2.2`, ...).
    pub version: String,
    /// Why the server considers itself unhealthy, if it says.
    pub reasons: Vec<String>,
}

/// Writes chunk vectors to one Milvus collection and searches them.
///
/// Holds one gRPC client (cheap to share by reference across tasks). Telemetry of the SDK is
/// switched off.
#[derive(Clone)]
pub struct MilvusSink {
    pub(crate) client: ClientV2,
    pub(crate) cfg: MilvusConfig,
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
            cc = cc.token(t.clone());
        }
        let client = bounded(cfg.timeout, async { Ok(ClientV2::new(&cc).await?) }).await?;
        Ok(MilvusSink { client, cfg })
    }

    /// The configuration this sink was connected with.
    pub fn config(&self) -> &MilvusConfig {
        &self.cfg
    }

    /// The underlying SDK client (for operations this crate does not wrap).
    pub fn client(&self) -> &ClientV2 {
        &self.client
    }

    pub(crate) fn coll(&self) -> &str {
        &self.cfg.collection
    }

    fn timeout_ms(&self) -> i64 {
        self.cfg.timeout.as_millis().min(i64::MAX as u128) as i64
    }

    /// Creates the collection if missing (fields, HNSW/COSINE index, model id and dimension in
    /// the properties and description), checks an existing one against the configuration, and
    /// loads it. Idempotent. Fails with [`Error::DimensionMismatch`] / [`Error::ModelMismatch`]
    /// when the existing collection holds other vectors.
    pub async fn ensure_collection(&self) -> Result<()> {
        self.ensure_collection_with(&FieldLimits::LAYOUT).await
    }

    /// [`MilvusSink::ensure_collection`], creating a missing collection with `limits` instead
    /// of the layout's (as a collection made by other tools may be).
    pub async fn ensure_collection_with(&self, limits: &FieldLimits) -> Result<()> {
        if !self.has_collection().await? {
            let req = CreateCollectionRequest::builder()
                .collection_name(self.coll())
                .description(schema::description(&self.cfg))
                .schema(schema::collection_schema_with(&self.cfg, limits))
                .properties(schema::properties(&self.cfg))
                .build()?;
            if let Err(e) = self.client.create_collection(req).await {
                // Lost a creation race with another process: verify what it created.
                if !self.has_collection().await? {
                    return Err(e.into());
                }
            } else {
                tracing::info!(collection = self.coll(), dim = self.cfg.dim, model = %self.cfg.model_id, "created milvus collection");
            }
        }
        self.verify_collection().await?;
        self.ensure_index().await?;
        self.load().await
    }

    /// For readers (the query node): checks that the collection exists with this configuration's
    /// dimension and model, and loads it. Creates nothing.
    pub async fn check_collection(&self) -> Result<()> {
        bounded(self.cfg.timeout, async {
            if !self.has_collection().await? {
                return Err(Error::InvalidInput(format!(
                    "milvus collection {:?} does not exist (has the pipeline run yet?)",
                    self.cfg.collection
                )));
            }
            self.verify_collection().await?;
            self.load().await
        })
        .await
    }

    /// Loads the collection into memory (a no-op if it is loaded).
    async fn load(&self) -> Result<()> {
        self.client
            .load_collection(
                LoadCollectionRequest::builder()
                    .collection_name(self.coll())
                    .timeout_ms(self.timeout_ms())
                    .build()?,
            )
            .await?;
        Ok(())
    }

    async fn has_collection(&self) -> Result<bool> {
        Ok(self
            .client
            .has_collection(
                HasCollectionRequest::builder()
                    .collection_name(self.coll())
                    .build()?,
            )
            .await?
            .exists())
    }

    async fn verify_collection(&self) -> Result<()> {
        let resp = self
            .client
            .describe_collection(
                DescribeCollectionRequest::builder()
                    .collection_name(self.coll())
                    .build()?,
            )
            .await?;
        let desc = resp.description();
        let fields = desc.get_schema().get_fields();
        let not_ours = |reason: String| Error::NotFreshetCollection {
            collection: self.cfg.collection.clone(),
            reason,
        };
        // An older freshet's collection says so before a missing field would.
        let layout = desc
            .get_properties()
            .get(P_LAYOUT)
            .and_then(|v| v.trim().parse::<u32>().ok());
        if let Some(existing) = layout.filter(|v| *v < LAYOUT_VERSION) {
            return Err(Error::LayoutOutdated {
                collection: self.cfg.collection.clone(),
                existing,
                current: LAYOUT_VERSION,
            });
        }
        for (name, ty) in EXPECTED_FIELDS {
            match fields.iter().find(|f| f.get_name() == *name) {
                None => return Err(not_ours(format!("field {name:?} is missing"))),
                Some(f) if f.get_data_type() != *ty => {
                    return Err(not_ours(format!(
                        "field {name:?} has type {:?}, expected {ty:?}",
                        f.get_data_type()
                    )))
                }
                Some(f) if *name == F_CHUNK_ID && !f.is_primary_key() => {
                    return Err(not_ours(format!("field {name:?} is not the primary key")))
                }
                Some(_) => {}
            }
        }
        let existing_dim = fields
            .iter()
            .find(|f| f.get_name() == F_VECTOR)
            .map(|f| f.get_dimension() as usize)
            .unwrap_or_default();
        if existing_dim != self.cfg.dim {
            return Err(Error::DimensionMismatch {
                collection: self.cfg.collection.clone(),
                existing: existing_dim,
                configured: self.cfg.dim,
            });
        }
        // milvus-lite keeps properties but drops descriptions; Milvus keeps both.
        let existing_model = desc
            .get_properties()
            .get(P_MODEL_ID)
            .cloned()
            .or_else(|| schema::parse_description(desc.get_description()).map(|(m, _)| m))
            .or_else(|| {
                schema::parse_description(desc.get_schema().get_description()).map(|(m, _)| m)
            })
            .ok_or_else(|| {
                not_ours(format!(
                    "no embedding model recorded (property {P_MODEL_ID:?} or description \
                     \"freshet model=<id> dim=<n>\")"
                ))
            })?;
        if existing_model != self.cfg.model_id {
            return Err(Error::ModelMismatch {
                collection: self.cfg.collection.clone(),
                existing: existing_model,
                configured: self.cfg.model_id.clone(),
            });
        }
        Ok(())
    }

    async fn ensure_index(&self) -> Result<()> {
        let described = self
            .client
            .describe_index(
                DescribeIndexRequest::builder()
                    .collection_name(self.coll())
                    .field_name(F_VECTOR)
                    .build()?,
            )
            .await;
        if let Ok(d) = &described {
            if !d.indexes().is_empty() {
                return Ok(());
            }
        }
        // Not synchronous: the SDK's wait uses AllocTimestamp, which milvus-lite lacks, and an
        // index on a new collection has nothing to build anyway.
        self.client
            .create_index(
                CreateIndexRequest::builder()
                    .collection_name(self.coll())
                    .index_param(schema::vector_index())
                    .sync(false)
                    .build()?,
            )
            .await?;
        Ok(())
    }

    /// Drops the collection if it exists (tests, re-indexing).
    ///
    /// Retried: milvus-lite 3.2.2 can report an error (its directory removal races with a
    /// background index build) after it has already dropped the collection.
    pub async fn drop_collection(&self) -> Result<()> {
        let mut attempt = 0;
        loop {
            if !self.has_collection().await? {
                return Ok(());
            }
            let res = self
                .client
                .drop_collection(
                    DropCollectionRequest::builder()
                        .collection_name(self.coll())
                        .build()?,
                )
                .await;
            match res {
                Ok(()) => return Ok(()),
                Err(e) if attempt >= 2 => return Err(e.into()),
                Err(e) => {
                    tracing::warn!(collection = self.coll(), error = %e, "drop_collection failed; retrying");
                    attempt += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                }
            }
        }
    }

    /// Seals and persists everything written so far (waits up to `timeout`).
    pub async fn flush(&self) -> Result<()> {
        self.client
            .flush(
                FlushRequest::builder()
                    .collection_names([self.coll()])
                    .wait_flushed_ms(self.timeout_ms())
                    .build()?,
            )
            .await?;
        Ok(())
    }

    async fn query(
        &self,
        filter: String,
        output: &[&str],
        limit: Option<usize>,
        pk_order: bool,
    ) -> Result<QueryResults> {
        let mut b = QueryRequest::builder()
            .collection_name(self.coll())
            .filter(filter)
            .output_fields(output.iter().copied())
            .consistency_level(ConsistencyLevel::Strong);
        if let Some(l) = limit {
            b = b.limit(l as i64);
        }
        if pk_order {
            // milvus-lite orders results by primary key only for iterator queries; Milvus 2.3
            // returns the smallest primary keys of a limited query either way.
            b = b.extra_params(HashMap::from([("iterator".to_owned(), "true".to_owned())]));
        }
        Ok(self.client.query(b.build()?).await?.results().clone())
    }

    /// Every chunk id in the collection (strongly consistent), paginated by primary key:
    /// `chunk_id > <last>` pages of `page_size`. Checked against `count(*)`.
    pub async fn list_chunk_ids(&self) -> Result<Vec<String>> {
        let page = self.cfg.page_size;
        let mut out: Vec<String> = Vec::new();
        let mut filter = format!("{F_CHUNK_ID} >= \"\"");
        loop {
            let res = self.query(filter, &[F_CHUNK_ID], Some(page), true).await?;
            let ids = varchar_column(&res, F_CHUNK_ID)?;
            let n = ids.len();
            let Some(max) = ids.iter().max().cloned() else {
                break;
            };
            out.extend(ids);
            if n < page {
                break;
            }
            filter = format!("{F_CHUNK_ID} > {}", quote(&max));
        }
        out.sort_unstable();
        out.dedup();
        let count = self.count().await?;
        if out.len() as u64 != count {
            return Err(Error::Inconsistent(format!(
                "listed {} chunk ids but count(*) is {count} (concurrent writes, or the server \
                 does not return the smallest primary keys first)",
                out.len()
            )));
        }
        Ok(out)
    }

    /// `(chunk_id, doc_id)` of those of `chunk_ids` that exist, in the order given.
    pub async fn get_doc_ids(&self, chunk_ids: &[String]) -> Result<Vec<(String, String)>> {
        let mut found: HashMap<String, String> = HashMap::with_capacity(chunk_ids.len());
        for part in chunk_ids.chunks(self.cfg.page_size) {
            let res = self
                .query(ids_expr(part), &[F_CHUNK_ID, F_DOC_ID], None, false)
                .await?;
            let ids = varchar_column(&res, F_CHUNK_ID)?;
            let docs = varchar_column(&res, F_DOC_ID)?;
            if ids.len() != docs.len() {
                return Err(Error::Inconsistent(format!(
                    "{} ids but {} doc ids in a query result",
                    ids.len(),
                    docs.len()
                )));
            }
            found.extend(ids.into_iter().zip(docs));
        }
        let mut emitted: HashSet<&str> = HashSet::with_capacity(found.len());
        Ok(chunk_ids
            .iter()
            .filter(|id| emitted.insert(id.as_str()))
            .filter_map(|id| found.get(id).map(|d| (id.clone(), d.clone())))
            .collect())
    }

    /// Number of chunks (strongly consistent).
    pub async fn count(&self) -> Result<u64> {
        self.count_where(String::new()).await
    }

    /// Number of chunks of one document (strongly consistent).
    pub async fn count_by_doc(&self, doc_id: &str) -> Result<u64> {
        self.count_where(format!("{F_DOC_ID} == {}", quote(doc_id)))
            .await
    }

    async fn count_where(&self, filter: String) -> Result<u64> {
        let res = self.query(filter, &["count(*)"], None, false).await?;
        Ok(res.get_row_count())
    }

    /// Top-`k` chunks by cosine similarity (higher is closer; 1.0 for the same direction),
    /// filtered inside Milvus. Session consistency: sees this sink's own writes.
    pub async fn search(
        &self,
        vector: &[f32],
        k: usize,
        filter: &ChunkFilter,
    ) -> Result<Vec<(String, f32)>> {
        self.search_with(
            vector,
            k,
            filter,
            ConsistencyLevel::Session,
            DEFAULT_SEARCH_EF,
        )
        .await
    }

    /// [`MilvusSink::search`] at a chosen consistency level (a reader in another process uses
    /// `Bounded` or `Strong`: `Session` only covers the writes of the same client) and HNSW
    /// `ef` (at least `k`, at most [`MAX_SEARCH_EF`]: larger finds more of the true nearest
    /// neighbours and takes longer).
    pub async fn search_with(
        &self,
        vector: &[f32],
        k: usize,
        filter: &ChunkFilter,
        consistency: ConsistencyLevel,
        ef: usize,
    ) -> Result<Vec<(String, f32)>> {
        if vector.len() != self.cfg.dim {
            return Err(Error::InvalidInput(format!(
                "query vector has {} dimensions, the collection {}",
                vector.len(),
                self.cfg.dim
            )));
        }
        if k > MAX_QUERY_WINDOW {
            return Err(Error::InvalidInput(format!(
                "k={k} exceeds Milvus' limit of {MAX_QUERY_WINDOW}"
            )));
        }
        if k == 0 || excludes_all_stored(filter) {
            return Ok(Vec::new());
        }
        let expr = filter_expr(filter)?;
        let ef = k.max(ef).min(MAX_SEARCH_EF).to_string();
        let request = SearchRequest::builder()
            .collection_name(self.coll())
            .vector_field(F_VECTOR)
            .vectors(SearchVectors::Float(vec![vector.to_vec()]))
            .limit(k as i64)
            .filter(expr)
            .extra_params(HashMap::from([("ef".to_owned(), ef)]))
            .consistency_level(consistency)
            .build()?;
        let resp = bounded(self.cfg.timeout, async {
            Ok(self.client.search(request).await?)
        })
        .await?;
        let mut out = Vec::with_capacity(k);
        // Read ids/scores directly: `rows()` fails on Milvus 2.3 responses (no primary-key /
        // score field names in them).
        for one in resp.results().iter() {
            let ids = match one.get_ids() {
                Ids::VarChar(v) => v,
                Ids::Int64(v) if v.is_empty() => continue,
                _ => {
                    return Err(Error::Inconsistent(
                        "search returned non-VarChar ids for a VarChar primary key".into(),
                    ))
                }
            };
            let scores = one.get_scores();
            if ids.len() != scores.len() {
                return Err(Error::Inconsistent(format!(
                    "search returned {} ids and {} scores",
                    ids.len(),
                    scores.len()
                )));
            }
            out.extend(ids.iter().cloned().zip(scores.iter().copied()));
        }
        Ok(out)
    }

    /// Asks the server whether it is healthy (CheckHealth) and for its version (bounded by
    /// `timeout`).
    pub async fn health(&self) -> Result<ServerHealth> {
        bounded(self.cfg.timeout, async {
            let version = self
                .client
                .server_version(GetServerVersionRequest::builder().build()?)
                .await?
                .version()
                .to_owned();
            match self
                .client
                .check_health(CheckHealthRequest::builder().build()?)
                .await
            {
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

/// `f`, or [`Error::Timeout`] once `limit` has passed. The SDK's deadline is per attempt and its
/// retries reconnect with backoff, so on a dead connection one call can take far longer than
/// `timeout`; the calls a reader waits on (connect, search, health, collection check) are
/// bounded as a whole.
async fn bounded<T>(
    limit: std::time::Duration,
    f: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    tokio::time::timeout(limit, f)
        .await
        .unwrap_or(Err(Error::Timeout(limit)))
}

fn varchar_column(res: &QueryResults, name: &str) -> Result<Vec<String>> {
    match res.get_output_field(name) {
        Some(FieldData::VarChar { values, .. }) => Ok(values.clone()),
        None if res.get_output_fields().is_empty() => Ok(Vec::new()),
        None => Err(Error::Inconsistent(format!(
            "query result has no field {name:?}"
        ))),
        Some(other) => Err(Error::Inconsistent(format!(
            "query result field {name:?} is not VarChar: {other:?}"
        ))),
    }
}
