//! What the embeddings client reports: [`EmbeddingsMetrics`], registered by the binary that
//! embeds remotely (`freshet_<binary>_remote_embedding_…`) and handed to the client with
//! [`EmbeddingsClient::with_metrics`](super::EmbeddingsClient::with_metrics). Documented in
//! this crate's `METRICS.md`.

use std::time::Duration;

use freshet_metrics::{Registrar, LATENCY};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

/// The embeddings client's metrics in one binary's registry. Cheap to clone.
#[derive(Clone, Debug)]
pub struct EmbeddingsMetrics {
    requests: Family<OutcomeLabel, Counter>,
    seconds: Histogram,
    retries: Family<ReasonLabel, Counter>,
    texts: Counter,
    tokens: Counter,
}

impl EmbeddingsMetrics {
    /// Registers the client's metrics with `r`.
    pub fn register(r: &mut Registrar) -> EmbeddingsMetrics {
        EmbeddingsMetrics {
            requests: r.counters(
                "remote_embedding_requests",
                "Requests to the embedding server, by outcome (ok, timeout, rate_limited, \
                 server_error, unavailable, refused, bad_response)",
            ),
            seconds: r.histogram(
                "remote_embedding_request_seconds",
                "One request to the embedding server, its retries and wait for a slot included",
                LATENCY,
            ),
            retries: r.counters(
                "remote_embedding_retries",
                "Attempts retried, by reason (rate_limited, server_error, unavailable, timeout)",
            ),
            texts: r.counter(
                "remote_embedding_texts",
                "Texts the embedding server embedded",
            ),
            tokens: r.counter(
                "remote_embedding_prompt_tokens",
                "Input tokens the embedding server reported",
            ),
        }
    }

    pub(crate) fn outcome(&self, outcome: &'static str, took: Duration) {
        self.requests.get_or_create(&OutcomeLabel { outcome }).inc();
        self.seconds.observe(took.as_secs_f64());
    }

    pub(crate) fn retry(&self, reason: &'static str) {
        self.retries.get_or_create(&ReasonLabel { reason }).inc();
    }

    pub(crate) fn inputs(&self, texts: u64, tokens: u64) {
        self.texts.inc_by(texts);
        self.tokens.inc_by(tokens);
    }
}
