//! Source connectors: publish documents to the documents topic using the document contract.
//!
//! The record key is the document id; the value is a JSON envelope:
//!
//! ```json
//! {"op":"upsert","id":"…","title":"…","text":"…","content_type":"text/markdown",
//!  "source":"…","metadata":{…},"acl":["group:…"]}
//! ```
//!
//! and a delete is `{"op":"delete","id":"…"}` (or a tombstone: a null value under the id key).
//! These connectors build envelopes; they do not check them beyond what is needed to key the
//! record (`op` and `id`): decoding and validation are the operators' job, and a bad envelope
//! ends in the dead-letter topic there.
//!
//! * [`publish_jsonl`]: a JSONL file whose lines are document envelopes or BEIR corpus lines.
//! * [`publish_dir`]: a directory tree of `.md`/`.markdown`/`.txt`/`.html`/`.htm` files.
//!
//! A line or file that cannot be turned into a record is reported in
//! [`PublishReport::bad`] and skipped; I/O errors on the input itself and delivery failures are
//! returned as errors.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use crate::{DocumentProducer, Error, Result};

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
    /// `acl` of built documents (BEIR lines and files); empty = visible to everyone.
    pub acl: Vec<String>,
    /// How many records are produced in flight at a time.
    pub batch_size: usize,
}

impl Default for Mapping {
    fn default() -> Self {
        Mapping {
            format: JsonlFormat::Auto,
            source: None,
            acl: Vec::new(),
            batch_size: 1000,
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

/// A record ready to be produced: key = document id, value = envelope (or `None`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outgoing {
    pub id: String,
    pub value: Option<Vec<u8>>,
    pub is_delete: bool,
}

/// Collects outgoing records and produces them in batches.
struct Publisher<'a> {
    producer: &'a DocumentProducer,
    topic: &'a str,
    batch_size: usize,
    pending: Vec<Outgoing>,
    report: PublishReport,
}

impl<'a> Publisher<'a> {
    fn new(producer: &'a DocumentProducer, topic: &'a str, batch_size: usize) -> Self {
        Publisher {
            producer,
            topic,
            batch_size: batch_size.max(1),
            pending: Vec::new(),
            report: PublishReport::default(),
        }
    }

    fn add(&mut self, out: Outgoing) -> Result<()> {
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
        let deletes = batch.iter().filter(|o| o.is_delete).count();
        let n = batch.len();
        self.producer.send_many(
            self.topic,
            batch.into_iter().map(|o| (o.id.into_bytes(), o.value)),
        )?;
        self.report.published += n;
        self.report.deletes += deletes;
        self.report.upserts += n - deletes;
        Ok(())
    }

    fn finish(mut self) -> Result<PublishReport> {
        self.flush()?;
        Ok(self.report)
    }
}

/// Publishes every line of the JSONL file `path` to `topic`.
///
/// A line is a document envelope (passed on as it is, keyed by its `id`) or a BEIR corpus line
/// (`{"_id","title","text","metadata"}`), which becomes an upsert with content type
/// `text/plain` and source `beir:<file stem>` (or [`Mapping::source`]). Blank lines are
/// ignored; a line that is neither is reported in [`PublishReport::bad`] and skipped.
pub fn publish_jsonl(
    path: &Path,
    producer: &DocumentProducer,
    topic: &str,
    mapping: &Mapping,
) -> Result<PublishReport> {
    let io_err = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = fs::File::open(path).map_err(io_err)?;
    let mut reader = BufReader::new(file);
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let beir_source = mapping
        .source
        .clone()
        .unwrap_or_else(|| format!("beir:{stem}"));

    let mut publisher = Publisher::new(producer, topic, mapping.batch_size);
    let mut bad = Vec::new();
    let mut buf = Vec::new();
    let mut line_no = 0usize;
    loop {
        buf.clear();
        if reader.read_until(b'\n', &mut buf).map_err(io_err)? == 0 {
            break;
        }
        line_no += 1;
        let bytes = if line_no == 1 {
            buf.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&buf)
        } else {
            &buf[..]
        };
        let line = match std::str::from_utf8(bytes) {
            Ok(l) => l.trim(),
            Err(e) => {
                bad.push(BadInput {
                    path: path.to_path_buf(),
                    line: Some(line_no),
                    reason: format!("not UTF-8: {e}"),
                });
                continue;
            }
        };
        if line.is_empty() {
            continue;
        }
        match map_jsonl_line(line, mapping, &beir_source) {
            Ok(out) => publisher.add(out)?,
            Err(reason) => {
                tracing::warn!(path = %path.display(), line = line_no, %reason, "skipping bad line");
                bad.push(BadInput {
                    path: path.to_path_buf(),
                    line: Some(line_no),
                    reason,
                });
            }
        }
    }
    let mut report = publisher.finish()?;
    report.bad = bad;
    tracing::info!(
        path = %path.display(), topic, published = report.published,
        bad = report.bad.len(), "published jsonl"
    );
    Ok(report)
}

