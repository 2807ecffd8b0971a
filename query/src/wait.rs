//! `GET /v1/index/wait?topic=T&partition=P&offset=O[&timeout_ms=MS]`: answers once the record
//! at offset `O` of partition `P` is searchable on this node, i.e. once the pipeline commit its
//! searches see has a next offset above `O` for that partition (both indexes hold a commit's
//! records before tantivy commits it; a record the pipeline refused is past too, in the
//! dead-letter topic). A producer that was told where its record went (the ingest service
//! answers with the partition and offset) waits here, then searches. `GET /v1/index` reports
//! that commit and its offsets.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use freshet_service::ApiError;

use crate::indexes::Indexes;
use crate::node::Node;
use crate::retrieve::RetrieveError;
use crate::serving::Serving;

/// How long a wait lasts when the request does not say, and the longest it may ask for.
pub const DEFAULT_WAIT_MS: u64 = 10_000;
pub const MAX_WAIT_MS: u64 = 120_000;

/// The query string.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitParams {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub timeout_ms: Option<u64>,
}

/// Waits until the served next offset of `topic`/`partition` is above `offset`: `Ok(next
/// offset)`, or `Err(the last seen)` after `timeout`. Woken when the node serves a new commit,
/// and every `poll` besides (a switch of index generation replaces the indexes it listens to).
pub async fn wait_for_offset(
    indexes: &Serving,
    params: &WaitParams,
    timeout: Duration,
    poll: Duration,
) -> Result<i64, Option<i64>> {
    let deadline = Instant::now() + timeout;
    loop {
        let ix = indexes.current();
        // Listening before the offsets are read: a commit served in between still wakes it.
        let advanced = ix.advanced().notified();
        tokio::pin!(advanced);
        advanced.as_mut().enable();
        let served = ix.served_offset(&params.topic, params.partition);
        if let Some(next) = served.filter(|&n| n > params.offset) {
            return Ok(next);
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(served);
        }
        let _woken = tokio::time::timeout(poll.min(deadline - now), advanced).await;
    }
}

fn check(params: &WaitParams) -> Result<Duration, ApiError> {
    if params.topic.is_empty() {
        return Err(ApiError::bad_request("topic must not be empty"));
    }
    if params.partition < 0 || params.offset < 0 {
        return Err(ApiError::bad_request("partition and offset must be ≥ 0"));
    }
    let ms = params.timeout_ms.unwrap_or(DEFAULT_WAIT_MS);
    if ms > MAX_WAIT_MS {
        return Err(ApiError::bad_request(format!(
            "timeout_ms must be at most {MAX_WAIT_MS}"
        )));
    }
    Ok(Duration::from_millis(ms))
}

/// The handler.
pub async fn index_wait(
    State(node): State<Arc<Node>>,
    headers: HeaderMap,
    params: Result<Query<WaitParams>, QueryRejection>,
) -> Response {
    let engine = &node.engine;
    let result = async {
        let _admission = node.auth.admit(&headers)?;
        let params = params
            .map(|q| q.0)
            .map_err(|e| ApiError::bad_request(format!("bad query string: {e}")))?;
        let timeout = check(&params)?;
        let poll = Duration::from_millis(engine.config.query.reload_interval_ms.clamp(5, 100));
        let start = Instant::now();
        match wait_for_offset(&engine.indexes, &params, timeout, poll).await {
            Ok(next) => {
                let f = engine.indexes.freshness();
                Ok(Json(json!({
                    "topic": params.topic,
                    "partition": params.partition,
                    "offset": params.offset,
                    "committed_offset": next,
                    "epoch": f.epoch,
                    "committed_at_ms": f.committed_at_ms,
                    "waited_ms": start.elapsed().as_millis() as u64,
                })))
            }
            Err(seen) => Err(ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                "timeout",
                format!(
                    "offset {} of {}/{} not searchable after {} ms (next offset served: {})",
                    params.offset,
                    params.topic,
                    params.partition,
                    timeout.as_millis(),
                    seen.map_or("none".to_string(), |n| n.to_string())
                ),
            )),
        }
    }
    .await;
    match result {
        Ok(r) => {
            engine.metrics.request("index_wait", "none", "ok");
            r.into_response()
        }
        Err(e) => {
            engine.metrics.request("index_wait", "none", e.code);
            e.into_response()
        }
    }
}

