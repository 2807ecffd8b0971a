//! The single writer of a chunk index.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use freshet_core::chunk::Chunk;
use tantivy::directory::MmapDirectory;
use tantivy::indexer::LogMergePolicy;
use tantivy::{
    Index, IndexReader, IndexSettings, IndexWriter, ReloadPolicy, TantivyDocument, TantivyError,
    Term,
};

use crate::error::{Error, Result};
use crate::payload::CommitPayload;
use crate::read;
use crate::receipts::{DeleteReceipt, ReceiptLog};
use crate::schema::{ChunkSchema, SCHEMA_VERSION};

/// tantivy's minimum indexing memory per writer thread.
pub const MIN_HEAP_PER_THREAD: usize = 15_000_000;

/// Most indexing threads a writer may use (tantivy's own limit).
pub const MAX_WRITER_THREADS: usize = 8;

/// Segments below this many documents form tantivy's smallest merge level.
const MIN_MERGE_LAYER_DOCS: u32 = 1_000;

/// tantivy's log merge policy with a smaller first level. The pipeline commits every few
/// hundred milliseconds, each commit adding a tiny segment. With tantivy's default first level
/// (10,000 documents) those tiny segments share a level with an index of ~10-20k documents, so
/// every eighth commit re-merged the whole index: in a steady 20 updates/s stream this took
/// about 30% of the pipeline's CPU. Here tiny segments merge among themselves, and a large segment
/// is merged only with segments of a similar size.
fn streaming_merge_policy() -> LogMergePolicy {
    let mut policy = LogMergePolicy::default();
    policy.set_min_layer_size(MIN_MERGE_LAYER_DOCS);
    policy
}

/// Owns the tantivy `IndexWriter` (and its directory lock: one writer per index, across
/// processes). Changes become visible and durable only with [`ChunkIndexWriter::commit`].
pub struct ChunkIndexWriter {
    path: PathBuf,
    index: Index,
    writer: IndexWriter<TantivyDocument>,
    /// Sees the last commit of this writer.
    reader: IndexReader,
    schema: ChunkSchema,
    /// The id binding the index to its Milvus collection, from the last commit.
    index_id: Option<String>,
    /// The delete receipts log ([`crate::receipts`]).
    pub(crate) receipts: ReceiptLog,
}

