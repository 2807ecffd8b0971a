//! freshet publishers: documents written onto the document topic from files, folders and JSONL,
//! as records of the document contract (`freshet_operators::envelope`), with the Kafka
//! connector's producer. (The pipeline's source is the reader of that topic.)
//!
//! * [`publish_jsonl`]: a JSONL file whose lines are document envelopes or BEIR corpus lines.
//! * [`watch`]: folder sync, the directories' files kept on the topic from events, durably.
//! * [`publish_dir`]: a directory tree of `.md`/`.markdown`/`.txt`/`.html`/`.htm` files, each a
//!   document keyed by its relative path, titled by its own text
//!   (`freshet_operators::title`).
//! * [`acl`]: which ACL each document gets (path-glob rules, `--acl`, `--public`), and the
//!   `[files]` settings.
//!
//! Files are read through [`read_file`]: regular files only (a FIFO, socket or device is never
//! opened for a blocking read), at most their size limit, and not through a symlink that leaves
//! the directories unless `[files] follow_symlinks_outside_roots` says so.
//!
//! These publishers build envelopes; they check them no further than keying the record needs (`op`
//! and `id`): decoding and validation are the operators' job, and a bad envelope ends in the
//! dead-letter topic there. A line or file that cannot be turned into a record is reported in
//! [`PublishReport::bad`] and skipped; I/O errors on the input itself and delivery failures are
//! errors.

pub mod acl;
mod file_envelope;
mod files;
mod jsonl;
mod publish;
mod read;
pub mod watch;

pub use acl::{AclRuleConfig, FileAcls, FilesConfig};
pub use file_envelope::{file_envelope, FileFields, NotUtf8};
pub use files::{content_type_for, file_bytes_document, file_document, list_files, publish_dir};
pub use jsonl::{map_jsonl_line, publish_jsonl};
pub use publish::{upsert_record, BadInput, JsonlFormat, Mapping, PublishReport};
pub use read::{read_file, Unread};

use std::path::PathBuf;

/// What can go wrong publishing.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Kafka(#[from] freshet_kafka::Error),
    /// The watcher's state file cannot be used.
    #[error("watch state {path}: {message}")]
    State { path: PathBuf, message: String },
    /// A setting or the environment does not allow the publisher to run.
    #[error("{0}")]
    Config(String),
}

pub type Result<T> = std::result::Result<T, Error>;
