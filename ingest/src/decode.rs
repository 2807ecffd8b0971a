//! Request bodies → the records to produce, checked with the pipeline's own decoder
//! ([`freshet_core::envelope::decode`] and the `[limits]`), so that whatever the pipeline
//! would dead-letter is refused here with the decoder's class and message instead.
//!
//! - A JSON envelope (`PUT` with `application/json`): the body is produced as sent, keyed by the
//!   path's id; an `id` in the envelope must equal it, and `op` must be absent or `upsert`.
//! - A file (`PUT` with the file's media type): an upsert envelope is built the way the
//!   directory source builds one from a file (text types as `text`, PDF/DOCX/EPUB as
//!   `content_base64`), with `title`, `source`, `acl` (repeatable), `public` (`true`: a public
//!   document, said so) and `metadata` (a JSON object) from the query string. The envelope is
//!   checked with the pipeline's decoder, so `[limits] require_acl` refuses an upload that
//!   gives neither `acl` nor `public=true` (`missing_acl`).
//! - A batch (NDJSON): one envelope per line, each with its `id`; a `delete` line becomes a
//!   tombstone. Every line is checked before anything is produced.
//! - A delete: a tombstone (null value) keyed by the id.

use freshet_core::document::{Change, ContentType};
use freshet_core::envelope::{decode, Acl, DecodeError};
use freshet_core::json::canonical_json;
use freshet_core::limits::RecordLimits;
use freshet_kafka::DocumentRecord;
use freshet_publishers::{file_envelope, FileFields};
use serde_json::{Map, Value};

/// A record checked with the pipeline's decoder, with the ACL of its document (the decoded
/// principals; empty for a public document and for a delete), for the write rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checked {
    pub record: DocumentRecord,
    pub acl: Vec<String>,
}

/// Why a request body was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Invalid {
    /// The document breaks the contract: the decoder's class (`malformed_json`,
    /// `field_too_large`, …) and message. `too_large` is answered 413, the others 400.
    Document {
        class: &'static str,
        message: String,
    },
    /// The request itself is wrong (query string, op, empty batch).
    BadRequest(String),
    /// A media type freshet does not read (415).
    UnsupportedMediaType(String),
    /// A batch with more documents than `ingest.max_batch_documents` (413).
    TooManyDocuments { count: usize, limit: usize },
}

impl Invalid {
    fn decode(e: DecodeError) -> Self {
        let message = match &e {
            DecodeError::IdMismatch { key, value } => {
                format!("the id in the path ({key:?}) differs from the envelope's id ({value:?})")
            }
            other => other.to_string(),
        };
        Invalid::Document {
            class: e.class(),
            message,
        }
    }
}

/// Holds a path id to the contract (non-empty, at most `max_id_bytes`).
pub fn check_id(id: &str, limits: &RecordLimits) -> Result<(), Invalid> {
    if id.is_empty() {
        return Err(Invalid::Document {
            class: "missing_id",
            message: "the document id in the path is empty".into(),
        });
    }
    decode(Some(id.as_bytes()), None, limits)
        .map(|_| ())
        .map_err(Invalid::decode)
}

/// `PUT` with a JSON envelope.
pub fn envelope(id: &str, body: &[u8], limits: &RecordLimits) -> Result<Checked, Invalid> {
    check_id(id, limits)?;
    match decode(Some(id.as_bytes()), Some(body), limits).map_err(Invalid::decode)? {
        Change::Upsert(d) => Ok(Checked {
            record: DocumentRecord::upsert(id, body.to_vec()),
            acl: d.acl,
        }),
        Change::Delete { .. } => Err(Invalid::BadRequest(
            "a PUT envelope must be an upsert (`op` absent or \"upsert\"); delete with DELETE /v1/documents/{id}".into(),
        )),
    }
}

/// `DELETE`: a tombstone.
pub fn delete(id: &str, limits: &RecordLimits) -> Result<Checked, Invalid> {
    check_id(id, limits)?;
    Ok(Checked {
        record: DocumentRecord::tombstone(id),
        acl: Vec::new(),
    })
}

/// The query-string options of a file upload.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileOptions {
    pub title: Option<String>,
    pub source: Option<String>,
    pub acl: Vec<String>,
    /// `public=true`: the document is public, said so (`"acl": "public"`).
    pub public: bool,
    pub metadata: Map<String, Value>,
}

