//! Change-data-capture records as pipeline input: how a topic's records are read
//! ([`RecordFormat`]), and Debezium's change events ([`debezium`]) mapped to documents by a
//! [`DebeziumMapping`] ([`mapping`]). `docs/cdc.md` is the user's reference.

pub mod debezium;
pub mod mapping;

#[cfg(test)]
mod tests;

pub use mapping::{DebeziumMapping, NullAcl};

use crate::document::Change;
use crate::envelope::{self, DecodeError};
use crate::limits::RecordLimits;

/// How the records of one topic are read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum RecordFormat {
    /// freshet's document envelope ([`crate::envelope`]).
    #[default]
    Freshet,
    /// Debezium change events of one table, mapped to documents.
    Debezium(DebeziumMapping),
}

impl RecordFormat {
    /// Decodes one record: `Ok(None)` when it changes no document (a Debezium message event,
    /// or a tombstone whose key does not name a document).
    pub fn decode(
        &self,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        limits: &RecordLimits,
    ) -> Result<Option<Change>, DecodeError> {
        match self {
            RecordFormat::Freshet => envelope::decode(key, value, limits).map(Some),
            RecordFormat::Debezium(m) => debezium::decode(m, key, value, limits),
        }
    }

    /// The document a record names even when it cannot be decoded, which a rejection of the
    /// record deletes.
    pub fn named_document(
        &self,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        limits: &RecordLimits,
    ) -> Option<String> {
        match self {
            RecordFormat::Freshet => crate::intake::named_document(key, value, limits),
            RecordFormat::Debezium(m) => debezium::named_document(m, key, value, limits),
        }
    }
}