/// Maps one JSONL line (without its newline) to a record. `beir_source` is the `source` given
/// to BEIR documents.
pub fn map_jsonl_line(
    line: &str,
    mapping: &Mapping,
    beir_source: &str,
) -> std::result::Result<Outgoing, String> {
    let value: Value = serde_json::from_str(line).map_err(|e| format!("invalid JSON: {e}"))?;
    let Value::Object(obj) = value else {
        return Err("not a JSON object".to_string());
    };
    let format = match mapping.format {
        JsonlFormat::Auto if obj.contains_key("op") => JsonlFormat::Envelope,
        JsonlFormat::Auto if obj.contains_key("_id") => JsonlFormat::Beir,
        JsonlFormat::Auto => {
            return Err(
                "neither a document envelope (no \"op\") nor a BEIR corpus line (no \"_id\")"
                    .to_string(),
            )
        }
        f => f,
    };
    match format {
        JsonlFormat::Beir => beir_line(obj, mapping, beir_source),
        _ => envelope_line(obj),
    }
}

fn envelope_line(obj: Map<String, Value>) -> std::result::Result<Outgoing, String> {
    let is_delete = match obj.get("op") {
        Some(Value::String(op)) if op == "upsert" => false,
        Some(Value::String(op)) if op == "delete" => true,
        Some(other) => return Err(format!("unknown op {other}")),
        None => return Err("envelope without \"op\"".to_string()),
    };
    let id = match obj.get("id") {
        Some(Value::String(id)) if !id.is_empty() => id.clone(),
        Some(Value::String(_)) => return Err("empty \"id\"".to_string()),
        Some(_) => return Err("\"id\" is not a string".to_string()),
        None => return Err("envelope without \"id\"".to_string()),
    };
    let value = serde_json::to_vec(&Value::Object(obj)).map_err(|e| e.to_string())?;
    Ok(Outgoing {
        id,
        value: Some(value),
        is_delete,
    })
}

fn beir_line(
    mut obj: Map<String, Value>,
    mapping: &Mapping,
    source: &str,
) -> std::result::Result<Outgoing, String> {
    let id = match obj.remove("_id") {
        Some(Value::String(id)) if !id.is_empty() => id,
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(_)) => return Err("empty \"_id\"".to_string()),
        Some(_) => return Err("\"_id\" is neither a string nor a number".to_string()),
        None => return Err("BEIR line without \"_id\"".to_string()),
    };
    let title = match obj.remove("title") {
        Some(Value::String(t)) => t,
        None | Some(Value::Null) => String::new(),
        Some(_) => return Err("\"title\" is not a string".to_string()),
    };
    let text = match obj.remove("text") {
        Some(Value::String(t)) => t,
        Some(_) => return Err("\"text\" is not a string".to_string()),
        None => return Err("BEIR line without \"text\"".to_string()),
    };
    let metadata = match obj.remove("metadata") {
        Some(Value::Object(m)) => m,
        None | Some(Value::Null) => Map::new(),
        Some(_) => return Err("\"metadata\" is not an object".to_string()),
    };
    let value = upsert_envelope(
        &id,
        &title,
        &text,
        "text/plain",
        source,
        metadata,
        &mapping.acl,
    );
    Ok(Outgoing {
        id,
        value: Some(value),
        is_delete: false,
    })
}

