//! Which tantivy index a collection belongs to. The pipeline writes one id into both when it
//! binds them: the collection keeps it in its properties (with the path the index had then, for
//! messages), the index in its commit payload. An index and a collection whose ids differ are
//! never reconciled with each other.

use std::collections::HashMap;

use milvus::v2::prelude::AlterCollectionPropertiesRequest;

use crate::columns::bounded;
use crate::error::{Error, Result};
use crate::metrics::Op;
use crate::schema::FieldLimits;
use crate::sink::MilvusSink;

/// Collection property: the id of the tantivy index the collection belongs to.
pub const P_INDEX_ID: &str = "freshet.index_id";
/// Collection property: where that index was when the two were bound.
pub const P_INDEX_PATH: &str = "freshet.index_path";

/// What a collection says of the index it belongs to, and how many rows it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    /// `None` for a collection never bound to an index.
    pub index_id: Option<String>,
    pub index_path: Option<String>,
    pub rows: u64,
}

impl MilvusSink {
    /// The collection's binding and row count, after checking it against the configuration
    /// and loading it as [`MilvusSink::ensure_collection`] does; `None` when there is no
    /// collection (nothing is created).
    pub async fn binding(&self) -> Result<Option<Binding>> {
        if !self.has_collection().await? {
            return Ok(None);
        }
        self.verify_collection().await?;
        self.ensure_index().await?;
        self.load().await?;
        let mut props = self.properties().await?;
        Ok(Some(Binding {
            index_id: props.remove(P_INDEX_ID),
            index_path: props.remove(P_INDEX_PATH),
            rows: self.count().await?,
        }))
    }

    /// The id of the index the collection belongs to (`Some(None)` for a collection bound to
    /// none), without checking the collection against the configuration; `None` when there is
    /// no collection. Bounded by the configured timeout, like every call of a health check.
    pub async fn bound_index(&self) -> Result<Option<Option<String>>> {
        bounded(self.cfg.timeout, async {
            if !self.has_collection().await? {
                return Ok(None);
            }
            Ok(Some(self.properties().await?.remove(P_INDEX_ID)))
        })
        .await
    }

    /// Creates the collection bound to `index_id` (as [`MilvusSink::ensure_collection`] would
    /// create it) and loads it. Fails when a collection of that name exists bound to another
    /// index (created meanwhile by another process).
    pub async fn create_bound(&self, index_id: &str, index_path: &str) -> Result<()> {
        let binding = HashMap::from([
            (P_INDEX_ID.to_owned(), index_id.to_owned()),
            (P_INDEX_PATH.to_owned(), index_path.to_owned()),
        ]);
        self.ensure_collection_props(&FieldLimits::LAYOUT, binding)
            .await?;
        let held = self.properties().await?.remove(P_INDEX_ID);
        if held.as_deref() != Some(index_id) {
            return Err(Error::Inconsistent(format!(
                "collection {:?} was created bound to index {held:?} while this process \
                 created it for index {index_id:?}",
                self.cfg.collection
            )));
        }
        Ok(())
    }

    /// Records that the collection belongs to the index `index_id` (at `index_path`).
    pub async fn bind(&self, index_id: &str, index_path: &str) -> Result<()> {
        let req = AlterCollectionPropertiesRequest::builder()
            .collection_name(self.coll())
            .properties(HashMap::from([
                (P_INDEX_ID.to_owned(), index_id.to_owned()),
                (P_INDEX_PATH.to_owned(), index_path.to_owned()),
            ]))
            .build()?;
        self.rpc(Op::Alter, self.client.alter_collection_properties(req))
            .await?;
        let held = self.properties().await?.remove(P_INDEX_ID);
        if held.as_deref() != Some(index_id) {
            return Err(Error::Inconsistent(format!(
                "collection {:?} still says index {held:?} after being bound to {index_id:?}",
                self.cfg.collection
            )));
        }
        tracing::info!(
            collection = self.coll(),
            index_id,
            index_path,
            "collection bound to the index"
        );
        Ok(())
    }

    /// The collection's properties.
    pub(crate) async fn properties(&self) -> Result<HashMap<String, String>> {
        Ok(self
            .describe()
            .await?
            .description()
            .get_properties()
            .clone())
    }
}
