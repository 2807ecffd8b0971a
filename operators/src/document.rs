//! The document model: what a change event on the `documents` topic carries once decoded.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// How a document's text is to be read by the cleaner and the chunker.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
pub enum ContentType {
    #[default]
    PlainText,
    Markdown,
    Html,
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
            _ => None,
        }
    }

    /// The canonical MIME name.
    pub fn as_str(&self) -> &'static str {
        match self {
            ContentType::PlainText => "text/plain",
            ContentType::Markdown => "text/markdown",
            ContentType::Html => "text/html",
        }
    }
}

/// One version of a document, as published on the topic (after decoding, before cleaning).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Document {
    pub id: String,
    pub title: String,
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
