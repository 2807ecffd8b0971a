//! Metrics of a freshet binary, named by the spec in `docs/metrics.md`: every metric is
//! registered through a [`Registrar`] (the binary's `freshet_<binary>_` prefix, counters ending
//! in `_total`, histograms with one of the bucket sets below), encoded by [`encode`], and
//! checked against the binary's `METRICS.md` by [`spec`].

pub mod spec;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};

/// Bucket upper bounds (seconds) of a histogram.
#[derive(Clone, Copy, Debug)]
pub struct Buckets(pub &'static [f64]);

/// `start`, `start·2`, `start·4` … (`N` bounds; doubling is exact in binary floating point,
/// so `0.00025·4` is the same number as `0.001`).
const fn doubling<const N: usize>(start: f64) -> [f64; N] {
    let mut b = [0.0; N];
    let mut v = start;
    let mut i = 0;
    while i < N {
        b[i] = v;
        v *= 2.0;
        i += 1;
    }
    b
}

const LATENCY_BOUNDS: [f64; 19] = doubling(0.000_25);

/// The latency set of every histogram unless it says why it needs another: 0.25 ms doubling to
/// 65.5 s (19 buckets), from a cached query to a produce waiting out the producer's timeout.
pub const LATENCY: Buckets = Buckets(&LATENCY_BOUNDS);

/// The set of the pipeline's record ages and sink writes, 5 ms to 300 s: a record's way from
/// its Kafka timestamp to durable crosses batching, the model and stall retries, which reach
/// minutes; its bounds are the ones the pipeline's dashboards and SLOs are written against.
pub const PIPELINE_AGE: Buckets = Buckets(&[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.35, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
]);

impl Buckets {
    /// An empty histogram with these buckets.
    pub fn histogram(&self) -> Histogram {
        Histogram::new(self.0.iter().copied())
    }
}

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        self.histogram()
    }
}

/// A family of histograms by label set, all with the same buckets.
pub type HistogramFamily<L> = Family<L, Histogram, Buckets>;

/// A gauge of a float (seconds, a timestamp).
pub type FloatGauge = Gauge<f64, AtomicU64>;

/// Registers the metrics of one binary (`freshet_<binary>_<name>`).
pub struct Registrar {
    registry: Registry,
}

impl Registrar {
    /// The registrar of `binary` (`pipeline`, `query`, `ingest` ...).
    pub fn new(binary: &str) -> Registrar {
        Registrar {
            registry: Registry::with_prefix(format!("freshet_{binary}")),
        }
    }

    /// Registers `metric` as `name` (a counter's `_total` is added when encoded) and hands it
    /// back.
    pub fn register<M: Metric + Clone>(&mut self, name: &str, help: &str, metric: M) -> M {
        self.registry.register(name, help, metric.clone());
        metric
    }

    /// A counter.
    pub fn counter(&mut self, name: &str, help: &str) -> Counter {
        self.register(name, help, Counter::default())
    }

    /// A counter per label set.
    pub fn counters<L>(&mut self, name: &str, help: &str) -> Family<L, Counter>
    where
        L: EncodeLabelSet + Clone + std::hash::Hash + Eq + std::fmt::Debug + Send + Sync + 'static,
    {
        self.register(name, help, Family::default())
    }

    /// An integer gauge.
    pub fn gauge(&mut self, name: &str, help: &str) -> Gauge {
        self.register(name, help, Gauge::default())
    }

    /// A float gauge.
    pub fn float_gauge(&mut self, name: &str, help: &str) -> FloatGauge {
        self.register(name, help, FloatGauge::default())
    }

    /// An integer gauge per label set.
    pub fn gauges<L>(&mut self, name: &str, help: &str) -> Family<L, Gauge>
    where
        L: EncodeLabelSet + Clone + std::hash::Hash + Eq + std::fmt::Debug + Send + Sync + 'static,
    {
        self.register(name, help, Family::default())
    }

    /// A histogram with `buckets`.
    pub fn histogram(&mut self, name: &str, help: &str, buckets: Buckets) -> Histogram {
        self.register(name, help, buckets.histogram())
    }

    /// A histogram per label set, each with `buckets`.
    pub fn histograms<L>(&mut self, name: &str, help: &str, buckets: Buckets) -> HistogramFamily<L>
    where
        L: EncodeLabelSet + Clone + std::hash::Hash + Eq + std::fmt::Debug + Send + Sync + 'static,
    {
        self.register(name, help, Family::new_with_constructor(buckets))
    }

    /// The registry, to encode.
    pub fn finish(self) -> Arc<Registry> {
        Arc::new(self.registry)
    }
}

/// Every metric of `registry` as OpenMetrics text (empty if encoding fails, which it does not
/// for the metric types above).
pub fn encode(registry: &Registry) -> String {
    let mut text = String::new();
    if prometheus_client::encoding::text::encode(&mut text, registry).is_err() {
        text.clear();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::histogram::exponential_buckets;

    #[test]
    fn the_latency_set_holds_every_bound_the_services_used() {
        let has = |b: f64| LATENCY.0.contains(&b);
        // The query node's request set, its commit-visibility set, the ingest service's and the
        // folder watcher's: every bound of each is a bound of the one set.
        for old in [
            exponential_buckets(0.000_25, 2.0, 17).collect::<Vec<_>>(),
            exponential_buckets(0.001, 2.0, 14).collect(),
            exponential_buckets(0.000_5, 2.0, 18).collect(),
            exponential_buckets(0.001, 2.0, 16).collect(),
        ] {
            assert!(old.iter().all(|b| has(*b)), "{old:?}");
        }
        assert_eq!(LATENCY.0.len(), 19);
        assert!((LATENCY.0[18] - 65.536).abs() < 1e-9);
    }

    #[test]
    fn names_get_the_binary_prefix_and_counters_total() {
        let mut r = Registrar::new("demo");
        r.counter("things", "Things").inc();
        r.histogram("wait_seconds", "Waits", LATENCY).observe(0.001);
        let text = encode(&r.finish());
        assert!(text.contains("freshet_demo_things_total 1"), "{text}");
        assert!(
            text.contains(r#"freshet_demo_wait_seconds_bucket{le="0.001"} 1"#),
            "{text}"
        );
    }
}
