//! One commit of a chunk index, pinned: every read of a [`Snapshot`] sees the same segments,
//! whatever the writer commits meanwhile, and the snapshot knows the commit payload (Kafka
//! offsets, epoch) of what it holds. A caller that searches and then loads chunks by id (a
//! query node's vector hits, parents, expansion neighbours) does all of it on one snapshot, so
//! one answer never mixes two commits.

use std::collections::HashSet;
use std::ops::Bound;

use freshet_core::chunk::{Chunk, ChunkKind};
use tantivy::collector::DocSetCollector;
use tantivy::query::{BooleanQuery, Occur, Query, RangeQuery, TermQuery};
use tantivy::schema::IndexRecordOption;
use tantivy::{IndexMeta, Searcher, TantivyDocument, Term};

use crate::bm25::{Bm25Params, Bm25Scorer};
use crate::error::Result;
use crate::payload::CommitPayload;
use crate::query::{filter_clauses, ChunkFilter};
use crate::read;
use crate::schema::ChunkSchema;

/// A pinned commit of a chunk index (cheap to clone; the segments stay readable while it
/// lives). Made by [`crate::ChunkIndexReader::snapshot`] or [`crate::ChunkIndexReader::reload`].
#[derive(Clone)]
pub struct Snapshot {
    pub(crate) searcher: Searcher,
    pub(crate) schema: ChunkSchema,
    pub(crate) bm25: Bm25Params,
    pub(crate) bm25_scorer: Bm25Scorer,
    /// The payload of the commit these segments are, when known (see [`Snapshot::payload`]).
    pub(crate) payload: Option<CommitPayload>,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("generation", &self.generation())
            .field("chunks", &self.count())
            .field("payload", &self.payload)
            .finish()
    }
}

/// Whether `meta` (a commit read from disk) lists exactly the segments, with the same deletes,
/// that `searcher` reads: then its payload is the payload of what the searcher holds.
pub(crate) fn is_commit_of(meta: &IndexMeta, searcher: &Searcher) -> bool {
    let loaded = searcher.generation().segments();
    meta.segments.len() == loaded.len()
        && meta
            .segments
            .iter()
            .all(|s| loaded.get(&s.id()) == Some(&s.delete_opstamp()))
}

impl Snapshot {
    /// The commit payload of the commit this snapshot holds: `None` for an index the pipeline
    /// has not committed to, and for a snapshot of a reader that reloads by itself
    /// ([`crate::ChunkIndexReader::open`]) whose commit is no longer the newest on disk (its
    /// payload is gone from disk by then). A reader reloaded with
    /// [`crate::ChunkIndexReader::reload`] always knows it.
    pub fn payload(&self) -> Option<&CommitPayload> {
        self.payload.as_ref()
    }

    /// Tantivy's number for this set of segments in this process (a new reload that found a
    /// new commit gets a new one).
    pub fn generation(&self) -> u64 {
        self.searcher.generation().generation_id()
    }

    /// How many segments this snapshot searches (each is searched on its own).
    pub fn segment_count(&self) -> usize {
        self.searcher.segment_readers().len()
    }

    /// Number of chunks in this snapshot.
    pub fn count(&self) -> u64 {
        self.searcher.num_docs()
    }

    /// Stored chunks read through this snapshot (and its clones) so far: what its loads cost.
    pub fn stored_reads(&self) -> u64 {
        let s = self.searcher.doc_store_cache_stats();
        (s.cache_hits + s.cache_misses) as u64
    }

    /// BM25 top-`k` with the filter inside the query (see
    /// [`crate::ChunkIndexReader::search_bm25`]).
    pub fn search_bm25(
        &self,
        query: &str,
        k: usize,
        filter: &ChunkFilter,
    ) -> Result<Vec<(f32, Chunk)>> {
        read::search_bm25(
            &self.searcher,
            &self.schema,
            query,
            k,
            filter,
            self.bm25,
            self.bm25_scorer,
        )
    }

