//! The tantivy schema of the chunk index, the analyzer of each field, and the conversions
//! between a [`Chunk`] and a tantivy document.
//!
//! Four analyzers are registered in every index (the [`crate::analyzers`] module):
//!
//! - [`ANALYZER_NAME`] (`freshet_en`, [`freshet_en_analyzer`]): split on non-alphanumerics,
//!   lowercase, drop long tokens, English stop words, Porter2 stemmer. It analyses `body`: the
//!   title, section path and text of every chunk as one field (`text` and `title` themselves are
//!   stored only).
//! - [`ZH_ANALYZER_NAME`] (`freshet_zh`, [`freshet_zh_analyzer`]): traditional characters folded
//!   into simplified ones, then jieba. It analyses `text_zh` / `title_zh`, filled when the
//!   chunk (title and text together) is Chinese: Han without kana ([`CjkScripts`]).
//! - [`JA_ANALYZER_NAME`] (`freshet_ja`, [`freshet_ja_analyzer`]): lindera with IPADIC, base
//!   forms. It analyses `text_ja` / `title_ja`, filled when the chunk has kana.
//! - [`KO_ANALYZER_NAME`] (`freshet_ko`, [`freshet_ko_analyzer`]): Hangul bigrams. It analyses
//!   `text_ko` / `title_ko`, filled when the chunk has Hangul.
//!
//! Chunks without CJK leave the six CJK fields empty, so English-only indexes pay nothing for
//! them. They are not stored: the stored `text` / `title` remain the only copies and a chunk
//! still round-trips exactly.

use std::path::Path;

use freshet_core::chunk::{Chunk, ChunkKind};
use tantivy::schema::document::{TantivyDocument, Value};
use tantivy::schema::{
    Field, IndexRecordOption, JsonObjectOptions, NumericOptions, OwnedValue, Schema,
    TextFieldIndexing, TextOptions,
};
use tantivy::Index;

use crate::analyzers::{
    freshet_en_analyzer, freshet_ja_analyzer, freshet_ko_analyzer, freshet_zh_analyzer,
    japanese_analysis, CjkScripts, ANALYZER_NAME, JA_ANALYZER_NAME, KO_ANALYZER_NAME,
    ZH_ANALYZER_NAME,
};
use crate::error::{Error, Result};

/// Version of the field layout below (and of the analyzers). Bump it whenever a field, a field
/// option or an analyzer changes: an index written by
/// another version is refused on open with [`Error::SchemaVersionMismatch`] and must be rebuilt.
///
/// 2: `text_zh` / `title_zh` analysed with [`ZH_ANALYZER_NAME`].
/// 3: `body` (title, section path and text in one field) is the field English BM25 searches;
///    `text` and `title` are stored only; no `section_text`.
/// 4: no `doc_hash`: a chunk's version stamp is not stored, so that a new version of a
///    document rewrites only the chunks whose stored record changed.
/// 5: [`freshet_zh_analyzer`] folds traditional characters into simplified ones before
///    segmenting, so that 宮 and 宫 are one term.
/// 6: Japanese chunks (with kana) in `text_ja` / `title_ja` ([`JA_ANALYZER_NAME`]) instead of
///    the Chinese fields; Korean chunks in `text_ko` / `title_ko` ([`KO_ANALYZER_NAME`]). The
///    version file also names the Japanese analysis (`ipadic` or `bigram`).
pub const SCHEMA_VERSION: u32 = 6;

/// Term indexed in the `acl_index` field of a chunk whose `acl` is empty (visible to everyone).
/// Principals are indexed as `p:<principal>`, so no principal can collide with this marker.
pub const PUBLIC_ACL_MARKER: &str = "__public__";

/// Prefix of a principal term in the `acl_index` field.
pub(crate) const PRINCIPAL_PREFIX: &str = "p:";

/// The longest term tantivy indexes (`u16::MAX - 5` bytes). A longer raw value (an id, a
/// source, a principal as `p:<principal>`, a metadata string with its JSON path) would be
/// dropped from the index without an error, so the pipeline's record limits stay below it.
pub const MAX_TERM_BYTES: usize = tantivy::tokenizer::MAX_TOKEN_LEN;

