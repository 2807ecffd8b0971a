//! Read operations shared by [`crate::ChunkIndexWriter`] (committed state) and
//! [`crate::ChunkIndexReader`].

use std::collections::BTreeMap;

use freshet_core::chunk::Chunk;
use tantivy::collector::{Count, DocSetCollector, TopDocs};
use tantivy::columnar::StrColumn;
use tantivy::query::{AllQuery, BooleanQuery, Occur, Query, TermQuery};
use tantivy::schema::{Field, IndexRecordOption};
use tantivy::{
    DocAddress, DocSet, Index, Searcher, TantivyDocument, TantivyError, Term, TERMINATED,
};

use crate::bm25::{Bm25Params, Bm25Scorer};
use crate::error::Result;
use crate::payload::CommitPayload;
use crate::query::{bm25_query, filter_clauses, ChunkFilter};
use crate::schema::{ChunkSchema, DOC_ID_FIELD};

pub(crate) fn load_all(searcher: &Searcher, s: &ChunkSchema) -> Result<Vec<Chunk>> {
    let mut out = Vec::with_capacity(searcher.num_docs() as usize);
    for seg in searcher.segment_readers() {
        // Sequential scan of the doc store: every block is decompressed once.
        let store = seg.get_store_reader(1).map_err(TantivyError::from)?;
        for doc in store.iter::<TantivyDocument>(seg.alive_bitset()) {
            out.push(s.to_chunk(&doc?)?);
        }
    }
    Ok(out)
}

/// Number of live chunks that pass `filter`.
pub(crate) fn count_matching(
    searcher: &Searcher,
    s: &ChunkSchema,
    filter: &ChunkFilter,
) -> Result<u64> {
    Ok(searcher.search(&filtered_all(filter, s)?, &Count)? as u64)
}

/// The live chunks that pass `filter`, as one query.
fn filtered_all(filter: &ChunkFilter, s: &ChunkSchema) -> Result<BooleanQuery> {
    let mut clauses: Vec<(Occur, Box<dyn Query>)> = vec![(Occur::Must, Box::new(AllQuery))];
    clauses.extend(
        filter_clauses(filter, s)?
            .into_iter()
            .map(|q| (Occur::Must, q)),
    );
    Ok(BooleanQuery::new(clauses))
}

/// The documents with a live chunk that passes `filter`: each document id with the address of
/// its first such chunk (lowest address), sorted by id. Reads the `doc_id` fast field only, no
/// stored document.
pub(crate) fn documents_matching(
    searcher: &Searcher,
    s: &ChunkSchema,
    filter: &ChunkFilter,
) -> Result<BTreeMap<String, DocAddress>> {
    let mut out = BTreeMap::new();
    if filter.matches_nothing() {
        return Ok(out);
    }
    let mut addrs: Vec<DocAddress> = searcher
        .search(&filtered_all(filter, s)?, &DocSetCollector)?
        .into_iter()
        .collect();
    addrs.sort_unstable();
    let mut column: Option<(u32, Option<StrColumn>)> = None;
    let mut id = String::new();
    for addr in addrs {
        if column.as_ref().map(|c| c.0) != Some(addr.segment_ord) {
            let c = searcher
                .segment_reader(addr.segment_ord)
                .fast_fields()
                .str(DOC_ID_FIELD)?;
            column = Some((addr.segment_ord, c));
        }
        let Some((_, Some(c))) = &column else {
            continue;
        };
        for ord in c.term_ords(addr.doc_id) {
            id.clear();
            if c.ord_to_str(ord, &mut id).map_err(TantivyError::from)? && !out.contains_key(&id) {
                out.insert(id.clone(), addr);
            }
        }
    }
    Ok(out)
}

/// The first live chunk (see [`documents_matching`]) of each document with a chunk that passes
/// `filter`, sorted by document id.
pub(crate) fn first_chunks_of_documents(
    searcher: &Searcher,
    s: &ChunkSchema,
    filter: &ChunkFilter,
) -> Result<Vec<Chunk>> {
    documents_matching(searcher, s, filter)?
        .into_values()
        .map(|addr| s.to_chunk(&searcher.doc::<TantivyDocument>(addr)?))
        .collect()
}

