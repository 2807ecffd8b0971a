//! Binary documents to Markdown: what the envelope's `content_base64` carries (PDF, DOCX, EPUB) is
//! parsed here into Markdown text, whose headings become the chunks' section paths and whose
//! tables and lists stay Markdown. Pure: bytes in, text or a [`ParseError`] out.
//!
//! Every parser is bounded in memory and time by [`ParseLimits`]: archives are read entry by
//! entry with a cap on what they unpack, XML is read as a stream, a PDF's compressed streams are
//! decoded within a budget before its reader sees them and its content operations are counted
//! before they run, and every parser's text is held to the record's text limit. A file over a
//! limit is [`ParseError::TooLarge`]; any malformed input is a [`ParseError`], never a panic.

mod docx;
pub(crate) mod epub;
mod pdf;
mod xml;
mod zip;

use crate::document::ContentType;

/// A parsed document: Markdown text, and the title the file gives itself, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed {
    pub markdown: String,
    pub title: Option<String>,
    /// For a paged format (PDF): each page's Markdown, in page order (`markdown` is them
    /// joined by blank lines); empty otherwise.
    pub pages: Vec<String>,
}

/// Why a binary document yields no text. [`ParseError::class`] is stable (a DLQ header).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not a file of its content type, damaged, or encrypted.
    #[error("cannot parse the {content_type} document: {reason}")]
    Unparseable {
        content_type: &'static str,
        reason: String,
    },
    /// Over one of the [`ParseLimits`]: it unpacks, decodes, draws or reads to more than one
    /// document may, or its text is longer than the record's text limit.
    #[error("the {content_type} document is over a parsing limit: {reason}")]
    TooLarge {
        content_type: &'static str,
        reason: String,
    },
    /// A well-formed file without any text.
    #[error("the {content_type} document holds no text")]
    NoText { content_type: &'static str },
}

impl ParseError {
    /// Every value [`ParseError::class`] can return.
    pub const CLASSES: &'static [&'static str] = &["unparseable", "too_large", "no_text"];

    pub fn class(&self) -> &'static str {
        match self {
            ParseError::Unparseable { .. } => "unparseable",
            ParseError::TooLarge { .. } => "too_large",
            ParseError::NoText { .. } => "no_text",
        }
    }
}

/// Why a parser stopped, before its content type is known to the message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Damaged, encrypted, not of its type: [`ParseError::Unparseable`].
    Damaged(String),
    /// Over a limit: [`ParseError::TooLarge`].
    OverLimit(String),
}

impl From<String> for Fault {
    fn from(reason: String) -> Self {
        Fault::Damaged(reason)
    }
}

impl From<&str> for Fault {
    fn from(reason: &str) -> Self {
        Fault::Damaged(reason.to_owned())
    }
}

/// Caps on what parsing one document may take, in memory and in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParseLimits {
    /// Bytes all archive entries read may unpack to, together (a zip bomb stops here); for a
    /// PDF, the bytes all its decoded streams may take together.
    pub max_unpacked_bytes: u64,
    /// Archive entries a document may hold.
    pub max_entries: usize,
    /// Bytes of the parsed text (the record's `[limits] max_text_bytes`).
    pub max_text_bytes: usize,
    /// Bytes one decoded PDF stream may take.
    pub max_stream_bytes: u64,
    /// Content operators and operands one PDF page may hold (its content, or one form it
    /// draws): the reader holds them in memory together, up to about 200 bytes each.
    pub max_page_tokens: u64,
    /// Content operators a whole PDF may run, a form counted each time it is drawn.
    pub max_operations: u64,
    /// Pages one PDF may have.
    pub max_pages: usize,
    /// How long reading one PDF may take: a file that makes the reader crawl is refused rather
    /// than holding up the pipeline (the one limit that depends on the machine).
    pub max_read: std::time::Duration,
}

