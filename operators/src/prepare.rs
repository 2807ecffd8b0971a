//! The per-document pipeline step: parse (binary formats), clean, hash, chunk, each bounded by
//! the record's limits: a file's parsing by [`ParseLimits`] with its text held to
//! `max_text_bytes`, chunking by `max_chunks_per_document` (it stops at the first chunk over).

use crate::chunk::{chunk_document_within, Chunk, ChunkerConfig, ConfigError, TokenCounter};
use crate::clean::clean;
use crate::document::Document;
use crate::hash::doc_hash;
use crate::limits::{LimitError, RecordLimits};
use crate::parse::{decode_base64, parse_with, ParseError, ParseLimits, ParseOptions};

/// Why a document could not be prepared. [`PrepareError::class`] is stable (a DLQ header).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PrepareError {
    #[error(transparent)]
    InvalidConfig(#[from] ConfigError),
    #[error("document {doc_id:?} yields no chunks (its cleaned text is empty)")]
    NoChunks { doc_id: String },
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// More chunks than `max_chunks_per_document`.
    #[error(transparent)]
    Limit(#[from] LimitError),
}

impl PrepareError {
    /// Every value [`PrepareError::class`] can return.
    pub const CLASSES: &'static [&'static str] = &[
        "invalid_config",
        "no_chunks",
        "unparseable",
        "too_large",
        "no_text",
        "too_many_chunks",
    ];

    pub fn class(&self) -> &'static str {
        match self {
            PrepareError::InvalidConfig(_) => "invalid_config",
            PrepareError::NoChunks { .. } => "no_chunks",
            PrepareError::Parse(e) => e.class(),
            PrepareError::Limit(e) => e.class(),
        }
    }
}

/// A prepared document version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreparedDocument {
    /// The cleaned document (what was hashed and chunked).
    pub cleaned: Document,
    /// [`doc_hash`] of `cleaned`.
    pub doc_hash: String,
    pub chunks: Vec<Chunk>,
}

/// Cleans, hashes and chunks a document within the default [`RecordLimits`]. With
/// `cfg.error_on_empty`, a document without chunks is a [`PrepareError::NoChunks`]; otherwise it
/// yields an empty list.
pub fn prepare(
    doc: Document,
    cfg: &ChunkerConfig,
    tokens: &dyn TokenCounter,
) -> Result<Vec<Chunk>, PrepareError> {
    prepare_full(doc, cfg, tokens).map(|p| p.chunks)
}

/// [`prepare`], also returning the cleaned document and its hash.
pub fn prepare_full(
    doc: Document,
    cfg: &ChunkerConfig,
    tokens: &dyn TokenCounter,
) -> Result<PreparedDocument, PrepareError> {
    prepare_within(doc, cfg, tokens, &RecordLimits::default())
}

/// [`prepare_full`] within `limits`: a file's parsed text is held to `max_text_bytes`
/// (`too_large`), and chunking stops at the first chunk over `max_chunks_per_document`
/// (`too_many_chunks`).
pub fn prepare_within(
    doc: Document,
    cfg: &ChunkerConfig,
    tokens: &dyn TokenCounter,
    limits: &RecordLimits,
) -> Result<PreparedDocument, PrepareError> {
    cfg.validate()?;
    let parse_limits = ParseLimits::with_text_limit(limits.max_text_bytes);
    let options = ParseOptions {
        drop_matter: cfg.drop_matter.clone(),
    };
    let (mut doc, pages) = parsed(doc, &parse_limits, &options)?;
    // A paged document is cleaned page by page, so that every chunk knows its pages (its
    // joined text is not cleaned a second time).
    if !pages.is_empty() {
        doc.text.clear();
    }
    let mut cleaned = clean(&doc);
    drop(doc);
    let page_starts = if pages.is_empty() {
        Vec::new()
    } else {
        let (text, starts) = clean_pages(&pages);
        cleaned.text = text;
        starts
    };
    let hash = doc_hash(&cleaned);
    let max = limits.max_chunks_per_document;
    let chunks = chunk_document_within(&cleaned, &hash, cfg, tokens, &page_starts, max).map_err(
        |too_many| LimitError::TooManyChunks {
            limit: too_many.limit,
        },
    )?;
    if chunks.is_empty() && cfg.error_on_empty {
        return Err(PrepareError::NoChunks {
            doc_id: cleaned.id.clone(),
        });
    }
    Ok(PreparedDocument {
        cleaned,
        doc_hash: hash,
        chunks,
    })
}

