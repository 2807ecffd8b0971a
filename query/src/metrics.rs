//! The query node's Prometheus metrics (names and meanings: `query/METRICS.md`), served on the
//! API port at `/metrics`.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub endpoint: String,
    pub mode: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabels {
    pub stage: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModeLabels {
    pub mode: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RejectionLabels {
    /// The credential's name (a key's `name`, `jwt`, `admin`, `unknown`, `none`), never a secret.
    pub key: String,
    pub reason: String,
}

fn latency_histogram() -> Histogram {
    // 0.25 ms .. ~16 s.
    Histogram::new(exponential_buckets(0.000_25, 2.0, 17))
}

/// Every metric the query node exports. Cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    pub registry: Arc<Registry>,
    pub requests: Family<RequestLabels, Counter>,
    pub request_seconds: Family<ModeLabels, Histogram, fn() -> Histogram>,
    pub stage_seconds: Family<StageLabels, Histogram, fn() -> Histogram>,
    pub index_commit_timestamp: Gauge<f64, AtomicU64>,
    pub index_commit_age: Gauge<f64, AtomicU64>,
    pub index_epoch: Gauge,
    pub index_chunks: Gauge,
    pub index_visible_delay: Histogram,
    pub ready: Gauge,
    pub query_embeddings: Family<OutcomeLabels, Counter>,
    pub auth_rejections: Family<RejectionLabels, Counter>,
    pub chunks_dropped: Family<ReasonLabels, Counter>,
    pub retrievals_running: Gauge,
    pub retrievals_waiting: Gauge,
    pub overload_rejections: Family<ReasonLabels, Counter>,
    pub cancelled_work: Family<StageLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut r = Registry::with_prefix("freshet_query");
        let requests = Family::<RequestLabels, Counter>::default();
        r.register(
            "requests",
            "Requests by endpoint, mode and outcome (ok, degraded, bad_request, unauthorized, unavailable, error)",
            requests.clone(),
        );
        let request_seconds =
            Family::<ModeLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                latency_histogram,
            );
        r.register(
            "request_seconds",
            "Retrieve latency end to end inside the node, by mode",
            request_seconds.clone(),
        );
        let stage_seconds =
            Family::<StageLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                latency_histogram,
            );
        r.register(
            "stage_seconds",
            "Retrieve latency per stage (embed, bm25, vector, fetch, fusion, parents, rerank, expand, pack)",
            stage_seconds.clone(),
        );
        let index_commit_timestamp = Gauge::<f64, AtomicU64>::default();
        r.register(
            "index_commit_timestamp_seconds",
            "Unix time of the newest pipeline commit this node serves",
            index_commit_timestamp.clone(),
        );
        let index_commit_age = Gauge::<f64, AtomicU64>::default();
        r.register(
            "index_commit_age_seconds",
            "Age of the newest pipeline commit this node serves (updated every reload tick)",
            index_commit_age.clone(),
        );
        let index_epoch = Gauge::default();
        r.register(
            "index_epoch",
            "Pipeline epoch of the newest commit this node serves",
            index_epoch.clone(),
        );
        let index_chunks = Gauge::default();
        r.register(
            "index_chunks",
            "Chunks in the tantivy index this node serves",
            index_chunks.clone(),
        );
        let index_visible_delay = Histogram::new(exponential_buckets(0.001, 2.0, 14));
        r.register(
            "index_visible_delay_seconds",
            "Time from a pipeline commit to it being searchable in this node",
            index_visible_delay.clone(),
        );
        let ready = Gauge::default();
        r.register(
            "ready",
            "1 when both indexes are reachable (as /readyz reports)",
            ready.clone(),
        );
        let query_embeddings = Family::<OutcomeLabels, Counter>::default();
        r.register(
            "query_embeddings",
            "Query vectors by outcome: embedded by the model, or cache_hit",
            query_embeddings.clone(),
        );
        let auth_rejections = Family::<RejectionLabels, Counter>::default();
        r.register(
            "auth_rejections",
            "Requests refused by credential name and reason (unauthorized, forbidden, rate_limited, concurrency_limited)",
            auth_rejections.clone(),
        );
        let chunks_dropped = Family::<ReasonLabels, Counter>::default();
        r.register(
            "chunks_dropped",
            "Chunks kept out of answers at the final check (missing: a vector hit the request's index snapshot lacks; acl: not visible to the request's principals; filter: fails the request's filter)",
            chunks_dropped.clone(),
        );
        let retrievals_running = Gauge::default();
        r.register(
            "retrievals_running",
            "Retrieval slots held (max_running_retrievals), by requests and by work a timed-out request has not stopped yet",
            retrievals_running.clone(),
        );
        let retrievals_waiting = Gauge::default();
        r.register(
            "retrievals_waiting",
            "Retrievals waiting for a slot",
            retrievals_waiting.clone(),
        );
        let overload_rejections = Family::<ReasonLabels, Counter>::default();
        r.register(
            "overload_rejections",
            "Retrievals refused with 503 overloaded (queue_full, queue_timeout)",
            overload_rejections.clone(),
        );
        let cancelled_work = Family::<StageLabels, Counter>::default();
        r.register(
            "cancelled_work",
            "Units of blocking work not done because their request was cancelled or past its deadline, by stage",
            cancelled_work.clone(),
        );
        Metrics {
            registry: Arc::new(r),
            requests,
            request_seconds,
            stage_seconds,
            index_commit_timestamp,
            index_commit_age,
            index_epoch,
            index_chunks,
            index_visible_delay,
            ready,
            query_embeddings,
            auth_rejections,
            chunks_dropped,
            retrievals_running,
            retrievals_waiting,
            overload_rejections,
            cancelled_work,
        }
    }

    pub fn chunk_dropped(&self, reason: &str) {
        self.chunks_dropped
            .get_or_create(&ReasonLabels {
                reason: reason.into(),
            })
            .inc();
    }

    pub fn overload_rejection(&self, reason: &str) {
        self.overload_rejections
            .get_or_create(&ReasonLabels {
                reason: reason.into(),
            })
            .inc();
    }

    pub fn cancelled_work(&self, stage: &str) {
        self.cancelled_work
            .get_or_create(&StageLabels {
                stage: stage.into(),
            })
            .inc();
    }

    pub fn request(&self, endpoint: &str, mode: &str, outcome: &str) {
        self.requests
            .get_or_create(&RequestLabels {
                endpoint: endpoint.into(),
                mode: mode.into(),
                outcome: outcome.into(),
            })
            .inc();
    }

    pub fn auth_rejection(&self, key: &str, reason: &str) {
        self.auth_rejections
            .get_or_create(&RejectionLabels {
                key: key.into(),
                reason: reason.into(),
            })
            .inc();
    }

    pub fn query_embedding(&self, outcome: &str) {
        self.query_embeddings
            .get_or_create(&OutcomeLabels {
                outcome: outcome.into(),
            })
            .inc();
    }

    pub fn stage(&self, stage: &str, seconds: f64) {
        self.stage_seconds
            .get_or_create(&StageLabels {
                stage: stage.into(),
            })
            .observe(seconds);
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
