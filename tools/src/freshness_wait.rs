//! `bench-freshness --visibility wait` (the default for updates produced to Kafka): each
//! update's visibility taken from the node rather than from periodic polls of the whole run.
//!
//! Once an update is produced, its partition and offset are known. The bench asks the node's
//! `GET /v1/index/wait` for that offset, which answers as the node starts serving the commit that
//! holds it, and checks with one BM25 search for that update alone that it is there: the BM25
//! route's moment is the answer of the wait (or, where the search did not show it yet, of the
//! first search that did, counted in `wait_before_visible`). Then the vector route is searched
//! for that update every `check` until it shows (a vector hit needs the commit too, so it
//! cannot count earlier). Each replica is asked the same way as the node's BM25 route.
//!
//! Every moment is the arrival of the answer that showed the update, so each figure is an
//! upper bound: the wait's by its answer's latency, the vector route's by `check` plus one
//! search. The polls of the other mode cost the node a search per route every `poll_ms` during
//! the whole run and add up to `poll_ms` to every figure.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use serde_json::{json, Value};

use crate::freshness_bench::{Tracker, PROBE_QUERY};
use crate::query_bench::post;

/// How long an update may take to show in a route before it counts as not visible.
const VISIBLE_WITHIN: Duration = Duration::from_secs(30);

/// Follows produced updates until they show on the node and the replicas.
pub(crate) struct Follower {
    pub client: reqwest::Client,
    pub key: Option<String>,
    /// Base URL of the pipeline's node.
    pub node: String,
    /// Base URLs of the replicas: route 2 + i of the tracker.
    pub replicas: Vec<String>,
    pub topic: String,
    /// Interval between searches of a route that does not show an update yet.
    pub check: Duration,
    pub tracker: Arc<Tracker>,
    /// Updates whose wait answered before a BM25 search showed them (per node or replica).
    pub wait_before_visible: AtomicUsize,
}

impl Follower {
    /// Notes when update `seq`, produced at `partition`/`offset`, shows in each route.
    pub async fn follow(self: Arc<Self>, seq: usize, partition: i32, offset: i64) {
        let node = {
            let me = self.clone();
            async move {
                let base = me.node.clone();
                if let Some(at) = me.bm25_visible(&base, partition, offset, seq).await {
                    me.mark(0, seq, at);
                    if let Some(v) = me.until_shown(&base, "vector", seq).await {
                        me.mark(1, seq, v);
                    }
                }
            }
        };
        let replicas = self.replicas.iter().enumerate().map(|(i, base)| {
            let me = self.clone();
            async move {
                if let Some(at) = me.bm25_visible(base, partition, offset, seq).await {
                    me.mark(2 + i, seq, at);
                }
            }
        });
        tokio::join!(node, futures::future::join_all(replicas));
    }

    /// The answer of the wait for the update on `base`, checked by a BM25 search.
    async fn bm25_visible(
        &self,
        base: &str,
        partition: i32,
        offset: i64,
        seq: usize,
    ) -> Option<Instant> {
        let answered = match self.wait(base, partition, offset).await {
            Ok(at) => at,
            Err(e) => {
                eprintln!("waiting for update {seq} on {base}: {e:#}");
                return None;
            }
        };
        match self.shows(base, "bm25", seq).await {
            Ok(true) => Some(answered),
            _ => {
                self.wait_before_visible.fetch_add(1, Ordering::Relaxed);
                self.until_shown(base, "bm25", seq).await
            }
        }
    }

    fn mark(&self, route: usize, seq: usize, at: Instant) {
        if let Ok(mut seen) = self.tracker.seen.lock() {
            if let Some(slot) = seen.get_mut(route).and_then(|r| r.get_mut(seq)) {
                slot.get_or_insert(at);
            }
        }
    }

    /// `GET /v1/index/wait` for the record at `offset`: the moment its answer arrived.
    async fn wait(&self, base: &str, partition: i32, offset: i64) -> Result<Instant> {
        let url = format!("{}/v1/index/wait", base.trim_end_matches('/'));
        let timeout = VISIBLE_WITHIN.as_millis().to_string();
        let query = [
            ("topic", self.topic.clone()),
            ("partition", partition.to_string()),
            ("offset", offset.to_string()),
            ("timeout_ms", timeout),
        ];
        let mut req = self
            .client
            .get(url)
            .query(&query)
            .timeout(VISIBLE_WITHIN + Duration::from_secs(5));
        if let Some(k) = &self.key {
            req = req.bearer_auth(k);
        }
        let resp = req.send().await?;
        let at = Instant::now();
        let status = resp.status();
        if !status.is_success() {
            bail!("{status}: {}", resp.text().await.unwrap_or_default());
        }
        Ok(at)
    }

    /// Searches `mode` on `base` every `check` until update `seq` shows: the arrival of the
    /// answer that showed it, or `None` after [`VISIBLE_WITHIN`].
    async fn until_shown(&self, base: &str, mode: &str, seq: usize) -> Option<Instant> {
        let deadline = Instant::now() + VISIBLE_WITHIN;
        loop {
            if let Ok(true) = self.shows(base, mode, seq).await {
                return Some(Instant::now());
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(self.check).await;
        }
    }

    /// Whether `mode` on `base` returns update `seq` of its document, or a newer one.
    async fn shows(&self, base: &str, mode: &str, seq: usize) -> Result<bool> {
        let url = format!("{}/v1/retrieve", base.trim_end_matches('/'));
        let body = update_search(&self.tracker, mode, seq);
        let v = post(&self.client, &url, self.key.as_deref(), &body).await?;
        Ok(shows_update(&v, seq))
    }
}

/// A search for update `seq` alone: its document's versions from `seq` on (newer ones replace
/// it), by their `bench_seq`.
fn update_search(t: &Tracker, mode: &str, seq: usize) -> Value {
    let versions: Vec<usize> = (seq..t.total()).step_by(t.documents.max(1)).collect();
    json!({"query": PROBE_QUERY, "mode": mode, "k": 1, "bm25_top_k": 10, "vector_top_k": 10,
        "filter": {"bench_run": t.run_id, "bench_seq": {"in": versions}}})
}

/// Whether a search's answer holds update `seq` or a newer version of its document.
fn shows_update(answer: &Value, seq: usize) -> bool {
    answer["results"].as_array().is_some_and(|hits| {
        hits.iter().any(|h| {
            h["metadata"]["bench_seq"]
                .as_u64()
                .is_some_and(|s| s >= seq as u64)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_update_shows_as_itself_or_a_newer_version() {
        let answer = |seqs: &[u64]| {
            json!({"results": seqs.iter().map(|s| json!({"metadata": {"bench_seq": s}}))
                .collect::<Vec<_>>()})
        };
        assert!(shows_update(&answer(&[7]), 7));
        assert!(shows_update(&answer(&[107]), 7));
        assert!(!shows_update(&answer(&[]), 7));
        assert!(!shows_update(&json!({"results": [{"metadata": {}}]}), 7));
    }

    #[test]
    fn the_search_asks_for_the_versions_of_one_document() {
        let t = Tracker::new(100, 250, 2, 1234, None);
        let body = update_search(&t, "vector", 5);
        assert_eq!(
            body["filter"],
            json!({"bench_run": 1234, "bench_seq": {"in": [5, 105, 205]}})
        );
        assert_eq!(body["mode"], "vector");
    }
}