pub(crate) fn get(searcher: &Searcher, s: &ChunkSchema, chunk_id: &str) -> Result<Option<Chunk>> {
    let q = TermQuery::new(
        Term::from_field_text(s.chunk_id, chunk_id),
        IndexRecordOption::Basic,
    );
    let hits = searcher.search(&q, &TopDocs::with_limit(1).order_by_score())?;
    match hits.first() {
        Some((_, addr)) => Ok(Some(s.to_chunk(&searcher.doc::<TantivyDocument>(*addr)?)?)),
        None => Ok(None),
    }
}

/// The chunks with these ids that exist (each once), in no particular order.
///
/// One term-dictionary lookup per id and segment: a `TermSetQuery` would build an automaton
/// of the ids and stream the chunk-id dictionary through it: for 40 ids at 107k chunks that
/// took 2.6 ms against 0.9 ms this way, documents loaded in both.
pub(crate) fn get_many(
    searcher: &Searcher,
    s: &ChunkSchema,
    chunk_ids: &[String],
) -> Result<Vec<Chunk>> {
    let mut out = Vec::with_capacity(chunk_ids.len());
    for_each_live(searcher, s.chunk_id, chunk_ids, |_, addr| {
        out.push(s.to_chunk(&searcher.doc::<TantivyDocument>(addr)?)?);
        Ok(())
    })?;
    Ok(out)
}

/// Which of these chunk ids exist, without loading their stored documents (each id once).
pub(crate) fn existing<'a>(
    searcher: &Searcher,
    s: &ChunkSchema,
    chunk_ids: &'a [String],
) -> Result<Vec<&'a str>> {
    let mut out = Vec::new();
    for_each_live(searcher, s.chunk_id, chunk_ids, |id, _| {
        out.push(id);
        Ok(())
    })?;
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// How many live documents hold each of these values of the raw text field `field` (chunk
/// ids, document ids); a value held by none is absent from the map.
pub(crate) fn live_counts(
    searcher: &Searcher,
    field: Field,
    values: &[&str],
) -> Result<BTreeMap<String, usize>> {
    let mut out: BTreeMap<String, usize> = BTreeMap::new();
    for_each_live(searcher, field, values, |v, _| {
        *out.entry(v.to_owned()).or_default() += 1;
        Ok(())
    })?;
    Ok(out)
}

/// Calls `f` with each live document whose raw text field `field` holds one of `values` (a
/// value given twice is visited once per live document).
pub(crate) fn for_each_live<'a>(
    searcher: &Searcher,
    field: Field,
    values: &'a [impl AsRef<str>],
    mut f: impl FnMut(&'a str, DocAddress) -> Result<()>,
) -> Result<()> {
    let mut unique: Vec<&str> = values.iter().map(AsRef::as_ref).collect();
    unique.sort_unstable();
    unique.dedup();
    for (segment_ord, seg) in searcher.segment_readers().iter().enumerate() {
        let inverted = seg.inverted_index(field)?;
        let alive = seg.alive_bitset();
        for id in &unique {
            let term = Term::from_field_text(field, id);
            let Some(mut postings) = inverted
                .read_postings(&term, IndexRecordOption::Basic)
                .map_err(TantivyError::from)?
            else {
                continue;
            };
            let mut doc = postings.doc();
            while doc != TERMINATED {
                if alive.is_none_or(|a| a.is_alive(doc)) {
                    f(id, DocAddress::new(segment_ord as u32, doc))?;
                }
                doc = postings.advance();
            }
        }
    }
    Ok(())
}

/// Distinct `source` values of the visible chunks, sorted.
pub(crate) fn sources(searcher: &Searcher, s: &ChunkSchema) -> Result<Vec<String>> {
    let mut out = std::collections::BTreeSet::new();
    for seg in searcher.segment_readers() {
        let inverted = seg.inverted_index(s.source)?;
        let mut stream = inverted.terms().stream().map_err(TantivyError::from)?;
        while stream.advance() {
            if let Ok(v) = std::str::from_utf8(stream.key()) {
                out.insert(v.to_owned());
            }
        }
    }
    Ok(out.into_iter().collect())
}