impl Default for ParseLimits {
    fn default() -> Self {
        ParseLimits {
            max_unpacked_bytes: 256 << 20,
            max_entries: 10_000,
            max_text_bytes: 8 << 20,
            max_stream_bytes: 64 << 20,
            max_page_tokens: 1_000_000,
            max_operations: 20_000_000,
            max_pages: 5_000,
            max_read: std::time::Duration::from_secs(120),
        }
    }
}

impl ParseLimits {
    /// The defaults, with the parsed text held to `max_text_bytes`.
    pub fn with_text_limit(max_text_bytes: usize) -> Self {
        ParseLimits {
            max_text_bytes,
            ..ParseLimits::default()
        }
    }
}

/// Kinds of a book's front and back matter, by their EPUB names (`epub:type`, landmarks; the
/// EPUB 2 guide's spellings are read as these).
pub const MATTER_KINDS: &[&str] = &[
    "cover",
    "titlepage",
    "toc",
    "copyright-page",
    "dedication",
    "epigraph",
    "foreword",
    "preface",
    "acknowledgments",
    "index",
    "colophon",
    "glossary",
    "bibliography",
    "appendix",
    "afterword",
    "loi",
    "lot",
];

/// The matter a book leaves out by default (`[chunking] drop_matter`).
pub const DEFAULT_DROP_MATTER: &[&str] = &["cover", "toc", "copyright-page", "index", "colophon"];

/// What parsing leaves out beyond each format's own rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseOptions {
    /// Kinds of front and back matter ([`MATTER_KINDS`]) left out of a book (EPUB).
    pub drop_matter: Vec<String>,
}

impl Default for ParseOptions {
    fn default() -> Self {
        ParseOptions {
            drop_matter: DEFAULT_DROP_MATTER.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// The bytes of a `content_base64` (the envelope's rule, `freshet-core`).
pub use freshet_core::envelope::decode_base64;

/// Parses `bytes` of a binary content type with the default [`ParseOptions`]. `None` for a text
/// content type (nothing to parse).
pub fn parse(
    content_type: ContentType,
    bytes: &[u8],
    limits: &ParseLimits,
) -> Option<Result<Parsed, ParseError>> {
    parse_with(content_type, bytes, limits, &ParseOptions::default())
}

/// [`parse`] with `options`.
pub fn parse_with(
    content_type: ContentType,
    bytes: &[u8],
    limits: &ParseLimits,
    options: &ParseOptions,
) -> Option<Result<Parsed, ParseError>> {
    let ct = content_type.as_str();
    let classified = |fault: Fault| match fault {
        Fault::Damaged(reason) => ParseError::Unparseable {
            content_type: ct,
            reason,
        },
        Fault::OverLimit(reason) => ParseError::TooLarge {
            content_type: ct,
            reason,
        },
    };
    let parsed = match content_type {
        ContentType::Docx => docx::parse(bytes, limits),
        ContentType::Epub => epub::parse(bytes, limits, options),
        ContentType::Pdf => pdf::parse(bytes, limits),
        ContentType::PlainText
        | ContentType::Markdown
        | ContentType::Html
        | ContentType::Csv
        | ContentType::Code(_) => return None,
    };
    let parsed = parsed.and_then(|p| text_within(p, limits.max_text_bytes));
    Some(parsed.map_err(classified).and_then(|p| {
        if p.markdown.trim().is_empty() {
            Err(ParseError::NoText { content_type: ct })
        } else {
            Ok(p)
        }
    }))
}

/// `Err` when the parsed text is longer than `max_text_bytes` (the parsers stop early when their
/// text grows past it; this holds the joined result to it).
fn text_within(p: Parsed, max_text_bytes: usize) -> Result<Parsed, Fault> {
    if p.markdown.len() > max_text_bytes {
        return Err(text_over(max_text_bytes));
    }
    Ok(p)
}

/// The refusal of a parsed text longer than `max_text_bytes`.
pub(crate) fn text_over(max_text_bytes: usize) -> Fault {
    Fault::OverLimit(format!(
        "its text is longer than {max_text_bytes} bytes (the record's max_text_bytes)"
    ))
}

#[cfg(test)]
mod tests;
