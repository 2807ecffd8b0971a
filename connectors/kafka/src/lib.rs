//! freshet's Kafka transport.
//!
//! This crate moves bytes between Kafka (any broker speaking the Kafka protocol; freshet runs
//! on tansu) and the rest of freshet. It does **not** decode document JSON: a [`Record`] carries
//! the raw key, value and headers, and the operators crate turns values into documents.
//!
//! * [`admin`]: create topics ([`admin::ensure_topic`]) and discover partitions
//!   ([`admin::partitions`]).
//! * [`PartitionReader`]: a consumer with *manual* partition assignment (no group rebalances;
//!   worker `w` of `W` reads the partitions `p` with `p % W == w`, see
//!   [`partitions_for_worker`]), explicit synchronous offset commits and watermark queries for
//!   lag metrics.
//! * [`DlqProducer`]: sends a failed record, unchanged, to the dead-letter topic with headers
//!   describing the failure, and waits until it is durable.
//! * [`DocumentProducer`]: publishes keyed documents (one at a time or many in flight). What
//!   the documents are built from (files, JSONL) is `freshet-publishers`' business.
//! * [`Produce`]: what every publisher of documents produces through ([`DocumentRecord`]s,
//!   answered with where each was [`Placed`]); [`TopicProducer`] is it over the
//!   [`DocumentProducer`], counting and timing its calls in the [`ProduceMetrics`] the binary
//!   registers and hands it ([`TopicProducer::with_metrics`]).
//!
//! All calls are blocking; none needs an async runtime. librdkafka's own log lines and client
//! errors are forwarded to `tracing` (target `librdkafka`).
//!
//! ```no_run
//! use std::collections::BTreeMap;
//! use std::time::Duration;
//! use freshet_kafka::{admin, partitions_for_worker, DlqProducer, Failure, KafkaConfig, PartitionReader};
//!
//! # fn main() -> freshet_kafka::Result<()> {
//! let cfg = KafkaConfig::default();
//! admin::ensure_topic(&cfg, &cfg.topic, 4)?;
//! admin::ensure_topic(&cfg, &cfg.dlq_topic, 1)?;
//! let all = admin::partitions(&cfg, &cfg.topic)?;
//! // Worker 0 of 2; start from the group's committed offsets.
//! let mut reader =
//!     PartitionReader::new(&cfg, &cfg.topic, &partitions_for_worker(&all, 0, 2), &BTreeMap::new())?;
//! let dlq = DlqProducer::new(&cfg)?;
//! let mut next = BTreeMap::new();
//! for record in reader.poll_batch(1000, Duration::from_millis(200))? {
//!     if record.value.as_deref().is_some_and(|v| v.is_empty()) {
//!         let failure = Failure { class: "malformed_json", stage: "decode", message: "empty value" };
//!         dlq.send(&record, &failure)?;
//!     }
//!     next.insert(record.partition, record.offset + 1);
//! }
//! // ...once the batch's effects are durable downstream:
//! reader.commit(&next)?;
//! # Ok(())
//! # }
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub mod admin;
mod client;
mod consumer;
mod metrics;
mod produce;
mod producer;

pub use consumer::PartitionReader;
pub use metrics::ProduceMetrics;
pub use produce::{DocumentRecord, Op, Placed, Produce, TopicProducer};
pub use producer::{DlqProducer, DocumentProducer, Failure, HeadedRecord};

/// Re-exported so that callers can name librdkafka error codes without depending on rdkafka.
pub use rdkafka::error::RDKafkaErrorCode;

/// Header names set on dead-letter records by [`DlqProducer::send`].
pub mod dlq_headers {
    /// Short machine-readable class of the failure (`malformed_json`, `field_too_large`, ...).
    pub const ERROR_CLASS: &str = "freshet.error.class";
    /// Where the record was refused (`decode`, `prepare`, `embed`, `sink`).
    pub const ERROR_STAGE: &str = "freshet.error.stage";
    /// Human-readable failure message.
    pub const ERROR_MESSAGE: &str = "freshet.error.message";
    /// Topic the original record was read from.
    pub const SOURCE_TOPIC: &str = "freshet.source.topic";
    /// Partition of the original record (decimal).
    pub const SOURCE_PARTITION: &str = "freshet.source.partition";
    /// Offset of the original record (decimal).
    pub const SOURCE_OFFSET: &str = "freshet.source.offset";
    /// Wall-clock time of the failure, milliseconds since the Unix epoch (decimal).
    pub const FAILED_AT_MS: &str = "freshet.failed_at_ms";
    /// Set on a record replayed from the dead-letter topic (`freshet dlq replay`): the dead
    /// letter it came from, `<dead-letter topic>/<partition>/<offset>`.
    pub const REPLAY_OF: &str = "freshet.replay.of";

