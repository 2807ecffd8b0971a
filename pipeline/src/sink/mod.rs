//! The sink stage: one operator (on worker 0) that hands complete epochs to a writer thread,
//! which applies them to Milvus and then to tantivy, whose commit carries the Kafka offsets it
//! reflects. The operator holds the capability of every epoch until that epoch is durable in both
//! indexes, so a probe after it tells every worker which offsets it may commit.
//!
//! Every index and topic the sink writes has the same shape (after Vector's sinks): a request
//! built from the batch, a [`Service`] doing the I/O, and one thin driver over them.
//!
//! - [`operator`]: the timely operator and the writer thread.
//! - [`plan`]: epochs collapsed into what each document needs (pure, model-tested).
//! - [`apply`]: the driver, [`apply_epochs`]: a sequence of named steps over the services.
//! - [`refusals`]: the document versions an index refuses, which are removed and dead-lettered.
//! - [`vectors`]: Milvus rows written and removed ([`vectors::VectorWriter`]), each write noted
//!   beforehand ([`pending`]).
//! - [`dead_letters`]: refused records on the dead-letter topic, each once
//!   ([`dead_letters::DeadLetters`]).
//! - [`receipts`]: the delete receipts of the documents a batch removes, recorded with its
//!   commit.
//! - [`changelog`]: the batch's chunk changes and its marker on the changelog topic for query
//!   replicas ([`changelog::Changelog`]).
//! - [`text`]: the tantivy commit carrying the offsets, read back and repaired ([`verify`])
//!   ([`text::TextIndex`]).

mod apply;
pub mod changelog;
mod dead_letters;
mod operator;
pub mod pending;
pub mod plan;
mod receipts;
mod refusals;
mod text;
mod vectors;
pub mod verify;

pub use apply::apply_epochs;
pub use operator::{sink, Fatal, SinkWriter};
pub use refusals::{EMBED_FAILED, MILVUS_REFUSED};

use std::collections::BTreeSet;

use anyhow::{Context, Result};
use freshet_kafka::{DlqProducer, KafkaConfig};
use freshet_milvus::MilvusSink;
use freshet_operators::dataflow::SinkRecord;
use freshet_tantivy::ChunkIndexWriter;
use serde::{Deserialize, Serialize};

use crate::census::LanguageCensus;
use crate::endpoint::Readiness;
use crate::metrics::Metrics;
use crate::stall::Stall;
use dead_letters::DeadLetters;
use text::TextIndex;
use vectors::VectorWriter;

/// What flows into the sink: chunk records, and each worker's read progress for the epoch.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum SinkMsg {
    Record(Box<SinkRecord>),
    Progress {
        next_offsets: plan::Offsets,
        timestamps_ms: Vec<i64>,
        /// The latest record of each document read in the epoch, so that a version refused
        /// at write time can be dead-lettered as it was read.
        records: Vec<(String, plan::RecordRef)>,
        /// The records refused before the sink, to dead-letter.
        refused: Vec<crate::dlq::Refused>,
        /// The records that asked for their document's removal, for its delete receipt.
        #[serde(default)]
        removals: Vec<plan::RemovalAsked>,
    },
}

/// The shape of every service the driver writes through (Vector's `tower::Service`, without
/// the asynchrony): one call per request built from the batch. A service does the I/O of its
/// index or topic, retries a failure that is not about one record through the
/// [`crate::stall`] policy, and counts what it wrote in the [`Metrics`].
pub trait Service<Request> {
    type Response;

    fn call(&mut self, request: Request) -> Result<Self::Response>;
}

/// What the sink writes to, opened by [`crate::preflight`].
pub struct Indexes {
    pub tantivy: ChunkIndexWriter,
    pub milvus: MilvusSink,
    /// The runtime the Milvus client runs on.
    pub runtime: tokio::runtime::Runtime,
}

/// The sink's services and what the driver keeps from one batch to the next, owned by the
/// writer thread.
pub struct Sinks {
    vectors: VectorWriter,
    dead_letters: DeadLetters,
    text: TextIndex,
    /// The changelog for query replicas (`[replication]`), if any.
    changelog: Option<changelog::Changelog>,
    /// The topics read, by index ([`plan::TopicPartition::topic`]).
    topics: Vec<String>,
    /// Offsets already durable (from the last tantivy commit), updated as epochs commit.
    offsets: plan::Offsets,
    /// Documents removed from the indexes after a refusal whose refused version the dataflow
    /// still holds: their next version is written whole (see [`plan`]). Empty after a restart,
    /// whose state comes from the indexes.
    lost: BTreeSet<String>,
    /// The index's chunks by language ([`crate::census`]).
    census: LanguageCensus,
    metrics: Metrics,
}

impl Sinks {
    /// These sinks, keeping `census` (built from the index at start) up to date with each
    /// commit; without one, chunks are counted from the first commit on and never warned about.
    pub fn with_census(mut self, census: LanguageCensus) -> Sinks {
        self.census = census;
        self
    }

    /// These sinks, publishing every commit's changes to `changelog` (brought to the last
    /// commit by [`changelog::Changelog::recover`]).
    pub fn with_changelog(mut self, changelog: changelog::Changelog) -> Sinks {
        self.changelog = Some(changelog);
        self
    }

    /// The sinks of process 0: the `indexes` opened and reconciled, the dead letters written
    /// since the last commit (`dead_letters`, [`crate::dlq::already_sent`]), the durable
    /// `offsets` of the last commit, and `stall`, the retry policy of every write.
    pub fn new(
        kafka: &KafkaConfig,
        topics: Vec<String>,
        indexes: Indexes,
        dead_letters: crate::dlq::Scan,
        offsets: plan::Offsets,
        stall: Stall,
        metrics: &Metrics,
    ) -> Result<Sinks> {
        let producer = DlqProducer::new(kafka)
            .context("creating the DLQ producer")?
            .with_metrics(metrics.dead_letters.clone());
        let Indexes {
            tantivy,
            milvus,
            runtime,
        } = indexes;
        Ok(Sinks {
            vectors: VectorWriter::new(
                milvus,
                runtime,
                tantivy.path().to_path_buf(),
                stall.clone(),
                metrics.clone(),
            )?,
            dead_letters: DeadLetters::new(
                producer,
                kafka.clone(),
                topics.clone(),
                dead_letters,
                stall.clone(),
                metrics.clone(),
            ),
            text: TextIndex::new(tantivy, stall, metrics.clone()),
            changelog: None,
            topics,
            offsets,
            lost: BTreeSet::new(),
            census: LanguageCensus::new(None, 0.0, metrics.clone(), Readiness::new()),
            metrics: metrics.clone(),
        })
    }
}
