//! The watcher's [`Outlet`] on Kafka: records to the document topic with the idempotent,
//! `acks=all` producer; refused files to the dead-letter topic with their path and reason.

use freshet_kafka::{DlqProducer, DocumentProducer, Failure, Record};

use crate::publish::Outgoing;
use crate::watch::sync::{DeadFile, Outlet};
use crate::Result;

/// The header naming a refused file's path.
pub const PATH_HEADER: &str = "freshet.source.path";

pub struct KafkaOutlet {
    pub producer: DocumentProducer,
    pub dlq: DlqProducer,
    pub topic: String,
}

impl Outlet for KafkaOutlet {
    fn publish(&mut self, records: &[Outgoing]) -> Result<Vec<(i32, i64)>> {
        let placed = self.producer.send_placed(
            &self.topic,
            records
                .iter()
                .map(|o| (o.id.clone().into_bytes(), o.value.clone())),
        )?;
        Ok(placed)
    }

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
