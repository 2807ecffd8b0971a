//! The watcher's durable state: per document id, what was last seen of its file (size, mtime,
//! ctime, blake3 of its bytes), the ACL its upsert carried, and where its last record was
//! acknowledged. It lives in one
//! [redb](https://docs.rs/redb) file, mirrored in memory; a change is written (and fsynced) only
//! after the broker acknowledged the records it describes, so a crash at any point re-publishes
//! at most what was in flight, never less.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use freshet_operators::envelope::Acl;
use redb::{Database, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// id → JSON [`Entry`].
const FILES: TableDefinition<'static, &str, &[u8]> = TableDefinition::new("files");
/// `identity` → what this state file belongs to (topic and roots).
const META: TableDefinition<'static, &str, &str> = TableDefinition::new("meta");

/// What the watcher last saw of one file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub size: u64,
    /// Modification and status-change times, nanoseconds since the Unix epoch.
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    /// blake3 of the file's bytes (hex); empty when the file could not be read.
    pub hash: String,
    /// Partition and offset of its last acknowledged upsert; `None` when it was refused.
    pub placed: Option<(i32, i64)>,
    /// The file went to the dead-letter topic instead of the document topic.
    pub rejected: bool,
    /// The ACL its last upsert carried. An entry of an older freshet's state file, which has
    /// none, reads as [`Acl::Unstated`] (its upsert stated no ACL), so a configured ACL is sent.
    #[serde(default)]
    pub acl: Acl,
}

impl Entry {
    /// Whether the file still looks as it did (same size and times): not even read again.
    pub fn same_stat(&self, size: u64, mtime_ns: i64, ctime_ns: i64) -> bool {
        self.size == size && self.mtime_ns == mtime_ns && self.ctime_ns == ctime_ns
    }
}

/// The state file and its in-memory mirror.
pub struct State {
    db: Database,
    path: PathBuf,
    files: BTreeMap<String, Entry>,
}

impl State {
    /// Opens (or creates) the state at `path` for `identity` (the topic and roots it tracks). A
    /// state written for another identity is an error: its ids would mean other files.
    pub fn open(path: &Path, identity: &str) -> Result<State> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| Error::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let db = Database::create(path).or_state(path)?;
        let txn = db.begin_write().or_state(path)?;
        let mut files = BTreeMap::new();
        {
            let mut meta = txn.open_table(META).or_state(path)?;
            let stored = meta
                .get("identity")
                .or_state(path)?
                .map(|v| v.value().to_string());
            match stored {
                Some(s) if s != identity => {
                    return Err(Error::State {
                        path: path.to_path_buf(),
                        message: format!(
                            "it belongs to another watch ({s}), not this one ({identity}); \
                             give another --state file or remove it to publish everything again"
                        ),
                    })
                }
                Some(_) => {}
                None => {
                    meta.insert("identity", identity).or_state(path)?;
                }
            }
            let table = txn.open_table(FILES).or_state(path)?;
            for item in table.iter().or_state(path)? {
                let (k, v) = item.or_state(path)?;
                let entry: Entry = serde_json::from_slice(v.value()).map_err(|e| Error::State {
                    path: path.to_path_buf(),
                    message: format!("entry {:?} is corrupt: {e}", k.value()),
                })?;
                files.insert(k.value().to_string(), entry);
            }
        }
        txn.commit().or_state(path)?;
        Ok(State {
            db,
            path: path.to_path_buf(),
            files,
        })
    }

    pub fn get(&self, id: &str) -> Option<&Entry> {
        self.files.get(id)
    }

    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// `id` itself and every id below it (`id/…`); every id when `id` is empty.
    pub fn ids_under(&self, id: &str) -> Vec<String> {
        if id.is_empty() {
            return self.files.keys().cloned().collect();
        }
        let mut out: Vec<String> = self
            .files
            .get_key_value(id)
            .map(|(k, _)| k.clone())
            .into_iter()
            .collect();
        let lo = format!("{id}/");
        // '0' is the character after '/': the range holds exactly the ids starting with `id/`.
        let hi = format!("{id}0");
        out.extend(self.files.range(lo..hi).map(|(k, _)| k.clone()));
        out
    }

    /// Writes `changes` (an entry, or `None` to forget the id) in one durable transaction, then
    /// to memory.
    pub fn apply(&mut self, changes: Vec<(String, Option<Entry>)>) -> Result<()> {
        if changes.is_empty() {
            return Ok(());
        }
        let txn = self.db.begin_write().or_state(&self.path)?;
        {
            let mut table = txn.open_table(FILES).or_state(&self.path)?;
            for (id, entry) in &changes {
                match entry {
                    Some(e) => {
                        let bytes = serde_json::to_vec(e).map_err(|e| Error::State {
                            path: self.path.clone(),
                            message: e.to_string(),
                        })?;
                        table
                            .insert(id.as_str(), bytes.as_slice())
                            .or_state(&self.path)?;
                    }
                    None => {
                        table.remove(id.as_str()).or_state(&self.path)?;
                    }
                }
            }
        }
        txn.commit().or_state(&self.path)?;
        for (id, entry) in changes {
            match entry {
                Some(e) => self.files.insert(id, e),
                None => self.files.remove(&id),
            };
        }
        Ok(())
    }
}

/// A redb failure as this state file's error.
trait OrState<T> {
    fn or_state(self, path: &Path) -> Result<T>;
}

impl<T, E: Into<redb::Error>> OrState<T> for std::result::Result<T, E> {
    fn or_state(self, path: &Path) -> Result<T> {
        self.map_err(|e| Error::State {
            path: path.to_path_buf(),
            message: e.into().to_string(),
        })
    }
}
