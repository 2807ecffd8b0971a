use super::*;

fn lim() -> RecordLimits {
    RecordLimits::default()
}

fn dec(key: Option<&str>, value: Option<&str>) -> Result<Change, DecodeError> {
    decode(key.map(str::as_bytes), value.map(str::as_bytes), &lim())
}

fn upsert(key: Option<&str>, value: &str) -> Document {
    match dec(key, Some(value)) {
        Ok(Change::Upsert(d)) => d,
        other => panic!("expected an upsert, got {other:?}"),
    }
}

fn class(r: Result<Change, DecodeError>) -> &'static str {
    r.expect_err("expected an error").class()
}

#[test]
fn full_upsert() {
    let d = upsert(
        Some("d1"),
        r#"{"op":"upsert","id":"d1","title":"T","text":"Hello","content_type":"text/markdown",
            "source":"s3://x","metadata":{"lang":"en","n":3,"obj":{"b":1,"a":[true,null]}},
            "acl":["group:b","group:a","group:b"]}"#,
    );
    assert_eq!(d.id, "d1");
    assert_eq!(d.title, "T");
    assert_eq!(d.text, "Hello");
    assert_eq!(d.content_type, ContentType::Markdown);
    assert_eq!(d.source, "s3://x");
    assert_eq!(d.metadata["lang"], "\"en\"");
    assert_eq!(d.metadata["n"], "3");
    assert_eq!(d.metadata["obj"], r#"{"a":[true,null],"b":1}"#);
    assert_eq!(d.acl, vec!["group:a", "group:b"]);
}

#[test]
fn minimal_upsert_defaults() {
    let d = upsert(None, r#"{"id":"x"}"#);
    assert_eq!(d.id, "x");
    assert_eq!(d.title, "");
    assert_eq!(d.text, "");
    assert_eq!(d.content_type, ContentType::PlainText);
    assert!(d.metadata.is_empty());
    assert!(d.acl.is_empty());
    // nulls are the same as missing
    let d2 = upsert(
        None,
        r#"{"op":null,"id":"x","title":null,"text":null,"content_type":null,"source":null,
            "metadata":null,"acl":null}"#,
    );
    assert_eq!(d, d2);
}

