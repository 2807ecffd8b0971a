//! Reads: ids and counts by paginated queries, and the filtered vector search the query node
//! runs.

use std::collections::{HashMap, HashSet};

use milvus::v2::prelude::{
    ConsistencyLevel, Ids, QueryRequest, QueryResults, SearchRequest, SearchVectors,
};

use crate::collection::SearchedIndex;
use crate::columns::{bounded, varchar_column};
use crate::config::IndexType;
use crate::error::{Error, Result};
use crate::expr::{excludes_all_stored, filter_expr, ids_expr, quote, ChunkFilter};
use crate::metrics::Op;
use crate::schema::{F_CHUNK_ID, F_DOC_ID, F_VECTOR};
use crate::sink::MilvusSink;

/// Milvus' limit on `offset + limit` of one query / `topk` of one search.
pub const MAX_QUERY_WINDOW: usize = 16_384;
/// Default lower bound of HNSW `ef` at search time (raised to `k` when `k` is larger). Raised
/// from 64 while chasing build-to-build variation of SciFact results, which turned out to come
/// from Milvus 2.3's approximate interim index on growing segments (turned off by
/// `deploy/start-milvus.sh`); it stayed at 256 (recall@50 0.999 against `ef` 4,096 at 107k
/// chunks; 0.995 at 128, 0.981 at 64).
pub const DEFAULT_SEARCH_EF: usize = 256;
/// Largest HNSW `ef` Milvus accepts.
pub const MAX_SEARCH_EF: usize = 32_768;
/// Default IVF `nprobe`: clusters searched of each segment's `nlist` (at most all of them).
pub const DEFAULT_SEARCH_NPROBE: usize = 32;
/// Largest IVF `nprobe` Milvus accepts.
pub const MAX_SEARCH_NPROBE: usize = 65_536;

/// The query-side parameters of the approximate search; each index type uses its own (HNSW
/// `ef`, IVF `nprobe`; FLAT none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SearchTuning {
    /// HNSW: the candidate list, raised to `k` when smaller, at most [`MAX_SEARCH_EF`].
    pub ef: usize,
    /// IVF: the clusters searched, at least 1, at most the index's `nlist`.
    pub nprobe: usize,
}

impl Default for SearchTuning {
    fn default() -> Self {
        SearchTuning {
            ef: DEFAULT_SEARCH_EF,
            nprobe: DEFAULT_SEARCH_NPROBE,
        }
    }
}

/// The search parameters of a top-`k` search through `index`.
pub fn search_params(
    index: SearchedIndex,
    k: usize,
    tuning: SearchTuning,
) -> HashMap<String, String> {
    match index.index_type {
        IndexType::Hnsw => HashMap::from([(
            "ef".to_owned(),
            k.max(tuning.ef).min(MAX_SEARCH_EF).to_string(),
        )]),
        IndexType::IvfFlat | IndexType::IvfSq8 => HashMap::from([(
            "nprobe".to_owned(),
            tuning
                .nprobe
                .clamp(1, (index.nlist as usize).clamp(1, MAX_SEARCH_NPROBE))
                .to_string(),
        )]),
        IndexType::Flat => HashMap::new(),
    }
}

impl MilvusSink {
    async fn query(
        &self,
        filter: String,
        output: &[&str],
        limit: Option<usize>,
        pk_order: bool,
    ) -> Result<QueryResults> {
        let mut b = QueryRequest::builder()
            .collection_name(self.coll())
            .filter(filter)
            .output_fields(output.iter().copied())
            .consistency_level(ConsistencyLevel::Strong);
        if let Some(l) = limit {
            b = b.limit(l as i64);
        }
        if pk_order {
            // milvus-lite orders results by primary key only for iterator queries; Milvus 2.3
            // returns the smallest primary keys of a limited query either way.
            b = b.extra_params(HashMap::from([("iterator".to_owned(), "true".to_owned())]));
        }
        let req = b.build()?;
        Ok(self
            .rpc(Op::Query, self.client.query(req))
            .await?
            .results()
            .clone())
    }

