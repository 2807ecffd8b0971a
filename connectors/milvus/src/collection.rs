//! The collection's life cycle: create it with freshet's layout (HNSW/COSINE vector index,
//! the model id, dimension and layout version as properties), check an existing one against the
//! configuration, load it, drop it.

use std::collections::HashMap;

use milvus::v2::prelude::{
    CreateCollectionRequest, CreateIndexRequest, DescribeCollectionRequest, DescribeIndexRequest,
    DropCollectionRequest, HasCollectionRequest, LoadCollectionRequest,
};
use milvus::v2::response::collection::DescribeCollectionResponse;

use crate::columns::bounded;
use crate::error::{Error, Result};
use crate::metrics::Op;
use crate::schema::{
    self, FieldLimits, EXPECTED_FIELDS, F_CHUNK_ID, F_VECTOR, LAYOUT_VERSION, P_LAYOUT, P_MODEL_ID,
};
use crate::sink::MilvusSink;

impl MilvusSink {
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
    pub(crate) async fn load(&self) -> Result<()> {
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

    pub(crate) async fn ensure_index(&self) -> Result<()> {
        let req = DescribeIndexRequest::builder()
            .collection_name(self.coll())
            .field_name(F_VECTOR)
            .build()?;
        let described = self
            .rpc(Op::Describe, self.client.describe_index(req))
            .await;
        if let Ok(d) = &described {
            if !d.indexes().is_empty() {
                return Ok(());
            }
        }
        // Not synchronous: the SDK's wait uses AllocTimestamp, which milvus-lite lacks, and an
        // index on a new collection has nothing to build anyway.
        let req = CreateIndexRequest::builder()
            .collection_name(self.coll())
            .index_param(schema::vector_index())
            .sync(false)
            .build()?;
        self.rpc(Op::Create, self.client.create_index(req)).await?;
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
