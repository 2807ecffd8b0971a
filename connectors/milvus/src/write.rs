//! The write path of [`MilvusSink`]: row checks, deletes, batched inserts, and
//! [`MilvusSink::replace_isolating`], which leaves out the rows Milvus refuses for their content
//! and writes the rest.

use std::collections::HashSet;

use freshet_core::chunk::{Chunk, ChunkKind};
use milvus::v2::prelude::{DeleteRequest, FieldData, FlushRequest, InsertRequest};

use crate::columns::{metadata_value, row_bytes};
use crate::metrics::Op;

use crate::error::{Error, Result};
use crate::expr::ids_expr;
use crate::schema::{
    ACL_ENTRY_MAX_LEN, ACL_MAX_ENTRIES, CHUNK_ID_MAX_LEN, F_ACL, F_ACL_PUBLIC, F_CHUNK_ID,
    F_DOC_ID, F_KIND, F_METADATA, F_SOURCE, F_VECTOR, JSON_MAX_BYTES, VARCHAR_MAX_LEN,
};
use crate::sink::MilvusSink;

/// A row that was not written because of its own content: this crate's checks or Milvus
/// refused it ([`Error::refuses_input`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusedRow {
    /// Position of the row in the `rows` given to [`MilvusSink::replace_isolating`].
    pub index: usize,
    pub reason: String,
}

/// A row and where it came from in the caller's list.
type Row<'a> = (usize, &'a (Chunk, Vec<f32>));

impl MilvusSink {
    /// Inserts or replaces (by chunk id) one vector per chunk. Batched by
    /// `max_batch_rows` / `max_batch_bytes`; if a chunk id occurs twice, the last row wins.
    /// Not atomic across batches: on error, a prefix of the batches may have been applied
    /// (re-applying the same rows is harmless).
    pub async fn upsert(&self, rows: &[(Chunk, Vec<f32>)]) -> Result<()> {
        self.replace(&[], rows).await
    }

    /// Deletes the chunks `deletes` and inserts or replaces `rows`, with one delete of every
    /// affected id followed by the inserts (not Milvus' own upsert: on Milvus 2.3.5, rows written
    /// with it seemed to go missing from filtered searches; that was seen while the approximate
    /// interim index was still on, and upsert has not been re-tested without it). Batching and
    /// failure behave as in [`MilvusSink::upsert`]; on error, the deletes may have been applied
    /// without some inserts, which re-applying repairs. A row this crate's checks refuse fails
    /// the whole call before anything is sent.
    pub async fn replace(&self, deletes: &[String], rows: &[(Chunk, Vec<f32>)]) -> Result<()> {
        for (c, v) in rows {
            self.validate_row(c, v)?;
        }
        let refused = self.replace_isolating(deletes, rows).await?;
        match refused.into_iter().next() {
            None => Ok(()),
            Some(r) => Err(Error::InvalidInput(r.reason)),
        }
    }

    /// [`MilvusSink::replace`] that writes every row it can: a row refused for its own content
    /// (by this crate's checks, or by Milvus with an invalid-parameter status) is left out and
    /// returned, and the rest is written. A refused insert batch is split in halves until each
    /// refused row stands alone, so one bad row costs about `2 log2(batch)` extra requests.
    /// Any other failure (Milvus unreachable, a timeout, a refusal that is not about the input)
    /// is an `Err`, as in [`MilvusSink::replace`].
    ///
    /// The refused rows' ids are deleted like every other row's, so none of them is left in the
    /// collection.
    pub async fn replace_isolating(
        &self,
        deletes: &[String],
        rows: &[(Chunk, Vec<f32>)],
    ) -> Result<Vec<RefusedRow>> {
        let mut refused = Vec::new();
        // Last occurrence of each id wins.
        let mut seen: HashSet<&str> = HashSet::with_capacity(rows.len());
        let mut keep: Vec<Row<'_>> = Vec::with_capacity(rows.len());
        for (i, r) in rows.iter().enumerate().rev() {
            if seen.insert(r.0.chunk_id.as_str()) {
                keep.push((i, r));
            }
        }
        keep.reverse();

        let ids: Vec<String> = deletes
            .iter()
            .cloned()
            .chain(keep.iter().map(|(_, r)| r.0.chunk_id.clone()))
            .collect();
        if !ids.is_empty() {
            self.delete(&ids).await?;
        }
        fail::fail_point!("milvus.after_delete");
        let mut valid = Vec::with_capacity(keep.len());
        for (i, r) in keep {
            match self.validate_row(&r.0, &r.1) {
                Ok(()) => valid.push((i, r)),
                Err(Error::InvalidInput(reason)) => refused.push(RefusedRow { index: i, reason }),
                Err(e) => return Err(e),
            }
        }
        let mut batch: Vec<Row<'_>> = Vec::new();
        let mut bytes = 0usize;
        for (i, r) in valid {
            let size = row_bytes(&r.0, r.1.len());
            if !batch.is_empty()
                && (batch.len() >= self.cfg.max_batch_rows
                    || bytes + size > self.cfg.max_batch_bytes)
            {
                self.insert_isolating(std::mem::take(&mut batch), &mut refused)
                    .await?;
                bytes = 0;
            }
            batch.push((i, r));
            bytes += size;
        }
        if !batch.is_empty() {
            self.insert_isolating(batch, &mut refused).await?;
        }
        refused.sort_by_key(|r| r.index);
        Ok(refused)
    }

