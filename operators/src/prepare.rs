//! The per-document pipeline step: clean, hash, chunk.

use crate::chunk::{chunk_document, Chunk, ChunkerConfig, ConfigError, TokenCounter};
use crate::clean::clean;
use crate::document::Document;
use crate::hash::doc_hash;

/// Why a document could not be prepared. [`PrepareError::class`] is stable (a DLQ header).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PrepareError {
    #[error(transparent)]
    InvalidConfig(#[from] ConfigError),
    #[error("document {doc_id:?} yields no chunks (its cleaned text is empty)")]
    NoChunks { doc_id: String },
}

impl PrepareError {
    /// Every value [`PrepareError::class`] can return.
    pub const CLASSES: &'static [&'static str] = &["invalid_config", "no_chunks"];

    pub fn class(&self) -> &'static str {
        match self {
            PrepareError::InvalidConfig(_) => "invalid_config",
            PrepareError::NoChunks { .. } => "no_chunks",
        }
    }
}

/// A prepared document version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prepared {
    /// The cleaned document (what was hashed and chunked).
    pub cleaned: Document,
    /// [`doc_hash`] of `cleaned`.
    pub doc_hash: String,
    pub chunks: Vec<Chunk>,
}

/// Cleans, hashes and chunks a document. With `cfg.error_on_empty`, a document without chunks is
/// a [`PrepareError::NoChunks`]; otherwise it yields an empty list.
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
) -> Result<Prepared, PrepareError> {
    cfg.validate()?;
    let cleaned = clean(&doc);
    drop(doc);
    let hash = doc_hash(&cleaned);
    let chunks = chunk_document(&cleaned, &hash, cfg, tokens);
    if chunks.is_empty() && cfg.error_on_empty {
        return Err(PrepareError::NoChunks {
            doc_id: cleaned.id.clone(),
        });
    }
    Ok(Prepared {
        cleaned,
        doc_hash: hash,
        chunks,
    })
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
        assert_eq!(PrepareError::CLASSES, &["invalid_config", "no_chunks"]);
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
}
