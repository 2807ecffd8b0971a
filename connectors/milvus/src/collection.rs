//! The collection's life cycle: create it with freshet's layout (the configured COSINE vector
//! index, the model id, dimension and layout version as properties), check an existing one
//! against the configuration, load it, release it, drop it.

use std::collections::HashMap;

use milvus::v2::prelude::{
    CreateCollectionRequest, CreateIndexRequest, DescribeCollectionRequest, DescribeIndexRequest,
    DropCollectionRequest, HasCollectionRequest, LoadCollectionRequest, ReleaseCollectionRequest,
};
use milvus::v2::response::collection::DescribeCollectionResponse;

use crate::columns::bounded;
use crate::config::IndexType;
use crate::error::{Error, Result};
use crate::metrics::Op;
use crate::schema::{
    self, FieldLimits, EXPECTED_FIELDS, F_CHUNK_ID, F_VECTOR, LAYOUT_VERSION, P_LAYOUT, P_MODEL_ID,
};
use crate::sink::MilvusSink;

impl MilvusSink {
    /// Creates the collection if missing (fields, the configured COSINE vector index, model id
    /// and dimension in the properties and description), checks an existing one against the
    /// configuration, and loads it. Idempotent. Fails with [`Error::DimensionMismatch`] /
    /// [`Error::ModelMismatch`] when the existing collection holds other vectors, and with
    /// [`Error::IndexMismatch`] when its vector index is of another type than
    /// [`crate::MilvusConfig::index_type`] (it is never rebuilt or dropped here).
    pub async fn ensure_collection(&self) -> Result<()> {
        self.ensure_collection_with(&FieldLimits::LAYOUT).await
    }

    /// [`MilvusSink::ensure_collection`], creating a missing collection with `limits` instead
    /// of the layout's (as a collection made by other tools may be).
    pub async fn ensure_collection_with(&self, limits: &FieldLimits) -> Result<()> {
        self.ensure_collection_props(limits, HashMap::new()).await
    }

