//! The chunk ids of the rows the sink is about to insert into Milvus, noted in the index
//! directory before each Milvus write. A crash between that write and the tantivy commit
//! leaves exactly these rows in Milvus without their chunks in tantivy; at the next start the
//! reconcile deletes them as expected, while deleting any other row counts against
//! `[pipeline] reconcile_max_delete_share`.
//!
//! Each note replaces the last one (a new file renamed over it). It is not fsync'd: a killed
//! process leaves it in the page cache, and should a machine crash lose it, the rows it named
//! only count as unexplained, so the reconcile refuses rather than deletes.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The file, in the tantivy index directory.
pub const FILE: &str = "freshet-milvus-pending.json";

#[derive(Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Note {
    epoch: u64,
    ids: BTreeSet<String>,
}

fn file(index_dir: &Path) -> PathBuf {
    index_dir.join(FILE)
}

/// Notes `ids` as the rows of the write about to happen for `epoch`.
pub fn note<'a>(
    index_dir: &Path,
    epoch: u64,
    ids: impl IntoIterator<Item = &'a str>,
) -> std::io::Result<()> {
    let note = Note {
        epoch,
        ids: ids.into_iter().map(str::to_string).collect(),
    };
    let path = file(index_dir);
    let tmp = path.with_extension("json.tmp");
    let mut f = std::fs::File::create(&tmp)?;
    serde_json::to_writer(&mut f, &note)?;
    f.flush()?;
    drop(f);
    std::fs::rename(&tmp, &path)
}

/// The ids of the last note if its write came after the index's last commit (`committed`, the
/// commit's epoch); none when its batch was committed, when there is no note or when it cannot
/// be read (then nothing is expected, which errs on the side of refusing a delete).
pub fn read(index_dir: &Path, committed: Option<u64>) -> BTreeSet<String> {
    let path = file(index_dir);
    match std::fs::read(&path) {
        Ok(bytes) => match serde_json::from_slice::<Note>(&bytes) {
            Ok(n) if committed.is_some_and(|c| n.epoch <= c) => BTreeSet::new(),
            Ok(n) => n.ids,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read the note of the last Milvus write; no row counts as expected");
                BTreeSet::new()
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeSet::new(),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read the note of the last Milvus write; no row counts as expected");
            BTreeSet::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_uncommitted_note_counts_and_a_missing_or_broken_one_expects_nothing() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(dir.path(), None).is_empty());
        note(dir.path(), 1, ["a", "b"]).unwrap();
        note(dir.path(), 2, ["c"]).unwrap();
        let c = BTreeSet::from(["c".to_string()]);
        assert_eq!(read(dir.path(), None), c, "an index without a commit");
        assert_eq!(
            read(dir.path(), Some(1)),
            c,
            "written after the last commit"
        );
        assert!(
            read(dir.path(), Some(2)).is_empty(),
            "its batch was committed"
        );
        std::fs::write(dir.path().join(FILE), b"{\"epoch\": 3, \"ids\": [\"d\"").unwrap();
        assert!(read(dir.path(), None).is_empty());
    }
}