    /// Inserts `batch`, halving a refused batch until each refused row stands alone.
    async fn insert_isolating(
        &self,
        batch: Vec<Row<'_>>,
        refused: &mut Vec<RefusedRow>,
    ) -> Result<()> {
        let mut todo = vec![batch];
        while let Some(part) = todo.pop() {
            let rows: Vec<&(Chunk, Vec<f32>)> = part.iter().map(|(_, r)| *r).collect();
            match self.insert_batch(&rows).await {
                Ok(()) => {}
                Err(e) if e.refuses_input() && part.len() == 1 => {
                    tracing::warn!(chunk_id = %part[0].1 .0.chunk_id, error = %e, "milvus refused a row");
                    refused.push(RefusedRow {
                        index: part[0].0,
                        reason: e.to_string(),
                    });
                }
                Err(e) if e.refuses_input() => {
                    let mut first = part;
                    let second = first.split_off(first.len() / 2);
                    todo.push(second);
                    todo.push(first);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    pub(crate) fn validate_row(&self, c: &Chunk, v: &[f32]) -> Result<()> {
        let bad = |what: String| {
            Err(Error::InvalidInput(format!(
                "chunk {:?}: {what}",
                c.chunk_id
            )))
        };
        if c.kind != ChunkKind::Leaf {
            // Searches rely on it: they leave the kind condition out (see `filter_expr`).
            return bad(format!(
                "a {} chunk: only leaf chunks have vectors and are stored in Milvus",
                c.kind.as_str()
            ));
        }
        if v.len() != self.cfg.dim {
            return bad(format!(
                "vector has {} dimensions, the collection {}",
                v.len(),
                self.cfg.dim
            ));
        }
        if v.iter().any(|x| !x.is_finite()) {
            return bad("vector has a NaN or infinite component".into());
        }
        if c.chunk_id.is_empty() || c.chunk_id.len() > CHUNK_ID_MAX_LEN {
            return bad(format!("chunk id must be 1..={CHUNK_ID_MAX_LEN} bytes"));
        }
        if c.doc_id.len() > VARCHAR_MAX_LEN || c.source.len() > VARCHAR_MAX_LEN {
            return bad(format!(
                "doc_id and source must be at most {VARCHAR_MAX_LEN} bytes"
            ));
        }
        if c.acl.len() > ACL_MAX_ENTRIES {
            return bad(format!(
                "acl has {} entries, at most {ACL_MAX_ENTRIES}",
                c.acl.len()
            ));
        }
        if let Some(a) = c.acl.iter().find(|a| a.len() > ACL_ENTRY_MAX_LEN) {
            return bad(format!(
                "acl entry of {} bytes, at most {ACL_ENTRY_MAX_LEN}",
                a.len()
            ));
        }
        if c.metadata_json.len() > JSON_MAX_BYTES {
            return bad(format!(
                "metadata of {} bytes, at most {JSON_MAX_BYTES}",
                c.metadata_json.len()
            ));
        }
        Ok(())
    }

    pub(crate) async fn insert_batch(&self, batch: &[&(Chunk, Vec<f32>)]) -> Result<()> {
        let n = batch.len();
        let mut ids = Vec::with_capacity(n);
        let mut doc_ids = Vec::with_capacity(n);
        let mut kinds = Vec::with_capacity(n);
        let mut sources = Vec::with_capacity(n);
        let mut vectors = Vec::with_capacity(n);
        let mut acls = Vec::with_capacity(n);
        let mut public = Vec::with_capacity(n);
        let mut metas = Vec::with_capacity(n);
        for (c, v) in batch.iter().map(|r| (&r.0, &r.1)) {
            ids.push(c.chunk_id.clone());
            doc_ids.push(c.doc_id.clone());
            kinds.push(c.kind.as_str().to_owned());
            sources.push(c.source.clone());
            vectors.push(v.clone());
            acls.push(c.acl.clone());
            public.push(c.acl.is_empty());
            metas.push(metadata_value(c));
        }
        let insert = InsertRequest::builder()
            .collection_name(self.coll())
            .columns(vec![
                FieldData::VarChar {
                    name: F_CHUNK_ID.into(),
                    values: ids,
                },
                FieldData::VarChar {
                    name: F_DOC_ID.into(),
                    values: doc_ids,
                },
                FieldData::VarChar {
                    name: F_KIND.into(),
                    values: kinds,
                },
                FieldData::VarChar {
                    name: F_SOURCE.into(),
                    values: sources,
                },
                FieldData::FloatVector {
                    name: F_VECTOR.into(),
                    values: vectors,
                },
                FieldData::ArrayVarChar {
                    name: F_ACL.into(),
                    values: acls,
                },
                FieldData::Bool {
                    name: F_ACL_PUBLIC.into(),
                    values: public,
                },
                FieldData::Json {
                    name: F_METADATA.into(),
                    values: metas,
                },
            ])
            .build()?;
        self.rpc(Op::Insert, self.client.insert(insert)).await?;
        Ok(())
    }

    /// Deletes chunks by id (missing ids are fine), `page_size` ids per request.
    pub async fn delete(&self, chunk_ids: &[String]) -> Result<()> {
        for part in chunk_ids.chunks(self.cfg.page_size) {
            let req = DeleteRequest::builder()
                .collection_name(self.coll())
                .filter(ids_expr(part))
                .build()?;
            self.rpc(Op::Delete, self.client.delete(req)).await?;
        }
        Ok(())
    }

    /// Seals and persists everything written so far (waits up to `timeout`).
    pub async fn flush(&self) -> Result<()> {
        let req = FlushRequest::builder()
            .collection_names([self.coll()])
            .wait_flushed_ms(self.timeout_ms())
            .build()?;
        self.rpc(Op::Flush, self.client.flush(req)).await?;
        Ok(())
    }
}