    /// The headers [`crate::DlqProducer::send`] puts before the original record's, in order.
    pub const FAILURE: [&str; 7] = [
        ERROR_CLASS,
        ERROR_STAGE,
        ERROR_MESSAGE,
        SOURCE_TOPIC,
        SOURCE_PARTITION,
        SOURCE_OFFSET,
        FAILED_AT_MS,
    ];
}

/// Errors of the Kafka transport.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A librdkafka call failed.
    #[error("kafka: {op}: {source}")]
    Kafka {
        /// What was being done.
        op: &'static str,
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// The broker refused to create a topic.
    #[error("kafka: creating topic {topic:?}: {code}")]
    CreateTopic {
        topic: String,
        code: RDKafkaErrorCode,
    },
    /// One or more produced records were not acknowledged by the broker.
    #[error("kafka: delivery to {topic:?} failed for {failed} of {total} record(s); first error: {first}")]
    Delivery {
        topic: String,
        failed: usize,
        total: usize,
        first: rdkafka::error::KafkaError,
    },
    /// An error that retrying cannot fix (authorization, fatal client state, ...).
    #[error("kafka: fatal error: {0}")]
    Fatal(String),
    /// Something did not happen in time.
    #[error("kafka: timed out after {waited:?} waiting for {what}")]
    Timeout { what: String, waited: Duration },
    /// The caller passed something this crate cannot act on.
    #[error("kafka: invalid argument: {0}")]
    InvalidArgument(String),
}

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn kafka(op: &'static str) -> impl FnOnce(rdkafka::error::KafkaError) -> Error {
        move |source| Error::Kafka { op, source }
    }
}

fn default_brokers() -> String {
    "127.0.0.1:9092".to_string()
}
fn default_topic() -> String {
    "documents".to_string()
}
fn default_dlq_topic() -> String {
    "documents.dlq".to_string()
}
fn default_group_id() -> String {
    "freshet-pipeline".to_string()
}

/// Where the broker is and which topics and group freshet uses. `Debug` prints the value of a
/// property that holds a secret (`sasl.password`, `ssl.key.password`, `sasl.jaas.config`, …) as
/// `<redacted>`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KafkaConfig {
    /// `bootstrap.servers`: comma-separated `host:port` list.
    pub brokers: String,
    /// Topic of document change events.
    pub topic: String,
    /// Dead-letter topic for records that cannot be processed.
    pub dlq_topic: String,
    /// Consumer group under which the pipeline commits its offsets.
    pub group_id: String,
    /// Extra librdkafka properties passed through to every client this crate creates (they
    /// override this crate's defaults, except the few a client needs to be correct, such as
    /// `enable.auto.commit=false` on readers).
    pub client_properties: BTreeMap<String, String>,
    /// Extra librdkafka properties for the pipeline's readers only, on top of
    /// `client_properties`. The local scripts set `fetch.min.bytes` here for tansu (see
    /// `deploy/start-pipeline.sh`).
    pub consumer_properties: BTreeMap<String, String>,
}

/// Whether a librdkafka property's value is a secret (or can hold one).
fn secret_property(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    [
        "password",
        "secret",
        "jaas",
        "token",
        "ssl.key.pem",
        "ssl_key",
        "credentials",
    ]
    .iter()
    .any(|s| n.contains(s))
}

/// Properties with secret values redacted, for `Debug`.
struct Redacted<'a>(&'a BTreeMap<String, String>);

impl std::fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(k, v)| {
                let v = if secret_property(k) {
                    "<redacted>"
                } else {
                    v.as_str()
                };
                (k, v)
            }))
            .finish()
    }
}

impl std::fmt::Debug for KafkaConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let KafkaConfig {
            brokers,
            topic,
            dlq_topic,
            group_id,
            client_properties,
            consumer_properties,
        } = self;
        f.debug_struct("KafkaConfig")
            .field("brokers", brokers)
            .field("topic", topic)
            .field("dlq_topic", dlq_topic)
            .field("group_id", group_id)
            .field("client_properties", &Redacted(client_properties))
            .field("consumer_properties", &Redacted(consumer_properties))
            .finish()
    }
}

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig {
            brokers: default_brokers(),
            topic: default_topic(),
            dlq_topic: default_dlq_topic(),
            group_id: default_group_id(),
            client_properties: BTreeMap::new(),
            consumer_properties: BTreeMap::new(),
        }
    }
}