    /// Every chunk id in the collection (strongly consistent), paginated by primary key:
    /// `chunk_id > <last>` pages of `page_size`. Checked against `count(*)`.
    pub async fn list_chunk_ids(&self) -> Result<Vec<String>> {
        let page = self.cfg.page_size;
        let mut out: Vec<String> = Vec::new();
        let mut filter = format!("{F_CHUNK_ID} >= \"\"");
        loop {
            let res = self.query(filter, &[F_CHUNK_ID], Some(page), true).await?;
            let ids = varchar_column(&res, F_CHUNK_ID)?;
            let n = ids.len();
            let Some(max) = ids.iter().max().cloned() else {
                break;
            };
            out.extend(ids);
            if n < page {
                break;
            }
            filter = format!("{F_CHUNK_ID} > {}", quote(&max));
        }
        out.sort_unstable();
        out.dedup();
        let count = self.count().await?;
        if out.len() as u64 != count {
            return Err(Error::Inconsistent(format!(
                "listed {} chunk ids but count(*) is {count} (concurrent writes, or the server \
                 does not return the smallest primary keys first)",
                out.len()
            )));
        }
        Ok(out)
    }

    /// Up to `limit` rows (at most [`MAX_QUERY_WINDOW`]) with their vectors, by primary key,
    /// after `after` (from the first without): `(chunk_id, vector)` pages for copying a
    /// collection's vectors (`freshet-tools bench-index`). Strongly consistent.
    pub async fn vectors_after(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Vec<f32>)>> {
        let filter = match after {
            Some(a) => format!("{F_CHUNK_ID} > {}", quote(a)),
            None => format!("{F_CHUNK_ID} >= \"\""),
        };
        let limit = limit.clamp(1, MAX_QUERY_WINDOW);
        let res = self
            .query(filter, &[F_CHUNK_ID, F_VECTOR], Some(limit), true)
            .await?;
        let ids = varchar_column(&res, F_CHUNK_ID)?;
        let vectors = match res.get_output_field(F_VECTOR) {
            Some(f) => f.as_float_vectors().map(<[_]>::to_vec).ok_or_else(|| {
                Error::Inconsistent(format!(
                    "query result field {F_VECTOR:?} is not FloatVector"
                ))
            })?,
            None if ids.is_empty() => Vec::new(),
            None => {
                return Err(Error::Inconsistent(format!(
                    "query result has no field {F_VECTOR:?}"
                )))
            }
        };
        if ids.len() != vectors.len() {
            return Err(Error::Inconsistent(format!(
                "{} ids but {} vectors in a query result",
                ids.len(),
                vectors.len()
            )));
        }
        let mut rows: Vec<_> = ids.into_iter().zip(vectors).collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(rows)
    }

    /// `(chunk_id, doc_id)` of those of `chunk_ids` that exist, in the order given.
    pub async fn get_doc_ids(&self, chunk_ids: &[String]) -> Result<Vec<(String, String)>> {
        let mut found: HashMap<String, String> = HashMap::with_capacity(chunk_ids.len());
        for part in chunk_ids.chunks(self.cfg.page_size) {
            let res = self
                .query(ids_expr(part), &[F_CHUNK_ID, F_DOC_ID], None, false)
                .await?;
            let ids = varchar_column(&res, F_CHUNK_ID)?;
            let docs = varchar_column(&res, F_DOC_ID)?;
            if ids.len() != docs.len() {
                return Err(Error::Inconsistent(format!(
                    "{} ids but {} doc ids in a query result",
                    ids.len(),
                    docs.len()
                )));
            }
            found.extend(ids.into_iter().zip(docs));
        }
        let mut emitted: HashSet<&str> = HashSet::with_capacity(found.len());
        Ok(chunk_ids
            .iter()
            .filter(|id| emitted.insert(id.as_str()))
            .filter_map(|id| found.get(id).map(|d| (id.clone(), d.clone())))
            .collect())
    }

    /// Number of chunks (strongly consistent).
    pub async fn count(&self) -> Result<u64> {
        self.count_where(String::new()).await
    }

    /// Number of chunks of one document (strongly consistent).
    pub async fn count_by_doc(&self, doc_id: &str) -> Result<u64> {
        self.count_where(format!("{F_DOC_ID} == {}", quote(doc_id)))
            .await
    }

    async fn count_where(&self, filter: String) -> Result<u64> {
        let res = self.query(filter, &["count(*)"], None, false).await?;
        Ok(res.get_row_count())
    }

    /// Top-`k` chunks by cosine similarity (higher is closer; 1.0 for the same direction),
    /// filtered inside Milvus. Session consistency: sees this sink's own writes.
    pub async fn search(
        &self,
        vector: &[f32],
        k: usize,
        filter: &ChunkFilter,
    ) -> Result<Vec<(String, f32)>> {
        self.search_with(
            vector,
            k,
            filter,
            ConsistencyLevel::Session,
            SearchTuning::default(),
        )
        .await
    }

