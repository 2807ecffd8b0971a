//! Bringing the topic in line with the files: for a set of changed paths (or a whole root),
//! compare what is on disk with the [`State`] and publish exactly the difference. A file whose
//! size and times are unchanged, and whose ACL rule gives what its last upsert carried, is not
//! read; one whose bytes hash to what was published with that ACL is not re-sent (a changed
//! ACL mapping re-sends exactly the files whose ACL it changes); a file or directory that is
//! gone deletes every document below it. Records are
//! produced in batches, each batch acknowledged before the state records it.

use std::collections::HashSet;
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::files::file_bytes_document;
use freshet_kafka::{DocumentRecord, Op, Produce};

use crate::publish::Mapping;
use crate::read::{read_file, Unread};
use crate::watch::state::{Entry, State};
use crate::watch::tree::Tree;
use crate::Result;

/// A batch is produced once it holds this many records or bytes.
const BATCH_RECORDS: usize = 256;
const BATCH_BYTES: usize = 32 << 20;

/// A file refused before it reached the topic: it goes to the dead-letter topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadFile {
    pub id: String,
    pub path: PathBuf,
    /// `file_too_large`, `unreadable` or `not_utf8`.
    pub class: &'static str,
    pub reason: String,
}

/// Where the watcher's records go: produced to the document topic ([`Produce`]), and refused
/// files to the dead-letter topic.
pub trait Outlet: Produce {
    /// Sends a refused file to the dead-letter topic and waits for the acknowledgement.
    fn dead_letter(&mut self, file: &DeadFile) -> Result<()>;
}

/// What a sync did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyncReport {
    pub upserts: usize,
    pub deletes: usize,
    pub dead_letters: usize,
    /// Files looked at and found as they were.
    pub unchanged: usize,
    /// Files whose times changed but whose bytes did not: recorded, not published.
    pub touched: usize,
    /// Every root was compared (a start, or a lost event queue), not just some paths.
    pub full: bool,
    /// How long the sync took: reading, producing, the acknowledgements, the state.
    pub elapsed: Duration,
}

impl SyncReport {
    pub fn published(&self) -> usize {
        self.upserts + self.deletes
    }

    fn add(&mut self, o: &SyncReport) {
        self.upserts += o.upserts;
        self.deletes += o.deletes;
        self.dead_letters += o.dead_letters;
        self.unchanged += o.unchanged;
        self.touched += o.touched;
    }
}

/// What one file needs.
enum Step {
    Unchanged,
    /// Same bytes, new times.
    Touch(Entry),
    Upsert(DocumentRecord, Entry),
    /// Gone (or no longer a document).
    Gone,
    Dead(DeadFile, Entry),
}

/// One id's change, waiting for its batch to be acknowledged.
struct Pending {
    id: String,
    record: Option<DocumentRecord>,
    dead: Option<DeadFile>,
    entry: Option<Entry>,
}

/// The state, the tree and the outlet, and the batch being built.
pub struct Syncer<O: Outlet> {
    tree: Tree,
    state: State,
    outlet: O,
    mapping: Mapping,
    pending: Vec<Pending>,
    pending_bytes: usize,
    report: SyncReport,
}

impl<O: Outlet> Syncer<O> {
    pub fn new(tree: Tree, state: State, outlet: O, mapping: Mapping) -> Self {
        Syncer {
            tree,
            state,
            outlet,
            mapping,
            pending: Vec::new(),
            pending_bytes: 0,
            report: SyncReport::default(),
        }
    }

    pub fn tree(&self) -> &Tree {
        &self.tree
    }

    pub fn state(&self) -> &State {
        &self.state
    }

    /// Every root: what a start (or a lost event queue) needs.
    pub fn sync_all(&mut self) -> Result<SyncReport> {
        let dirs: Vec<PathBuf> = self.tree.roots.iter().map(|r| r.dir.clone()).collect();
        let report = self.sync_paths(dirs)?;
        Ok(SyncReport {
            full: true,
            ..report
        })
    }

    /// The files and directories at `paths` (existing or not), each with everything below it.
    /// On an error nothing of the unfinished batch is recorded: calling again with the same
    /// paths publishes what is still missing.
    pub fn sync_paths(&mut self, paths: impl IntoIterator<Item = PathBuf>) -> Result<SyncReport> {
        let started = Instant::now();
        self.pending.clear();
        self.pending_bytes = 0;
        self.report = SyncReport::default();
        let mut total = SyncReport::default();
        let mut seen: HashSet<String> = HashSet::new();
        for path in paths {
            let Some((_, id)) = self.tree.locate(&path) else {
                continue;
            };
            let present = self.tree.files_under(&path);
            let mut here = HashSet::with_capacity(present.len());
            for (file_id, file) in present {
                here.insert(file_id.clone());
                if seen.insert(file_id.clone()) {
                    let step = self.check(&file_id, &file);
                    self.push(file_id, step, &mut total)?;
                }
            }
            for known in self.state.ids_under(&id) {
                if !here.contains(&known) && seen.insert(known.clone()) {
                    self.push(known, Step::Gone, &mut total)?;
                }
            }
        }
        self.flush(&mut total)?;
        total.elapsed = started.elapsed();
        Ok(total)
    }

