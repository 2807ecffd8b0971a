//! What the connector reports of its calls to Milvus: [`MilvusMetrics`], registered by the
//! binary that uses the connector (`freshet_<binary>_milvus_…`) and handed to a
//! [`MilvusSink`](crate::MilvusSink) with [`MilvusSink::with_metrics`](crate::MilvusSink::with_metrics).
//! A sink without one records nothing.

use std::future::Future;
use std::time::Instant;

use freshet_metrics::{HistogramFamily, Registrar, LATENCY};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::error::{Error, Result};

/// One kind of call to Milvus (the `op` label): a closed set, one per SDK call the connector
/// makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// `Search` (vector search with a filter).
    Search,
    /// `Query` (rows or `count(*)` by expression).
    Query,
    /// `Insert` (rows; replaced ids are deleted first).
    Insert,
    /// `Delete` (by chunk id).
    Delete,
    /// `Flush`.
    Flush,
    /// `LoadCollection`.
    Load,
    /// `HasCollection`.
    HasCollection,
    /// `DescribeCollection`, `DescribeIndex` and `GetQuerySegmentInfo`.
    Describe,
    /// `CreateCollection` and `CreateIndex`.
    Create,
    /// `DropCollection`.
    Drop,
    /// `AlterCollectionProperties`.
    Alter,
    /// `GetVersion` and `CheckHealth`.
    Health,
}

impl Op {
    fn as_str(self) -> &'static str {
        match self {
            Op::Search => "search",
            Op::Query => "query",
            Op::Insert => "insert",
            Op::Delete => "delete",
            Op::Flush => "flush",
            Op::Load => "load",
            Op::HasCollection => "has_collection",
            Op::Describe => "describe",
            Op::Create => "create",
            Op::Drop => "drop",
            Op::Alter => "alter",
            Op::Health => "health",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Request {
    op: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabel {
    op: &'static str,
}

/// The connector's metrics in one binary's registry: `milvus_requests_total{op, outcome}`
/// (outcome `ok`, `error`, or `timeout` when the connector's own bound ran out) and
/// `milvus_request_seconds{op}` (every finished call, LATENCY buckets). Cheap to clone.
#[derive(Clone, Debug)]
pub struct MilvusMetrics {
    requests: Family<Request, Counter>,
    seconds: HistogramFamily<OpLabel>,
}

impl MilvusMetrics {
    /// Registers the connector's metrics with `r`.
    pub fn register(r: &mut Registrar) -> MilvusMetrics {
        MilvusMetrics {
            requests: r.counters(
                "milvus_requests",
                "Calls to Milvus, by op and outcome (ok, error, timeout)",
            ),
            seconds: r.histograms(
                "milvus_request_seconds",
                "Duration of a finished call to Milvus, by op",
                LATENCY,
            ),
        }
    }

    fn record(&self, op: Op, outcome: &'static str, seconds: f64) {
        let op = op.as_str();
        self.requests.get_or_create(&Request { op, outcome }).inc();
        self.seconds.get_or_create(&OpLabel { op }).observe(seconds);
    }
}

/// Runs `call` (one call of kind `op`) and records it in `metrics`, if any.
pub(crate) async fn recorded<T, E: Into<Error>>(
    metrics: Option<&MilvusMetrics>,
    op: Op,
    call: impl Future<Output = std::result::Result<T, E>>,
) -> Result<T> {
    let start = Instant::now();
    let res = call.await.map_err(Into::into);
    if let Some(m) = metrics {
        let outcome = match &res {
            Ok(_) => "ok",
            Err(Error::Timeout(_)) => "timeout",
            Err(_) => "error",
        };
        m.record(op, outcome, start.elapsed().as_secs_f64());
    }
    res
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use freshet_metrics::encode;

    use super::*;
    use crate::columns::bounded;

    #[tokio::test]
    async fn each_call_counts_by_op_and_outcome() {
        let mut r = Registrar::new("demo");
        let m = MilvusMetrics::register(&mut r);
        let registry = r.finish();
        let ok: Result<u8> = recorded(Some(&m), Op::Search, async { Ok::<_, Error>(1) }).await;
        assert_eq!(ok.unwrap(), 1);
        let failed = recorded(Some(&m), Op::Insert, async {
            Err::<(), _>(Error::Inconsistent("refused".into()))
        })
        .await;
        assert!(failed.is_err());
        let limit = Duration::from_millis(5);
        let slow = recorded(
            Some(&m),
            Op::Search,
            bounded(limit, async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                Ok(())
            }),
        )
        .await;
        assert!(matches!(slow, Err(Error::Timeout(_))));
        // Without a handle nothing is recorded (and the answer is the call's).
        let unrecorded: Result<u8> = recorded(None, Op::Flush, async { Ok::<_, Error>(2) }).await;
        assert_eq!(unrecorded.unwrap(), 2);

        let text = encode(&registry);
        for line in [
            r#"freshet_demo_milvus_requests_total{op="search",outcome="ok"} 1"#,
            r#"freshet_demo_milvus_requests_total{op="insert",outcome="error"} 1"#,
            r#"freshet_demo_milvus_requests_total{op="search",outcome="timeout"} 1"#,
            r#"freshet_demo_milvus_request_seconds_count{op="search"} 2"#,
            r#"freshet_demo_milvus_request_seconds_count{op="insert"} 1"#,
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
        assert!(!text.contains(r#"op="flush""#), "{text}");
    }
}
