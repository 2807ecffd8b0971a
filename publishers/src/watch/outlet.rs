//! The watcher's [`Outlet`] on Kafka: records to the document topic with the idempotent,
//! `acks=all` producer; refused files to the dead-letter topic with their path and reason.

use freshet_kafka::{DlqProducer, DocumentRecord, Failure, Placed, Produce, Record, TopicProducer};

use crate::watch::sync::{DeadFile, Outlet};
use crate::Result;

/// The header naming a refused file's path.
pub const PATH_HEADER: &str = "freshet.source.path";

pub struct KafkaOutlet {
    pub producer: TopicProducer,
    pub dlq: DlqProducer,
}

impl Produce for KafkaOutlet {
    fn topic(&self) -> &str {
        self.producer.topic()
    }

    fn produce(&self, records: &[DocumentRecord]) -> freshet_kafka::Result<Vec<Placed>> {
        self.producer.produce(records)
    }
}

impl Outlet for KafkaOutlet {
    fn dead_letter(&mut self, file: &DeadFile) -> Result<()> {
        // Not a record of a topic: the source is the file (topic `file`, no partition/offset).
        let record = Record {
            topic: "file".into(),
            partition: -1,
            offset: -1,
            key: Some(file.id.clone().into_bytes()),
            value: None,
            headers: vec![(
                PATH_HEADER.into(),
                Some(file.path.to_string_lossy().into_owned().into_bytes()),
            )],
            timestamp_ms: None,
        };
        let failure = Failure {
            class: file.class,
            stage: "source",
            message: &file.reason,
        };
        self.dlq.send(&record, &failure)?;
        Ok(())
    }
}