#[test]
fn op_defaults_to_upsert() {
    let d = upsert(Some("k"), r#"{"text":"body"}"#);
    assert_eq!(d.id, "k");
    assert_eq!(d.text, "body");
}

#[test]
fn delete_by_value_and_by_tombstone() {
    assert_eq!(
        dec(None, Some(r#"{"op":"delete","id":"a"}"#)),
        Ok(Change::Delete { id: "a".into() })
    );
    // extra fields on a delete are ignored, even ill-typed ones
    assert_eq!(
        dec(Some("a"), Some(r#"{"op":"delete","acl":7,"text":1}"#)),
        Ok(Change::Delete { id: "a".into() })
    );
    assert_eq!(dec(Some("a"), None), Ok(Change::Delete { id: "a".into() }));
    assert_eq!(
        dec(Some("日本語-ü"), None),
        Ok(Change::Delete {
            id: "日本語-ü".into()
        })
    );
}

#[test]
fn integer_ids() {
    assert_eq!(upsert(None, r#"{"id":12345}"#).id, "12345");
    assert_eq!(upsert(Some("-7"), r#"{"id":-7}"#).id, "-7");
    let e = dec(None, Some(r#"{"id":1.5}"#)).unwrap_err();
    assert_eq!(e.class(), "invalid_field");
    assert!(e.to_string().contains("`id`"), "{e}");
}

#[test]
fn class_empty_record() {
    assert_eq!(class(dec(None, None)), "empty_record");
    assert_eq!(class(dec(Some(""), None)), "empty_record");
}

#[test]
fn class_invalid_utf8() {
    let e = decode(Some(b"ab\xffc"), None, &lim()).unwrap_err();
    assert_eq!(e.class(), "invalid_utf8");
    assert_eq!(
        e,
        DecodeError::InvalidUtf8 {
            part: RecordPart::Key,
            offset: 2
        }
    );
    assert!(e.to_string().contains("key"));
    let e = decode(None, Some(b"{\"id\":\"\xc3\x28\"}"), &lim()).unwrap_err();
    assert_eq!(e.class(), "invalid_utf8");
    assert!(e.to_string().contains("value") && e.to_string().contains("offset 7"));
}

#[test]
fn class_malformed_json() {
    for v in [
        "{",
        "not json",
        "[1,2]",
        "\"str\"",
        "null",
        "",
        "   ",
        "{\"id\":\"a\"} trailing",
    ] {
        let e = dec(Some("k"), Some(v)).unwrap_err();
        assert_eq!(e.class(), "malformed_json", "{v:?}: {e}");
    }
    let e = dec(Some("k"), Some("[1]")).unwrap_err();
    assert!(e.to_string().contains("found an array"), "{e}");
    let e = dec(Some("k"), Some("")).unwrap_err();
    assert!(e.to_string().contains("tombstone"), "{e}");
    // deep nesting is refused by serde_json's recursion limit, not a stack overflow
    let deep = format!(
        "{{\"id\":\"a\",\"x\":{}{}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    assert_eq!(class(dec(None, Some(&deep))), "malformed_json");
}

#[test]
fn bom_is_skipped() {
    let d = upsert(None, "\u{feff}{\"id\":\"a\"}");
    assert_eq!(d.id, "a");
}

#[test]
fn class_missing_id() {
    assert_eq!(class(dec(None, Some(r#"{"text":"x"}"#))), "missing_id");
    assert_eq!(class(dec(None, Some(r#"{"id":""}"#))), "missing_id");
    assert_eq!(class(dec(Some(""), Some(r#"{"id":null}"#))), "missing_id");
    assert_eq!(class(dec(None, Some(r#"{"op":"delete"}"#))), "missing_id");
}

#[test]
fn class_unknown_op() {
    let e = dec(Some("a"), Some(r#"{"op":"merge"}"#)).unwrap_err();
    assert_eq!(e.class(), "unknown_op");
    assert!(e.to_string().contains("merge"));
    assert_eq!(
        class(dec(Some("a"), Some(r#"{"op":"UPSERT"}"#))),
        "unknown_op"
    );
    let long = format!(r#"{{"op":"{}"}}"#, "x".repeat(10_000));
    let e = dec(Some("a"), Some(&long)).unwrap_err();
    assert!(e.to_string().len() < 200, "op is truncated in the message");
    // a non-string op is a wrong type, not an unknown op
    assert_eq!(class(dec(Some("a"), Some(r#"{"op":1}"#))), "invalid_field");
}

#[test]
fn class_too_large_and_field_too_large() {
    let limits = RecordLimits {
        max_value_bytes: 100,
        max_id_bytes: 5,
        max_title_bytes: 3,
        max_text_bytes: 10,
        ..RecordLimits::default()
    };
    let d = |k: Option<&str>, v: Option<&str>| {
        decode(k.map(str::as_bytes), v.map(str::as_bytes), &limits)
    };
    let e = d(
        None,
        Some(&format!(r#"{{"id":"a","text":"{}"}}"#, "x".repeat(200))),
    )
    .unwrap_err();
    assert_eq!(e.class(), "too_large");
    assert!(
        e.to_string().contains("value") && e.to_string().contains("100"),
        "{e}"
    );
    let e = d(Some("abcdef"), None).unwrap_err();
    assert_eq!(e.class(), "field_too_large");
    assert!(e.to_string().contains("key is 6 bytes"), "{e}");
    let e = d(None, Some(r#"{"id":"abcdef"}"#)).unwrap_err();
    assert!(
        e.to_string()
            .contains("`id` is 6 bytes, over the limit of 5"),
        "{e}"
    );
    let e = d(None, Some(r#"{"id":"a","title":"abcd"}"#)).unwrap_err();
    assert!(e.to_string().contains("`title` is 4 bytes"), "{e}");
    let e = d(None, Some(r#"{"id":"a","text":"0123456789A"}"#)).unwrap_err();
    assert_eq!(e.class(), "field_too_large");
    assert!(e.to_string().contains("`text` is 11 bytes"), "{e}");
    // at the limit is fine; limits count bytes, not characters
    assert!(d(None, Some(r#"{"id":"a","text":"0123456789"}"#)).is_ok());
    assert_eq!(
        d(None, Some(r#"{"id":"a","text":"ééééé\u00e9"}"#))
            .unwrap_err()
            .class(),
        "field_too_large"
    );
    // a delete is held to the id limit only
    assert!(d(
        None,
        Some(r#"{"op":"delete","id":"abcde","text":"0123456789A"}"#)
    )
    .is_ok());
}

/// Every other field limit is checked while decoding too (each in `limits.rs`).
#[test]
fn record_limits_apply_to_decoded_documents() {
    let acl: Vec<String> = (0..4097).map(|i| format!("group:{i}")).collect();
    let v = serde_json::json!({"id": "a", "acl": acl}).to_string();
    assert_eq!(class(dec(None, Some(&v))), "too_many_acl_entries");
    let v = serde_json::json!({"id": "a", "source": "s".repeat(65_531)}).to_string();
    assert_eq!(class(dec(None, Some(&v))), "field_too_large");
    let v = serde_json::json!({"id": "a", "metadata": {"k": "v".repeat(65_530)}}).to_string();
    assert_eq!(class(dec(None, Some(&v))), "field_too_large");
    let v = serde_json::json!({"id": "a", "metadata": {"a\u{0}": 1}}).to_string();
    assert_eq!(class(dec(None, Some(&v))), "invalid_field");
}

/// A binary document's file rides as base64 (padding optional, line breaks ignored) and
/// is kept as sent, without whitespace, as the document's text until it is parsed.
#[test]
fn binary_documents_carry_content_base64() {
    let v = r#"{"id":"a","content_type":"application/vnd.openxmlformats-officedocument.wordprocessingml.document","content_base64":"UEsD\nBA"}"#;
    let Change::Upsert(d) = dec(None, Some(v)).unwrap() else {
        panic!("an upsert")
    };
    assert_eq!(d.content_type, ContentType::Docx);
    assert_eq!(d.text, "UEsDBA");
    let back = encode(&Change::Upsert(d.clone()));
    let json: Value = serde_json::from_slice(&back).unwrap();
    assert_eq!(json["content_base64"], "UEsDBA");
    assert!(json.get("text").is_none());
    assert_eq!(
        decode(Some(b"a"), Some(&back), &RecordLimits::default()).unwrap(),
        Change::Upsert(d)
    );
    let v = r#"{"id":"b","content_type":"application/epub+zip","content_base64":"UEsDBA=="}"#;
    let Change::Upsert(d) = dec(None, Some(v)).unwrap() else {
        panic!("an upsert")
    };
    assert_eq!(
        (d.content_type, d.text.as_str()),
        (ContentType::Epub, "UEsDBA==")
    );
}

#[test]
fn class_invalid_field() {
    let cases = [
        (r#"{"id":"a","acl":"group:x"}"#, "`acl`"),
        (r#"{"id":"a","acl":["group:x",3]}"#, "`acl[1]`"),
        (r#"{"id":"a","acl":["group:x",""]}"#, "`acl[1]`"),
        (
            r#"{"id":"a","content_type":"application/pdf"}"#,
            "application/pdf",
        ),
        (r#"{"id":"a","content_type":5}"#, "`content_type`"),
        (r#"{"id":"a","title":["x"]}"#, "`title`"),
        (r#"{"id":"a","text":{"a":1}}"#, "`text`"),
        (r#"{"id":"a","source":false}"#, "`source`"),
        (r#"{"id":"a","metadata":[1]}"#, "`metadata`"),
        (r#"{"id":true}"#, "`id`"),
        (
            r#"{"id":"a","content_base64":"UEsDBA=="}"#,
            "content_type is text/plain",
        ),
        (
            r#"{"id":"a","content_type":"docx"}"#,
            "carries its file as content_base64",
        ),
        (
            r#"{"id":"a","content_type":"epub","text":"x","content_base64":"UEsDBA=="}"#,
            "not both",
        ),
        (
            r#"{"id":"a","content_type":"docx","content_base64":"not*base64"}"#,
            "not valid base64",
        ),
        (
            r#"{"id":"a","content_type":"docx","content_base64":7}"#,
            "`content_base64`",
        ),
    ];
    for (v, needle) in cases {
        let e = dec(None, Some(v)).unwrap_err();
        assert_eq!(e.class(), "invalid_field", "{v}: {e}");
        assert!(e.to_string().contains(needle), "{v}: {e}");
    }
    let e = dec(None, Some(r#"{"id":"a","acl":"x"}"#)).unwrap_err();
    assert!(e.to_string().contains("found a string"), "{e}");
}

#[test]
fn class_id_mismatch() {
    let e = dec(Some("a"), Some(r#"{"id":"b"}"#)).unwrap_err();
    assert_eq!(e.class(), "id_mismatch");
    assert!(e.to_string().contains("\"a\"") && e.to_string().contains("\"b\""));
    assert_eq!(
        class(dec(Some("1"), Some(r#"{"op":"delete","id":2}"#))),
        "id_mismatch"
    );
    // same id in both is fine
    assert_eq!(upsert(Some("a"), r#"{"id":"a"}"#).id, "a");
}

#[test]
fn every_class_is_listed() {
    let errors = [
        DecodeError::EmptyRecord,
        DecodeError::InvalidUtf8 {
            part: RecordPart::Value,
            offset: 0,
        },
        DecodeError::MalformedJson { detail: "x".into() },
        DecodeError::MissingId,
        DecodeError::UnknownOp {
            op: "x".into(),
            expected: "y",
        },
        DecodeError::TooLarge { size: 2, limit: 1 },
        DecodeError::InvalidField {
            field: "x".into(),
            reason: "y".into(),
        },
        DecodeError::IdMismatch {
            key: "a".into(),
            value: "b".into(),
        },
        DecodeError::Limit(LimitError::FieldTooLarge {
            field: "x".into(),
            size: 2,
            limit: 1,
        }),
        DecodeError::Limit(LimitError::TooManyAclEntries { count: 2, limit: 1 }),
        DecodeError::MissingAcl { reason: "x".into() },
    ];
    let classes: Vec<_> = errors.iter().map(DecodeError::class).collect();
    assert_eq!(classes, DecodeError::CLASSES);
}

#[test]
fn unicode_fields() {
    let d = upsert(
        Some("ドキュメント"),
        r#"{"title":"Ünïcödé 标题 🚀","text":"中文文本\u00e9\ud83d\ude80","metadata":{"ключ":"значение"},
            "acl":["group:日本"]}"#,
    );
    assert_eq!(d.id, "ドキュメント");
    assert_eq!(d.title, "Ünïcödé 标题 🚀");
    assert_eq!(d.text, "中文文本é🚀");
    assert_eq!(d.metadata["ключ"], "\"значение\"");
    assert_eq!(d.acl, vec!["group:日本"]);
    // lone surrogate escapes are malformed JSON for serde_json
    assert_eq!(
        class(dec(None, Some(r#"{"id":"a","text":"\ud800"}"#))),
        "malformed_json"
    );
}

#[test]
fn unknown_fields_go_to_metadata() {
    let d = upsert(
        None,
        r#"{"id":"a","lang":"de","tags":["x","y"],"n":1.5,"nested":{"z":1,"a":{"c":2,"b":3}},
            "nothing":null}"#,
    );
    assert_eq!(d.metadata["lang"], "\"de\"");
    assert_eq!(d.metadata["tags"], r#"["x","y"]"#);
    assert_eq!(d.metadata["n"], "1.5");
    assert_eq!(d.metadata["nested"], r#"{"a":{"b":3,"c":2},"z":1}"#);
    assert_eq!(d.metadata["nothing"], "null");
    assert_eq!(d.metadata.len(), 5);
}

#[test]
fn unknown_field_collisions() {
    let d = upsert(
        None,
        r#"{"id":"a","metadata":{"lang":"en","_envelope.lang":"taken"},"lang":"de","x":1}"#,
    );
    assert_eq!(d.metadata["lang"], "\"en\"", "explicit metadata wins");
    assert_eq!(d.metadata["_envelope.lang"], "\"taken\"");
    assert_eq!(d.metadata["_envelope.lang.2"], "\"de\"");
    assert_eq!(d.metadata["x"], "1");
    assert_eq!(d.metadata.len(), 4);
}

#[test]
fn limits_deserialize_with_defaults() {
    let l: RecordLimits = serde_json::from_str(r#"{"max_id_bytes":10}"#).unwrap();
    assert_eq!(l.max_id_bytes, 10);
    assert_eq!(l.max_value_bytes, 8 << 20);
    assert!(serde_json::from_str::<RecordLimits>(r#"{"max_idbytes":10}"#).is_err());
}

/// What `encode` writes, `decode` reads back, for any document `decode` could have produced.
#[test]
fn encode_then_decode_round_trips() {
    use crate::testing::Rng;
    let mut rng = Rng::new(11);
    let strings = [
        "",
        "plain",
        "Ünïcödé 标题 🚀",
        "quote \" and \\ back",
        "line\nbreak\ttab",
        "\u{0}nul",
    ];
    let values = [
        "\"en\"",
        "3",
        "-2.5",
        "true",
        "null",
        "[1,\"x\"]",
        "{\"a\":{\"b\":[]}}",
    ];
    for case in 0..300 {
        let mut metadata = BTreeMap::new();
        for _ in 0..rng.below(4) {
            let key = format!("{}{}", rng.pick(&strings), rng.below(9));
            let raw: &&str = rng.pick(&values);
            let v: Value = serde_json::from_str(raw).unwrap();
            metadata.insert(key.replace('\0', ""), canonical_json(&v));
        }
        let mut acl: Vec<String> = (0..rng.below(4))
            .map(|i| format!("group:{}{i}", rng.pick(&strings)))
            .collect();
        acl.sort();
        acl.dedup();
        let content_type = *rng.pick(&ContentType::ALL);
        let text = format!("{} {}", rng.pick(&strings), rng.pick(&strings));
        let doc = Document {
            id: format!("doc-{case}-{}", rng.pick(&strings)),
            title: rng.pick(&strings).to_string(),
            // a binary document holds its content_base64 as its text
            text: if content_type.is_binary() {
                use base64::Engine as _;
                base64::engine::general_purpose::STANDARD.encode(text.as_bytes())
            } else {
                text
            },
            content_type,
            source: rng.pick(&strings).to_string(),
            metadata,
            acl,
        };
        for change in [
            Change::Upsert(doc.clone()),
            Change::Delete { id: doc.id.clone() },
        ] {
            let bytes = encode(&change);
            let back = decode(Some(doc.id.as_bytes()), Some(&bytes), &lim());
            assert_eq!(
                back.as_ref(),
                Ok(&change),
                "{}",
                String::from_utf8_lossy(&bytes)
            );
            let by_value_id = decode(None, Some(&bytes), &lim());
            assert_eq!(by_value_id, Ok(change));
        }
    }
}
