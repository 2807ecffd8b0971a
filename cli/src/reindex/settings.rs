//! `[reindex]`: where the serving pointer is, the Milvus alias moved with it, and how far
//! behind the topics a generation may be when it is switched to (docs/reindex.md).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReindexConfig {
    /// The serving pointer file the query nodes follow (their `[query] serving_pointer`).
    pub pointer: PathBuf,
    /// A Milvus alias pointed at the collection of the generation served, for tools outside
    /// freshet ("" = none). It must not be any collection's name.
    pub alias: String,
    /// The most records a generation may be behind the ends of its topics when it is switched
    /// to (0: it holds every record published before the switch began).
    pub max_lag: u64,
    /// A switch needs a passed verdict of `freshet-tools gate` for the generation (`--gate`).
    pub require_gate: bool,
}

impl Default for ReindexConfig {
    fn default() -> Self {
        ReindexConfig {
            pointer: PathBuf::new(),
            alias: String::new(),
            max_lag: 0,
            require_gate: true,
        }
    }
}