impl FileOptions {
    /// Reads `title`, `source`, `acl` (repeatable: one principal each), `public` (`true` or
    /// `false`; not with `acl`) and `metadata` (a JSON object); any other parameter is refused,
    /// so a misspelt one is not silently dropped.
    pub fn from_query(params: &[(String, String)]) -> Result<Self, Invalid> {
        let mut o = FileOptions::default();
        for (k, v) in params {
            match k.as_str() {
                "title" => o.title = Some(v.clone()),
                "source" => o.source = Some(v.clone()),
                "acl" => o.acl.push(v.clone()),
                "public" => {
                    o.public = match v.as_str() {
                        "true" => true,
                        "false" => false,
                        _ => {
                            return Err(Invalid::BadRequest(
                                "query parameter `public` must be true or false".into(),
                            ))
                        }
                    }
                }
                "metadata" if v.trim().is_empty() => o.metadata = Map::new(),
                "metadata" => match serde_json::from_str::<Value>(v) {
                    Ok(Value::Object(m)) => o.metadata = m,
                    _ => {
                        return Err(Invalid::BadRequest(
                            "query parameter `metadata` must be a JSON object".into(),
                        ))
                    }
                },
                other => {
                    return Err(Invalid::BadRequest(format!(
                        "unknown query parameter {other:?} (expected title, source, acl, public, metadata)"
                    )))
                }
            }
        }
        if o.public && !o.acl.is_empty() {
            return Err(Invalid::BadRequest(
                "give acl principals or public=true, not both".into(),
            ));
        }
        Ok(o)
    }
}

/// `PUT` with a file's bytes and its media type.
pub fn file(
    id: &str,
    media_type: &str,
    body: &[u8],
    options: FileOptions,
    limits: &RecordLimits,
) -> Result<Checked, Invalid> {
    check_id(id, limits)?;
    let content_type = ContentType::parse(media_type)
        .filter(|_| !media_type.trim().is_empty())
        .ok_or_else(|| {
            let known: Vec<&str> = ContentType::ALL.iter().map(|c| c.as_str()).collect();
            Invalid::UnsupportedMediaType(format!(
                "unsupported media type {media_type:?}: send application/json (an envelope) or one of {}",
                known.join(", ")
            ))
        })?;
    // The principals as given: the decoder below holds them to the contract.
    let acl = if options.public {
        Acl::Public
    } else if options.acl.is_empty() {
        Acl::Unstated
    } else {
        Acl::Principals(options.acl)
    };
    let fields = FileFields {
        id: id.to_owned(),
        content_type,
        title: options.title,
        untitled: String::new(),
        source: options.source.unwrap_or_default(),
        metadata: options
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), canonical_json(v)))
            .collect(),
        acl,
    };
    let record = file_envelope(fields, body.to_vec()).map_err(|e| Invalid::Document {
        class: "invalid_utf8",
        message: format!(
            "a {} upload must be UTF-8 (invalid byte at offset {})",
            content_type.as_str(),
            e.0.valid_up_to()
        ),
    })?;
    let acl = match decode(Some(id.as_bytes()), record.value.as_deref(), limits)
        .map_err(Invalid::decode)?
    {
        Change::Upsert(d) => d.acl,
        Change::Delete { .. } => Vec::new(),
    };
    Ok(Checked { record, acl })
}

/// A refused line of a batch (1-based).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineError {
    pub line: usize,
    pub class: &'static str,
    pub message: String,
}

/// A batch that cannot be produced: a request error, or the lines that break the contract.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchInvalid {
    Request(Invalid),
    Lines(Vec<LineError>),
}