impl std::fmt::Debug for ChunkIndexWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkIndexWriter")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl ChunkIndexWriter {
    /// [`ChunkIndexWriter::open_or_create_with_threads`] with one indexing thread.
    pub fn open_or_create(path: impl AsRef<Path>, writer_heap_bytes: usize) -> Result<Self> {
        Self::open_or_create_with_threads(path, writer_heap_bytes, 1)
    }

    /// Opens the index at `path`, creating the directory and an empty index if needed.
    /// `writer_heap_bytes` is tantivy's indexing memory budget, split over `threads` indexing
    /// threads (1 to [`MAX_WRITER_THREADS`], each getting at least 15 MB).
    ///
    /// Every commit writes one new segment per thread that received documents, and each new
    /// segment has a fixed cost (its term hash table is allocated, zeroed and walked whatever
    /// the number of documents). A streaming writer that commits a few chunks at a time is
    /// cheapest with one thread: a 2-document commit took ~14 ms of CPU with one and ~34 ms
    /// with two on the 2-core development VM. More threads only pay off for bulk loads.
    ///
    /// Fails with [`Error::SchemaVersionMismatch`] or [`Error::NotAChunkIndex`] on an index of
    /// another layout, and with a tantivy `LockFailure` if another writer holds the index.
    pub fn open_or_create_with_threads(
        path: impl AsRef<Path>,
        writer_heap_bytes: usize,
        threads: usize,
    ) -> Result<Self> {
        let path = path.as_ref().to_owned();
        if !(1..=MAX_WRITER_THREADS).contains(&threads) {
            return Err(Error::InvalidArgument(format!(
                "{threads} writer threads: must be 1 to {MAX_WRITER_THREADS}"
            )));
        }
        if writer_heap_bytes / threads < MIN_HEAP_PER_THREAD {
            return Err(Error::InvalidArgument(format!(
                "writer_heap_bytes={writer_heap_bytes} over {threads} thread(s) is below \
                 tantivy's minimum of {MIN_HEAP_PER_THREAD} per thread"
            )));
        }
        std::fs::create_dir_all(&path).map_err(|source| Error::Io {
            op: "create directory",
            path: path.clone(),
            source,
        })?;
        let schema = ChunkSchema::new();
        let dir = MmapDirectory::open(&path)?;
        let exists = Index::exists(&dir).map_err(TantivyError::from)?;
        let index = if exists {
            let index = Index::open(dir)?;
            schema.check_existing(&path, &index)?;
            index
        } else {
            // Version file first: a crash before the index exists leaves a directory that is
            // simply created again.
            ChunkSchema::write_version_file(&path)?;
            Index::create(dir, schema.schema.clone(), IndexSettings::default())?
        };
        ChunkSchema::register_analyzer(&index);
        let last = read::last_payload(&index)?;
        let receipts = ReceiptLog::open(&path, index.load_metas()?.opstamp)?;
        if let Some(p) = &last {
            if p.schema_version != SCHEMA_VERSION {
                return Err(Error::SchemaVersionMismatch {
                    path,
                    found: p.schema_version,
                    expected: SCHEMA_VERSION,
                });
            }
        }
        let writer: IndexWriter<TantivyDocument> =
            index.writer_with_num_threads(threads, writer_heap_bytes)?;
        writer.set_merge_policy(Box::new(streaming_merge_policy()));
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()?;
        Ok(ChunkIndexWriter {
            path,
            index,
            writer,
            reader,
            schema,
            index_id: last.and_then(|p| p.index_id),
            receipts,
        })
    }

    /// Stages one batch: every id in `deletes` and every upserted chunk id is deleted, then the
    /// upserts are added. So an id both deleted and upserted ends up present, and an upsert
    /// replaces the stored chunk. If `upserts` holds one chunk id twice, the last one wins.
    pub fn apply(&mut self, upserts: &[Chunk], deletes: &[String]) -> Result<()> {
        for id in deletes {
            self.writer
                .delete_term(Term::from_field_text(self.schema.chunk_id, id));
        }
        // Last occurrence of each id wins.
        let mut seen: HashSet<&str> = HashSet::with_capacity(upserts.len());
        let mut keep = vec![false; upserts.len()];
        for (i, c) in upserts.iter().enumerate().rev() {
            if seen.insert(c.chunk_id.as_str()) {
                keep[i] = true;
            }
        }
        for c in upserts
            .iter()
            .zip(&keep)
            .filter(|(_, k)| **k)
            .map(|(c, _)| c)
        {
            self.writer
                .delete_term(Term::from_field_text(self.schema.chunk_id, &c.chunk_id));
        }
        for c in upserts
            .iter()
            .zip(&keep)
            .filter(|(_, k)| **k)
            .map(|(c, _)| c)
        {
            self.writer.add_document(self.schema.to_document(c))?;
        }
        Ok(())
    }

    /// Writes what [`ChunkIndexWriter::apply`] staged since the last commit (or the last call of
    /// this) into a segment that is not committed: nothing of it is visible or durable before
    /// the next commit, which then only writes what was applied after this, applies the deletes
    /// and records the commit. A rollback or a crash before that commit drops it.
    ///
    /// For a writer whose commit waits for something it does not control (a replica waiting for
    /// the marker of a batch whose changes it has read): the segment is built while it waits.
    pub fn stage(&mut self) -> Result<()> {
        // The prepared commit is dropped, not committed: tantivy keeps its segment among the
        // uncommitted ones, which the next commit takes, and skips the opstamp it drew.
        drop(self.writer.prepare_commit()?);
        Ok(())
    }

    /// Durably commits everything staged since the last commit together with `payload`
    /// (fsync'd by tantivy before this returns). The payload's `schema_version` must be
    /// [`SCHEMA_VERSION`].
    ///
    /// The index's id ([`CommitPayload::index_id`]) is carried forward when the payload names
    /// none; a payload may set it on an index that has none, and one naming another id than
    /// the index holds is refused ([`Error::IndexIdMismatch`]).
    pub fn commit(&mut self, payload: &CommitPayload) -> Result<()> {
        self.commit_with_receipts(payload, &[])
    }

    /// [`ChunkIndexWriter::commit`], with the delete receipts of what this commit removes
    /// ([`crate::receipts`]): each stamped with the commit's opstamp, epoch and time, and on
    /// disk before the commit is.
    pub fn commit_with_receipts(
        &mut self,
        payload: &CommitPayload,
        receipts: &[DeleteReceipt],
    ) -> Result<()> {
        if payload.schema_version != SCHEMA_VERSION {
            return Err(Error::SchemaVersionMismatch {
                path: self.path.clone(),
                found: payload.schema_version,
                expected: SCHEMA_VERSION,
            });
        }
        let index_id = match (&self.index_id, &payload.index_id) {
            (Some(held), Some(given)) if held != given => {
                return Err(Error::IndexIdMismatch {
                    path: self.path.clone(),
                    held: held.clone(),
                    given: given.clone(),
                })
            }
            (held, given) => given.clone().or_else(|| held.clone()),
        };
        let mut prepared = self.writer.prepare_commit()?;
        let opstamp = prepared.opstamp();
        let encoded = CommitPayload {
            index_id: index_id.clone(),
            opstamp: Some(opstamp),
            ..payload.clone()
        }
        .encode()?;
        let stamped: Vec<DeleteReceipt> = receipts
            .iter()
            .map(|r| DeleteReceipt {
                opstamp,
                epoch: payload.epoch,
                completed_at_ms: payload.committed_at_ms,
                ..r.clone()
            })
            .collect();
        self.receipts.append(&stamped)?;
        prepared.set_payload(&encoded);
        fail::fail_point!("tantivy.commit_prepared");
        prepared.commit()?;
        self.reader.reload()?;
        self.index_id = index_id;
        Ok(())
    }

    /// The id binding this index to its Milvus collection, `None` for an index never bound.
    pub fn index_id(&self) -> Option<&str> {
        self.index_id.as_deref()
    }

    /// Drops everything staged since the last commit. tantivy replaces its writer on a
    /// rollback, with the default merge policy: ours is set again.
    pub fn rollback(&mut self) -> Result<()> {
        let committed = self.writer.rollback()?;
        self.writer
            .set_merge_policy(Box::new(streaming_merge_policy()));
        // The receipts of a commit that failed: tantivy hands their opstamp out again.
        self.receipts.cut_after(committed)
    }

    /// The receipts of the commits so far that `query` asks for ([`crate::receipts::read`]).
    pub fn delete_receipts(
        &self,
        query: &crate::receipts::ReceiptQuery,
    ) -> Result<Vec<crate::receipts::Numbered>> {
        let committed = self.index.load_metas()?.opstamp;
        crate::receipts::read(&self.path, committed, query)
    }

    /// The payload of the latest commit, `None` for a never-committed index.
    pub fn last_payload(&self) -> Result<Option<CommitPayload>> {
        read::last_payload(&self.index)
    }

    /// Every committed chunk, in no particular order (one sequential doc-store scan).
    pub fn load_all(&self) -> Result<Vec<Chunk>> {
        read::load_all(&self.reader.searcher(), &self.schema)
    }

    /// The committed chunk with this id.
    pub fn get(&self, chunk_id: &str) -> Result<Option<Chunk>> {
        read::get(&self.reader.searcher(), &self.schema, chunk_id)
    }

    /// The committed chunks of a document, sorted by kind, then index.
    pub fn chunks_of_doc(&self, doc_id: &str) -> Result<Vec<Chunk>> {
        read::chunks_of_doc(&self.reader.searcher(), &self.schema, doc_id)
    }

    /// How many committed live documents hold each of these chunk ids; an id that none holds
    /// is absent from the map. One term lookup per id and segment, no stored document read.
    pub fn live_chunk_counts(&self, chunk_ids: &[&str]) -> Result<BTreeMap<String, usize>> {
        read::live_counts(&self.reader.searcher(), self.schema.chunk_id, chunk_ids)
    }

    /// How many committed live chunks each of these documents has (documents with none are
    /// absent from the map). One term lookup per document and segment.
    pub fn live_doc_counts(&self, doc_ids: &[&str]) -> Result<BTreeMap<String, usize>> {
        read::live_counts(&self.reader.searcher(), self.schema.doc_id, doc_ids)
    }

    /// Number of committed chunks.
    pub fn count(&self) -> u64 {
        self.reader.searcher().num_docs()
    }

    /// The index directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Blocks until background merges finish and releases the writer lock.
    pub fn close(self) -> Result<()> {
        self.writer.wait_merging_threads()?;
        Ok(())
    }
}

