//! A case's Milvus collection, read and written behind the pipeline's back.

use anyhow::{anyhow, Result};
use freshet_milvus::{MilvusConfig, MilvusSink};
use freshet_operators::chunk::Chunk;

use crate::Case;

impl Case {
    /// Every chunk id in the Milvus collection.
    pub fn milvus_ids(&self) -> Result<Vec<String>> {
        self.with_milvus(|m| async move { m.list_chunk_ids().await })
            .map_err(|e| anyhow!("listing Milvus ids: {e}"))
    }

    /// Writes rows straight into this case's Milvus collection, behind the pipeline's back (as
    /// if a Milvus write had landed and the tantivy commit had not).
    pub fn milvus_upsert(&self, rows: Vec<(Chunk, Vec<f32>)>) -> Result<()> {
        self.with_milvus(|m| async move { m.upsert(&rows).await })
            .map_err(|e| anyhow!("writing to Milvus: {e}"))
    }

    /// The top-`k` chunk ids and similarities Milvus itself returns for `vector`, unfiltered.
    pub fn milvus_search(&self, vector: Vec<f32>, k: usize) -> Result<Vec<(String, f32)>> {
        self.with_milvus(|m| async move {
            m.search(&vector, k, &freshet_milvus::ChunkFilter::none())
                .await
        })
        .map_err(|e| anyhow!("searching Milvus: {e}"))
    }

    /// Creates this case's collection before the pipeline does, with other field limits than
    /// freshet's layout (as a collection made by other tools may have), for the model the
    /// pipeline runs: Milvus then refuses rows that the pipeline's own checks let through.
    pub fn create_collection_with(
        &self,
        limits: freshet_milvus::schema::FieldLimits,
    ) -> Result<()> {
        use freshet_operators::embed::Embedder;
        // The pipeline's model (its default configuration, as `spawn` leaves it).
        let model = freshet_embedding::FastEmbedder::load(&Default::default())
            .map_err(|e| anyhow!("loading the model: {e}"))?;
        let cfg = MilvusConfig {
            url: self.milvus_url.clone(),
            collection: self.collection.clone(),
            dim: model.dim(),
            model_id: model.model_id().to_owned(),
            ..Default::default()
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async {
            let m = MilvusSink::connect(cfg).await?;
            m.ensure_collection_with(&limits).await
        })
        .map_err(|e| anyhow!("creating collection {}: {e}", self.collection))
    }

    /// The id of the index the collection belongs to: `None` without a collection,
    /// `Some(None)` for one bound to no index.
    pub fn milvus_index_id(&self) -> Result<Option<Option<String>>> {
        self.with_milvus(|m| async move { m.bound_index().await })
            .map_err(|e| anyhow!("reading the collection's index id: {e}"))
    }

    /// Drops this case's collection.
    pub fn drop_milvus_collection(&self) -> Result<()> {
        self.with_milvus(|m| async move { m.drop_collection().await })
            .map_err(|e| anyhow!("dropping the collection: {e}"))
    }

    /// Runs `f` with a connection to this case's collection.
    pub(crate) fn with_milvus<T, F, Fut>(&self, f: F) -> Result<T>
    where
        F: FnOnce(MilvusSink) -> Fut,
        Fut: std::future::Future<Output = freshet_milvus::Result<T>>,
    {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let cfg = MilvusConfig {
            url: self.milvus_url.clone(),
            collection: self.collection.clone(),
            dim: 384,
            ..Default::default()
        };
        rt.block_on(async { f(MilvusSink::connect(cfg).await?).await })
            .map_err(|e| anyhow!("{e}"))
    }
}
