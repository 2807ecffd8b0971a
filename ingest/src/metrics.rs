//! The ingest service's Prometheus metrics (names and meanings: `ingest/METRICS.md`), served on
//! the API port at `/metrics`.

use std::sync::Arc;

use freshet_kafka::ProduceMetrics;
use freshet_service::metrics::{HistogramFamily, Registrar, LATENCY};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
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

/// Every metric the ingest service exports. Cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    requests: Family<RequestLabels, Counter>,
    request_seconds: HistogramFamily<RouteLabels>,
    documents: Family<OpLabels, Counter>,
    produce_errors: Counter,
    auth_rejections: Family<RejectionLabels, Counter>,
    /// The Kafka connector's produce calls (`kafka_produce_…`), handed to the producer.
    pub kafka: ProduceMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut r = Registrar::new("ingest");
        let requests = r.counters("requests", "Answers by route and HTTP status");
        let request_seconds = r.histograms(
            "request_seconds",
            "Time to answer a request, by route",
            LATENCY,
        );
        let documents = r.counters(
            "documents",
            "Records the broker acknowledged, by op (upsert, delete)",
        );
        let produce_errors = r.counter(
            "produce_errors",
            "Produce calls that failed (broker unreachable, timed out or refused)",
        );
        let auth_rejections = r.counters(
            "auth_rejections",
            "Requests refused by authentication, a write rule or a limit, by key name and reason",
        );
        let kafka = ProduceMetrics::register(&mut r);
        Metrics {
            registry: r.finish(),
            requests,
            request_seconds,
            documents,
            produce_errors,
            auth_rejections,
            kafka,
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
        freshet_service::metrics::encode(&self.registry)
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

    #[test]
    fn metrics_md_lists_exactly_the_registered_metrics() {
        let problems = freshet_service::metrics::spec::check(
            include_str!("../METRICS.md"),
            "freshet_ingest_",
            Metrics::new().registry(),
        );
        assert!(problems.is_empty(), "ingest/METRICS.md: {problems:#?}");
    }
}