/// The JSON of an upsert envelope.
pub fn upsert_envelope(
    id: &str,
    title: &str,
    text: &str,
    content_type: &str,
    source: &str,
    metadata: Map<String, Value>,
    acl: &[String],
) -> Vec<u8> {
    let v = json!({
        "op": "upsert",
        "id": id,
        "title": title,
        "text": text,
        "content_type": content_type,
        "source": source,
        "metadata": Value::Object(metadata),
        "acl": acl,
    });
    serde_json::to_vec(&v).expect("a JSON value always serializes")
}

/// The JSON of a delete envelope.
pub fn delete_envelope(id: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({"op": "delete", "id": id})).expect("a JSON value always serializes")
}

/// Publishes every `.md`, `.markdown`, `.txt`, `.html` and `.htm` file under `dir` (recursively,
/// skipping hidden entries and symlinked directories, in path order) as an upsert:
/// id = path relative to `dir` with `/` separators, content type from the extension, title =
/// first Markdown heading / HTML `<title>` (or first `<h1>`) / file stem, source =
/// `file://<relative path>` (or [`Mapping::source`]), metadata `{"path": <relative path>}`.
/// A file that cannot be read as UTF-8 text is reported in [`PublishReport::bad`] and skipped.
pub fn publish_dir(
    dir: &Path,
    producer: &DocumentProducer,
    topic: &str,
    mapping: &Mapping,
) -> Result<PublishReport> {
    let files = list_files(dir)?;
    let mut publisher = Publisher::new(producer, topic, mapping.batch_size);
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
        dir = %dir.display(), topic, published = report.published,
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
        _ => None,
    }
}