/// `POST /v1/documents:batch`: every non-blank line an envelope with its `id`. Returns the
/// records in line order with their (1-based) line numbers, or every refused line (then nothing
/// is to be produced).
pub fn batch(
    body: &[u8],
    limits: &RecordLimits,
    max_documents: usize,
) -> Result<Vec<(usize, Checked)>, BatchInvalid> {
    let mut out = Vec::new();
    let mut errors = Vec::new();
    let lines = body.split(|b| *b == b'\n').enumerate();
    let lines = lines
        .map(|(i, l)| (i + 1, l.strip_suffix(b"\r").unwrap_or(l)))
        .filter(|(_, l)| !l.iter().all(u8::is_ascii_whitespace));
    for (n, line) in lines {
        if out.len() + errors.len() >= max_documents {
            let count = body
                .split(|b| *b == b'\n')
                .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
                .count();
            return Err(BatchInvalid::Request(Invalid::TooManyDocuments {
                count,
                limit: max_documents,
            }));
        }
        match decode(None, Some(line), limits) {
            Ok(Change::Upsert(d)) => out.push((
                n,
                Checked {
                    record: DocumentRecord::upsert(d.id, line.to_vec()),
                    acl: d.acl,
                },
            )),
            Ok(Change::Delete { id }) => out.push((
                n,
                Checked {
                    record: DocumentRecord::tombstone(id),
                    acl: Vec::new(),
                },
            )),
            Err(e) => errors.push(LineError {
                line: n,
                class: e.class(),
                message: e.to_string(),
            }),
        }
    }
    if !errors.is_empty() {
        return Err(BatchInvalid::Lines(errors));
    }
    if out.is_empty() {
        return Err(BatchInvalid::Request(Invalid::BadRequest(
            "the batch has no documents: send one JSON envelope per line (NDJSON)".into(),
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use freshet_kafka::Op;

    use super::*;

    fn lim() -> RecordLimits {
        RecordLimits::default()
    }

    fn class(r: Result<Checked, Invalid>) -> &'static str {
        match r {
            Err(Invalid::Document { class, .. }) => class,
            other => panic!("expected a document error, got {other:?}"),
        }
    }

    #[test]
    fn an_envelope_is_produced_as_sent_and_its_id_must_match_the_path() {
        let body = br#"{"id":"a","title":"T","text":"hello"}"#;
        let o = envelope("a", body, &lim()).unwrap();
        assert_eq!((o.record.id.as_str(), o.record.op), ("a", Op::Upsert));
        assert_eq!(o.record.value.as_deref(), Some(&body[..]));
        assert!(envelope("a", br#"{"text":"no id: the path's"}"#, &lim()).is_ok());
        assert_eq!(class(envelope("b", body, &lim())), "id_mismatch");
        assert_eq!(class(envelope("a", b"{not json", &lim())), "malformed_json");
        assert_eq!(class(envelope("a", b"", &lim())), "malformed_json");
        assert_eq!(class(envelope("a", br#"{"op":"x"}"#, &lim())), "unknown_op");
        assert_eq!(
            class(envelope("a", br#"{"content_type":"image/png"}"#, &lim())),
            "invalid_field"
        );
        assert!(matches!(
            envelope("a", br#"{"op":"delete"}"#, &lim()),
            Err(Invalid::BadRequest(_))
        ));
        let small = RecordLimits {
            max_value_bytes: 10,
            max_title_bytes: 2,
            ..lim()
        };
        assert_eq!(class(envelope("a", body, &small)), "too_large");
        let small = RecordLimits {
            max_title_bytes: 2,
            ..lim()
        };
        let long_title = br#"{"title":"Title","text":"hello"}"#;
        assert_eq!(class(envelope("a", long_title, &small)), "field_too_large");
    }

    #[test]
    fn path_ids_are_held_to_the_limits() {
        assert!(check_id("x", &lim()).is_ok());
        assert_eq!(class(delete("", &lim())), "missing_id");
        let long = "x".repeat(1025);
        assert_eq!(class(delete(&long, &lim())), "field_too_large");
        let d = delete("x", &lim()).unwrap();
        assert_eq!((d.record.op, d.record.value), (Op::Delete, None));
    }

    #[test]
    fn a_text_file_becomes_an_envelope_the_pipeline_decodes() {
        let opts = FileOptions::from_query(&[
            ("source".into(), "https://x/a.md".into()),
            ("acl".into(), "group:b".into()),
            ("acl".into(), "group:a".into()),
            ("metadata".into(), r#"{"lang":"en"}"#.into()),
        ])
        .unwrap();
        let o = file(
            "a",
            "text/markdown; charset=utf-8",
            b"# Title\n\nbody",
            opts,
            &lim(),
        )
        .unwrap();
        let Change::Upsert(d) = decode(Some(b"a"), o.record.value.as_deref(), &lim()).unwrap()
        else {
            panic!("not an upsert")
        };
        assert_eq!(d.title, "Title");
        assert_eq!(d.content_type, ContentType::Markdown);
        assert_eq!(d.text, "# Title\n\nbody");
        assert_eq!(d.source, "https://x/a.md");
        assert_eq!(d.acl, vec!["group:a".to_string(), "group:b".to_string()]);
        assert_eq!(d.metadata["lang"], "\"en\"");
        let bad = file(
            "a",
            "text/plain",
            b"\xff\xfe",
            FileOptions::default(),
            &lim(),
        );
        assert_eq!(class(bad), "invalid_utf8");
    }

    #[test]
    fn a_binary_file_goes_as_base64() {
        let o = file(
            "p",
            "application/pdf",
            b"%PDF-1.4 \xff",
            FileOptions {
                title: Some("Report".into()),
                ..FileOptions::default()
            },
            &lim(),
        )
        .unwrap();
        let v: Value = serde_json::from_slice(o.record.value.as_deref().unwrap()).unwrap();
        assert_eq!(v["content_base64"], "JVBERi0xLjQg/w==");
        assert_eq!(v["title"], "Report");
        assert!(v.get("text").is_none());
    }

    #[test]
    fn unsupported_media_types_and_options_are_refused() {
        for t in [
            "image/png",
            "application/octet-stream",
            "",
            "application/x-ndjson",
        ] {
            let r = file("a", t, b"x", FileOptions::default(), &lim());
            assert!(
                matches!(r, Err(Invalid::UnsupportedMediaType(_))),
                "{t}: {r:?}"
            );
        }
        for q in [("tittle", "x"), ("metadata", "[1]"), ("metadata", "{")] {
            let r = FileOptions::from_query(&[(q.0.into(), q.1.into())]);
            assert!(matches!(r, Err(Invalid::BadRequest(_))), "{q:?}");
        }
        let r = FileOptions::from_query(&[("acl".into(), "".into())]).unwrap();
        assert_eq!(
            class(file("a", "text/plain", b"x", r, &lim())),
            "invalid_field"
        );
    }

    #[test]
    fn a_batch_is_checked_whole_before_anything_is_produced() {
        let body = b"{\"id\":\"a\",\"text\":\"x\"}\r\n\n{\"op\":\"delete\",\"id\":\"b\"}\n";
        let out = batch(body, &lim(), 10).unwrap();
        assert_eq!(out.len(), 2);
        let (lines, out): (Vec<usize>, Vec<Checked>) = out.into_iter().unzip();
        assert_eq!(lines, vec![1, 3]);
        assert_eq!(
            (out[0].record.id.as_str(), out[0].record.op),
            ("a", Op::Upsert)
        );
        assert_eq!(
            out[0].record.value.as_deref(),
            Some(&b"{\"id\":\"a\",\"text\":\"x\"}"[..])
        );
        assert_eq!(
            (
                out[1].record.id.as_str(),
                out[1].record.op,
                &out[1].record.value
            ),
            ("b", Op::Delete, &None)
        );

        let body = b"{\"id\":\"a\"}\n{\"text\":\"no id\"}\nnot json\n";
        match batch(body, &lim(), 10) {
            Err(BatchInvalid::Lines(e)) => {
                let got: Vec<_> = e.iter().map(|e| (e.line, e.class)).collect();
                assert_eq!(got, vec![(2, "missing_id"), (3, "malformed_json")]);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            batch(b"\n \n", &lim(), 10),
            Err(BatchInvalid::Request(Invalid::BadRequest(_)))
        ));
        let three = b"{\"id\":\"a\"}\n{\"id\":\"b\"}\n{\"id\":\"c\"}\n";
        assert_eq!(
            batch(three, &lim(), 2),
            Err(BatchInvalid::Request(Invalid::TooManyDocuments {
                count: 3,
                limit: 2
            }))
        );
    }

    /// A misspelt ACL key is refused with the decoder's class before anything is produced; with
    /// `require_acl`, so is an envelope, a file or a batch line that states no ACL, while
    /// `"acl": "public"` and `public=true` pass.
    #[test]
    fn acls_are_held_to_the_contract() {
        let e = envelope("a", br#"{"text":"x","ACL":["group:hr"]}"#, &lim());
        assert_eq!(class(e), "invalid_field");
        let e = envelope("a", br#"{"text":"x","metadata":{"acls":["g"]}}"#, &lim());
        assert_eq!(class(e), "invalid_field");
        let strict = RecordLimits {
            require_acl: true,
            ..lim()
        };
        assert_eq!(
            class(envelope("a", br#"{"text":"x"}"#, &strict)),
            "missing_acl"
        );
        assert!(envelope("a", br#"{"text":"x","acl":"public"}"#, &strict).is_ok());
        assert!(envelope("a", br#"{"text":"x","acl":["group:a"]}"#, &strict).is_ok());
        let plain = || FileOptions::default();
        assert_eq!(
            class(file("a", "text/plain", b"x", plain(), &strict)),
            "missing_acl"
        );
        let public = FileOptions::from_query(&[("public".into(), "true".into())]).unwrap();
        let o = file("a", "text/plain", b"x", public, &strict).unwrap();
        let v: Value = serde_json::from_slice(o.record.value.as_deref().unwrap()).unwrap();
        assert_eq!(v["acl"], "public");
        let both = FileOptions::from_query(&[
            ("public".into(), "true".into()),
            ("acl".into(), "group:a".into()),
        ]);
        assert!(matches!(both, Err(Invalid::BadRequest(_))));
        let yes = FileOptions::from_query(&[("public".into(), "yes".into())]);
        assert!(matches!(yes, Err(Invalid::BadRequest(_))));
        let reserved = FileOptions::from_query(&[("acl".into(), "public".into())]).unwrap();
        assert_eq!(
            class(file("a", "text/plain", b"x", reserved, &strict)),
            "invalid_field"
        );
        let body = b"{\"id\":\"a\",\"acl\":\"public\"}\n{\"id\":\"b\"}\n{\"op\":\"delete\",\"id\":\"c\"}\n";
        match batch(body, &strict, 10) {
            Err(BatchInvalid::Lines(e)) => {
                let got: Vec<_> = e.iter().map(|e| (e.line, e.class)).collect();
                assert_eq!(got, vec![(2, "missing_acl")]);
            }
            other => panic!("{other:?}"),
        }
    }
}