    /// Compares one file with its entry.
    fn check(&self, id: &str, path: &Path) -> Step {
        let known = self.state.get(id);
        let acl = self.mapping.acl.for_id(id);
        // The same ACL as its last upsert (a refused file carried none).
        let same_acl = |k: &Entry| k.rejected || k.acl == *acl;
        let dead = |class, reason: String, entry: Entry| {
            let file = DeadFile {
                id: id.to_string(),
                path: path.to_path_buf(),
                class,
                reason,
            };
            Step::Dead(file, entry)
        };
        let (size, mtime_ns, ctime_ns) = match stat(path) {
            Ok(s) => s,
            Err(e) if e.kind() == ErrorKind::NotFound => return Step::Gone,
            Err(e) => return dead("unreadable", e.to_string(), Entry::unread(0, 0, 0)),
        };
        if known.is_some_and(|k| k.same_stat(size, mtime_ns, ctime_ns) && same_acl(k)) {
            return Step::Unchanged;
        }
        let mut entry = Entry::unread(size, mtime_ns, ctime_ns);
        entry.acl = acl.clone();
        let max = self.tree.filter.max_file_bytes;
        let bytes = match read_file(path, max, self.tree.allowed_dirs().as_deref()) {
            Ok(b) => b,
            Err(Unread::Gone) => return Step::Gone,
            // Not a document (the walk saw it as one a moment ago): what was indexed goes.
            Err(e @ (Unread::NotRegular(_) | Unread::OutsideRoots(_))) => {
                tracing::warn!(path = %path.display(), reason = %e, "not a document");
                return Step::Gone;
            }
            Err(e @ Unread::TooLarge { .. }) => {
                return dead("file_too_large", e.to_string(), entry)
            }
            Err(e @ Unread::Io(_)) => return dead("unreadable", e.to_string(), entry),
        };
        entry.size = bytes.len() as u64;
        entry.hash = blake3::hash(&bytes).to_hex().to_string();
        if let Some(k) = known.filter(|k| k.hash == entry.hash && same_acl(k)) {
            entry.placed = k.placed;
            entry.rejected = k.rejected;
            return Step::Touch(entry);
        }
        match file_bytes_document(id, path, bytes, &self.mapping) {
            Ok(out) => Step::Upsert(out, entry),
            Err(reason) => dead("not_utf8", reason, entry),
        }
    }

    fn push(&mut self, id: String, step: Step, total: &mut SyncReport) -> Result<()> {
        let known = self.state.get(&id);
        // A document that is in the indexes: a gone or refused file must take it out.
        let indexed = known.is_some_and(|k| !k.rejected);
        let tombstone = |id: &String| DocumentRecord::tombstone(id.clone());
        let pending = match step {
            Step::Unchanged => {
                self.report.unchanged += 1;
                return Ok(());
            }
            Step::Touch(entry) => {
                self.report.touched += 1;
                Pending {
                    record: None,
                    dead: None,
                    entry: Some(entry),
                    id,
                }
            }
            Step::Upsert(out, entry) => {
                self.report.upserts += 1;
                self.pending_bytes += out.value.as_ref().map_or(0, Vec::len);
                Pending {
                    record: Some(out),
                    dead: None,
                    entry: Some(entry),
                    id,
                }
            }
            Step::Gone => {
                if known.is_none() {
                    return Ok(());
                }
                if indexed {
                    self.report.deletes += 1;
                }
                Pending {
                    record: indexed.then(|| tombstone(&id)),
                    dead: None,
                    entry: None,
                    id,
                }
            }
            Step::Dead(file, mut entry) => {
                self.report.dead_letters += 1;
                if indexed {
                    self.report.deletes += 1;
                }
                entry.rejected = true;
                Pending {
                    record: indexed.then(|| tombstone(&id)),
                    dead: Some(file),
                    entry: Some(entry),
                    id,
                }
            }
        };
        self.pending.push(pending);
        if self.pending.len() >= BATCH_RECORDS || self.pending_bytes >= BATCH_BYTES {
            self.flush(total)?;
        }
        Ok(())
    }

    /// Dead letters, then the records, each acknowledged; then the state.
    fn flush(&mut self, total: &mut SyncReport) -> Result<()> {
        let mut batch = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        for dead in batch.iter().filter_map(|p| p.dead.as_ref()) {
            tracing::warn!(
                path = %dead.path.display(), class = dead.class, reason = %dead.reason,
                "file to the dead-letter topic"
            );
            self.outlet.dead_letter(dead)?;
        }
        let records: Vec<DocumentRecord> = batch.iter().filter_map(|p| p.record.clone()).collect();
        let placed = if records.is_empty() {
            Vec::new()
        } else {
            self.outlet.produce(&records)?
        };
        let mut placed = placed.into_iter();
        for p in &mut batch {
            if let Some(r) = &p.record {
                let at = placed.next().map(|at| (at.partition, at.offset));
                if let (Op::Upsert, Some(entry)) = (r.op, p.entry.as_mut()) {
                    entry.placed = at;
                }
            }
        }
        self.state
            .apply(batch.into_iter().map(|p| (p.id, p.entry)).collect())?;
        total.add(&self.report);
        self.report = SyncReport::default();
        Ok(())
    }
}

impl Entry {
    fn unread(size: u64, mtime_ns: i64, ctime_ns: i64) -> Entry {
        Entry {
            size,
            mtime_ns,
            ctime_ns,
            hash: String::new(),
            placed: None,
            rejected: false,
            acl: Default::default(),
        }
    }
}

/// Size, mtime and ctime (ns) of the file at `path`, following a symlink.
fn stat(path: &Path) -> std::io::Result<(u64, i64, i64)> {
    use std::os::unix::fs::MetadataExt;
    let m = fs::metadata(path)?;
    let ns = |s: i64, n: i64| s.saturating_mul(1_000_000_000).saturating_add(n);
    Ok((
        m.len(),
        ns(m.mtime(), m.mtime_nsec()),
        ns(m.ctime(), m.ctime_nsec()),
    ))
}
