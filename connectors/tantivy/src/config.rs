//! [`TantivyConfig`]: the `[tantivy]` section, read by the pipeline (which writes the index) and
//! the query node (which reads it).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The tantivy index the pipeline writes and the query node reads.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TantivyConfig {
    /// Index directory. Default `index/tantivy` under the local stack's state directory
    /// (`$FRESHET_RUN_DIR`, else `$FRESHET_HOME/run`: [`freshet_config::run_dir`]).
    pub path: PathBuf,
    /// Writer memory budget in bytes (split over the threads, at least 15 MB each).
    pub writer_heap_bytes: usize,
    /// Indexing threads. Each commit writes one segment per thread that received documents,
    /// at a fixed cost per segment; the pipeline commits a few chunks at a time, so one thread
    /// is cheapest (see `ChunkIndexWriter::open_or_create_with_threads`). More help only bulk
    /// loads whose chunks come from the embedding cache.
    pub writer_threads: usize,
    /// The Japanese dictionary: a directory of lindera's IPADIC build (`deploy/install.sh`
    /// builds it; `freshet-tools ja-dict`). Default `dict/ipadic` under `$FRESHET_HOME`. Loaded
    /// at start-up; a missing or unreadable one stops the process with what to do. Empty: no
    /// dictionary, Japanese indexed as character bigrams (a warning at start-up). An index
    /// records which of the two it was written with and is refused by a process with the other.
    pub ja_dictionary: PathBuf,
}

impl TantivyConfig {
    /// Settles this process's Japanese analysis from [`TantivyConfig::ja_dictionary`]
    /// ([`crate::configure_japanese`]); call it at start-up, before opening an index.
    pub fn configure_japanese(&self) -> crate::Result<crate::JapaneseAnalysis> {
        crate::configure_japanese(&self.ja_dictionary)
    }
}

impl Default for TantivyConfig {
    fn default() -> Self {
        TantivyConfig {
            path: freshet_config::run_dir().join("index").join("tantivy"),
            writer_heap_bytes: 64 * 1024 * 1024,
            writer_threads: 1,
            ja_dictionary: crate::default_ja_dictionary(),
        }
    }
}