/// The supported files under `root`, sorted.
fn list_files(root: &Path) -> Result<Vec<PathBuf>> {
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

/// Builds the upsert for the file `path` under `root`.
pub fn file_document(
    root: &Path,
    path: &Path,
    mapping: &Mapping,
) -> std::result::Result<Outgoing, String> {
    let content_type =
        content_type_for(path).ok_or_else(|| "unsupported file extension".to_string())?;
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
    let rel_id = parts.join("/");
    let bytes = fs::read(path).map_err(|e| format!("cannot read: {e}"))?;
    let text = String::from_utf8(bytes).map_err(|e| format!("not UTF-8: {}", e.utf8_error()))?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or(&rel_id)
        .to_string();
    let title = match content_type {
        "text/markdown" => markdown_title(text),
        "text/html" => html_title(text),
        _ => None,
    }
    .filter(|t| !t.is_empty())
    .unwrap_or(stem);
    let source = mapping
        .source
        .clone()
        .unwrap_or_else(|| format!("file://{rel_id}"));
    let mut metadata = Map::new();
    metadata.insert("path".to_string(), Value::String(rel_id.clone()));
    let value = upsert_envelope(
        &rel_id,
        &title,
        text,
        content_type,
        &source,
        metadata,
        &mapping.acl,
    );
    Ok(Outgoing {
        id: rel_id,
        value: Some(value),
        is_delete: false,
    })
}

/// The first heading of a Markdown text (ATX `# …` or setext), outside front matter and code
/// fences.
pub fn markdown_title(text: &str) -> Option<String> {
    let mut lines = text.lines().peekable();
    // YAML front matter: a `title:` there wins.
    if lines.peek().map(|l| l.trim_end()) == Some("---") {
        lines.next();
        let mut fm_title = None;
        for l in lines.by_ref() {
            let t = l.trim_end();
            if t == "---" || t == "..." {
                break;
            }
            if let Some(v) = t.strip_prefix("title:") {
                let v = v.trim().trim_matches(|c| c == '"' || c == '\'').trim();
                if !v.is_empty() {
                    fm_title = Some(v.to_string());
                }
            }
        }
        if fm_title.is_some() {
            return fm_title;
        }
    }
    let mut fence: Option<&str> = None;
    let mut prev: Option<&str> = None;
    for line in lines {
        let indent = line.len() - line.trim_start_matches(' ').len();
        let t = line.trim();
        if let Some(f) = fence {
            if indent < 4 && t.starts_with(f) {
                fence = None;
            }
            prev = None;
            continue;
        }
        if indent < 4 && (t.starts_with("```") || t.starts_with("~~~")) {
            fence = Some(&t[..3]);
            prev = None;
            continue;
        }
        if indent < 4 && t.starts_with('#') {
            let hashes = t.len() - t.trim_start_matches('#').len();
            let rest = &t[hashes..];
            if hashes <= 6 && (rest.is_empty() || rest.starts_with([' ', '\t'])) {
                let title = rest.trim().trim_end_matches('#').trim_end();
                if !title.is_empty() {
                    return Some(title.to_string());
                }
            }
        }
        if let Some(p) = prev {
            if indent < 4
                && !t.is_empty()
                && (t.chars().all(|c| c == '=') || t.chars().all(|c| c == '-'))
            {
                return Some(p.trim().to_string());
            }
        }
        prev = if t.is_empty() || indent >= 4 {
            None
        } else {
            Some(line)
        };
    }
    None
}

/// The `<title>` of an HTML text, else its first `<h1>`, tags removed, basic entities decoded
/// and whitespace collapsed.
pub fn html_title(html: &str) -> Option<String> {
    let inner = element_text(html, "title").or_else(|| element_text(html, "h1"))?;
    let stripped = strip_tags(inner);
    let decoded = decode_entities(&stripped);
    let collapsed = decoded.split_whitespace().collect::<Vec<_>>().join(" ");
    (!collapsed.is_empty()).then_some(collapsed)
}

/// The raw content of the first `<name …>…</name>` element (ASCII case-insensitive).
fn element_text<'h>(html: &'h str, name: &str) -> Option<&'h str> {
    let lower = html.to_ascii_lowercase();
    let open = format!("<{name}");
    let mut from = 0;
    while let Some(i) = lower[from..].find(&open) {
        let start = from + i;
        let after = start + open.len();
        // `<title>` or `<title attr…>`, not `<titles>`.
        match lower.as_bytes().get(after) {
            Some(b'>') | Some(b' ') | Some(b'\t') | Some(b'\n') | Some(b'\r') | Some(b'/') => {
                let gt = after + lower[after..].find('>')?;
                let close = format!("</{name}");
                let end = gt + 1 + lower[gt + 1..].find(&close)?;
                return Some(&html[gt + 1..end]);
            }
            _ => from = after,
        }
    }
    None
}

fn strip_tags(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_tag = false;
    for c in s.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => {
                in_tag = false;
                out.push(' ');
            }
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out
}

