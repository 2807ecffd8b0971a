//! The ingest service's Prometheus metrics, served on the API port at `/metrics`:
//!
//! - `freshet_ingest_requests_total{route,status}`: every answer, by route and HTTP status;
//! - `freshet_ingest_request_seconds{route}`: time to answer (for the produce routes, mostly the
//!   wait for the broker's acknowledgement);
//! - `freshet_ingest_documents_total{op}`: records acknowledged by the broker (`upsert`,
//!   `delete`);
//! - `freshet_ingest_produce_errors_total`: produce calls that failed (answered 503);
//! - `freshet_ingest_auth_rejections_total{key,reason}`: requests refused by authentication
//!   (`unauthorized`), a write rule (`forbidden`) or a limit (`rate_limited`,
//!   `concurrency_limited`), by the key's name, `jwt`, `anonymous`, `unknown` or `none`.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub route: String,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RejectionLabels {
    pub key: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabels {
    pub op: String,
}

fn latency_histogram() -> Histogram {
    // 0.5 ms .. ~65 s (a produce may wait for the producer's whole timeout).
    Histogram::new(exponential_buckets(0.000_5, 2.0, 18))
}

/// Every metric the ingest service exports. Cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    requests: Family<RequestLabels, Counter>,
    request_seconds: Family<RouteLabels, Histogram, fn() -> Histogram>,
    documents: Family<OpLabels, Counter>,
    produce_errors: Counter,
    auth_rejections: Family<RejectionLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut r = Registry::with_prefix("freshet_ingest");
        let requests = Family::<RequestLabels, Counter>::default();
        r.register(
            "requests",
            "Answers by route and HTTP status",
            requests.clone(),
        );
        let request_seconds =
            Family::<RouteLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                latency_histogram,
            );
        r.register(
            "request_seconds",
            "Time to answer a request, by route",
            request_seconds.clone(),
        );
        let documents = Family::<OpLabels, Counter>::default();
        r.register(
            "documents",
            "Records the broker acknowledged, by op (upsert, delete)",
            documents.clone(),
        );
        let produce_errors = Counter::default();
        r.register(
            "produce_errors",
            "Produce calls that failed (broker unreachable, timed out or refused)",
            produce_errors.clone(),
        );
        let auth_rejections = Family::<RejectionLabels, Counter>::default();
        r.register(
            "auth_rejections",
            "Requests refused by authentication, a write rule or a limit, by key name and reason",
            auth_rejections.clone(),
        );
        Metrics {
            registry: Arc::new(r),
            requests,
            request_seconds,
            documents,
            produce_errors,
            auth_rejections,
        }
    }

    /// One answer of `route` with `status`, after `seconds`.
    pub fn request(&self, route: &str, status: u16, seconds: f64) {
        self.requests
            .get_or_create(&RequestLabels {
                route: route.into(),
                status,
            })
            .inc();
        self.request_seconds
            .get_or_create(&RouteLabels {
                route: route.into(),
            })
            .observe(seconds);
    }

    /// `n` records of `op` acknowledged.
    pub fn documents(&self, op: &str, n: u64) {
        self.documents
            .get_or_create(&OpLabels { op: op.into() })
            .inc_by(n);
    }

    pub fn produce_error(&self) {
        self.produce_errors.inc();
    }

    /// A request of `key` (a key's name, `jwt`, `anonymous`, `unknown`, `none`; never a secret)
    /// refused for `reason`.
    pub fn auth_rejection(&self, key: &str, reason: &str) {
        self.auth_rejections
            .get_or_create(&RejectionLabels {
                key: key.into(),
                reason: reason.into(),
            })
            .inc();
    }

    /// The registry `/metrics` encodes.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_show_in_the_exposition() {
        let m = Metrics::new();
        m.request("/v1/documents/{id}", 200, 0.01);
        m.documents("upsert", 3);
        m.produce_error();
        m.auth_rejection("crm", "forbidden");
        let text = m.encode();
        assert!(
            text.contains(
                r#"freshet_ingest_auth_rejections_total{key="crm",reason="forbidden"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"freshet_ingest_requests_total{route="/v1/documents/{id}",status="200"} 1"#
            ),
            "{text}"
        );
        assert!(text.contains(r#"freshet_ingest_documents_total{op="upsert"} 3"#));
        assert!(text.contains("freshet_ingest_produce_errors_total 1"));
        assert!(text.contains("freshet_ingest_request_seconds_bucket"));
    }
}
