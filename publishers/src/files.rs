//! A directory of files as documents: each supported file an upsert keyed by its path relative
//! to the directory, its content type from the extension and its title from its own text.

use std::fs;
use std::path::{Path, PathBuf};

use freshet_kafka::{DocumentRecord, Produce};
use freshet_operators::document::{ContentType, Language};

use crate::file_envelope::{file_envelope, FileFields};
use crate::publish::{BadInput, Batcher, Mapping, PublishReport};
use crate::read::{read_file, Unread};
use crate::{Error, Result};

/// Publishes every `.md`, `.markdown`, `.txt`, `.html`, `.htm`, `.csv`, `.pdf`, `.docx`, `.epub` and
/// source file (`.rs`, `.py`, `.js`, `.ts`, `.go`, `.java`: [`Language::from_extension`])
/// under `dir` (recursively, skipping hidden entries and symlinked directories, in path order)
/// as an upsert: id = path relative to `dir` with `/` separators, content type from the
/// extension, title = first Markdown heading / HTML `<title>` (or first `<h1>`) / file stem (a
/// PDF, DOCX or EPUB file: none, so that the file's own title is taken when it is parsed), source =
/// `file://<relative path>` (or [`Mapping::source`]), metadata `{"path": <relative path>}`,
/// ACL from [`Mapping::acl`]. PDF, DOCX and EPUB files are sent as `content_base64`. A file that
/// [`read_file`] refuses (not a regular file, over [`Mapping::max_file_bytes`], a symlink out of
/// `dir`) and a text file that cannot be read as UTF-8 are reported in [`PublishReport::bad`]
/// and skipped.
pub fn publish_dir(dir: &Path, producer: &dyn Produce, mapping: &Mapping) -> Result<PublishReport> {
    let files = list_files(dir)?;
    if mapping.acl.may_leave_unstated() {
        tracing::info!(
            dir = %dir.display(),
            "files that no [[files.acl]] rule matches state no ACL (no --acl or --public): \
             public, or refused as missing_acl where the pipeline sets [limits] require_acl"
        );
    }
    let mut publisher = Batcher::new(producer, mapping.batch_size);
    let mut bad = Vec::new();
    for path in files {
        match file_document(dir, &path, mapping) {
            Ok(out) => publisher.add(out)?,
            Err(reason) => {
                tracing::warn!(path = %path.display(), %reason, "skipping file");
                bad.push(BadInput {
                    path,
                    line: None,
                    reason,
                });
            }
        }
    }
    let mut report = publisher.finish()?;
    report.bad = bad;
    tracing::info!(
        dir = %dir.display(), topic = producer.topic(), published = report.published,
        bad = report.bad.len(), "published directory"
    );
    Ok(report)
}

/// The content type freshet gives a file, from its extension; `None` for files it skips.
pub fn content_type_for(path: &Path) -> Option<&'static str> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    match ext.as_str() {
        "md" | "markdown" => Some("text/markdown"),
        "txt" => Some("text/plain"),
        "html" | "htm" => Some("text/html"),
        "csv" => Some("text/csv"),
        e if Language::from_extension(e).is_some() => {
            Language::from_extension(e).map(|l| l.media_type())
        }
        "pdf" => Some("application/pdf"),
        "docx" => Some(freshet_operators::document::DOCX_MEDIA_TYPE),
        "epub" => Some("application/epub+zip"),
        _ => None,
    }
}

