//! The serving pointer: a small JSON file naming the index generation the query nodes serve (a
//! tantivy index directory and the Milvus collection bound to it), and the generation served
//! before it, for a rollback. `freshet reindex switch` and `rollback` write it; a query node
//! with `[query] serving_pointer` set follows it (docs/reindex.md).
//!
//! It is written whole or not at all: a temporary file beside it, fsynced, renamed over it, and
//! the directory fsynced, so a reader sees the old pointer or the new one, never a mix, and a
//! crash leaves one of them.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One index generation: where its two halves are.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Generation {
    /// Its name (letters, digits, `-`, `_` and `.`; what responses report).
    pub name: String,
    /// The tantivy index directory its pipeline writes.
    pub tantivy_path: PathBuf,
    /// The concrete Milvus collection its pipeline writes (never an alias).
    pub milvus_collection: String,
    /// The index id binding the two (the tantivy commit payload's and the collection's); empty
    /// when unknown, and then not checked.
    #[serde(default)]
    pub index_id: String,
    /// The `[embedding]` settings of the pipeline that builds it (a JSON object of
    /// `freshet_embedding::EmbeddingConfig`), which the query node embeds queries with for this
    /// generation; absent: the node's own `[embedding]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedding: Option<serde_json::Value>,
}

/// The pointer file's contents.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServingPointer {
    /// The generation served.
    pub serving: Generation,
    /// When the pointer was written (Unix ms).
    pub switched_at_ms: u64,
    /// The generation served before, which `rollback` returns to.
    #[serde(default)]
    pub previous: Option<Generation>,
}

/// Why a pointer cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum PointerError {
    #[error("cannot read the serving pointer {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the serving pointer {path} is not a valid pointer ({reason}): write it with `freshet reindex switch`")]
    Invalid { path: PathBuf, reason: String },
    #[error("cannot write the serving pointer {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl Generation {
    /// The generation's own checks: a usable name, a path and a collection.
    pub fn validate(&self) -> Result<(), String> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 64
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !name_ok {
            return Err(format!(
                "generation name {:?} must be 1 to 64 letters, digits, '-', '_' or '.'",
                self.name
            ));
        }
        if self.tantivy_path.as_os_str().is_empty() {
            return Err(format!("generation {} has no tantivy_path", self.name));
        }
        if self.milvus_collection.is_empty() {
            return Err(format!("generation {} has no milvus_collection", self.name));
        }
        if self.embedding.as_ref().is_some_and(|e| !e.is_object()) {
            return Err(format!(
                "generation {}'s embedding must be an object of [embedding] settings",
                self.name
            ));
        }
        Ok(())
    }
}

impl ServingPointer {
    /// Reads and checks the pointer at `path`.
    pub fn read(path: &Path) -> Result<ServingPointer, PointerError> {
        let bytes = std::fs::read(path).map_err(|source| PointerError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(path, &bytes)
    }

    /// Reads and checks pointer bytes (`path` only names them in errors).
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<ServingPointer, PointerError> {
        let invalid = |reason: String| PointerError::Invalid {
            path: path.to_owned(),
            reason,
        };
        let p: ServingPointer =
            serde_json::from_slice(bytes).map_err(|e| invalid(e.to_string()))?;
        p.serving.validate().map_err(invalid)?;
        if let Some(prev) = &p.previous {
            prev.validate().map_err(invalid)?;
        }
        Ok(p)
    }

    /// Writes the pointer to `path` atomically: a temporary file in the same directory, fsynced,
    /// renamed over `path`, then the directory fsynced.
    pub fn write_atomic(&self, path: &Path) -> Result<(), PointerError> {
        let err = |source: std::io::Error| PointerError::Write {
            path: path.to_owned(),
            source,
        };
        self.serving
            .validate()
            .map_err(|r| err(std::io::Error::new(std::io::ErrorKind::InvalidInput, r)))?;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
            _ => PathBuf::from("."),
        };
        let file_name = path
            .file_name()
            .ok_or_else(|| {
                err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "the pointer path names no file",
                ))
            })?
            .to_string_lossy()
            .into_owned();
        let tmp = dir.join(format!(".{file_name}.tmp-{}", std::process::id()));
        let mut body = serde_json::to_vec_pretty(self)
            .map_err(|e| err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
        body.push(b'\n');
        let written = (|| {
            let mut f = File::create(&tmp)?;
            f.write_all(&body)?;
            f.sync_all()?;
            drop(f);
            std::fs::rename(&tmp, path)?;
            File::open(&dir)?.sync_all()
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written.map_err(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generation(name: &str) -> Generation {
        Generation {
            name: name.into(),
            tantivy_path: PathBuf::from(format!("/data/{name}")),
            milvus_collection: format!("chunks_{name}"),
            index_id: format!("id-{name}"),
            embedding: None,
        }
    }

    #[test]
    fn a_pointer_round_trips_and_replaces_the_old_one_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("serving.json");
        let a = ServingPointer {
            serving: generation("a"),
            switched_at_ms: 1,
            previous: None,
        };
        a.write_atomic(&path).unwrap();
        assert_eq!(ServingPointer::read(&path).unwrap(), a);
        let b = ServingPointer {
            serving: generation("b"),
            switched_at_ms: 2,
            previous: Some(generation("a")),
        };
        b.write_atomic(&path).unwrap();
        assert_eq!(ServingPointer::read(&path).unwrap(), b);
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["serving.json"], "no temporary file left behind");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"name\": \"b\""), "{text}");
    }

    #[test]
    fn bad_pointers_are_refused_with_what_to_do() {
        let p = Path::new("serving.json");
        let g = |body: &str| format!(r#"{{"serving":{{{body}}},"switched_at_ms":1}}"#);
        for bad in [
            "{".to_string(),
            r#"{"serving":{"name":"a","tantivy_path":"/x","milvus_collection":"c"}}"#.into(),
            g(r#""name":"a b","tantivy_path":"/x","milvus_collection":"c""#),
            g(r#""name":"a","tantivy_path":"","milvus_collection":"c""#),
            g(r#""name":"a","tantivy_path":"/x","milvus_collection":"""#),
            g(r#""name":"a","tantivy_path":"/x","milvus_collection":"c","extra":1"#),
            g(r#""name":"a","tantivy_path":"/x","milvus_collection":"c","embedding":"e5""#),
        ] {
            let bad = bad.as_bytes();
            let e = ServingPointer::parse(p, bad).unwrap_err().to_string();
            assert!(e.contains("freshet reindex switch"), "{e}");
        }
        let ok = g(r#""name":"a","tantivy_path":"/x","milvus_collection":"c""#);
        let got = ServingPointer::parse(p, ok.as_bytes()).unwrap();
        assert_eq!(got.serving.index_id, "");
        assert_eq!(got.previous, None);
        assert_eq!(got.serving.embedding, None, "a pointer naming no model");
        let with_model = g(
            r#""name":"a","tantivy_path":"/x","milvus_collection":"c","embedding":{"model_dir":"/m"}"#,
        );
        let got = ServingPointer::parse(p, with_model.as_bytes()).unwrap();
        assert_eq!(
            got.serving.embedding,
            Some(serde_json::json!({"model_dir": "/m"}))
        );
    }

    #[test]
    fn a_missing_pointer_is_a_read_error() {
        let dir = tempfile::tempdir().unwrap();
        let e = ServingPointer::read(&dir.path().join("none.json")).unwrap_err();
        assert!(matches!(e, PointerError::Read { .. }), "{e}");
    }
}
