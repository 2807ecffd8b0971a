//! A Milvus alias naming the collection of the index generation served (docs/reindex.md), for
//! tools outside freshet that search "the" collection by one name. The query node never
//! searches through it: it searches the concrete collection of the generation a request pinned.

use milvus::v2::request::alias::{
    AlterAliasRequest, CreateAliasRequest, DescribeAliasRequest, DropAliasRequest,
};

use crate::columns::bounded;
use crate::error::{Error, Result};
use crate::metrics::Op;
use crate::sink::MilvusSink;

impl MilvusSink {
    /// The collection `alias` names, or `None` when there is no such alias.
    pub async fn alias_target(&self, alias: &str) -> Result<Option<String>> {
        let request = DescribeAliasRequest::builder()
            .alias(alias)
            .build()
            .map_err(|e| Error::InvalidInput(e.to_string()))?;
        let described = bounded(self.cfg.timeout, async {
            self.rpc(Op::Describe, self.client.describe_alias(request))
                .await
        })
        .await;
        match described {
            Ok(d) if !d.collection_name().is_empty() => Ok(Some(d.collection_name().to_owned())),
            Ok(_) => Ok(None),
            // The servers answer an unknown alias with an error status, not an empty answer.
            Err(e) if is_unknown_alias(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Points `alias` at this sink's collection (created, or moved from the collection it
    /// named): Milvus moves an alias in one step, so a search through it reads one collection
    /// or the other. Returns the collection it named before.
    pub async fn point_alias(&self, alias: &str) -> Result<Option<String>> {
        if alias == self.coll() {
            return Err(Error::InvalidInput(format!(
                "the alias {alias:?} is the collection's own name: an alias needs a name no \
                 collection has"
            )));
        }
        let before = self.alias_target(alias).await?;
        bounded(self.cfg.timeout, async {
            match &before {
                Some(c) if c == self.coll() => Ok(()),
                Some(_) => {
                    let r = AlterAliasRequest::builder()
                        .alias(alias)
                        .collection_name(self.coll())
                        .build()
                        .map_err(|e| Error::InvalidInput(e.to_string()))?;
                    self.rpc(Op::Alter, self.client.alter_alias(r)).await
                }
                None => {
                    let r = CreateAliasRequest::builder()
                        .alias(alias)
                        .collection_name(self.coll())
                        .build()
                        .map_err(|e| Error::InvalidInput(e.to_string()))?;
                    self.rpc(Op::Create, self.client.create_alias(r)).await
                }
            }
        })
        .await?;
        Ok(before)
    }
}

impl MilvusSink {
    /// Drops `alias` (the collection it names stays); nothing to do without one.
    pub async fn drop_alias(&self, alias: &str) -> Result<()> {
        if self.alias_target(alias).await?.is_none() {
            return Ok(());
        }
        let r = DropAliasRequest::builder()
            .alias(alias)
            .build()
            .map_err(|e| Error::InvalidInput(e.to_string()))?;
        bounded(self.cfg.timeout, async {
            self.rpc(Op::Drop, self.client.drop_alias(r)).await
        })
        .await
    }
}

fn is_unknown_alias(e: &Error) -> bool {
    let m = e.to_string().to_lowercase();
    m.contains("alias") && (m.contains("not exist") || m.contains("not found"))
}
