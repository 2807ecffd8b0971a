//! The commit payload: what the pipeline needs to resume exactly where the index left off.

use std::collections::BTreeMap;

use freshet_operators::clock::now_ms;
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
}

impl CommitPayload {
    /// A payload of the current schema version stamped with the current time.
    pub fn new(offsets: BTreeMap<String, BTreeMap<i32, i64>>, epoch: u64) -> Self {
        CommitPayload {
            schema_version: SCHEMA_VERSION,
            offsets,
            epoch,
            committed_at_ms: now_ms(),
        }
    }

    pub(crate) fn encode(&self) -> Result<String> {
        serde_json::to_string(self).map_err(|e| Error::Payload(e.to_string()))
    }

    pub(crate) fn decode(raw: &str) -> Result<Self> {
        serde_json::from_str(raw).map_err(|e| Error::Payload(format!("{e} in {raw:?}")))
    }
}