    /// The chunks with these ids that this snapshot holds (missing ids are skipped), in no
    /// particular order.
    pub fn get_many(&self, chunk_ids: &[String]) -> Result<Vec<Chunk>> {
        read::get_many(&self.searcher, &self.schema, chunk_ids)
    }

    /// Which of these chunk ids this snapshot holds with a chunk that passes `filter` (sorted,
    /// each once), without loading stored documents: the term dictionary and the filter's
    /// clauses only.
    pub fn existing_matching<'a>(
        &self,
        chunk_ids: &'a [String],
        filter: &ChunkFilter,
    ) -> Result<Vec<&'a str>> {
        if filter.matches_nothing() {
            return Ok(Vec::new());
        }
        let clauses = filter_clauses(filter, &self.schema)?;
        let passing: Option<HashSet<tantivy::DocAddress>> = if clauses.is_empty() {
            None
        } else {
            let ids: Vec<(Occur, Box<dyn Query>)> = chunk_ids
                .iter()
                .map(|id| {
                    let t = Term::from_field_text(self.schema.chunk_id, id);
                    let q: Box<dyn Query> = Box::new(TermQuery::new(t, IndexRecordOption::Basic));
                    (Occur::Should, q)
                })
                .collect();
            let mut must: Vec<(Occur, Box<dyn Query>)> =
                vec![(Occur::Must, Box::new(BooleanQuery::new(ids)))];
            must.extend(clauses.into_iter().map(|q| (Occur::Must, q)));
            Some(
                self.searcher
                    .search(&BooleanQuery::new(must), &DocSetCollector)?,
            )
        };
        let mut out = Vec::new();
        read::for_each_live(
            &self.searcher,
            self.schema.chunk_id,
            chunk_ids,
            |id, addr| {
                if passing.as_ref().is_none_or(|p| p.contains(&addr)) {
                    out.push(id);
                }
                Ok(())
            },
        )?;
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    /// The chunks of document `doc_id` of this `kind` whose index lies in `lo..=hi`, sorted by
    /// index: a window of neighbours, read by a range over the `index` fast field, so a
    /// document of ten thousand chunks costs as much as one of ten.
    pub fn window(&self, doc_id: &str, kind: ChunkKind, lo: u32, hi: u32) -> Result<Vec<Chunk>> {
        let s = &self.schema;
        let term = |f, v: &str| -> Box<dyn Query> {
            Box::new(TermQuery::new(
                Term::from_field_text(f, v),
                IndexRecordOption::Basic,
            ))
        };
        let range: Box<dyn Query> = Box::new(RangeQuery::new(
            Bound::Included(Term::from_field_u64(s.index, u64::from(lo))),
            Bound::Included(Term::from_field_u64(s.index, u64::from(hi))),
        ));
        let q = BooleanQuery::new(vec![
            (Occur::Must, term(s.doc_id, doc_id)),
            (Occur::Must, term(s.kind, kind.as_str())),
            (Occur::Must, range),
        ]);
        let addrs = self.searcher.search(&q, &DocSetCollector)?;
        let mut out = addrs
            .into_iter()
            .map(|a| s.to_chunk(&self.searcher.doc::<TantivyDocument>(a)?))
            .collect::<Result<Vec<_>>>()?;
        out.sort_by(|a, b| (a.index, &a.chunk_id).cmp(&(b.index, &b.chunk_id)));
        Ok(out)
    }

    /// Number of chunks that pass `filter` (e.g. a caller's principals).
    pub fn count_matching(&self, filter: &ChunkFilter) -> Result<u64> {
        read::count_matching(&self.searcher, &self.schema, filter)
    }

    /// The chunks of a document, sorted by kind (leaf before parent), then index.
    pub fn chunks_of_doc(&self, doc_id: &str) -> Result<Vec<Chunk>> {
        read::chunks_of_doc(&self.searcher, &self.schema, doc_id)
    }
}
