//! The document model: what a change event on the `documents` topic carries once decoded.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// How a document's text is to be read by the cleaner and the chunker. The binary types (PDF,
/// DOCX, EPUB) arrive as `content_base64` and are parsed to Markdown when prepared
/// (`freshet-operators`' `parse`); until then the document's `text` holds that base64 as sent.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
pub enum ContentType {
    #[default]
    PlainText,
    Markdown,
    Html,
    /// Comma-separated values; cleaned into a Markdown table (chunked by rows).
    Csv,
    /// Source code in a language with a grammar: chunked at its definitions
    /// (`chunk/code.rs`).
    Code(Language),
    /// PDF with a text layer (`.pdf`), read page by page.
    Pdf,
    /// Office Open XML word processing (`.docx`).
    Docx,
    /// EPUB 2 or 3 (`.epub`).
    Epub,
}

impl ContentType {
    /// Parses a MIME-style content type (`text/markdown`, `text/html; charset=utf-8`, ...).
    /// Returns `None` for types freshet does not read.
    pub fn parse(s: &str) -> Option<ContentType> {
        let base = s
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match base.as_str() {
            "" | "text/plain" | "text" | "plain" => Some(ContentType::PlainText),
            "text/markdown" | "text/x-markdown" | "markdown" | "md" => Some(ContentType::Markdown),
            "text/html" | "application/xhtml+xml" | "html" => Some(ContentType::Html),
            "text/csv" | "csv" => Some(ContentType::Csv),
            "text/x-rust" | "rust" => Some(ContentType::Code(Language::Rust)),
            "text/x-python" | "text/x-script.python" | "python" => {
                Some(ContentType::Code(Language::Python))
            }
            "text/javascript" | "application/javascript" | "text/x-javascript" | "javascript" => {
                Some(ContentType::Code(Language::JavaScript))
            }
            "text/x-typescript" | "application/typescript" | "typescript" => {
                Some(ContentType::Code(Language::TypeScript))
            }
            "text/x-go" | "go" => Some(ContentType::Code(Language::Go)),
            "text/x-java" | "text/x-java-source" | "java" => {
                Some(ContentType::Code(Language::Java))
            }
            "application/pdf" | "pdf" => Some(ContentType::Pdf),
            DOCX_MEDIA_TYPE | "docx" => Some(ContentType::Docx),
            "application/epub+zip" | "epub" => Some(ContentType::Epub),
            _ => None,
        }
    }

    /// Whether documents of this type carry bytes (`content_base64`) rather than text.
    pub fn is_binary(&self) -> bool {
        matches!(
            self,
            ContentType::Pdf | ContentType::Docx | ContentType::Epub
        )
    }

    /// Every content type, for messages and tests.
    pub const ALL: [ContentType; 13] = [
        ContentType::PlainText,
        ContentType::Markdown,
        ContentType::Html,
        ContentType::Csv,
        ContentType::Code(Language::Rust),
        ContentType::Code(Language::Python),
        ContentType::Code(Language::JavaScript),
        ContentType::Code(Language::TypeScript),
        ContentType::Code(Language::Go),
        ContentType::Code(Language::Java),
        ContentType::Pdf,
        ContentType::Docx,
        ContentType::Epub,
    ];

    /// The canonical MIME name.
    pub fn as_str(&self) -> &'static str {
        match self {
            ContentType::PlainText => "text/plain",
            ContentType::Markdown => "text/markdown",
            ContentType::Html => "text/html",
            ContentType::Csv => "text/csv",
            ContentType::Code(l) => l.media_type(),
            ContentType::Pdf => "application/pdf",
            ContentType::Docx => DOCX_MEDIA_TYPE,
            ContentType::Epub => "application/epub+zip",
        }
    }
}

/// A programming language freshet parses (tree-sitter grammars).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Language {
    Rust,
    Python,
    JavaScript,
    TypeScript,
    Go,
    Java,
}

impl Language {
    /// The media type a document of this language is sent with.
    pub fn media_type(&self) -> &'static str {
        match self {
            Language::Rust => "text/x-rust",
            Language::Python => "text/x-python",
            Language::JavaScript => "text/javascript",
            Language::TypeScript => "text/x-typescript",
            Language::Go => "text/x-go",
            Language::Java => "text/x-java",
        }
    }

    /// The language of a file name's extension (`.rs`, `.py`, `.js`/`.mjs`/`.cjs`, `.ts`,
    /// `.go`, `.java`).
    pub fn from_extension(ext: &str) -> Option<Language> {
        match ext.to_ascii_lowercase().as_str() {
            "rs" => Some(Language::Rust),
            "py" => Some(Language::Python),
            "js" | "mjs" | "cjs" => Some(Language::JavaScript),
            "ts" | "mts" | "cts" => Some(Language::TypeScript),
            "go" => Some(Language::Go),
            "java" => Some(Language::Java),
            _ => None,
        }
    }
}

/// The media type of a DOCX file.
pub const DOCX_MEDIA_TYPE: &str =
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document";

/// One version of a document, as published on the topic (after decoding, before cleaning).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Document {
    pub id: String,
    pub title: String,
    /// The text; for a binary content type, its bytes in base64 as sent (`content_base64`).
    pub text: String,
    pub content_type: ContentType,
    pub source: String,
    /// User metadata plus any unknown envelope fields, as canonical JSON values (sorted keys).
    pub metadata: BTreeMap<String, String>,
    /// ACL principals (`group:…`, `user:…`). Empty means visible to everyone.
    pub acl: Vec<String>,
}

/// A decoded change event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    Upsert(Document),
    Delete { id: String },
}

impl Change {
    pub fn id(&self) -> &str {
        match self {
            Change::Upsert(d) => &d.id,
            Change::Delete { id } => id,
        }
    }
}
