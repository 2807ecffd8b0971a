//! A file's bytes as the upsert of the document contract, the one way every publisher builds it
//! (`freshet publish --dir`, folder sync, the ingest service's file upload): a text type as
//! `text` (UTF-8, a byte-order mark dropped) titled from its own text
//! ([`freshet_operators::title::title_of`]) unless a title is given, a binary type (PDF, DOCX,
//! EPUB) as `content_base64`, untitled unless a title is given (the parser finds the file's
//! own), encoded by the contract's encoder.

use std::collections::BTreeMap;

use base64::Engine as _;
use freshet_kafka::DocumentRecord;
use freshet_operators::document::{ContentType, Document};
use freshet_operators::envelope::Acl;
use freshet_operators::title::title_of;

use crate::publish::upsert_record;

/// What a file's upsert says besides its bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileFields {
    pub id: String,
    pub content_type: ContentType,
    /// The title given; without one, a text's own title, else [`FileFields::untitled`].
    pub title: Option<String>,
    /// The title of a text that has none of its own and was given none.
    pub untitled: String,
    pub source: String,
    /// Metadata values as canonical JSON ([`freshet_operators::json::canonical_json`]).
    pub metadata: BTreeMap<String, String>,
    pub acl: Acl,
}

/// A text file whose bytes are not UTF-8.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotUtf8(pub std::str::Utf8Error);

/// The upsert record of a file with `fields` and its `bytes`.
pub fn file_envelope(fields: FileFields, bytes: Vec<u8>) -> Result<DocumentRecord, NotUtf8> {
    let content_type = fields.content_type;
    let (text, title) = if content_type.is_binary() {
        (
            base64::engine::general_purpose::STANDARD.encode(&bytes),
            fields.title.unwrap_or_default(),
        )
    } else {
        let text = String::from_utf8(bytes).map_err(|e| NotUtf8(e.utf8_error()))?;
        let text = match text.strip_prefix('\u{feff}') {
            Some(rest) => rest.to_owned(),
            None => text,
        };
        let title = fields
            .title
            .or_else(|| title_of(content_type, &text))
            .unwrap_or(fields.untitled);
        (text, title)
    };
    let doc = Document {
        id: fields.id,
        title,
        text,
        content_type,
        source: fields.source,
        metadata: fields.metadata,
        acl: Vec::new(),
    };
    Ok(upsert_record(doc, &fields.acl))
}

#[cfg(test)]
mod tests {
    use freshet_kafka::Op;
    use serde_json::{json, Value};

    use super::*;

    fn fields(content_type: ContentType) -> FileFields {
        FileFields {
            id: "a".into(),
            content_type,
            untitled: "stem".into(),
            source: "s".into(),
            ..FileFields::default()
        }
    }

    fn value(r: &DocumentRecord) -> Value {
        serde_json::from_slice(r.value.as_deref().unwrap()).unwrap()
    }

    #[test]
    fn text_is_titled_from_itself_then_untitled() {
        let r = file_envelope(
            fields(ContentType::Markdown),
            "\u{feff}# Head\n\nbody".into(),
        )
        .unwrap();
        assert_eq!((r.id.as_str(), r.op), ("a", Op::Upsert));
        assert_eq!(
            value(&r),
            json!({"op":"upsert","id":"a","title":"Head","text":"# Head\n\nbody",
                   "content_type":"text/markdown","source":"s","metadata":{},"acl":[]})
        );
        let r = file_envelope(fields(ContentType::PlainText), b"plain".to_vec()).unwrap();
        assert_eq!(value(&r)["title"], "stem");
        let given = FileFields {
            title: Some("Given".into()),
            ..fields(ContentType::Markdown)
        };
        assert_eq!(
            value(&file_envelope(given, b"# Head".to_vec()).unwrap())["title"],
            "Given"
        );
    }

    #[test]
    fn binary_is_base64_and_untitled_unless_given() {
        let r = file_envelope(fields(ContentType::Pdf), vec![0xff, 0x00]).unwrap();
        let v = value(&r);
        assert_eq!(
            (v["content_base64"].as_str(), v["title"].as_str()),
            (Some("/wA="), Some(""))
        );
        let public = FileFields {
            acl: Acl::Public,
            title: Some("T".into()),
            ..fields(ContentType::Pdf)
        };
        let v = value(&file_envelope(public, vec![1]).unwrap());
        assert_eq!(
            (v["acl"].as_str(), v["title"].as_str()),
            (Some("public"), Some("T"))
        );
    }

    #[test]
    fn text_that_is_not_utf8_is_refused() {
        let e = file_envelope(fields(ContentType::PlainText), vec![b'o', b'k', 0xff]).unwrap_err();
        assert_eq!(e.0.valid_up_to(), 2);
    }
}
