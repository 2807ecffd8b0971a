//! What the client reports of its calls: [`LlmMetrics`], registered by the binary that calls
//! the model (`freshet_<binary>_llm_…`) and handed to the client with
//! [`LlmClient::with_metrics`](crate::LlmClient::with_metrics). A client without one records
//! nothing. The metrics are documented in this crate's `METRICS.md`.

use std::time::Duration;

use freshet_metrics::{Registrar, LATENCY};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

use crate::wire::Usage;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

/// The client's metrics in one binary's registry. Cheap to clone.
#[derive(Clone, Debug)]
pub struct LlmMetrics {
    requests: Family<OutcomeLabel, Counter>,
    seconds: Histogram,
    first_token: Histogram,
    retries: Family<ReasonLabel, Counter>,
    prompt_tokens: Counter,
    completion_tokens: Counter,
}

impl LlmMetrics {
    /// Registers the client's metrics with `r`.
    pub fn register(r: &mut Registrar) -> LlmMetrics {
        LlmMetrics {
            requests: r.counters(
                "llm_requests",
                "Chat calls to the language model, by outcome (ok, timeout, rate_limited, \
                 server_error, unavailable, refused, bad_response, cancelled)",
            ),
            seconds: r.histogram(
                "llm_request_seconds",
                "One chat call, its retries and waits included, until its answer ended",
                LATENCY,
            ),
            first_token: r.histogram(
                "llm_first_token_seconds",
                "A streamed chat call until its first piece of text",
                LATENCY,
            ),
            retries: r.counters(
                "llm_retries",
                "Attempts retried, by reason (rate_limited, server_error, unavailable)",
            ),
            prompt_tokens: r.counter("llm_prompt_tokens", "Prompt tokens the server reported"),
            completion_tokens: r.counter(
                "llm_completion_tokens",
                "Completion tokens the server reported",
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

    pub(crate) fn first_token(&self, took: Duration) {
        self.first_token.observe(took.as_secs_f64());
    }

    pub(crate) fn usage(&self, usage: &Usage) {
        self.prompt_tokens.inc_by(usage.prompt_tokens);
        self.completion_tokens.inc_by(usage.completion_tokens);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `METRICS.md` documents exactly what [`LlmMetrics::register`] and
    /// [`EmbeddingsMetrics::register`](crate::EmbeddingsMetrics::register) register.
    #[test]
    fn metrics_md_matches_the_registry() {
        let mut r = Registrar::new("binary");
        let m = LlmMetrics::register(&mut r);
        m.outcome("ok", Duration::from_millis(1));
        m.retry("rate_limited");
        let e = crate::EmbeddingsMetrics::register(&mut r);
        e.outcome("ok", Duration::from_millis(1));
        e.retry("timeout");
        let registry = r.finish();
        let md = include_str!("../METRICS.md");
        let problems = freshet_metrics::spec::check(md, "freshet_binary_", &registry);
        assert!(problems.is_empty(), "{problems:#?}");
    }
}