/// The body of `GET /v1/index` for a caller who may see what `filter` lets through: the
/// commit the node serves (the snapshot its searches read, not a newer commit on disk that is
/// not loaded yet), its Kafka offsets and the caller's chunks in it. Blocking (a count).
pub fn index_state_body(
    indexes: &Indexes,
    filter: &freshet_core::filter::ChunkFilter,
) -> Result<serde_json::Value, ApiError> {
    let unavailable = |m: String| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", m);
    let snapshot = indexes
        .snapshot()
        .ok_or_else(|| unavailable(indexes.status().tantivy.unwrap_or_default()))?;
    let chunks = snapshot
        .count_matching(filter)
        .map_err(|e| unavailable(format!("tantivy: {e}")))?;
    let payload = snapshot.payload();
    let mut body = json!({
        "epoch": payload.map_or(0, |p| p.epoch),
        "committed_at_ms": payload.map_or(0, |p| p.committed_at_ms),
        "offsets": payload.map(|p| p.offsets.clone()).unwrap_or_default(),
        "chunks": chunks,
    });
    if let Some(id) = payload.and_then(|p| p.index_id.as_deref()) {
        body["index_id"] = json!(id);
    }
    if let Some(g) = indexes.generation() {
        body["generation"] = json!(g.name);
        body["milvus_collection"] = json!(g.milvus_collection);
    }
    Ok(body)
}