impl KafkaConfig {
    /// A default configuration pointing at `brokers`.
    pub fn with_brokers(brokers: impl Into<String>) -> Self {
        KafkaConfig {
            brokers: brokers.into(),
            ..KafkaConfig::default()
        }
    }
}

/// One record as read from a partition. Key and value are raw bytes; `None` is a Kafka null
/// (a `None` value is a tombstone).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Record {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    /// Headers in wire order; a header may repeat.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    /// Record timestamp (create or log-append time), milliseconds since the Unix epoch.
    pub timestamp_ms: Option<i64>,
}

impl Record {
    /// The value of the first header named `name` (`Some(None)` for a header with a null value).
    pub fn header(&self, name: &str) -> Option<Option<&[u8]>> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_deref())
    }
}

/// The partitions worker `worker` of `workers` reads: those `p` with `p % workers == worker`,
/// in ascending order.
pub fn partitions_for_worker(all: &[i32], worker: usize, workers: usize) -> Vec<i32> {
    assert!(workers > 0, "workers must be positive");
    let mut mine: Vec<i32> = all
        .iter()
        .copied()
        .filter(|p| (*p as i64).rem_euclid(workers as i64) == worker as i64)
        .collect();
    mine.sort_unstable();
    mine.dedup();
    mine
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_and_partial_toml_like_json() {
        let cfg: KafkaConfig = serde_json::from_str(r#"{"brokers":"h:1"}"#).unwrap();
        assert_eq!(cfg.brokers, "h:1");
        assert_eq!(cfg.topic, "documents");
        assert_eq!(cfg.dlq_topic, "documents.dlq");
        assert_eq!(cfg.group_id, "freshet-pipeline");
        assert!(cfg.client_properties.is_empty());
        assert_eq!(
            serde_json::from_str::<KafkaConfig>("{}").unwrap(),
            KafkaConfig::default()
        );
        assert!(serde_json::from_str::<KafkaConfig>(r#"{"brokerz":"x"}"#).is_err());
    }

    #[test]
    fn debug_never_shows_a_secret_property() {
        let cfg: KafkaConfig = serde_json::from_str(
            r#"{"client_properties": {"sasl.password": "pw-s3cret", "sasl.username": "u",
                "sasl.jaas.config": "x password=\"jaas-s3cret\";", "ssl.key.password": "k-s3cret"},
                "consumer_properties": {"sasl.oauthbearer.client.secret": "oauth-s3cret"}}"#,
        )
        .unwrap();
        let shown = format!("{cfg:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(
            shown.contains("\"sasl.username\": \"u\"") && shown.contains("<redacted>"),
            "{shown}"
        );
    }

    #[test]
    fn clients_can_move_between_threads() {
        fn send<T: Send>() {}
        fn send_sync<T: Send + Sync>() {}
        send::<PartitionReader>();
        send_sync::<DocumentProducer>();
        send_sync::<DlqProducer>();
        send_sync::<Error>();
    }

    #[test]
    fn worker_partition_split() {
        let all = [0, 1, 2, 3, 4];
        assert_eq!(partitions_for_worker(&all, 0, 2), vec![0, 2, 4]);
        assert_eq!(partitions_for_worker(&all, 1, 2), vec![1, 3]);
        assert_eq!(partitions_for_worker(&all, 2, 3), vec![2]);
        assert!(partitions_for_worker(&all, 5, 6).is_empty());
    }

    /// What a replay strips from a dead letter is what the producer put there.
    #[test]
    fn a_dead_letter_opens_with_the_failure_headers() {
        let original = Record {
            topic: "docs".into(),
            partition: 2,
            offset: 9,
            key: Some(b"k".to_vec()),
            value: None,
            headers: vec![("content-type".into(), Some(b"x".to_vec()))],
            timestamp_ms: None,
        };
        let failure = Failure {
            class: "malformed_json",
            stage: "decode",
            message: "m",
        };
        let headers = producer::dlq_header_list(&original, &failure, 5);
        let names: Vec<&str> = headers.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names[..7], dlq_headers::FAILURE);
        assert_eq!(headers[7..], original.headers);
    }

    #[test]
    fn record_header_lookup() {
        let r = Record {
            topic: "t".into(),
            partition: 0,
            offset: 1,
            key: None,
            value: None,
            headers: vec![("a".into(), Some(b"1".to_vec())), ("n".into(), None)],
            timestamp_ms: None,
        };
        assert_eq!(r.header("a"), Some(Some(&b"1"[..])));
        assert_eq!(r.header("n"), Some(None));
        assert_eq!(r.header("x"), None);
    }
}
