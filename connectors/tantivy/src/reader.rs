//! Read-only access to a chunk index, safe while a writer (in this or another process) runs.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use freshet_core::chunk::Chunk;
use tantivy::directory::MmapDirectory;
use tantivy::{DocAddress, Index, IndexReader, ReloadPolicy, Searcher, TantivyError};

use crate::bm25::{Bm25Params, Bm25Scorer};
use crate::error::{Error, Result};
use crate::payload::CommitPayload;
use crate::query::ChunkFilter;
use crate::read;
use crate::schema::ChunkSchema;
use crate::snapshot::{is_commit_of, Snapshot};

/// How many times [`ChunkIndexReader::reload`] tries to read a commit and load its segments
/// without another commit landing in between.
const RELOAD_ATTEMPTS: usize = 16;

/// Searches the committed state of a chunk index. It picks up new commits by itself shortly
/// after they land (tantivy's `OnCommitWithDelay` watches `meta.json`); call
/// [`ChunkIndexReader::reload`] to see a commit immediately.
///
/// Each method reads the commit loaded at the time of the call; [`ChunkIndexReader::snapshot`]
/// pins one commit for a series of reads.
pub struct ChunkIndexReader {
    path: PathBuf,
    index: Index,
    reader: IndexReader,
    schema: ChunkSchema,
    bm25: Bm25Params,
    bm25_scorer: Bm25Scorer,
    /// The searcher generation whose commit payload is known, and that payload.
    paired: Mutex<Option<(u64, Option<CommitPayload>)>>,
}

