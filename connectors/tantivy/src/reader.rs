//! Read-only access to a chunk index, safe while a writer (in this or another process) runs.

use std::path::{Path, PathBuf};

use freshet_operators::chunk::Chunk;
use tantivy::directory::MmapDirectory;
use tantivy::{Index, IndexReader, ReloadPolicy, TantivyError};

use crate::bm25::Bm25Params;
use crate::error::{Error, Result};
use crate::payload::CommitPayload;
use crate::query::ChunkFilter;
use crate::read;
use crate::schema::ChunkSchema;

/// Searches the committed state of a chunk index. It picks up new commits by itself shortly
/// after they land (tantivy's `OnCommitWithDelay` watches `meta.json`); call
/// [`ChunkIndexReader::reload`] to see a commit immediately.
pub struct ChunkIndexReader {
    path: PathBuf,
    index: Index,
    reader: IndexReader,
    schema: ChunkSchema,
    bm25: Bm25Params,
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
        })
    }

    /// Scores BM25 searches with these parameters instead of the defaults
    /// ([`Bm25Params::default`]: Anserini's `k1 = 0.9`, `b = 0.4`).
    pub fn with_bm25(mut self, params: Bm25Params) -> Result<Self> {
        self.bm25 = params.validate()?;
        Ok(self)
    }

    /// Makes the latest commit visible now.
    pub fn reload(&self) -> Result<()> {
        self.reader.reload()?;
        Ok(())
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

    /// The payload of the latest commit on disk (which may be newer than what searches see
    /// until the next reload).
    pub fn last_payload(&self) -> Result<Option<CommitPayload>> {
        read::last_payload(&self.index)
    }

    /// The index directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}