/// The pages of a paged document cleaned one by one and joined by blank lines, with the
/// character offset at which each non-empty page starts and its number (1-based).
pub fn clean_pages(pages: &[String]) -> (String, Vec<(u32, u32)>) {
    let mut text = String::new();
    let mut chars = 0usize;
    let mut starts = Vec::new();
    for (i, page) in pages.iter().enumerate() {
        let cleaned = crate::clean::clean_text(page, crate::document::ContentType::Markdown);
        if cleaned.is_empty() {
            continue;
        }
        if !text.is_empty() {
            text.push_str("\n\n");
            chars += 2;
        }
        let to_u32 = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        starts.push((to_u32(chars), to_u32(i + 1)));
        chars += cleaned.chars().count();
        text.push_str(&cleaned);
    }
    (text, starts)
}

/// A binary document with its file parsed to Markdown as its text (and the file's own title
/// when the envelope gave none), with its pages' Markdown for a paged format (PDF); any other
/// document as it is.
pub fn parsed(
    mut doc: Document,
    limits: &ParseLimits,
    options: &ParseOptions,
) -> Result<(Document, Vec<String>), ParseError> {
    if !doc.content_type.is_binary() {
        return Ok((doc, Vec::new()));
    }
    let unparseable = |reason: String| ParseError::Unparseable {
        content_type: doc.content_type.as_str(),
        reason,
    };
    let bytes = decode_base64(&doc.text).map_err(unparseable)?;
    let Some(result) = parse_with(doc.content_type, &bytes, limits, options) else {
        return Ok((doc, Vec::new()));
    };
    let p = result?;
    doc.text = p.markdown;
    if doc.title.trim().is_empty() {
        if let Some(t) = p.title {
            doc.title = t;
        }
    }
    Ok((doc, p.pages))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::chunk::tokens::tests::test_counter;
    use crate::chunk::ChunkKind;
    use crate::document::ContentType;

    fn doc(text: &str, ct: ContentType) -> Document {
        Document {
            id: "doc".into(),
            title: String::new(),
            text: text.into(),
            content_type: ct,
            source: "src".into(),
            metadata: BTreeMap::from([("lang".into(), "\"en\"".into())]),
            acl: vec!["group:a".into()],
        }
    }

    #[test]
    fn html_end_to_end() {
        let t = test_counter();
        let html = "<html><head><title>Page</title></head><body><nav>menu</nav>\
                    <main><h1>Install</h1><p>the quick brown fox.</p><h2>Linux</h2>\
                    <p>run the code.</p></main></body></html>";
        let p = prepare_full(doc(html, ContentType::Html), &ChunkerConfig::default(), &t).unwrap();
        assert_eq!(p.cleaned.title, "Page");
        assert_eq!(
            p.cleaned.text,
            "# Install\n\nthe quick brown fox.\n\n## Linux\n\nrun the code."
        );
        let c = &p.chunks;
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].text, "# Install\n\nthe quick brown fox.");
        assert_eq!(c[0].section, vec!["Install"]);
        assert_eq!(c[1].section, vec!["Install", "Linux"]);
        assert!(c
            .iter()
            .all(|c| c.doc_hash == p.doc_hash && c.title == "Page"));
        assert!(c
            .iter()
            .all(|c| c.kind == ChunkKind::Leaf && c.metadata_json == r#"{"lang":"en"}"#));
        assert_eq!(
            prepare(doc(html, ContentType::Html), &ChunkerConfig::default(), &t).unwrap(),
            p.chunks
        );
    }

    #[test]
    fn no_chunks_class() {
        let t = test_counter();
        let cfg = ChunkerConfig {
            error_on_empty: true,
            ..ChunkerConfig::default()
        };
        let e = prepare(doc(" \u{200B}\n\t", ContentType::PlainText), &cfg, &t).unwrap_err();
        assert_eq!(e.class(), "no_chunks");
        assert!(e.to_string().contains("\"doc\""));
        let e = prepare(doc("<script>x</script>", ContentType::Html), &cfg, &t).unwrap_err();
        assert_eq!(e.class(), "no_chunks");
        // without the flag: zero chunks
        let ok = prepare(
            doc("", ContentType::Markdown),
            &ChunkerConfig::default(),
            &t,
        )
        .unwrap();
        assert!(ok.is_empty());
    }

    #[test]
    fn invalid_config_class() {
        let t = test_counter();
        let cfg = ChunkerConfig {
            overlap_tokens: 200,
            ..ChunkerConfig::default()
        };
        let e = prepare(doc("x", ContentType::PlainText), &cfg, &t).unwrap_err();
        assert_eq!(e.class(), "invalid_config");
        assert!(e.to_string().contains("overlap_tokens (200)"), "{e}");
        assert_eq!(
            PrepareError::CLASSES,
            &[
                "invalid_config",
                "no_chunks",
                "unparseable",
                "too_large",
                "no_text",
                "too_many_chunks"
            ]
        );
    }

    #[test]
    fn hash_is_of_the_cleaned_document() {
        let t = test_counter();
        let cfg = ChunkerConfig::default();
        let a = prepare_full(doc("the  cat\r\n", ContentType::PlainText), &cfg, &t).unwrap();
        let b = prepare_full(doc("the cat", ContentType::PlainText), &cfg, &t).unwrap();
        assert_eq!(a.doc_hash, b.doc_hash);
        assert_eq!(a.chunks, b.chunks);
    }

    fn binary(ct: ContentType, bytes: &[u8]) -> Document {
        use base64::Engine as _;
        Document {
            title: String::new(),
            text: base64::engine::general_purpose::STANDARD.encode(bytes),
            ..doc("", ct)
        }
    }

    /// A binary document is parsed before it is cleaned: its chunks carry the file's headings
    /// as section paths and its own title; a file without text or a damaged one is refused
    /// with its class.
    #[test]
    fn binary_documents_are_parsed_first() {
        let t = test_counter();
        let cfg = ChunkerConfig::default();
        let report = include_bytes!("../tests/fixtures/parse/report.docx");
        let p = prepare_full(binary(ContentType::Docx, report), &cfg, &t).unwrap();
        assert_eq!(p.cleaned.title, "Quarterly River Report");
        assert!(p.cleaned.text.starts_with("# Quarterly River Report"));
        assert!(p
            .chunks
            .iter()
            .any(|c| c.section == ["Introduction", "Results"] && c.text.contains("| Upstream |")));
        let book = include_bytes!("../tests/fixtures/parse/book.epub");
        let p = prepare_full(binary(ContentType::Epub, book), &cfg, &t).unwrap();
        assert_eq!(p.cleaned.title, "The River Book");
        // an envelope title wins over the file's
        let titled = Document {
            title: "Mine".into(),
            ..binary(ContentType::Epub, book)
        };
        assert_eq!(
            prepare_full(titled, &cfg, &t).unwrap().cleaned.title,
            "Mine"
        );
        let empty = include_bytes!("../tests/fixtures/parse/empty.docx");
        let e = prepare(binary(ContentType::Docx, empty), &cfg, &t).unwrap_err();
        assert_eq!(e.class(), "no_text");
        let e = prepare(binary(ContentType::Epub, b"PK\x03\x04 broken"), &cfg, &t).unwrap_err();
        assert_eq!(e.class(), "unparseable");
        assert!(e.to_string().contains("application/epub+zip"), "{e}");
    }

    /// A PDF is cleaned page by page and every chunk's metadata names its pages.
    #[test]
    fn pdf_chunks_carry_their_pages() {
        let t = test_counter();
        let headers = include_bytes!("../tests/fixtures/parse/headers.pdf");
        let p = prepare_full(
            binary(ContentType::Pdf, headers),
            &ChunkerConfig::default(),
            &t,
        )
        .unwrap();
        assert_eq!(p.cleaned.title, "River Survey");
        let pages = |c: &Chunk| -> (u64, u64) {
            let m: serde_json::Value = serde_json::from_str(&c.metadata_json).unwrap();
            assert_eq!(m["lang"], "en", "the document's metadata stays");
            (
                m["page_start"].as_u64().unwrap(),
                m["page_end"].as_u64().unwrap(),
            )
        };
        let upper = p
            .chunks
            .iter()
            .find(|c| c.section == ["Upper river"])
            .unwrap();
        assert_eq!(pages(upper), (2, 2));
        let last = p
            .chunks
            .iter()
            .find(|c| c.section == ["Conclusions"])
            .unwrap();
        assert_eq!(pages(last), (4, 4));
        // one chunk across both pages of a small document
        let two = include_bytes!("../tests/fixtures/parse/two-column.pdf");
        let cfg = ChunkerConfig {
            max_tokens: 2_000,
            ..ChunkerConfig::default()
        };
        let p = prepare_full(binary(ContentType::Pdf, two), &cfg, &t).unwrap();
        assert_eq!(p.chunks.len(), 1);
        assert_eq!(pages(&p.chunks[0]), (1, 2));
        let scanned = include_bytes!("../tests/fixtures/parse/scanned.pdf");
        let e = prepare(
            binary(ContentType::Pdf, scanned),
            &ChunkerConfig::default(),
            &t,
        );
        assert_eq!(e.unwrap_err().class(), "no_text");
    }

    /// The text a DOCX or EPUB file yields is held to the record's `max_text_bytes`: a small
    /// file whose text is over it is `too_large`, refused while it is parsed.
    #[test]
    fn parsed_text_is_held_to_the_text_limit() {
        let t = test_counter();
        let cfg = ChunkerConfig::default();
        let report = include_bytes!("../tests/fixtures/parse/report.docx");
        let book = include_bytes!("../tests/fixtures/parse/book.epub");
        let tight = RecordLimits {
            max_text_bytes: 100,
            ..RecordLimits::default()
        };
        for (ct, bytes) in [
            (ContentType::Docx, &report[..]),
            (ContentType::Epub, &book[..]),
        ] {
            assert!(prepare_within(binary(ct, bytes), &cfg, &t, &RecordLimits::default()).is_ok());
            let e = prepare_within(binary(ct, bytes), &cfg, &t, &tight).unwrap_err();
            assert_eq!(e.class(), "too_large", "{e}");
            assert!(e.to_string().contains("longer than 100 bytes"), "{e}");
        }
    }

    /// Words as tokens, with their spans (as the model's tokenizer gives them: one call plans a
    /// document), counting the calls: how much chunking work a document cost.
    struct Counting(std::cell::Cell<usize>);

    impl TokenCounter for Counting {
        fn count(&self, text: &str) -> usize {
            self.0.set(self.0.get() + 1);
            text.split_whitespace().count()
        }

        fn token_spans(&self, text: &str) -> Option<Vec<(usize, usize)>> {
            self.0.set(self.0.get() + 1);
            let base = text.as_ptr() as usize;
            Some(
                text.split_whitespace()
                    .map(|w| {
                        (
                            w.as_ptr() as usize - base,
                            w.as_ptr() as usize - base + w.len(),
                        )
                    })
                    .collect(),
            )
        }
    }

    /// A document over `max_chunks_per_document` is refused at the first chunk over the limit:
    /// its chunking costs the work of the limit, not of the whole document.
    #[test]
    fn chunking_stops_at_the_chunk_limit() {
        let cfg = ChunkerConfig {
            max_tokens: 8,
            overlap_tokens: 0,
            ..ChunkerConfig::default()
        };
        let text: String = (0..4_000)
            .map(|i| format!("paragraph {i} of the river survey\n\n"))
            .collect();
        let d = || doc(&text, ContentType::PlainText);
        let whole = Counting(std::cell::Cell::new(0));
        let all = prepare_within(d(), &cfg, &whole, &RecordLimits::default()).unwrap();
        assert!(all.chunks.len() > 1_000, "{}", all.chunks.len());
        for ct in [ContentType::PlainText, ContentType::Markdown] {
            let limited = Counting(std::cell::Cell::new(0));
            let limits = RecordLimits {
                max_chunks_per_document: 10,
                ..RecordLimits::default()
            };
            let e = prepare_within(doc(&text, ct), &cfg, &limited, &limits).unwrap_err();
            assert_eq!(e.class(), "too_many_chunks");
            assert!(e.to_string().contains("more than 10 chunks"), "{e}");
            assert!(
                limited.0.get() * 20 < whole.0.get(),
                "{ct:?}: {} token counts for 10 chunks, {} for all",
                limited.0.get(),
                whole.0.get()
            );
        }
        // exactly at the limit is within it
        let n = all.chunks.len();
        let at = RecordLimits {
            max_chunks_per_document: n,
            ..RecordLimits::default()
        };
        assert_eq!(
            prepare_within(d(), &cfg, &whole, &at).unwrap().chunks.len(),
            n
        );
        let under = RecordLimits {
            max_chunks_per_document: n - 1,
            ..RecordLimits::default()
        };
        assert!(prepare_within(d(), &cfg, &whole, &under).is_err());
    }
}