/// The supported files under `root`, sorted (what [`publish_dir`] sends).
pub fn list_files(root: &Path) -> Result<Vec<PathBuf>> {
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Io { path, source }
    };
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).map_err(io_err(&dir))? {
            let entry = entry.map_err(io_err(&dir))?;
            let path = entry.path();
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let ft = entry.file_type().map_err(io_err(&path))?;
            if ft.is_dir() {
                stack.push(path);
            } else if (ft.is_file() || (ft.is_symlink() && path.is_file()))
                && content_type_for(&path).is_some()
            {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Builds the upsert for the file `path` under `root`, read by [`read_file`] (within `root`
/// unless [`Mapping::follow_symlinks_outside_roots`], at most [`Mapping::max_file_bytes`]).
pub fn file_document(
    root: &Path,
    path: &Path,
    mapping: &Mapping,
) -> std::result::Result<DocumentRecord, String> {
    content_type_for(path).ok_or_else(|| "unsupported file extension".to_string())?;
    let rel_id = relative_id(root, path)?;
    let roots = if mapping.follow_symlinks_outside_roots {
        None
    } else {
        let real = root
            .canonicalize()
            .map_err(|e| format!("cannot resolve {}: {e}", root.display()))?;
        Some(vec![real])
    };
    let bytes = read_file(path, mapping.max_file_bytes, roots.as_deref()).map_err(|e| {
        let mut reason = e.to_string();
        if matches!(e, Unread::OutsideRoots(_)) {
            reason.push_str(" (set [files] follow_symlinks_outside_roots = true to follow it)");
        }
        reason
    })?;
    file_bytes_document(&rel_id, path, bytes, mapping)
}

/// `path` relative to `root` with `/` separators: a file's document id.
pub(crate) fn relative_id(root: &Path, path: &Path) -> std::result::Result<String, String> {
    let rel = path
        .strip_prefix(root)
        .map_err(|_| "file is not under the directory".to_string())?;
    let mut parts = Vec::new();
    for c in rel.components() {
        let s = c
            .as_os_str()
            .to_str()
            .ok_or_else(|| "path is not UTF-8".to_string())?;
        parts.push(s);
    }
    Ok(parts.join("/"))
}

/// The upsert of a file already read: `id` (also its `path` metadata and default source), the
/// content type from `path`'s extension, the title from its text (see [`publish_dir`]).
pub fn file_bytes_document(
    id: &str,
    path: &Path,
    bytes: Vec<u8>,
    mapping: &Mapping,
) -> std::result::Result<DocumentRecord, String> {
    let content_type =
        content_type_for(path).ok_or_else(|| "unsupported file extension".to_string())?;
    let content_type = ContentType::parse(content_type).unwrap_or_default();
    let untitled = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or(id)
        .to_string();
    let source = mapping
        .source
        .clone()
        .unwrap_or_else(|| format!("file://{id}"));
    let path = freshet_operators::json::canonical_json(&id.into());
    let fields = FileFields {
        id: id.to_string(),
        content_type,
        title: None,
        untitled,
        source,
        metadata: [("path".to_string(), path)].into(),
        acl: mapping.acl.for_id(id).clone(),
    };
    file_envelope(fields, bytes).map_err(|e| format!("not UTF-8: {}", e.0))
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    fn parse(v: &Option<Vec<u8>>) -> Value {
        serde_json::from_slice(v.as_ref().unwrap()).unwrap()
    }

    #[test]
    fn files_become_documents() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir_all(root.join("sub")).unwrap();
        fs::create_dir_all(root.join(".git")).unwrap();
        fs::write(root.join("sub/a.md"), "# Alpha\n\nbody").unwrap();
        fs::write(root.join("b.HTML"), "<title>Beta</title><p>x</p>").unwrap();
        fs::write(root.join("c.txt"), "just text").unwrap();
        fs::write(root.join("d.xlsx"), "skip").unwrap();
        fs::write(root.join(".git/x.md"), "# hidden").unwrap();
        fs::write(root.join("bad.txt"), [0xff, 0xfe, 0x00]).unwrap();
        let files = list_files(root).unwrap();
        let rels: Vec<String> = files
            .iter()
            .map(|p| p.strip_prefix(root).unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(rels, ["b.HTML", "bad.txt", "c.txt", "sub/a.md"]);
        let m = Mapping::default();
        let a = file_document(root, &root.join("sub/a.md"), &m).unwrap();
        assert_eq!(a.id, "sub/a.md");
        assert_eq!(
            parse(&a.value),
            json!({"op":"upsert","id":"sub/a.md","title":"Alpha","text":"# Alpha\n\nbody",
                   "content_type":"text/markdown","source":"file://sub/a.md",
                   "metadata":{"path":"sub/a.md"},"acl":[]})
        );
        let b = file_document(root, &root.join("b.HTML"), &m).unwrap();
        assert_eq!(parse(&b.value)["title"], "Beta");
        assert_eq!(parse(&b.value)["content_type"], "text/html");
        let c = file_document(root, &root.join("c.txt"), &m).unwrap();
        assert_eq!(parse(&c.value)["title"], "c");
        assert_eq!(parse(&c.value)["content_type"], "text/plain");
        assert!(file_document(root, &root.join("bad.txt"), &m).is_err());
    }

    #[test]
    fn office_files_are_sent_as_base64() {
        use base64::Engine as _;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let bytes = [0x50, 0x4b, 0x03, 0x04, 0xff, 0x00];
        fs::write(root.join("r.docx"), bytes).unwrap();
        fs::write(root.join("b.EPUB"), bytes).unwrap();
        fs::write(root.join("t.csv"), "a,b\n1,2\n").unwrap();
        fs::write(root.join("m.rs"), "fn main() {}\n").unwrap();
        let m = Mapping::default();
        let v = parse(&file_document(root, &root.join("r.docx"), &m).unwrap().value);
        assert_eq!(
            v["content_type"],
            freshet_operators::document::DOCX_MEDIA_TYPE
        );
        assert_eq!(
            v["content_base64"],
            base64::engine::general_purpose::STANDARD.encode(bytes)
        );
        assert_eq!(v["title"], "", "the file's own title is taken when parsed");
        assert!(v.get("text").is_none());
        let v = parse(&file_document(root, &root.join("b.EPUB"), &m).unwrap().value);
        assert_eq!(v["content_type"], "application/epub+zip");
        let v = parse(&file_document(root, &root.join("t.csv"), &m).unwrap().value);
        assert_eq!(
            (v["content_type"].as_str(), v["text"].as_str()),
            (Some("text/csv"), Some("a,b\n1,2\n"))
        );
        let v = parse(&file_document(root, &root.join("m.rs"), &m).unwrap().value);
        assert_eq!(v["content_type"], "text/x-rust");
        assert_eq!(v["title"], "m");
        assert_eq!(list_files(root).unwrap().len(), 4);
    }

    /// A file that became a FIFO between the listing and the read is refused at once, not
    /// waited on; so is a link to a device.
    #[test]
    fn a_fifo_is_refused_without_blocking() {
        use std::os::unix::fs::OpenOptionsExt;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let fifo = root.join("p.md");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo(3) reads the NUL-terminated path that `c` owns, nothing else.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        std::os::unix::fs::symlink("/dev/zero", root.join("z.txt")).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let (r, f) = (root.clone(), fifo.clone());
        std::thread::spawn(move || {
            let m = Mapping {
                follow_symlinks_outside_roots: true,
                ..Mapping::default()
            };
            let fifo = file_document(&r, &f, &m);
            let zero = file_document(&r, &r.join("z.txt"), &m);
            let _ = tx.send((fifo, zero));
        });
        let got = rx.recv_timeout(std::time::Duration::from_secs(10));
        // Unblock a reader stuck on the FIFO, should there be one.
        let _w = fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo);
        let (fifo, zero) = got.expect("file_document returned");
        assert!(fifo.unwrap_err().contains("FIFO"));
        assert!(zero.unwrap_err().contains("character device"));
    }

    /// `publish --dir` does not follow a link out of the directory unless told to; a link
    /// inside it is read; a file over the size limit is skipped.
    #[test]
    fn links_out_of_the_directory_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("docs");
        fs::create_dir_all(&root).unwrap();
        fs::write(dir.path().join("secret.md"), "# Secret").unwrap();
        fs::write(root.join("a.md"), "# A").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret.md"), root.join("out.md")).unwrap();
        std::os::unix::fs::symlink(root.join("a.md"), root.join("in.md")).unwrap();
        let m = Mapping::default();
        let e = file_document(&root, &root.join("out.md"), &m).unwrap_err();
        assert!(
            e.contains("outside") && e.contains("follow_symlinks_outside_roots"),
            "{e}"
        );
        assert!(file_document(&root, &root.join("in.md"), &m).is_ok());
        let follow = Mapping {
            follow_symlinks_outside_roots: true,
            ..Mapping::default()
        };
        let out = file_document(&root, &root.join("out.md"), &follow).unwrap();
        assert_eq!(parse(&out.value)["title"], "Secret");
        let small = Mapping {
            max_file_bytes: 2,
            ..Mapping::default()
        };
        let e = file_document(&root, &root.join("a.md"), &small).unwrap_err();
        assert!(e.contains("over the limit of 2"), "{e}");
    }

    /// Each file gets the ACL its id's first matching rule gives, else the default.
    #[test]
    fn files_get_their_acl() {
        use freshet_operators::envelope::Acl;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir_all(root.join("hr")).unwrap();
        fs::write(root.join("hr/a.md"), "# A").unwrap();
        fs::write(root.join("b.md"), "# B").unwrap();
        let rules = [crate::AclRuleConfig {
            glob: "hr/**".into(),
            principals: vec!["group:hr".into()],
            public: false,
        }];
        for (default, b_acl) in [
            (Acl::Public, json!("public")),
            (Acl::Unstated, json!([])),
            (Acl::principals(["user:x"]).unwrap(), json!(["user:x"])),
        ] {
            let m = Mapping {
                acl: crate::FileAcls::new(&rules, default).unwrap(),
                ..Mapping::default()
            };
            let a = file_document(root, &root.join("hr/a.md"), &m).unwrap();
            assert_eq!(parse(&a.value)["acl"], json!(["group:hr"]));
            let b = file_document(root, &root.join("b.md"), &m).unwrap();
            assert_eq!(parse(&b.value)["acl"], b_acl);
        }
    }
}