impl std::fmt::Debug for ChunkIndexReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkIndexReader")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl ChunkIndexReader {
    /// Opens an existing index; never creates or locks anything. New commits become visible
    /// shortly after they land (tantivy watches `meta.json`).
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, ReloadPolicy::OnCommitWithDelay)
    }

    /// Like [`ChunkIndexReader::open`], but new commits become visible only when
    /// [`ChunkIndexReader::reload`] is called (for a caller that polls on its own schedule).
    pub fn open_manual(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, ReloadPolicy::Manual)
    }

    fn open_with(path: impl AsRef<Path>, policy: ReloadPolicy) -> Result<Self> {
        let path = path.as_ref().to_owned();
        if !path.is_dir() {
            return Err(Error::NotFound(path));
        }
        let dir = MmapDirectory::open(&path)?;
        if !Index::exists(&dir).map_err(TantivyError::from)? {
            return Err(Error::NotFound(path));
        }
        let index = Index::open(dir)?;
        let schema = ChunkSchema::new();
        schema.check_existing(&path, &index)?;
        ChunkSchema::register_analyzer(&index);
        let reader = index.reader_builder().reload_policy(policy).try_into()?;
        Ok(ChunkIndexReader {
            path,
            index,
            reader,
            schema,
            bm25: Bm25Params::default(),
            bm25_scorer: Bm25Scorer::default(),
            paired: Mutex::new(None),
        })
    }

    /// Scores BM25 searches with these parameters instead of the defaults
    /// ([`Bm25Params::default`]: Anserini's `k1 = 0.9`, `b = 0.4`).
    pub fn with_bm25(mut self, params: Bm25Params) -> Result<Self> {
        self.bm25 = params.validate()?;
        Ok(self)
    }

    /// Finds BM25's top k with this scorer ([`Bm25Scorer::Pruned`] unless set): the exhaustive
    /// one is the reference the pruned one is checked and benchmarked against.
    pub fn with_bm25_scorer(mut self, scorer: Bm25Scorer) -> Self {
        self.bm25_scorer = scorer;
        self
    }

    /// Makes the latest commit visible now, and returns a snapshot of it that knows its
    /// commit payload: the commit on disk is read before the segments are loaded and checked
    /// against them, again if a commit landed in between.
    pub fn reload(&self) -> Result<Snapshot> {
        for _ in 0..RELOAD_ATTEMPTS {
            let meta = self.index.load_metas()?;
            self.reader.reload()?;
            let searcher = self.reader.searcher();
            if is_commit_of(&meta, &searcher) {
                let payload = meta
                    .payload
                    .as_deref()
                    .map(CommitPayload::decode)
                    .transpose()?;
                return Ok(self.pin(searcher, payload));
            }
        }
        Err(Error::Reload(format!(
            "{}: a new commit landed during each of {RELOAD_ATTEMPTS} reloads in a row",
            self.path.display()
        )))
    }

    /// The commit this reader has loaded, pinned: every read of the snapshot sees the same
    /// segments, whatever is committed or reloaded meanwhile.
    pub fn snapshot(&self) -> Result<Snapshot> {
        let searcher = self.reader.searcher();
        let generation = searcher.generation().generation_id();
        let known = self
            .paired
            .lock()
            .ok()
            .and_then(|p| p.clone())
            .filter(|(g, _)| *g == generation);
        if let Some((_, payload)) = known {
            return Ok(self.snapshot_of(searcher, payload));
        }
        // Loaded by tantivy's own reload (`open`): the payload is known if that commit is
        // still the newest on disk.
        let meta = self.index.load_metas()?;
        if is_commit_of(&meta, &searcher) {
            let payload = meta
                .payload
                .as_deref()
                .map(CommitPayload::decode)
                .transpose()?;
            return Ok(self.pin(searcher, payload));
        }
        Ok(self.snapshot_of(searcher, None))
    }

    /// A snapshot of `searcher`, whose commit payload is `payload`, remembered for later
    /// snapshots of the same generation.
    fn pin(&self, searcher: Searcher, payload: Option<CommitPayload>) -> Snapshot {
        if let Ok(mut p) = self.paired.lock() {
            *p = Some((searcher.generation().generation_id(), payload.clone()));
        }
        self.snapshot_of(searcher, payload)
    }

    fn snapshot_of(&self, searcher: Searcher, payload: Option<CommitPayload>) -> Snapshot {
        Snapshot {
            searcher,
            schema: self.schema.clone(),
            bm25: self.bm25,
            bm25_scorer: self.bm25_scorer,
            payload,
        }
    }

    /// BM25 top-`k` over the chunks' title, section path and text (see the `query` module),
    /// scored with this reader's [`Bm25Params`]. The query
    /// is analysed like the indexed text and becomes a disjunction of terms: there is no query
    /// syntax, so no input can fail. Input with no indexable term (empty, stop words only)
    /// returns no hits. The filter is applied inside the query, before top-k.
    pub fn search_bm25(
        &self,
        query: &str,
        k: usize,
        filter: &ChunkFilter,
    ) -> Result<Vec<(f32, Chunk)>> {
        read::search_bm25(
            &self.reader.searcher(),
            &self.schema,
            query,
            k,
            filter,
            self.bm25,
            self.bm25_scorer,
        )
    }

    /// BM25 top-`k` as [`Self::search_bm25`] finds it, as scores and tantivy addresses only
    /// (no stored chunk is read): for benchmarks and checks of the scorer.
    pub fn bm25_hits(
        &self,
        query: &str,
        k: usize,
        filter: &ChunkFilter,
    ) -> Result<Vec<(f32, DocAddress)>> {
        read::bm25_hits(
            &self.reader.searcher(),
            &self.schema,
            query,
            k,
            filter,
            self.bm25,
            self.bm25_scorer,
        )
    }

    /// The chunks with these ids that exist (missing ids are skipped), in no particular order.
    pub fn get_many(&self, chunk_ids: &[String]) -> Result<Vec<Chunk>> {
        read::get_many(&self.reader.searcher(), &self.schema, chunk_ids)
    }

    /// Which of these chunk ids exist (sorted, each once). Cheaper than [`Self::get_many`]: it
    /// reads the chunk-id dictionary only, no stored documents.
    pub fn existing<'a>(&self, chunk_ids: &'a [String]) -> Result<Vec<&'a str>> {
        read::existing(&self.reader.searcher(), &self.schema, chunk_ids)
    }

    /// Distinct document sources in the index, sorted (a deleted document's source can linger
    /// until its segment merges; filtering by it then matches nothing).
    pub fn sources(&self) -> Result<Vec<String>> {
        read::sources(&self.reader.searcher(), &self.schema)
    }

    /// The chunks of a document, sorted by kind (leaf before parent), then index.
    pub fn chunks_of_doc(&self, doc_id: &str) -> Result<Vec<Chunk>> {
        read::chunks_of_doc(&self.reader.searcher(), &self.schema, doc_id)
    }

    /// The chunk with this id.
    pub fn get(&self, chunk_id: &str) -> Result<Option<Chunk>> {
        read::get(&self.reader.searcher(), &self.schema, chunk_id)
    }

    /// Every chunk visible to this reader.
    pub fn load_all(&self) -> Result<Vec<Chunk>> {
        read::load_all(&self.reader.searcher(), &self.schema)
    }

    /// Number of chunks visible to this reader.
    pub fn count(&self) -> u64 {
        self.reader.searcher().num_docs()
    }

    /// Number of chunks visible to this reader that pass `filter` (e.g. a caller's principals).
    pub fn count_matching(&self, filter: &ChunkFilter) -> Result<u64> {
        read::count_matching(&self.reader.searcher(), &self.schema, filter)
    }

    /// Number of documents with a chunk visible to this reader that passes `filter` (each
    /// document once, however many of its chunks pass).
    pub fn count_documents_matching(&self, filter: &ChunkFilter) -> Result<u64> {
        Ok(read::documents_matching(&self.reader.searcher(), &self.schema, filter)?.len() as u64)
    }

    /// One chunk of each document with a chunk visible to this reader that passes `filter`
    /// (its first passing chunk), sorted by document id: the document's id, source, title,
    /// metadata and ACL as its chunks carry them.
    pub fn documents_matching(&self, filter: &ChunkFilter) -> Result<Vec<Chunk>> {
        read::first_chunks_of_documents(&self.reader.searcher(), &self.schema, filter)
    }

    /// The delete receipts ([`crate::receipts`]) of the commits up to the one `snapshot` holds
    /// that `query` asks for, oldest first: what a reader serves never claims a removal its
    /// chunks do not show. None for a snapshot of an unknown or never-stamped commit.
    pub fn delete_receipts(
        &self,
        snapshot: &Snapshot,
        query: &crate::receipts::ReceiptQuery,
    ) -> Result<Vec<crate::receipts::Numbered>> {
        match snapshot.payload().and_then(|p| p.opstamp) {
            Some(opstamp) => crate::receipts::read(&self.path, opstamp, query),
            None => Ok(Vec::new()),
        }
    }

    /// The payload of the latest commit on disk (which may be newer than what searches see
    /// until the next reload; [`Snapshot::payload`] is the payload of what a snapshot holds).
    pub fn last_payload(&self) -> Result<Option<CommitPayload>> {
        read::last_payload(&self.index)
    }

    /// The index directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}