/// File next to tantivy's `meta.json` that records the freshet schema version of the index.
/// The document-id field (raw, stored, and a fast field: [`crate::read`] lists documents by it).
pub(crate) const DOC_ID_FIELD: &str = "doc_id";

pub(crate) const VERSION_FILE: &str = "freshet_schema.json";

/// Fields of the chunk index. Every [`Chunk`] field is stored so that a chunk round-trips exactly.
#[derive(Clone, Debug)]
pub struct ChunkSchema {
    pub schema: Schema,
    /// Raw, indexed, stored: the unique key.
    pub chunk_id: Field,
    /// Raw, indexed, stored, fast.
    pub doc_id: Field,
    /// Raw, indexed, stored: `leaf` or `parent`.
    pub kind: Field,
    /// Raw, indexed, stored; absent when the chunk has no parent.
    pub parent_id: Field,
    /// u64 stored + fast.
    pub index: Field,
    pub char_start: Field,
    pub char_end: Field,
    pub token_count: Field,
    /// Stored only: the heading path as a JSON array string (exact round-trip).
    pub section: Field,
    /// Indexed with [`ANALYZER_NAME`] (frequencies), not stored: the chunk's title, section path
    /// and text as one field, the way Pyserini's "flat" BEIR index holds title and contents.
    /// English BM25 searches this field, so a term's weight and the length normalisation see
    /// the whole chunk as one text.
    pub body: Field,
    /// Stored only (searched through `body`).
    pub text: Field,
    /// Stored only (searched through `body`).
    pub title: Field,
    /// Indexed with [`ZH_ANALYZER_NAME`] (positions), not stored: a copy of `text`, present only
    /// when the chunk is [Chinese](CjkScripts::chinese).
    pub text_zh: Field,
    /// Indexed with [`ZH_ANALYZER_NAME`] (positions), not stored: a copy of `title`, present only
    /// when the chunk is Chinese and the title has CJK.
    pub title_zh: Field,
    /// Indexed with [`JA_ANALYZER_NAME`] (frequencies), not stored: a copy of `text`, present
    /// only when the chunk is [Japanese](CjkScripts::japanese).
    pub text_ja: Field,
    /// Indexed with [`JA_ANALYZER_NAME`], not stored: a copy of `title` of a Japanese chunk
    /// whose title has CJK.
    pub title_ja: Field,
    /// Indexed with [`KO_ANALYZER_NAME`] (frequencies), not stored: a copy of `text`, present
    /// only when the text has [Hangul](CjkScripts::korean).
    pub text_ko: Field,
    /// Indexed with [`KO_ANALYZER_NAME`], not stored: a copy of `title` when it has Hangul.
    pub title_ko: Field,
    /// Raw, indexed, stored.
    pub source: Field,
    /// Stored only: the canonical metadata JSON exactly as received.
    pub metadata_json: Field,
    /// JSON field, raw-tokenized strings, not stored: filter by top-level metadata key/value.
    pub metadata: Field,
    /// Raw, multi-valued, indexed, stored: the ACL exactly as received.
    pub acl: Field,
    /// Raw, indexed, not stored: `p:<principal>` per ACL entry, or [`PUBLIC_ACL_MARKER`].
    pub acl_index: Field,
}

impl Default for ChunkSchema {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkSchema {
    /// Builds the schema of [`SCHEMA_VERSION`].
    pub fn new() -> ChunkSchema {
        let raw_indexing = TextFieldIndexing::default()
            .set_tokenizer("raw")
            .set_fieldnorms(false)
            .set_index_option(IndexRecordOption::Basic);
        let raw = TextOptions::default().set_indexing_options(raw_indexing.clone());
        let raw_stored = raw.clone().set_stored();
        let zh = TextOptions::default().set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer(ZH_ANALYZER_NAME)
                .set_index_option(IndexRecordOption::WithFreqsAndPositions),
        );
        let analysed = |tokenizer: &str| {
            TextOptions::default().set_indexing_options(
                TextFieldIndexing::default()
                    .set_tokenizer(tokenizer)
                    .set_index_option(IndexRecordOption::WithFreqs),
            )
        };
        let stored_only = TextOptions::default().set_stored();
        let u64_opts = NumericOptions::default().set_stored().set_fast();

