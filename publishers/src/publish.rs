//! How records are built and sent: what input maps to ([`Mapping`]), what a publish did
//! ([`PublishReport`], the inputs skipped as [`BadInput`]), the record of a built document
//! ([`upsert_record`]), and the batching every publish shares.

use std::path::PathBuf;

use freshet_kafka::{DocumentRecord, Op, Produce};
use freshet_operators::document::{Change, Document};
use freshet_operators::envelope::{encode_stating, Acl};

use crate::acl::FileAcls;
use crate::Result;

/// Which kind of JSONL line to expect.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum JsonlFormat {
    /// Per line: an object with `op` is an envelope, an object with `_id` is a BEIR line.
    #[default]
    Auto,
    /// Every line is a document envelope.
    Envelope,
    /// Every line is a BEIR corpus line (`{"_id","title","text","metadata"}`).
    Beir,
}

/// How input is turned into documents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// The expected kind of JSONL line (ignored by [`publish_dir`]).
    pub format: JsonlFormat,
    /// `source` of built documents; default `beir:<file stem>` for BEIR lines and
    /// `file://<relative path>` for files. Envelopes are never changed.
    pub source: Option<String>,
    /// The ACL of each document by its id ([`crate::acl`]): of built documents (files, BEIR
    /// lines), and of envelopes that state none.
    pub acl: FileAcls,
    /// How many records are produced in flight at a time.
    pub batch_size: usize,
    /// Larger files are not read ([`crate::publish_dir`]: reported and skipped).
    pub max_file_bytes: u64,
    /// Follow symlinks whose targets resolve outside the directory (`[files]`).
    pub follow_symlinks_outside_roots: bool,
}

impl Default for Mapping {
    fn default() -> Self {
        Mapping {
            format: JsonlFormat::Auto,
            source: None,
            acl: FileAcls::default(),
            batch_size: 1000,
            max_file_bytes: 8 << 20,
            follow_symlinks_outside_roots: false,
        }
    }
}

/// What a publish call did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PublishReport {
    /// Records written (upserts + deletes).
    pub published: usize,
    pub upserts: usize,
    pub deletes: usize,
    /// Inputs skipped, in input order.
    pub bad: Vec<BadInput>,
}

/// An input line or file that was skipped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadInput {
    pub path: PathBuf,
    /// 1-based line number for JSONL input; `None` for a whole file.
    pub line: Option<usize>,
    pub reason: String,
}

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(n) => write!(f, "{}:{n}: {}", self.path.display(), self.reason),
            None => write!(f, "{}: {}", self.path.display(), self.reason),
        }
    }
}

/// The record of an upsert of `doc` with the ACL `acl` (its principals, `"public"`, or none
/// stated), keyed by its id.
pub fn upsert_record(mut doc: Document, acl: &Acl) -> DocumentRecord {
    doc.acl = match acl {
        Acl::Principals(p) => p.clone(),
        Acl::Public | Acl::Unstated => Vec::new(),
    };
    let value = encode_stating(&Change::Upsert(doc.clone()), *acl == Acl::Public);
    DocumentRecord::upsert(doc.id, value)
}

/// Collects records and produces them in batches.
pub(crate) struct Batcher<'a> {
    producer: &'a dyn Produce,
    batch_size: usize,
    pending: Vec<DocumentRecord>,
    report: PublishReport,
}

impl<'a> Batcher<'a> {
    pub(crate) fn new(producer: &'a dyn Produce, batch_size: usize) -> Self {
        Batcher {
            producer,
            batch_size: batch_size.max(1),
            pending: Vec::new(),
            report: PublishReport::default(),
        }
    }

    pub(crate) fn add(&mut self, out: DocumentRecord) -> Result<()> {
        self.pending.push(out);
        if self.pending.len() >= self.batch_size {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.pending);
        let deletes = batch.iter().filter(|o| o.op == Op::Delete).count();
        let n = batch.len();
        self.producer.produce(&batch)?;
        self.report.published += n;
        self.report.deletes += deletes;
        self.report.upserts += n - deletes;
        Ok(())
    }

    pub(crate) fn finish(mut self) -> Result<PublishReport> {
        self.flush()?;
        Ok(self.report)
    }
}