    /// [`MilvusSink::ensure_collection_with`], creating a missing collection with `extra`
    /// properties beside the model's.
    pub(crate) async fn ensure_collection_props(
        &self,
        limits: &FieldLimits,
        extra: HashMap<String, String>,
    ) -> Result<()> {
        if !self.has_collection().await? {
            let mut properties = schema::properties(&self.cfg);
            properties.extend(extra);
            let req = CreateCollectionRequest::builder()
                .collection_name(self.coll())
                .description(schema::description(&self.cfg))
                .schema(schema::collection_schema_with(&self.cfg, limits))
                .properties(properties)
                .build()?;
            if let Err(e) = self
                .rpc(Op::Create, self.client.create_collection(req))
                .await
            {
                // Lost a creation race with another process: verify what it created.
                if !self.has_collection().await? {
                    return Err(e);
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
    /// dimension and model, reads its vector index (searches use that index's parameters, not
    /// `[milvus] index_type`: a difference is logged), and loads it. Creates nothing.
    pub async fn check_collection(&self) -> Result<()> {
        bounded(self.cfg.timeout, async {
            if !self.has_collection().await? {
                return Err(Error::InvalidInput(format!(
                    "milvus collection {:?} does not exist (has the pipeline run yet?)",
                    self.cfg.collection
                )));
            }
            self.verify_collection().await?;
            self.read_index().await?;
            self.load().await
        })
        .await
    }

    /// The collection's vector index as Milvus describes it; `None` when it has none.
    pub async fn describe_vector_index(&self) -> Result<Option<VectorIndexInfo>> {
        let req = DescribeIndexRequest::builder()
            .collection_name(self.coll())
            .field_name(F_VECTOR)
            .build()?;
        let described = match self
            .rpc(Op::Describe, self.client.describe_index(req))
            .await
        {
            Ok(d) => d,
            Err(Error::Milvus(e)) if index_not_found(&e) => return Ok(None),
            Err(e) => return Err(e),
        };
        let Some(d) = described
            .indexes()
            .iter()
            .find(|d| d.get_field_name() == F_VECTOR || d.get_field_name().is_empty())
        else {
            return Ok(None);
        };
        let milvus_type = d.get_index_type();
        let index_type = schema::index_kind(milvus_type);
        Ok(Some(VectorIndexInfo {
            index_type,
            milvus_type: index_type.map_or_else(
                || format!("{milvus_type:?}").to_ascii_uppercase(),
                |t| t.milvus_name().to_owned(),
            ),
            params: d.get_extra_params().clone(),
            indexed_rows: d.get_indexed_rows(),
            total_rows: d.get_total_rows(),
            pending_rows: d.get_pending_rows(),
            failure: d.get_failure_reason().to_owned(),
        }))
    }

    /// Reads the collection's vector index and searches through it from now on.
    async fn read_index(&self) -> Result<()> {
        let not_ours = |reason: String| Error::NotFreshetCollection {
            collection: self.cfg.collection.clone(),
            reason,
        };
        let info = self
            .describe_vector_index()
            .await?
            .ok_or_else(|| not_ours(format!("field {F_VECTOR:?} has no index")))?;
        let searched = info.searched(&self.cfg).ok_or_else(|| {
            not_ours(format!(
                "its vector index is {}, which freshet does not search (it creates hnsw, \
                 ivf_flat, ivf_sq8 or flat)",
                info.milvus_type
            ))
        })?;
        if searched.index_type != self.cfg.index_type {
            tracing::info!(
                collection = self.coll(),
                collection_index = %searched.index_type,
                configured = %self.cfg.index_type,
                "the collection's vector index differs from [milvus] index_type: searching it \
                 with the parameters of its own type"
            );
        }
        self.set_searched(searched);
        Ok(())
    }

    /// Releases the collection from the query nodes' memory (loaded again by
    /// [`MilvusSink::check_collection`] / [`MilvusSink::ensure_collection`]).
    pub async fn release(&self) -> Result<()> {
        let req = ReleaseCollectionRequest::builder()
            .collection_name(self.coll())
            .build()?;
        self.rpc(Op::Load, self.client.release_collection(req))
            .await?;
        Ok(())
    }

    /// Loads the collection into memory (a no-op if it is loaded).
    pub async fn load(&self) -> Result<()> {
        let req = LoadCollectionRequest::builder()
            .collection_name(self.coll())
            .timeout_ms(self.timeout_ms())
            .build()?;
        self.rpc(Op::Load, self.client.load_collection(req)).await?;
        Ok(())
    }

    pub(crate) async fn has_collection(&self) -> Result<bool> {
        let req = HasCollectionRequest::builder()
            .collection_name(self.coll())
            .build()?;
        Ok(self
            .rpc(Op::HasCollection, self.client.has_collection(req))
            .await?
            .exists())
    }

    /// The collection's description (schema, properties).
    pub(crate) async fn describe(&self) -> Result<DescribeCollectionResponse> {
        let req = DescribeCollectionRequest::builder()
            .collection_name(self.coll())
            .build()?;
        self.rpc(Op::Describe, self.client.describe_collection(req))
            .await
    }

    pub(crate) async fn verify_collection(&self) -> Result<()> {
        let resp = self.describe().await?;
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

    /// Creates the configured vector index on a collection without one; refuses one with an
    /// index of another type ([`Error::IndexMismatch`]) and warns when only its build
    /// parameters differ from the configuration's.
    pub(crate) async fn ensure_index(&self) -> Result<()> {
        // An error other than "no index" is taken for no index too: creating one then fails
        // with Milvus' own message if there is one.
        if let Ok(Some(info)) = self.describe_vector_index().await {
            let Some(searched) = info
                .searched(&self.cfg)
                .filter(|s| s.index_type == self.cfg.index_type)
            else {
                return Err(Error::IndexMismatch {
                    collection: self.cfg.collection.clone(),
                    existing: info.milvus_type,
                    configured: self.cfg.index_type.as_str().to_owned(),
                });
            };
            let wanted = schema::vector_index(&self.cfg);
            // A parameter the server does not report (milvus-lite reports none) is not a
            // difference.
            let differ: Vec<String> = wanted
                .get_extra_params()
                .iter()
                .filter_map(|(k, v)| {
                    let has = info.params.get(k).filter(|h| *h != v)?;
                    Some(format!("{k} {has} (configured {v})"))
                })
                .collect();
            if !differ.is_empty() {
                tracing::warn!(
                    collection = self.coll(),
                    index = %searched.index_type,
                    differ = %differ.join(", "),
                    "the collection's vector index was built with other parameters than \
                     [milvus] configures; it stays as it is (drop the collection and re-index \
                     to rebuild it)"
                );
            }
            self.set_searched(searched);
            return Ok(());
        }
        // Not synchronous: the SDK's wait uses AllocTimestamp, which milvus-lite lacks, and an
        // index on a new collection has nothing to build anyway.
        let req = CreateIndexRequest::builder()
            .collection_name(self.coll())
            .index_param(schema::vector_index(&self.cfg))
            .sync(false)
            .build()?;
        self.rpc(Op::Create, self.client.create_index(req)).await?;
        self.set_searched(SearchedIndex::configured(&self.cfg));
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
            let req = DropCollectionRequest::builder()
                .collection_name(self.coll())
                .build()?;
            let res = self.rpc(Op::Drop, self.client.drop_collection(req)).await;
            match res {
                Ok(()) => return Ok(()),
                Err(e) if attempt >= 2 => return Err(e),
                Err(e) => {
                    tracing::warn!(collection = self.coll(), error = %e, "drop_collection failed; retrying");
                    attempt += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                }
            }
        }
    }
}

/// Milvus' answer that a field has no index: `ErrIndexNotFound` (700), or the legacy
/// `IndexNotExist` (25).
fn index_not_found(e: &milvus::v2::error::Error) -> bool {
    use milvus::v2::error::Error as Sdk;
    match e {
        Sdk::Server(s) => s.code() == 700 || s.legacy_code() == 25,
        Sdk::RetryExhausted { source, .. } => index_not_found(source),
        _ => false,
    }
}

/// A collection's vector index as Milvus describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VectorIndexInfo {
    /// Freshet's name of the type; `None` for a type freshet does not create.
    pub index_type: Option<IndexType>,
    /// Milvus' name of the type (`"HNSW"`, `"IVF_SQ8"`, ...).
    pub milvus_type: String,
    /// The build parameters (`M`, `efConstruction`, `nlist`, ...).
    pub params: HashMap<String, String>,
    /// Rows indexed, rows in the collection's sealed segments, rows waiting for the index.
    pub indexed_rows: i64,
    pub total_rows: i64,
    pub pending_rows: i64,
    /// Why the last build failed (empty: it did not).
    pub failure: String,
}

impl VectorIndexInfo {
    /// How searches go through this index; `None` for a type freshet does not search. An IVF
    /// index without a readable `nlist` is taken to have `cfg`'s.
    pub fn searched(&self, cfg: &crate::MilvusConfig) -> Option<SearchedIndex> {
        let index_type = self.index_type?;
        let nlist = self
            .params
            .get("nlist")
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(cfg.ivf_nlist);
        Some(SearchedIndex { index_type, nlist })
    }
}

/// What a search needs to know of the collection's vector index: its type, and for IVF its
/// `nlist` (the most clusters `nprobe` can name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SearchedIndex {
    pub index_type: IndexType,
    pub nlist: u32,
}

impl SearchedIndex {
    /// The index `cfg` creates.
    pub fn configured(cfg: &crate::MilvusConfig) -> SearchedIndex {
        SearchedIndex {
            index_type: cfg.index_type,
            nlist: cfg.ivf_nlist,
        }
    }
}
