//! The commit payload: what the pipeline needs to resume exactly where the index left off.

use std::collections::BTreeMap;

use freshet_core::clock::now_ms;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::schema::SCHEMA_VERSION;

/// Stored (as JSON) in tantivy's commit payload with every commit, atomically with the index
/// contents of that commit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitPayload {
    /// Must equal [`SCHEMA_VERSION`] (checked on commit).
    pub schema_version: u32,
    /// topic -> partition -> next offset to read.
    pub offsets: BTreeMap<String, BTreeMap<i32, i64>>,
    /// Pipeline epoch (e.g. timely frontier / batch counter) of this commit.
    pub epoch: u64,
    /// Wall clock of the commit, milliseconds since the Unix epoch.
    pub committed_at_ms: u64,
    /// Dead-letter topic partition -> the offset after the last dead letter the pipeline had
    /// written when it made this commit: the dead letters from there on are those written
    /// since, for records this commit does not cover yet.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub dead_letters_next: BTreeMap<i32, i64>,
    /// The id that binds this index to its Milvus collection (the collection holds it too), set
    /// once when the pipeline first opens the index; `None` leaves the index's id as it is
    /// ([`crate::ChunkIndexWriter::commit`] carries it forward).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index_id: Option<String>,
    /// tantivy's opstamp of this commit, set by [`crate::ChunkIndexWriter::commit`]: the
    /// delete receipts of this commit and those before it are the ones at or below it
    /// ([`crate::receipts`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opstamp: Option<u64>,
    /// The changelog records this commit reflects: those below this offset of the changelog
    /// topic's one partition (`docs/replicas.md`). The pipeline's commit holds the offset after
    /// the batch's last change; a replica's the offset after the batch marker it committed at,
    /// where it reads on from. `None`: no changelog.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changelog_next: Option<i64>,
}

impl CommitPayload {
    /// A payload of the current schema version stamped with the current time.
    pub fn new(offsets: BTreeMap<String, BTreeMap<i32, i64>>, epoch: u64) -> Self {
        CommitPayload {
            schema_version: SCHEMA_VERSION,
            offsets,
            epoch,
            committed_at_ms: now_ms(),
            dead_letters_next: BTreeMap::new(),
            index_id: None,
            opstamp: None,
            changelog_next: None,
        }
    }

    pub(crate) fn encode(&self) -> Result<String> {
        serde_json::to_string(self).map_err(|e| Error::Payload(e.to_string()))
    }

    pub(crate) fn decode(raw: &str) -> Result<Self> {
        serde_json::from_str(raw).map_err(|e| Error::Payload(format!("{e} in {raw:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dead_letter_marks_round_trip_and_older_payloads_read_without_them() {
        let mut p = CommitPayload::new(
            BTreeMap::from([("docs".into(), BTreeMap::from([(0, 5)]))]),
            3,
        );
        assert!(!p.encode().unwrap().contains("dead_letters_next"));
        p.dead_letters_next = BTreeMap::from([(0, 17)]);
        assert_eq!(CommitPayload::decode(&p.encode().unwrap()).unwrap(), p);
        let old =
            r#"{"schema_version":3,"offsets":{"docs":{"0":5}},"epoch":3,"committed_at_ms":1}"#;
        assert!(CommitPayload::decode(old)
            .unwrap()
            .dead_letters_next
            .is_empty());
    }

    #[test]
    fn the_changelog_position_round_trips_and_older_payloads_have_none() {
        let mut p = CommitPayload::new(BTreeMap::new(), 1);
        assert!(!p.encode().unwrap().contains("changelog_next"));
        p.changelog_next = Some(42);
        assert_eq!(CommitPayload::decode(&p.encode().unwrap()).unwrap(), p);
        let old = r#"{"schema_version":3,"offsets":{},"epoch":3,"committed_at_ms":1}"#;
        assert_eq!(CommitPayload::decode(old).unwrap().changelog_next, None);
    }

    #[test]
    fn the_index_id_round_trips_and_older_payloads_have_none() {
        let mut p = CommitPayload::new(BTreeMap::new(), 1);
        assert!(!p.encode().unwrap().contains("index_id"));
        p.index_id = Some("0b5c".into());
        assert_eq!(CommitPayload::decode(&p.encode().unwrap()).unwrap(), p);
        let old = r#"{"schema_version":3,"offsets":{},"epoch":3,"committed_at_ms":1}"#;
        assert_eq!(CommitPayload::decode(old).unwrap().index_id, None);
    }
}
