//! The vector index's service: Milvus rows replaced ([`VectorWrite`]) and refused documents
//! removed ([`Removal`]), each request built from the batch and written through the stall
//! policy by [`VectorWriter`].
//!
//! Before each write that inserts rows, their chunk ids are noted in the tantivy index directory
//! ([`super::pending`]): should the process die before the tantivy commit, the start-up
//! reconcile expects exactly these rows in Milvus without their chunks in tantivy.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{anyhow, Context, Result};
use freshet_milvus::{MilvusSink, Sealer};
use freshet_operators::chunk::{Chunk, ChunkKind};
use freshet_operators::dataflow::Time;

use super::plan::{self, Batch};
use super::refusals::{Refusals, RowRefusal};
use super::{pending, Service};
use crate::metrics::Metrics;
use crate::stall::Stall;

/// What Milvus must write of a batch: the ids to delete and the rows to insert of every
/// document not refused yet whose Milvus row differs ([`plan::Row::vector_row_changed`]).
pub struct VectorWrite {
    pub(super) epoch: Time,
    pub(super) deletes: Vec<String>,
    pub(super) rows: Vec<(Chunk, Vec<f32>)>,
}

impl VectorWrite {
    /// The write of `batch`, leaving out the documents already `refused`. `Err` when a leaf
    /// chunk to write has no vector.
    pub fn build(batch: &Batch, refused: &Refusals) -> Result<VectorWrite> {
        let mut deletes = Vec::new();
        let mut rows: Vec<(Chunk, Vec<f32>)> = Vec::new();
        for (doc, d) in &batch.docs {
            if refused.contains(doc) {
                continue;
            }
            deletes.extend(d.deletes.iter().cloned());
            for (id, r) in &d.upserts {
                if r.chunk.kind != ChunkKind::Leaf || !r.vector_row_changed() {
                    continue;
                }
                let v = r
                    .vector
                    .as_ref()
                    .ok_or_else(|| anyhow!("leaf chunk {id} reached the sink without a vector"))?;
                rows.push((r.chunk.clone(), v.clone()));
            }
        }
        Ok(VectorWrite {
            epoch: batch.last_epoch,
            deletes,
            rows,
        })
    }
}

/// Every chunk id of the refused documents, to remove from both indexes
/// ([`plan::removals`]).
pub struct Removal {
    pub(super) ids: Vec<String>,
}

impl Removal {
    pub fn build(batch: &Batch, refused: &Refusals) -> Removal {
        Removal {
            ids: refused
                .docs()
                .flat_map(|doc| plan::removals(&batch.docs[doc]))
                .collect(),
        }
    }

    /// The ids, which tantivy deletes too.
    pub fn into_ids(self) -> Vec<String> {
        self.ids
    }
}

/// Milvus, written through the stall policy.
pub struct VectorWriter {
    milvus: MilvusSink,
    runtime: tokio::runtime::Runtime,
    /// The tantivy index directory, which holds the note of each write ([`pending`]).
    index_dir: PathBuf,
    stall: Stall,
    metrics: Metrics,
    /// Flushes the collection by `[milvus] flush_rows` / `flush_interval`, off the write path
    /// (`None` when both are off).
    sealer: Option<Sealer>,
}

impl VectorWriter {
    pub fn new(
        milvus: MilvusSink,
        runtime: tokio::runtime::Runtime,
        index_dir: PathBuf,
        stall: Stall,
        metrics: Metrics,
    ) -> Result<VectorWriter> {
        let sealer = Sealer::start(
            milvus.config().clone(),
            Some(metrics.milvus.clone()),
            Some(metrics.milvus_seal.clone()),
        )
        .context("starting the Milvus sealer thread")?;
        Ok(VectorWriter {
            milvus,
            runtime,
            index_dir,
            stall,
            metrics,
            sealer,
        })
    }

    /// Tells the sealer that `rows` rows were written.
    fn wrote(&self, rows: usize) {
        if let Some(s) = &self.sealer {
            s.wrote(rows as u64);
        }
    }
}

impl Service<&VectorWrite> for VectorWriter {
    /// The rows Milvus refused; every other row is written.
    type Response = Vec<RowRefusal>;

    /// Notes the rows, then deletes and inserts them, isolating the rows Milvus refuses
    /// ([`MilvusSink::replace_isolating`]).
    fn call(&mut self, write: &VectorWrite) -> Result<Vec<RowRefusal>> {
        let VectorWrite {
            epoch,
            deletes,
            rows,
        } = write;
        if deletes.is_empty() && rows.is_empty() {
            return Ok(Vec::new());
        }
        let started = Instant::now();
        // Rows Milvus may hold without tantivy if the process dies before the commit.
        let index_dir = &self.index_dir;
        self.stall
            .retry("noting the rows written to Milvus", "tantivy", |_| {
                let ids = rows.iter().map(|(c, _)| c.chunk_id.as_str());
                pending::note(index_dir, *epoch, ids)
                    .with_context(|| format!("writing {}", index_dir.join(pending::FILE).display()))
            })?;
        let (milvus, runtime) = (&self.milvus, &self.runtime);
        let refused_rows = self.stall.retry("writing to Milvus", "milvus", |_| {
            Ok(runtime.block_on(milvus.replace_isolating(deletes, rows))?)
        })?;
        let m = &self.metrics;
        m.sink_write("milvus", started.elapsed().as_secs_f64());
        m.sink("milvus", "delete", deletes.len() as u64);
        m.sink("milvus", "upsert", (rows.len() - refused_rows.len()) as u64);
        self.wrote(deletes.len() + rows.len() - refused_rows.len());
        Ok(refused_rows
            .into_iter()
            .map(|r| {
                let doc_id = rows[r.index].0.doc_id.clone();
                tracing::warn!(%doc_id, reason = %r.reason, "Milvus refused a row; refusing the document's version");
                RowRefusal {
                    doc_id,
                    reason: r.reason,
                }
            })
            .collect())
    }
}

impl Service<&Removal> for VectorWriter {
    type Response = ();

    fn call(&mut self, removal: &Removal) -> Result<()> {
        if removal.ids.is_empty() {
            return Ok(());
        }
        let (milvus, runtime) = (&self.milvus, &self.runtime);
        self.stall
            .retry("removing refused documents from Milvus", "milvus", |_| {
                Ok(runtime.block_on(milvus.delete(&removal.ids))?)
            })?;
        self.wrote(removal.ids.len());
        Ok(())
    }
}
