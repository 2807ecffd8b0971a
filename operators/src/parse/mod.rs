//! Binary documents to Markdown: what the envelope's `content_base64` carries (PDF, DOCX, EPUB) is
//! parsed here into Markdown text, whose headings become the chunks' section paths and whose
//! tables and lists stay Markdown. Pure: bytes in, text or a [`ParseError`] out.
//!
//! Every parser is bounded: archives are read entry by entry with a cap on what they unpack
//! ([`ParseLimits`]), XML is read as a stream, and nothing in a file can make a parser loop or
//! allocate past those caps; any malformed input is a [`ParseError`], never a panic.

mod docx;
mod epub;
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
    /// Not a file of its content type, damaged, encrypted, or over the unpacking limits.
    #[error("cannot parse the {content_type} document: {reason}")]
    Unparseable {
        content_type: &'static str,
        reason: String,
    },
    /// A well-formed file without any text.
    #[error("the {content_type} document holds no text")]
    NoText { content_type: &'static str },
}

impl ParseError {
    /// Every value [`ParseError::class`] can return.
    pub const CLASSES: &'static [&'static str] = &["unparseable", "no_text"];

    pub fn class(&self) -> &'static str {
        match self {
            ParseError::Unparseable { .. } => "unparseable",
            ParseError::NoText { .. } => "no_text",
        }
    }
}

/// Caps on what one document may unpack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParseLimits {
    /// Bytes all archive entries read may unpack to, together (a zip bomb stops here).
    pub max_unpacked_bytes: u64,
    /// Archive entries a document may hold.
    pub max_entries: usize,
}

impl Default for ParseLimits {
    fn default() -> Self {
        ParseLimits {
            max_unpacked_bytes: 256 << 20,
            max_entries: 10_000,
        }
    }
}

/// The bytes of a `content_base64` (standard alphabet, padding optional).
pub fn decode_base64(b64: &str) -> Result<Vec<u8>, String> {
    use base64::engine::{general_purpose::GeneralPurpose, GeneralPurposeConfig};
    use base64::Engine as _;
    const LENIENT: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    LENIENT
        .decode(b64)
        .map_err(|e| format!("not valid base64: {e}"))
}

/// Parses `bytes` of a binary content type. `None` for a text content type (nothing to parse).
pub fn parse(
    content_type: ContentType,
    bytes: &[u8],
    limits: &ParseLimits,
) -> Option<Result<Parsed, ParseError>> {
    let ct = content_type.as_str();
    let unparseable = |reason: String| ParseError::Unparseable {
        content_type: ct,
        reason,
    };
    let parsed = match content_type {
        ContentType::Docx => docx::parse(bytes, limits).map_err(unparseable),
        ContentType::Epub => epub::parse(bytes, limits).map_err(unparseable),
        ContentType::Pdf => pdf::parse(bytes, limits).map_err(unparseable),
        ContentType::PlainText
        | ContentType::Markdown
        | ContentType::Html
        | ContentType::Csv
        | ContentType::Code(_) => return None,
    };
    Some(parsed.and_then(|p| {
        if p.markdown.trim().is_empty() {
            Err(ParseError::NoText { content_type: ct })
        } else {
            Ok(p)
        }
    }))
}

#[cfg(test)]
mod tests;