        let mut b = Schema::builder();
        let chunk_id = b.add_text_field("chunk_id", raw_stored.clone());
        let doc_id = b.add_text_field(DOC_ID_FIELD, raw_stored.clone().set_fast("raw"));
        let kind = b.add_text_field("kind", raw_stored.clone());
        let parent_id = b.add_text_field("parent_id", raw_stored.clone());
        let index = b.add_u64_field("index", u64_opts.clone());
        let char_start = b.add_u64_field("char_start", u64_opts.clone());
        let char_end = b.add_u64_field("char_end", u64_opts.clone());
        let token_count = b.add_u64_field("token_count", u64_opts);
        let section = b.add_text_field("section", stored_only.clone());
        let body = b.add_text_field(
            "body",
            TextOptions::default().set_indexing_options(
                TextFieldIndexing::default()
                    .set_tokenizer(ANALYZER_NAME)
                    .set_index_option(IndexRecordOption::WithFreqs),
            ),
        );
        let text = b.add_text_field("text", stored_only.clone());
        let title = b.add_text_field("title", stored_only.clone());
        let text_zh = b.add_text_field("text_zh", zh.clone());
        let title_zh = b.add_text_field("title_zh", zh);
        let text_ja = b.add_text_field("text_ja", analysed(JA_ANALYZER_NAME));
        let title_ja = b.add_text_field("title_ja", analysed(JA_ANALYZER_NAME));
        let text_ko = b.add_text_field("text_ko", analysed(KO_ANALYZER_NAME));
        let title_ko = b.add_text_field("title_ko", analysed(KO_ANALYZER_NAME));
        let source = b.add_text_field("source", raw_stored.clone());
        let metadata_json = b.add_text_field("metadata_json", stored_only.clone());
        let metadata = b.add_json_field(
            "metadata",
            JsonObjectOptions::default().set_indexing_options(raw_indexing),
        );
        let acl = b.add_text_field("acl", raw_stored);
        let acl_index = b.add_text_field("acl_index", raw);
        ChunkSchema {
            schema: b.build(),
            chunk_id,
            doc_id,
            kind,
            parent_id,
            index,
            char_start,
            char_end,
            token_count,
            section,
            body,
            text,
            title,
            text_zh,
            title_zh,
            text_ja,
            title_ja,
            text_ko,
            title_ko,
            source,
            metadata_json,
            metadata,
            acl,
            acl_index,
        }
    }

    /// The tantivy document of one chunk.
    pub fn to_document(&self, c: &Chunk) -> TantivyDocument {
        let mut d = TantivyDocument::default();
        d.add_text(self.chunk_id, &c.chunk_id);
        d.add_text(self.doc_id, &c.doc_id);
        d.add_text(self.kind, c.kind.as_str());
        if let Some(p) = &c.parent_id {
            d.add_text(self.parent_id, p);
        }
        d.add_u64(self.index, u64::from(c.index));
        d.add_u64(self.char_start, u64::from(c.char_start));
        d.add_u64(self.char_end, u64::from(c.char_end));
        d.add_u64(self.token_count, u64::from(c.token_count));
        d.add_text(
            self.section,
            serde_json::to_string(&c.section).expect("Vec<String> serializes"),
        );
        d.add_text(self.text, &c.text);
        d.add_text(self.title, &c.title);
        d.add_text(self.body, &c.title);
        if !c.section.is_empty() {
            d.add_text(self.body, c.section.join(" > "));
        }
        d.add_text(self.body, &c.text);
        self.add_cjk(&mut d, c);
        d.add_text(self.source, &c.source);
        d.add_text(self.metadata_json, &c.metadata_json);
        // Only an object can be indexed in the JSON field; anything else stays stored-only.
        if let Ok(serde_json::Value::Object(map)) =
            serde_json::from_str::<serde_json::Value>(&c.metadata_json)
        {
            let obj = map
                .into_iter()
                .map(|(k, v)| (k, json_to_owned(v)))
                .collect();
            d.add_object(self.metadata, obj);
        }
        for a in &c.acl {
            d.add_text(self.acl, a);
        }
        if c.acl.is_empty() {
            d.add_text(self.acl_index, PUBLIC_ACL_MARKER);
        } else {
            for a in &c.acl {
                d.add_text(self.acl_index, format!("{PRINCIPAL_PREFIX}{a}"));
            }
        }
        d
    }