    /// [`MilvusSink::search`] at a chosen consistency level (a reader in another process uses
    /// `Bounded` or `Strong`: `Session` only covers the writes of the same client) and search
    /// parameters: of `tuning`, those of the collection's index type
    /// ([`MilvusSink::searched_index`]; larger finds more of the true nearest neighbours and
    /// takes longer).
    pub async fn search_with(
        &self,
        vector: &[f32],
        k: usize,
        filter: &ChunkFilter,
        consistency: ConsistencyLevel,
        tuning: SearchTuning,
    ) -> Result<Vec<(String, f32)>> {
        if vector.len() != self.cfg.dim {
            return Err(Error::InvalidInput(format!(
                "query vector has {} dimensions, the collection {}",
                vector.len(),
                self.cfg.dim
            )));
        }
        if k > MAX_QUERY_WINDOW {
            return Err(Error::InvalidInput(format!(
                "k={k} exceeds Milvus' limit of {MAX_QUERY_WINDOW}"
            )));
        }
        if k == 0 || excludes_all_stored(filter) {
            return Ok(Vec::new());
        }
        let expr = filter_expr(filter)?;
        let request = SearchRequest::builder()
            .collection_name(self.coll())
            .vector_field(F_VECTOR)
            .vectors(SearchVectors::Float(vec![vector.to_vec()]))
            .limit(k as i64)
            .filter(expr)
            .extra_params(search_params(self.searched_index(), k, tuning))
            .consistency_level(consistency)
            .build()?;
        let resp = self
            .rpc(
                Op::Search,
                bounded(self.cfg.timeout, async {
                    Ok(self.client.search(request).await?)
                }),
            )
            .await?;
        let mut out = Vec::with_capacity(k);
        // Read ids/scores directly: `rows()` fails on Milvus 2.3 responses (no primary-key /
        // score field names in them).
        for one in resp.results().iter() {
            let ids = match one.get_ids() {
                Ids::VarChar(v) => v,
                Ids::Int64(v) if v.is_empty() => continue,
                _ => {
                    return Err(Error::Inconsistent(
                        "search returned non-VarChar ids for a VarChar primary key".into(),
                    ))
                }
            };
            let scores = one.get_scores();
            if ids.len() != scores.len() {
                return Err(Error::Inconsistent(format!(
                    "search returned {} ids and {} scores",
                    ids.len(),
                    scores.len()
                )));
            }
            out.extend(ids.iter().cloned().zip(scores.iter().copied()));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(index_type: IndexType, nlist: u32) -> SearchedIndex {
        SearchedIndex { index_type, nlist }
    }

    fn params(p: HashMap<String, String>) -> Vec<(String, String)> {
        let mut v: Vec<_> = p.into_iter().collect();
        v.sort();
        v
    }

    fn one(k: &str, v: &str) -> Vec<(String, String)> {
        vec![(k.to_owned(), v.to_owned())]
    }

    #[test]
    fn hnsw_searches_with_ef_of_at_least_k() {
        let t = SearchTuning { ef: 96, nprobe: 8 };
        let hnsw = index(IndexType::Hnsw, 1024);
        assert_eq!(params(search_params(hnsw, 10, t)), one("ef", "96"));
        assert_eq!(params(search_params(hnsw, 500, t)), one("ef", "500"));
        let huge = SearchTuning {
            ef: usize::MAX,
            ..t
        };
        assert_eq!(params(search_params(hnsw, 10, huge)), one("ef", "32768"));
        assert_eq!(
            params(search_params(hnsw, 10, SearchTuning::default())),
            one("ef", "256")
        );
    }

    #[test]
    fn ivf_searches_with_nprobe_within_nlist() {
        let t = SearchTuning { ef: 96, nprobe: 32 };
        for kind in [IndexType::IvfFlat, IndexType::IvfSq8] {
            assert_eq!(
                params(search_params(index(kind, 1024), 10, t)),
                one("nprobe", "32")
            );
            assert_eq!(
                params(search_params(index(kind, 16), 10, t)),
                one("nprobe", "16")
            );
            let zero = SearchTuning { nprobe: 0, ..t };
            assert_eq!(
                params(search_params(index(kind, 16), 10, zero)),
                one("nprobe", "1")
            );
            assert_eq!(
                params(search_params(index(kind, 0), 10, t)),
                one("nprobe", "1")
            );
        }
    }

    #[test]
    fn flat_searches_without_parameters() {
        let p = search_params(index(IndexType::Flat, 1024), 10, SearchTuning::default());
        assert!(p.is_empty(), "{p:?}");
    }
}