pub(crate) fn chunks_of_doc(
    searcher: &Searcher,
    s: &ChunkSchema,
    doc_id: &str,
) -> Result<Vec<Chunk>> {
    let q = TermQuery::new(
        Term::from_field_text(s.doc_id, doc_id),
        IndexRecordOption::Basic,
    );
    let addrs = searcher.search(&q, &DocSetCollector)?;
    let mut out = addrs
        .into_iter()
        .map(|a| s.to_chunk(&searcher.doc::<TantivyDocument>(a)?))
        .collect::<Result<Vec<_>>>()?;
    out.sort_by(|a, b| (a.kind, a.index, &a.chunk_id).cmp(&(b.kind, b.index, &b.chunk_id)));
    Ok(out)
}

/// The BM25 top `k`: scores and addresses, best first (ties: lower address first).
pub(crate) fn bm25_hits(
    searcher: &Searcher,
    s: &ChunkSchema,
    query: &str,
    k: usize,
    filter: &ChunkFilter,
    params: Bm25Params,
    scorer: Bm25Scorer,
) -> Result<Vec<(f32, DocAddress)>> {
    if k == 0 || filter.matches_nothing() {
        return Ok(Vec::new());
    }
    let Some(q) = bm25_query(s, query, filter, params, scorer)? else {
        return Ok(Vec::new());
    };
    Ok(searcher.search(&*q, &TopDocs::with_limit(k).order_by_score())?)
}

/// The BM25 top `k` with their chunks, best first; equal scores in chunk-id order. tantivy
/// orders a tie by where the index holds the chunks, and that differs between two indexes of
/// the same chunks (segments cut by other commits, merged at other times: a replica, the next
/// run), so the same query would rank them differently. A tie across the `k`-th place is
/// looked at whole when it ends within [`TIE_WIDENING`] × `k` + 16 hits; a longer one (one
/// common word over a large corpus) keeps tantivy's order, as does everything when it does.
pub(crate) fn search_bm25(
    searcher: &Searcher,
    s: &ChunkSchema,
    query: &str,
    k: usize,
    filter: &ChunkFilter,
    params: Bm25Params,
    scorer: Bm25Scorer,
) -> Result<Vec<(f32, Chunk)>> {
    if k == 0 {
        return Ok(Vec::new());
    }
    let search = |limit| bm25_hits(searcher, s, query, limit, filter, params, scorer);
    let load = |hits: Vec<(f32, DocAddress)>| {
        hits.into_iter()
            .map(|(score, addr)| Ok((score, s.to_chunk(&searcher.doc::<TantivyDocument>(addr)?)?)))
            .collect::<Result<Vec<_>>>()
    };
    // Whether the hits past `held` score as the k-th (a tie not held whole).
    let open = |hits: &[(f32, DocAddress)], held: usize| {
        hits.len() > held && hits[held].0 == hits[k - 1].0
    };
    let mut hits = search(k + 1)?;
    if open(&hits, k) {
        let cap = k.saturating_mul(TIE_WIDENING).saturating_add(16);
        let wide = search(cap + 1)?;
        if open(&wide, cap) {
            hits.truncate(k);
            return load(hits);
        }
        hits = wide;
    }
    let kth = hits.get(k - 1).map(|h| h.0);
    hits.retain(|(score, _)| kth.is_none_or(|l| *score >= l));
    let mut out = load(hits)?;
    out.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then_with(|| a.1.chunk_id.cmp(&b.1.chunk_id))
    });
    out.truncate(k);
    Ok(out)
}

/// How far [`search_bm25`] looks for the end of a tie across the `k`-th place: this many
/// times `k` hits (and 16).
const TIE_WIDENING: usize = 4;

pub(crate) fn last_payload(index: &Index) -> Result<Option<CommitPayload>> {
    match index.load_metas()?.payload {
        Some(raw) => Ok(Some(CommitPayload::decode(&raw)?)),
        None => Ok(None),
    }
}