    /// The copies of a chunk's text and title for the analyzers of its CJK scripts: title and
    /// text decide Chinese or Japanese together (a kanji-only title of a Japanese text is
    /// Japanese); each of them is copied when it has characters of the script.
    fn add_cjk(&self, d: &mut TantivyDocument, c: &Chunk) {
        let chunk = CjkScripts::of([c.title.as_str(), c.text.as_str()]);
        let (text, title) = (
            CjkScripts::of([c.text.as_str()]),
            CjkScripts::of([c.title.as_str()]),
        );
        let cjk = |s: CjkScripts| s.han || s.kana;
        let mut copy = |yes: bool, field: Field, value: &str| {
            if yes {
                d.add_text(field, value);
            }
        };
        copy(chunk.chinese() && cjk(text), self.text_zh, &c.text);
        copy(chunk.chinese() && cjk(title), self.title_zh, &c.title);
        copy(chunk.japanese() && cjk(text), self.text_ja, &c.text);
        copy(chunk.japanese() && cjk(title), self.title_ja, &c.title);
        copy(text.korean(), self.text_ko, &c.text);
        copy(title.korean(), self.title_ko, &c.title);
    }

    /// The chunk a stored document holds (its version stamp `doc_hash` is not stored: empty).
    pub fn to_chunk(&self, d: &TantivyDocument) -> Result<Chunk> {
        let chunk_id = first_str(d, self.chunk_id).map(str::to_owned);
        let corrupt = |reason: String| Error::Corrupt {
            chunk_id: chunk_id.clone(),
            reason,
        };
        let s = |f: Field, name: &str| -> Result<String> {
            first_str(d, f)
                .map(str::to_owned)
                .ok_or_else(|| corrupt(format!("missing field {name}")))
        };
        let n = |f: Field, name: &str| -> Result<u32> {
            let v = d
                .get_first(f)
                .and_then(|v| v.as_u64())
                .ok_or_else(|| corrupt(format!("missing field {name}")))?;
            u32::try_from(v).map_err(|_| corrupt(format!("{name}={v} does not fit u32")))
        };
        let kind_s = s(self.kind, "kind")?;
        let kind = ChunkKind::parse(&kind_s).ok_or_else(|| corrupt(format!("kind {kind_s:?}")))?;
        let section_s = s(self.section, "section")?;
        let section: Vec<String> = serde_json::from_str(&section_s)
            .map_err(|e| corrupt(format!("section {section_s:?}: {e}")))?;
        let acl = d
            .get_all(self.acl)
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| corrupt("non-text acl value".into()))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Chunk {
            chunk_id: s(self.chunk_id, "chunk_id")?,
            doc_id: s(self.doc_id, "doc_id")?,
            kind,
            parent_id: first_str(d, self.parent_id).map(str::to_owned),
            index: n(self.index, "index")?,
            char_start: n(self.char_start, "char_start")?,
            char_end: n(self.char_end, "char_end")?,
            section,
            text: s(self.text, "text")?,
            token_count: n(self.token_count, "token_count")?,
            title: s(self.title, "title")?,
            source: s(self.source, "source")?,
            metadata_json: s(self.metadata_json, "metadata_json")?,
            acl,
            doc_hash: String::new(),
        })
    }

    /// Registers the four analyzers on an index (needed before writing or searching). Does not
    /// load the jieba dictionary; settles this process's Japanese analysis
    /// ([`crate::japanese_analysis`]) if nothing has.
    pub(crate) fn register_analyzer(index: &Index) {
        let tokenizers = index.tokenizers();
        tokenizers.register(ANALYZER_NAME, freshet_en_analyzer());
        tokenizers.register(ZH_ANALYZER_NAME, freshet_zh_analyzer());
        tokenizers.register(JA_ANALYZER_NAME, freshet_ja_analyzer());
        tokenizers.register(KO_ANALYZER_NAME, freshet_ko_analyzer());
    }

    /// The `analyzer` line of the version file: the analyzers' names and this process's
    /// Japanese analysis.
    fn analyzer_line() -> String {
        format!(
            "{ANALYZER_NAME},{ZH_ANALYZER_NAME},{JA_ANALYZER_NAME}={},{KO_ANALYZER_NAME}",
            japanese_analysis().as_str()
        )
    }

    /// Checks the version file and the field layout of an existing index.
    pub(crate) fn check_existing(&self, path: &Path, index: &Index) -> Result<()> {
        let version_path = path.join(VERSION_FILE);
        let raw = match std::fs::read_to_string(&version_path) {
            Ok(raw) => raw,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::NotAChunkIndex {
                    path: path.to_owned(),
                    reason: format!("{VERSION_FILE} is missing"),
                })
            }
            Err(source) => {
                return Err(Error::Io {
                    op: "read",
                    path: version_path,
                    source,
                })
            }
        };
        let file =
            serde_json::from_str::<VersionFile>(&raw).map_err(|e| Error::NotAChunkIndex {
                path: path.to_owned(),
                reason: format!("unreadable {VERSION_FILE}: {e}"),
            })?;
        let found = file.schema_version;
        if found != SCHEMA_VERSION {
            return Err(Error::SchemaVersionMismatch {
                path: path.to_owned(),
                found,
                expected: SCHEMA_VERSION,
            });
        }
        if index.schema() != self.schema {
            return Err(Error::NotAChunkIndex {
                path: path.to_owned(),
                reason: format!(
                    "its fields differ from the freshet chunk schema version {SCHEMA_VERSION}"
                ),
            });
        }
        let ja_of = |line: &str| {
            line.split(',')
                .find_map(|a| a.strip_prefix(JA_ANALYZER_NAME)?.strip_prefix('='))
                .unwrap_or("unknown")
                .to_owned()
        };
        let (index_ja, process_ja) = (ja_of(&file.analyzer), japanese_analysis().as_str());
        if index_ja != process_ja {
            return Err(Error::JapaneseAnalysisMismatch {
                path: path.to_owned(),
                index: index_ja,
                process: process_ja.to_owned(),
            });
        }
        Ok(())
    }

    /// Writes the version file (atomically: temp file, fsync, rename).
    pub(crate) fn write_version_file(path: &Path) -> Result<()> {
        let target = path.join(VERSION_FILE);
        let tmp = path.join(format!("{VERSION_FILE}.tmp"));
        let body = serde_json::to_string(&VersionFile {
            schema_version: SCHEMA_VERSION,
            analyzer: Self::analyzer_line(),
        })
        .expect("serializable");
        let io = |op, p: &Path| {
            let p = p.to_owned();
            move |source| Error::Io {
                op,
                path: p,
                source,
            }
        };
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp).map_err(io("create", &tmp))?;
            f.write_all(body.as_bytes()).map_err(io("write", &tmp))?;
            f.sync_all().map_err(io("fsync", &tmp))?;
        }
        std::fs::rename(&tmp, &target).map_err(io("rename", &target))?;
        if let Ok(dir) = std::fs::File::open(path) {
            let _ = dir.sync_all();
        }
        Ok(())
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct VersionFile {
    schema_version: u32,
    #[serde(default)]
    analyzer: String,
}

fn first_str(d: &TantivyDocument, f: Field) -> Option<&str> {
    d.get_first(f).and_then(|v| v.as_str())
}

fn json_to_owned(v: serde_json::Value) -> OwnedValue {
    match v {
        serde_json::Value::Null => OwnedValue::Null,
        serde_json::Value::Bool(b) => OwnedValue::Bool(b),
        serde_json::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                OwnedValue::I64(i)
            } else if let Some(u) = n.as_u64() {
                OwnedValue::U64(u)
            } else {
                OwnedValue::F64(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        serde_json::Value::String(s) => OwnedValue::Str(s),
        serde_json::Value::Array(a) => {
            OwnedValue::Array(a.into_iter().map(json_to_owned).collect())
        }
        serde_json::Value::Object(o) => {
            OwnedValue::Object(o.into_iter().map(|(k, v)| (k, json_to_owned(v))).collect())
        }
    }
}
