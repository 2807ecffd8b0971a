//! The query node's Prometheus metrics (names and meanings: `query/METRICS.md`), served on the
//! API port at `/metrics`.

use std::sync::Arc;

use freshet_llm::{EmbeddingsMetrics, LlmMetrics};
use freshet_milvus::MilvusMetrics;
use freshet_service::metrics::{FloatGauge, HistogramFamily, Registrar, LATENCY};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
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
pub struct ValidityLabels {
    pub validity: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeftOutLabels {
    pub route: &'static str,
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabels {
    pub step: &'static str,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GenerationLabels {
    pub generation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModeLabels {
    pub mode: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TriggerLabels {
    /// What woke the reload: `notify` (a file notification), `poll` (the interval).
    pub trigger: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RejectionLabels {
    /// The credential's name (a key's `name`, `jwt`, `admin`, `unknown`, `none`), never a secret.
    pub key: String,
    pub reason: String,
}

/// Every metric the query node exports. Cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    pub registry: Arc<Registry>,
    pub requests: Family<RequestLabels, Counter>,
    pub request_seconds: HistogramFamily<ModeLabels>,
    pub stage_seconds: HistogramFamily<StageLabels>,
    pub index_commit_timestamp: FloatGauge,
    pub index_commit_age: FloatGauge,
    pub index_epoch: Gauge,
    pub index_chunks: Gauge,
    pub index_visible_delay: Histogram,
    pub index_reload_delay: Histogram,
    pub index_reloads: Family<TriggerLabels, Counter>,
    pub ready: Gauge,
    /// 1 for the index generation served (`[query] serving_pointer`); no series without one.
    pub index_generation: Family<GenerationLabels, Gauge>,
    pub index_switches: Counter,
    /// Query embedding models loaded (one per generation's model, served or being opened).
    pub query_models: Gauge,
    pub query_embeddings: Family<OutcomeLabels, Counter>,
    pub routes_left_out: Family<LeftOutLabels, Counter>,
    pub auth_rejections: Family<RejectionLabels, Counter>,
    pub chunks_dropped: Family<ReasonLabels, Counter>,
    pub retrievals_running: Gauge,
    pub retrievals_waiting: Gauge,
    pub overload_rejections: Family<ReasonLabels, Counter>,
    pub cancelled_work: Family<StageLabels, Counter>,
    pub transform_steps: Family<StepLabels, Counter>,
    /// The Milvus connector's calls (`milvus_requests_total`, `milvus_request_seconds`).
    pub milvus: MilvusMetrics,
    /// `/v1/answer`: answers by outcome, their citations and flagged sentences.
    pub answers: Family<OutcomeLabels, Counter>,
    pub answer_citations: Family<ValidityLabels, Counter>,
    pub answer_uncited_sentences: Counter,
    pub answer_unsupported_statements: Counter,
    /// The language model's calls (`llm_requests_total`, ...; `connectors/llm/METRICS.md`).
    pub llm: LlmMetrics,
    /// A remote embedding model's requests (`remote_embedding_…`; `connectors/llm/METRICS.md`).
    pub remote_embedding: EmbeddingsMetrics,
    /// The replica's (`[replica]`; zero on a node that is not one).
    pub replica: crate::replica::metrics::ReplicaMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut r = Registrar::new("query");
        let requests = r.counters(
            "requests",
            "Requests by endpoint, mode and outcome (ok, degraded, bad_request, unauthorized, \
             unavailable, error)",
        );
        let request_seconds = r.histograms(
            "request_seconds",
            "Retrieve latency end to end inside the node, by mode",
            LATENCY,
        );
        let stage_seconds = r.histograms(
            "stage_seconds",
            "Retrieve latency per stage (embed, bm25, vector, fetch, fusion, parents, rerank, \
             expand, pack, transform)",
            LATENCY,
        );
        let index_commit_timestamp = r.float_gauge(
            "index_commit_timestamp_seconds",
            "Unix time of the newest pipeline commit this node serves",
        );
        let index_commit_age = r.float_gauge(
            "index_commit_age_seconds",
            "Age of the newest pipeline commit this node serves (updated every reload tick)",
        );
        let index_epoch = r.gauge(
            "index_epoch",
            "Pipeline epoch of the newest commit this node serves",
        );
        let index_chunks = r.gauge(
            "index_chunks",
            "Chunks in the tantivy index this node serves",
        );
        let index_visible_delay = r.histogram(
            "index_visible_delay_seconds",
            "Time from a pipeline commit to it being searchable in this node",
            LATENCY,
        );
        let index_reload_delay = r.histogram(
            "index_reload_delay_seconds",
            "Time from a tantivy commit being written (its meta.json) to it being searchable \
             in this node",
            LATENCY,
        );
        let index_reloads = r.counters(
            "index_reloads",
            "Pipeline commits this node loaded, by what woke the reload (notify, poll)",
        );
        let ready = r.gauge(
            "ready",
            "1 when both indexes are reachable (as /readyz reports)",
        );
        let index_generation = r.gauges(
            "index_generation",
            "1 for the index generation this node serves (the serving pointer's), by generation",
        );
        let index_switches = r.counter(
            "index_switches",
            "Times this node switched to another index generation after opening it",
        );
        let query_models = r.gauge(
            "embedding_models",
            "Query embedding models loaded: the served generation's, and another while a \
             generation of another model is opened or still answers requests",
        );
        let query_embeddings = r.counters(
            "query_embeddings",
            "Query vectors by outcome: embedded by the model, or cache_hit",
        );
        let routes_left_out = r.counters(
            "routes_left_out",
            "Hybrid retrievals that left a route out on purpose, by route and reason (language: \
             the query is in a language the embedding model does not cover)",
        );
        let auth_rejections = r.counters(
            "auth_rejections",
            "Requests refused by credential name and reason (unauthorized, forbidden, \
             rate_limited, concurrency_limited)",
        );
        let chunks_dropped = r.counters(
            "chunks_dropped",
            "Chunks kept out of answers at the final check (missing: a vector hit the request's \
             index snapshot lacks; acl: not visible to the request's principals; filter: fails \
             the request's filter)",
        );
        let retrievals_running = r.gauge(
            "retrievals_running",
            "Retrieval slots held (max_running_retrievals), by requests and by work a timed-out \
             request has not stopped yet",
        );
        let retrievals_waiting = r.gauge("retrievals_waiting", "Retrievals waiting for a slot");
        let overload_rejections = r.counters(
            "overload_rejections",
            "Retrievals refused with 503 overloaded (queue_full, queue_timeout)",
        );
        let cancelled_work = r.counters(
            "cancelled_work",
            "Units of blocking work not done because their request was cancelled or past its \
             deadline, by stage",
        );
        let transform_steps = r.counters(
            "transform_steps",
            "Query transformation steps (condense, multi_query, hyde) by outcome: ok, cache_hit, \
             or why the step fell back to the question (timeout, rate_limited, server_error, \
             unavailable, refused, bad_response, garbage)",
        );
        let milvus = MilvusMetrics::register(&mut r);
        let llm = LlmMetrics::register(&mut r);
        let answers = r.counters(
            "answers",
            "Answers of /v1/answer by outcome (answered, model: the model refused, no_passages: \
             refused without calling the model, llm_<class>: the model failed)",
        );
        let answer_citations = r.counters(
            "answer_citations",
            "Citation markers in answers, by validity (valid: names a passage of the prompt, \
             invalid: names none)",
        );
        let answer_uncited_sentences = r.counter(
            "answer_uncited_sentences",
            "Sentences of answers that carry no valid citation",
        );
        let answer_unsupported_statements = r.counter(
            "answer_unsupported_statements",
            "Cited statements the grounding check found unsupported by their passages",
        );
        let remote_embedding = EmbeddingsMetrics::register(&mut r);
        let replica = crate::replica::metrics::ReplicaMetrics::register(&mut r);
        Metrics {
            registry: r.finish(),
            requests,
            request_seconds,
            stage_seconds,
            index_commit_timestamp,
            index_commit_age,
            index_epoch,
            index_chunks,
            index_visible_delay,
            index_reload_delay,
            index_reloads,
            ready,
            index_generation,
            index_switches,
            query_models,
            query_embeddings,
            routes_left_out,
            auth_rejections,
            chunks_dropped,
            retrievals_running,
            retrievals_waiting,
            overload_rejections,
            cancelled_work,
            transform_steps,
            milvus,
            answers,
            answer_citations,
            answer_uncited_sentences,
            answer_unsupported_statements,
            llm,
            remote_embedding,
            replica,
        }
    }

    /// One answer: its outcome (`answered` or the refusal's reason) and what its check found.
    pub fn answer(
        &self,
        outcome: &str,
        valid: usize,
        invalid: usize,
        uncited: usize,
        unsupported: usize,
    ) {
        self.answers
            .get_or_create(&OutcomeLabels {
                outcome: outcome.into(),
            })
            .inc();
        for (validity, n) in [("valid", valid), ("invalid", invalid)] {
            self.answer_citations
                .get_or_create(&ValidityLabels { validity })
                .inc_by(n as u64);
        }
        self.answer_uncited_sentences.inc_by(uncited as u64);
        self.answer_unsupported_statements
            .inc_by(unsupported as u64);
    }

    /// An answer the model failed (`llm_<class>`).
    pub fn answer_failed(&self, code: &str) {
        self.answers
            .get_or_create(&OutcomeLabels {
                outcome: code.into(),
            })
            .inc();
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

    pub fn route_left_out(&self, route: &'static str, reason: &'static str) {
        self.routes_left_out
            .get_or_create(&LeftOutLabels { route, reason })
            .inc();
    }

    pub fn transform_step(&self, step: &'static str, outcome: &'static str) {
        self.transform_steps
            .get_or_create(&StepLabels { step, outcome })
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
        freshet_service::metrics::encode(&self.registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_md_lists_exactly_the_registered_metrics() {
        let problems = freshet_service::metrics::spec::check(
            include_str!("../METRICS.md"),
            "freshet_query_",
            &Metrics::new().registry,
        );
        assert!(problems.is_empty(), "query/METRICS.md: {problems:#?}");
    }
}
