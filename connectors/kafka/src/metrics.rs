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

use crate::Error;

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

    /// Registers the connector's dead-letter metrics with `r`, the same three under
    /// `kafka_dead_letter_…`: one call per dead letter ([`DlqProducer::send`](crate::DlqProducer::send)),
    /// each awaited until the broker acknowledged it.
    pub fn register_dead_letters(r: &mut Registrar) -> ProduceMetrics {
        ProduceMetrics {
            calls: r.counters(
                "kafka_dead_letter_calls",
                "Dead letters produced and awaited, by outcome (ok, error, timeout)",
            ),
            records: r.counter(
                "kafka_dead_letter_records",
                "Dead letters the broker acknowledged",
            ),
            seconds: r.histogram(
                "kafka_dead_letter_seconds",
                "One dead letter until the broker acknowledged it",
                LATENCY,
            ),
        }
    }

    /// Records one produce call that took `took` and ended in `res` (the number of records
    /// acknowledged, or why not).
    pub(crate) fn record(&self, res: std::result::Result<usize, &Error>, took: Duration) {
        let outcome = match res {
            Ok(acknowledged) => {
                self.records.inc_by(acknowledged as u64);
                "ok"
            }
            Err(Error::Timeout { .. }) => "timeout",
            Err(_) => "error",
        };
        self.calls.get_or_create(&OutcomeLabel { outcome }).inc();
        self.seconds.observe(took.as_secs_f64());
    }
}
