//! The chunker's settings (`[chunking]`): the strategy, the token budgets, and which splitter
//! each content type gets.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

use crate::document::{ContentType, Language};

/// How a document is cut into chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChunkStrategy {
    /// [`recursive`](super::recursive) splitting, `max_tokens`/`overlap_tokens`.
    #[serde(alias = "Recursive")]
    Recursive,
    /// [`markdown`](super::markdown) splitting, `max_tokens`/`overlap_tokens`.
    #[serde(alias = "Markdown")]
    Markdown,
    /// [`parent_child`](super::parent_child) splitting; the base splitter is Markdown-aware for Markdown and HTML.
    #[serde(alias = "ParentChild", alias = "parent-child")]
    ParentChild,
    /// Source code at its definitions, with its language's parser (`chunk/code.rs`); for any other
    /// content type the same as `recursive`.
    #[serde(alias = "Syntax")]
    Syntax,
}

/// Chunker settings. Deserializes with defaults for every missing field.
///
/// Which splitter a document gets: `per_content_type[content_type]` if present, else
/// `strategy`. Parent-child applies if either of those is `parent_child`; its base splitter is
/// then Markdown-aware if the other one is `markdown` (or, when neither says, for Markdown and
/// HTML documents).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChunkerConfig {
    pub strategy: ChunkStrategy,
    /// Tokens of a leaf's whole embedded input: its header (title, section path; see
    /// [`header`](super::header)), its text and the model's additions (special tokens, passage prefix). At
    /// most the embedding model's window, or the model truncates.
    pub max_tokens: usize,
    pub overlap_tokens: usize,
    /// Tokens of a parent's text (parents are stored, not embedded).
    pub parent_max_tokens: usize,
    /// Like `max_tokens`, for the children of parent-child chunking (what is embedded there).
    pub child_max_tokens: usize,
    pub child_overlap_tokens: usize,
    /// Overrides `strategy` by content type. Keys: `text/plain`, `text/markdown`, `text/html`,
    /// `text/csv`, `pdf`, `docx`, `epub`, `text/x-rust`, … (anything [`ContentType::parse`] reads) or
    /// the variant names. Default: source code uses `syntax`, everything else but plain text
    /// `markdown` (HTML, CSV and the binary formats are Markdown once cleaned or parsed). A
    /// configured map replaces the default map.
    #[serde(deserialize_with = "de_per_content_type")]
    pub per_content_type: BTreeMap<ContentType, ChunkStrategy>,
    /// Make a document that yields no chunk an error (`no_chunks`) instead of zero chunks.
    pub error_on_empty: bool,
    /// Kinds of a book's (EPUB's) front and back matter left out of its text, by their EPUB
    /// names ([`crate::parse::MATTER_KINDS`]: `cover`, `titlepage`, `toc`, `copyright-page`,
    /// `dedication`, `index`, `colophon`, …), as the book's landmarks, guide or `epub:type`
    /// name them.
    pub drop_matter: Vec<String>,
}

impl Default for ChunkerConfig {
    fn default() -> Self {
        ChunkerConfig {
            strategy: ChunkStrategy::Recursive,
            max_tokens: 256,
            overlap_tokens: 32,
            parent_max_tokens: 1024,
            child_max_tokens: 128,
            child_overlap_tokens: 16,
            per_content_type: BTreeMap::from([
                (ContentType::Markdown, ChunkStrategy::Markdown),
                (ContentType::Html, ChunkStrategy::Markdown),
                (ContentType::Csv, ChunkStrategy::Markdown),
                (ContentType::Pdf, ChunkStrategy::Markdown),
                (ContentType::Docx, ChunkStrategy::Markdown),
                (ContentType::Epub, ChunkStrategy::Markdown),
                (ContentType::Code(Language::Rust), ChunkStrategy::Syntax),
                (ContentType::Code(Language::Python), ChunkStrategy::Syntax),
                (
                    ContentType::Code(Language::JavaScript),
                    ChunkStrategy::Syntax,
                ),
                (
                    ContentType::Code(Language::TypeScript),
                    ChunkStrategy::Syntax,
                ),
                (ContentType::Code(Language::Go), ChunkStrategy::Syntax),
                (ContentType::Code(Language::Java), ChunkStrategy::Syntax),
            ]),
            error_on_empty: false,
            drop_matter: crate::parse::DEFAULT_DROP_MATTER
                .iter()
                .map(|s| s.to_string())
                .collect(),
        }
    }
}

