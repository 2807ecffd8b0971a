//! Reads: ids and counts by paginated queries, and the filtered vector search the query node
//! runs.

use std::collections::{HashMap, HashSet};

use milvus::v2::prelude::{
    ConsistencyLevel, Ids, QueryRequest, QueryResults, SearchRequest, SearchVectors,
};

use crate::columns::{bounded, varchar_column};
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
            DEFAULT_SEARCH_EF,
        )
        .await
    }

    /// [`MilvusSink::search`] at a chosen consistency level (a reader in another process uses
    /// `Bounded` or `Strong`: `Session` only covers the writes of the same client) and HNSW
    /// `ef` (at least `k`, at most [`MAX_SEARCH_EF`]: larger finds more of the true nearest
    /// neighbours and takes longer).
    pub async fn search_with(
        &self,
        vector: &[f32],
        k: usize,
        filter: &ChunkFilter,
        consistency: ConsistencyLevel,
        ef: usize,
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
        let ef = k.max(ef).min(MAX_SEARCH_EF).to_string();
        let request = SearchRequest::builder()
            .collection_name(self.coll())
            .vector_field(F_VECTOR)
            .vectors(SearchVectors::Float(vec![vector.to_vec()]))
            .limit(k as i64)
            .filter(expr)
            .extra_params(HashMap::from([("ef".to_owned(), ef)]))
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