/// Whether a writer holds the index at `path` (a pipeline runs on it): tantivy's writer lock is
/// taken, or not, without waiting; nothing is written.
pub fn writer_running(path: &std::path::Path) -> Result<bool> {
    use tantivy::directory::error::LockError;
    use tantivy::directory::{Directory, MmapDirectory, INDEX_WRITER_LOCK};
    let dir = MmapDirectory::open(path)?;
    match dir.acquire_lock(&INDEX_WRITER_LOCK) {
        Ok(lock) => {
            drop(lock);
            Ok(false)
        }
        Err(LockError::LockBusy) => Ok(true),
        Err(e) => Err(tantivy::TantivyError::LockFailure(e, None).into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tantivy::index::SegmentId;
    use tantivy::indexer::MergePolicy;

    /// A writer open on the index is seen; once it is gone, none is.
    #[test]
    fn a_running_writer_is_seen() {
        let dir = tempfile::tempdir().expect("temp dir");
        let w = ChunkIndexWriter::open_or_create(dir.path(), 50_000_000).expect("open");
        assert!(writer_running(dir.path()).expect("lock probe"));
        drop(w);
        assert!(!writer_running(dir.path()).expect("lock probe"));
    }

    /// A rollback replaces tantivy's writer; the streaming merge policy stays.
    #[test]
    fn rollback_keeps_the_merge_policy() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut w = ChunkIndexWriter::open_or_create(dir.path(), 50_000_000).expect("open");
        let ours = format!("{:?}", streaming_merge_policy());
        assert_eq!(format!("{:?}", w.writer.get_merge_policy()), ours);
        w.rollback().expect("rollback");
        assert_eq!(format!("{:?}", w.writer.get_merge_policy()), ours);
        assert_ne!(ours, format!("{:?}", LogMergePolicy::default()));
    }

    /// An index keeps the id it was bound with: later commits carry it forward, a reopened
    /// writer knows it, and a commit for another index is refused.
    #[test]
    fn the_index_id_is_set_once_and_carried_forward() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut w = ChunkIndexWriter::open_or_create(dir.path(), 50_000_000).expect("open");
        assert_eq!(w.index_id(), None);
        w.commit(&CommitPayload::new(Default::default(), 1))
            .expect("commit");
        assert_eq!(w.last_payload().unwrap().unwrap().index_id, None);
        let bound = CommitPayload {
            index_id: Some("idx-a".into()),
            ..CommitPayload::new(Default::default(), 2)
        };
        w.commit(&bound).expect("bind");
        w.commit(&CommitPayload::new(Default::default(), 3))
            .expect("commit");
        let last = w.last_payload().unwrap().unwrap();
        assert_eq!((last.epoch, last.index_id.as_deref()), (3, Some("idx-a")));
        w.close().expect("close");

        let mut w = ChunkIndexWriter::open_or_create(dir.path(), 50_000_000).expect("reopen");
        assert_eq!(w.index_id(), Some("idx-a"));
        let other = CommitPayload {
            index_id: Some("idx-b".into()),
            ..CommitPayload::new(Default::default(), 4)
        };
        let e = w.commit(&other).unwrap_err();
        assert!(matches!(e, Error::IndexIdMismatch { .. }), "{e}");
        assert_eq!(w.last_payload().unwrap().unwrap().epoch, 3);
    }

    /// A big segment and eight one-document commits: the tiny segments merge among themselves
    /// (tantivy's default policy would merge all nine, rewriting the big segment).
    #[test]
    fn tiny_segments_do_not_drag_the_big_one_into_merges() {
        let index = Index::create_in_ram(ChunkSchema::new().schema);
        let big = index.new_segment_meta(SegmentId::generate_random(), 12_606);
        let mut segments = vec![big.clone()];
        for _ in 0..8 {
            segments.push(index.new_segment_meta(SegmentId::generate_random(), 1));
        }
        let ours = streaming_merge_policy().compute_merge_candidates(&segments);
        assert_eq!(ours.len(), 1);
        assert_eq!(ours[0].0.len(), 8);
        assert!(!ours[0].0.contains(&big.id()));

        let default = LogMergePolicy::default().compute_merge_candidates(&segments);
        assert!(
            default.iter().any(|c| c.0.contains(&big.id())),
            "the default policy merges the big segment too: {default:?}"
        );
    }
}