fn de_per_content_type<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<ContentType, ChunkStrategy>, D::Error> {
    let raw = BTreeMap::<String, ChunkStrategy>::deserialize(d)?;
    let mut out = BTreeMap::new();
    for (k, v) in raw {
        let ct = match k.as_str() {
            "PlainText" => Some(ContentType::PlainText),
            "Markdown" => Some(ContentType::Markdown),
            "Html" => Some(ContentType::Html),
            _ => ContentType::parse(&k),
        }
        .ok_or_else(|| {
            serde::de::Error::custom(format!(
                "per_content_type: unknown content type {k:?} (expected one of {})",
                ContentType::ALL.map(|c| c.as_str()).join(", ")
            ))
        })?;
        out.insert(ct, v);
    }
    Ok(out)
}

/// An invalid [`ChunkerConfig`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid chunker config: {0}")]
pub struct ConfigError(pub String);

impl ChunkerConfig {
    /// Checks the token budgets: every max is at least 1, every overlap at most half its max,
    /// and children no larger than parents.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let check_pair = |max_name: &str, max: usize, ov_name: &str, ov: usize| {
            if max == 0 {
                return Err(ConfigError(format!("{max_name} must be at least 1")));
            }
            if ov * 2 > max {
                return Err(ConfigError(format!(
                    "{ov_name} ({ov}) must be at most half of {max_name} ({max})"
                )));
            }
            Ok(())
        };
        check_pair(
            "max_tokens",
            self.max_tokens,
            "overlap_tokens",
            self.overlap_tokens,
        )?;
        check_pair(
            "child_max_tokens",
            self.child_max_tokens,
            "child_overlap_tokens",
            self.child_overlap_tokens,
        )?;
        if let Some(k) = self
            .drop_matter
            .iter()
            .find(|k| !crate::parse::MATTER_KINDS.contains(&k.as_str()))
        {
            return Err(ConfigError(format!(
                "drop_matter: unknown kind {k:?} (expected some of {})",
                crate::parse::MATTER_KINDS.join(", ")
            )));
        }
        if self.parent_max_tokens == 0 {
            return Err(ConfigError("parent_max_tokens must be at least 1".into()));
        }
        if self.child_max_tokens > self.parent_max_tokens {
            return Err(ConfigError(format!(
                "child_max_tokens ({}) must not exceed parent_max_tokens ({})",
                self.child_max_tokens, self.parent_max_tokens
            )));
        }
        Ok(())
    }

    /// The strategy configured for a content type (`per_content_type`, else `strategy`).
    pub fn strategy_for(&self, content_type: ContentType) -> ChunkStrategy {
        self.per_content_type
            .get(&content_type)
            .copied()
            .unwrap_or(self.strategy)
    }

    /// Whether some content type is chunked parent-child (then children are what is embedded).
    pub fn resolve_any_parent_child(&self) -> bool {
        self.strategy == ChunkStrategy::ParentChild
            || self
                .per_content_type
                .values()
                .any(|s| *s == ChunkStrategy::ParentChild)
    }

    /// (parent-child?, Markdown-aware base splitter?) for a content type.
    pub fn resolve(&self, content_type: ContentType) -> (bool, bool) {
        let per = self.per_content_type.get(&content_type).copied();
        let parent_child =
            self.strategy == ChunkStrategy::ParentChild || per == Some(ChunkStrategy::ParentChild);
        // HTML and the binary formats are Markdown once cleaned or parsed.
        let default_md = content_type != ContentType::PlainText;
        let markdown = match (per, self.strategy) {
            (Some(ChunkStrategy::Markdown), _) => true,
            (Some(ChunkStrategy::Recursive | ChunkStrategy::Syntax), _) => false,
            (Some(ChunkStrategy::ParentChild), ChunkStrategy::Markdown) => true,
            (
                Some(ChunkStrategy::ParentChild),
                ChunkStrategy::Recursive | ChunkStrategy::Syntax,
            ) => false,
            (Some(ChunkStrategy::ParentChild), ChunkStrategy::ParentChild) => default_md,
            (None, ChunkStrategy::Markdown) => true,
            (None, ChunkStrategy::Recursive | ChunkStrategy::Syntax) => false,
            (None, ChunkStrategy::ParentChild) => default_md,
        };
        (parent_child, markdown)
    }
}
