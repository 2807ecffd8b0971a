//! What the connector reports of its document produces: [`ProduceMetrics`], registered by the
//! binary that publishes (`freshet_<binary>_kafka_…`) and handed to a
//! [`TopicProducer`](crate::TopicProducer) with
//! [`TopicProducer::with_metrics`](crate::TopicProducer::with_metrics). A producer without one
//! records nothing.

use std::time::Duration;

use freshet_metrics::{Registrar, LATENCY};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

use crate::{Error, Result};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

/// The connector's produce metrics in one binary's registry:
/// `kafka_produce_calls_total{outcome}` (one per batch of records produced and awaited
/// together; outcome `ok`, `error`: a record refused or not delivered, `timeout`: a delivery
/// report never came), `kafka_produced_records_total` (records the broker acknowledged) and
/// `kafka_produce_seconds` (a call until its last acknowledgement, LATENCY buckets). Cheap to
/// clone.
#[derive(Clone, Debug)]
pub struct ProduceMetrics {
    calls: Family<OutcomeLabel, Counter>,
    records: Counter,
    seconds: Histogram,
}

impl ProduceMetrics {
    /// Registers the connector's produce metrics with `r`.
    pub fn register(r: &mut Registrar) -> ProduceMetrics {
        ProduceMetrics {
            calls: r.counters(
                "kafka_produce_calls",
                "Calls producing document records and awaiting their acknowledgements, by \
                 outcome (ok, error, timeout)",
            ),
            records: r.counter(
                "kafka_produced_records",
                "Document records the broker acknowledged",
            ),
            seconds: r.histogram(
                "kafka_produce_seconds",
                "One produce call until the broker acknowledged its last record",
                LATENCY,
            ),
        }
    }

    /// Records one produce call that took `took` and ended in `res` (acknowledged records).
    pub(crate) fn record<T>(&self, res: &Result<Vec<T>>, took: Duration) {
        let outcome = match res {
            Ok(placed) => {
                self.records.inc_by(placed.len() as u64);
                "ok"
            }
            Err(Error::Timeout { .. }) => "timeout",
            Err(_) => "error",
        };
        self.calls.get_or_create(&OutcomeLabel { outcome }).inc();
        self.seconds.observe(took.as_secs_f64());
    }
}