/// `GET /v1/index`: the pipeline commit this node serves, with its Kafka offsets (per topic
/// and partition, the next offset to read), so that a client can tell whether the records it
/// published are searchable.
pub async fn index_state(State(node): State<Arc<Node>>, headers: HeaderMap) -> Response {
    let engine = &node.engine;
    let filter = match node
        .auth
        .admit(&headers)
        .and_then(|a| node.auth.principals(&a, None))
    {
        Ok(p) => crate::visible::visible_to(p),
        Err(e) => return e.into_response(),
    };
    // The count is blocking work like a retrieval's: it takes a slot of the same limit.
    let deadline = Instant::now() + Duration::from_millis(engine.config.query.request_timeout_ms);
    let job = match engine.limiter.admit(deadline).await {
        Ok(job) => job,
        Err(why) => return ApiError::from(RetrieveError::Overloaded(why)).into_response(),
    };
    let e = engine.clone();
    let body = job
        .blocking("index", move |_| {
            Ok(index_state_body(&e.indexes.current(), &filter))
        })
        .await;
    match body {
        Ok(Ok(mut body)) => {
            // A generation being opened, or an unreadable pointer, beside the one served.
            if let Some(state) = engine.indexes.state() {
                if let Some(o) = state.opening {
                    body["opening"] = json!(o);
                }
                if let Some(e) = state.pointer_error {
                    body["pointer_error"] = json!(e);
                }
            }
            Json(body).into_response()
        }
        Ok(Err(e)) => e.into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use freshet_tantivy::{Bm25Params, ChunkIndexWriter, CommitPayload};

    fn params(offset: i64) -> WaitParams {
        WaitParams {
            topic: "docs".into(),
            partition: 2,
            offset,
            timeout_ms: None,
        }
    }

    #[tokio::test]
    async fn a_wait_ends_when_a_commit_passes_the_offset_or_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index");
        let mut w = ChunkIndexWriter::open_or_create(&path, 50_000_000).unwrap();
        let ix = Indexes::new(Metrics::new());
        ix.spawn_tantivy_reloader(path, Duration::from_millis(5), Bm25Params::default(), false);
        let ix = Serving::fixed(ix, Metrics::new());
        let ms = Duration::from_millis;
        assert_eq!(
            wait_for_offset(&ix, &params(0), ms(50), ms(5)).await,
            Err(None)
        );

        w.commit(&CommitPayload::new(
            [("docs".into(), [(2, 5)].into())].into(),
            1,
        ))
        .unwrap();
        assert_eq!(
            wait_for_offset(&ix, &params(4), ms(5000), ms(5)).await,
            Ok(5)
        );
        assert_eq!(
            wait_for_offset(&ix, &params(5), ms(50), ms(5)).await,
            Err(Some(5))
        );

        let later = params(5);
        let waiter = wait_for_offset(&ix, &later, ms(5000), ms(5));
        let commit = async {
            tokio::time::sleep(ms(100)).await;
            w.commit(&CommitPayload::new(
                [("docs".into(), [(2, 9)].into())].into(),
                2,
            ))
            .unwrap();
        };
        let (got, ()) = tokio::join!(waiter, commit);
        assert_eq!(got, Ok(9));
    }

    #[tokio::test]
    async fn a_new_commit_wakes_a_waiter_before_its_poll() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index");
        let mut w = ChunkIndexWriter::open_or_create(&path, 50_000_000).unwrap();
        let ix = Indexes::new(Metrics::new());
        let serving = Serving::fixed(ix.clone(), Metrics::new());
        let ms = Duration::from_millis;
        let start = Instant::now();
        // a poll far longer than the test: only the notification can end the wait in time
        let at = params(3);
        let waiter = wait_for_offset(&serving, &at, ms(60_000), ms(30_000));
        let commit = async {
            tokio::time::sleep(ms(50)).await;
            w.commit(&CommitPayload::new(
                [("docs".into(), [(2, 4)].into())].into(),
                1,
            ))
            .unwrap();
            ix.reload_tick(&path, Bm25Params::default());
        };
        let (got, ()) = tokio::join!(waiter, commit);
        assert_eq!(got, Ok(4));
        assert!(start.elapsed() < ms(10_000), "{:?}", start.elapsed());
    }

    #[test]
    fn the_index_state_is_of_the_commit_served_not_the_newest_on_disk() {
        use freshet_core::chunk::Chunk;
        use freshet_core::filter::ChunkFilter;

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index");
        let mut w = ChunkIndexWriter::open_or_create(&path, 50_000_000).unwrap();
        let ix = Indexes::new(Metrics::new());
        let bm25 = Bm25Params::default();
        let chunk = |id: &str, acl: &[&str]| Chunk {
            chunk_id: id.into(),
            acl: acl.iter().map(|a| a.to_string()).collect(),
            ..freshet_core::testing::chunk(id, "text")
        };
        let commit = |w: &mut ChunkIndexWriter, next: i64, epoch: u64| {
            w.commit(&CommitPayload::new(
                [("docs".into(), [(0, next)].into())].into(),
                epoch,
            ))
            .unwrap()
        };
        w.apply(&[chunk("a", &[]), chunk("b", &["group:hr"])], &[])
            .unwrap();
        commit(&mut w, 5, 1);
        ix.reload_tick(&path, bm25);
        let public = ChunkFilter::none().principals(Vec::<String>::new());
        let served = json!({"epoch": 1, "offsets": {"docs": {"0": 5}}, "chunks": 1});
        let state = |ix: &Indexes| {
            let mut v = index_state_body(ix, &public).unwrap();
            v.as_object_mut().unwrap().remove("committed_at_ms");
            v
        };
        assert_eq!(state(&ix), served);

        // Committed on disk, not loaded yet: searches see commit 1, and so does the state.
        w.apply(&[chunk("c", &[])], &[]).unwrap();
        commit(&mut w, 9, 2);
        assert_eq!(state(&ix), served);
        ix.reload_tick(&path, bm25);
        assert_eq!(
            state(&ix),
            json!({"epoch": 2, "offsets": {"docs": {"0": 9}}, "chunks": 2})
        );
    }

    #[test]
    fn bad_parameters_are_refused() {
        assert!(check(&params(0)).is_ok());
        for p in [
            WaitParams {
                topic: String::new(),
                ..params(0)
            },
            WaitParams {
                partition: -1,
                ..params(0)
            },
            params(-1),
            WaitParams {
                timeout_ms: Some(MAX_WAIT_MS + 1),
                ..params(0)
            },
        ] {
            assert!(check(&p).is_err(), "{p:?}");
        }
    }
}