fn decode_entities(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let Some(semi) = rest[..rest.len().min(12)].find(';') else {
            out.push('&');
            rest = &rest[1..];
            continue;
        };
        let ent = &rest[1..semi];
        let decoded = match ent {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            "nbsp" => Some(' '),
            _ => {
                let num = if let Some(h) = ent.strip_prefix("#x").or_else(|| ent.strip_prefix("#X"))
                {
                    u32::from_str_radix(h, 16).ok()
                } else if let Some(d) = ent.strip_prefix('#') {
                    d.parse().ok()
                } else {
                    None
                };
                num.and_then(char::from_u32)
            }
        };
        match decoded {
            Some(c) => {
                out.push(c);
                rest = &rest[semi + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: &Option<Vec<u8>>) -> Value {
        serde_json::from_slice(v.as_ref().unwrap()).unwrap()
    }

    #[test]
    fn beir_line_becomes_upsert() {
        let m = Mapping {
            acl: vec!["group:eng".into()],
            ..Mapping::default()
        };
        let out = map_jsonl_line(
            r#"{"_id":"d1","title":"T \"q\"","text":"hello\nworld","metadata":{"url":"u"}}"#,
            &m,
            "beir:corpus",
        )
        .unwrap();
        assert_eq!(out.id, "d1");
        assert!(!out.is_delete);
        assert_eq!(
            parse(&out.value),
            json!({"op":"upsert","id":"d1","title":"T \"q\"","text":"hello\nworld",
                   "content_type":"text/plain","source":"beir:corpus",
                   "metadata":{"url":"u"},"acl":["group:eng"]})
        );
        // Numeric id, no title/metadata.
        let out = map_jsonl_line(r#"{"_id":7,"text":"x"}"#, &m, "s").unwrap();
        assert_eq!(out.id, "7");
        assert_eq!(parse(&out.value)["title"], "");
        assert_eq!(parse(&out.value)["metadata"], json!({}));
    }

    #[test]
    fn envelopes_pass_through() {
        let m = Mapping::default();
        let up = r#"{"op":"upsert","id":"a","title":"t","text":"x","content_type":"text/html","source":"s","metadata":{},"acl":[]}"#;
        let out = map_jsonl_line(up, &m, "ignored").unwrap();
        assert_eq!(out.id, "a");
        assert_eq!(
            parse(&out.value),
            serde_json::from_str::<Value>(up).unwrap()
        );
        let out = map_jsonl_line(r#"{"op":"delete","id":"a"}"#, &m, "").unwrap();
        assert!(out.is_delete);
        assert_eq!(parse(&out.value), json!({"op":"delete","id":"a"}));
    }

    #[test]
    fn bad_lines_are_errors_not_panics() {
        let m = Mapping::default();
        for bad in [
            "{",
            "[]",
            "42",
            r#"{"title":"x"}"#,
            r#"{"op":"merge","id":"a"}"#,
            r#"{"op":"upsert"}"#,
            r#"{"op":"upsert","id":""}"#,
            r#"{"op":"upsert","id":5}"#,
            r#"{"_id":"a"}"#,
            r#"{"_id":"a","text":1}"#,
            r#"{"_id":"a","text":"t","metadata":[1]}"#,
            r#"{"_id":[],"text":"t"}"#,
        ] {
            assert!(map_jsonl_line(bad, &m, "s").is_err(), "{bad}");
        }
        let strict = Mapping {
            format: JsonlFormat::Beir,
            ..Mapping::default()
        };
        assert!(map_jsonl_line(r#"{"op":"delete","id":"a"}"#, &strict, "s").is_err());
    }

    #[test]
    fn markdown_titles() {
        assert_eq!(
            markdown_title("intro\n\n## Sub ##\n# Top").as_deref(),
            Some("Sub")
        );
        assert_eq!(
            markdown_title("Title\n=====\ntext").as_deref(),
            Some("Title")
        );
        assert_eq!(
            markdown_title("```\n# not\n```\n# Yes").as_deref(),
            Some("Yes")
        );
        assert_eq!(
            markdown_title("---\ntitle: \"Front\"\n---\n# H").as_deref(),
            Some("Front")
        );
        assert_eq!(markdown_title("---\nx: 1\n---\n# H").as_deref(), Some("H"));
        assert_eq!(markdown_title("#hashtag\nplain"), None);
        assert_eq!(markdown_title("    # code"), None);
    }

    #[test]
    fn html_titles() {
        assert_eq!(
            html_title("<html><HEAD><Title lang=en>\n A &amp; B &#x41;</title></head>").as_deref(),
            Some("A & B A")
        );
        assert_eq!(
            html_title("<body><h1 class=x>Hello <em>you</em></h1></body>").as_deref(),
            Some("Hello you")
        );
        assert_eq!(html_title("<titles>no</titles>"), None);
        assert_eq!(html_title("<title></title><p>x</p>"), None);
        assert_eq!(decode_entities("a & b &bogus; &#65;"), "a & b &bogus; A");
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
        fs::write(root.join("d.pdf"), "skip").unwrap();
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
}
