//! Debezium decoding against the fixtures (`tests/fixtures/debezium`), every op, both converter
//! shapes, and every error class.

use super::*;
use crate::document::{ContentType, Document};

macro_rules! fixture {
    ($name:literal) => {
        include_bytes!(concat!("../../tests/fixtures/debezium/", $name)).as_slice()
    };
}

const KEY1: &[u8] = fixture!("create.key.json");
const KEY1_BARE: &[u8] = fixture!("create-noschema.key.json");
const KEY2: &[u8] = fixture!("pk-change-create.key.json");

fn customers() -> DebeziumMapping {
    DebeziumMapping {
        id_fields: vec!["id".into()],
        id_prefix: "customers:".into(),
        title_field: Some("email".into()),
        text_fields: vec!["first_name".into(), "last_name".into()],
        content_type: ContentType::PlainText,
        metadata_fields: vec!["email".into()],
        acl_field: None,
        null_acl: None,
        source_field: None,
    }
}

fn dec(key: Option<&[u8]>, value: Option<&[u8]>) -> Result<Option<Change>, DecodeError> {
    RecordFormat::Debezium(customers()).decode(key, value, &RecordLimits::default())
}

fn anne(id: &str, first: &str) -> Change {
    Change::Upsert(Document {
        id: format!("customers:{id}"),
        title: "annek@noanswer.org".into(),
        text: format!("{first}\n\nKretchmar"),
        content_type: ContentType::PlainText,
        source: "debezium://postgres/public.customers".into(),
        metadata: [("email".to_string(), "\"annek@noanswer.org\"".to_string())].into(),
        acl: vec![],
    })
}

fn delete(id: &str) -> Option<Change> {
    Some(Change::Delete {
        id: format!("customers:{id}"),
    })
}

#[test]
fn create_and_read_with_and_without_the_schema_wrapper() {
    let want = Some(anne("1", "Anne"));
    assert_eq!(
        dec(Some(KEY1), Some(fixture!("create.value.json"))),
        Ok(want.clone())
    );
    let bare = fixture!("create-noschema.value.json");
    assert_eq!(dec(Some(KEY1_BARE), Some(bare)), Ok(want.clone()));
    // keys and values of either shape mix, and the key may be absent
    assert_eq!(dec(Some(KEY1), Some(bare)), Ok(want.clone()));
    assert_eq!(dec(None, Some(bare)), Ok(want.clone()));
    assert_eq!(dec(Some(KEY1), Some(fixture!("read.value.json"))), Ok(want));
}

#[test]
fn update_delete_and_tombstone() {
    assert_eq!(
        dec(Some(KEY1), Some(fixture!("update.value.json"))),
        Ok(Some(anne("1", "Anne Marie")))
    );
    assert_eq!(
        dec(Some(KEY1), Some(fixture!("delete.value.json"))),
        Ok(delete("1"))
    );
    assert_eq!(
        dec(
            Some(KEY1_BARE),
            Some(fixture!("delete-noschema.value.json"))
        ),
        Ok(delete("1"))
    );
    // the delete names its row by `before` alone too
    assert_eq!(
        dec(None, Some(fixture!("delete.value.json"))),
        Ok(delete("1"))
    );
    // the tombstone that follows deletes the key's document again
    assert_eq!(dec(Some(KEY1), None), Ok(delete("1")));
    assert_eq!(dec(Some(KEY1_BARE), None), Ok(delete("1")));
    // older converters wrote a tombstone as a wrapper of nulls; JSON null is one too
    assert_eq!(
        dec(Some(KEY1), Some(br#"{"schema":null,"payload":null}"#)),
        Ok(delete("1"))
    );
    assert_eq!(dec(Some(KEY1), Some(b"null")), Ok(delete("1")));
}

/// A primary-key change 1 → 2 is delete(1), tombstone(1), create(2): applied in order, only
/// the new document remains.
#[test]
fn a_primary_key_change_leaves_exactly_the_new_document() {
    let sequence = [
        (KEY1, Some(fixture!("create.value.json"))),
        (KEY1, Some(fixture!("pk-change-delete.value.json"))),
        (KEY1, None),
        (KEY2, Some(fixture!("pk-change-create.value.json"))),
    ];
    let mut docs = std::collections::BTreeMap::new();
    for (key, value) in sequence {
        match dec(Some(key), value).unwrap() {
            Some(Change::Upsert(d)) => {
                docs.insert(d.id.clone(), d);
            }
            Some(Change::Delete { id }) => {
                docs.remove(&id);
            }
            None => panic!("every record of the sequence changes a document"),
        }
    }
    let Some(Change::Upsert(want)) = Some(anne("2", "Anne Marie")) else {
        unreachable!()
    };
    assert_eq!(docs.into_values().collect::<Vec<_>>(), vec![want]);
    // the headers Debezium adds name the keys the records already carry
    let headers: serde_json::Value =
        serde_json::from_slice(fixture!("pk-change.headers.json")).unwrap();
    assert_eq!(
        headers["create"]["__debezium.oldkey"],
        serde_json::from_slice::<serde_json::Value>(KEY1).unwrap()
    );
}

#[test]
fn message_events_change_nothing_and_truncate_is_refused() {
    assert_eq!(dec(None, Some(fixture!("message.value.json"))), Ok(None));
    let e = dec(None, Some(fixture!("truncate.value.json"))).unwrap_err();
    assert_eq!(e.class(), "unknown_op");
    assert!(e.to_string().contains("truncate"), "{e}");
}

#[test]
fn a_tombstone_whose_key_names_no_document_changes_nothing() {
    assert_eq!(dec(Some(br#"{"other":1}"#), None), Ok(None));
    assert_eq!(dec(None, None).unwrap_err().class(), "empty_record");
}

fn class(key: Option<&[u8]>, value: &str) -> &'static str {
    dec(key, Some(value.as_bytes())).unwrap_err().class()
}

fn event(op: &str, before: &str, after: &str) -> String {
    format!(
        r#"{{"before":{before},"after":{after},"source":{{"db":"d","table":"t"}},"op":"{op}"}}"#
    )
}

const ROW: &str = r#"{"id":7,"first_name":"A","last_name":"B","email":"e"}"#;

#[test]
fn errors_have_the_envelope_classes() {
    assert_eq!(class(None, "{not json"), "malformed_json");
    assert_eq!(class(None, "[1]"), "malformed_json");
    assert_eq!(
        class(Some(b"[1]"), &event("c", "null", ROW)),
        "malformed_json"
    );
    assert_eq!(
        dec(Some(b"\xff"), None).unwrap_err().class(),
        "invalid_utf8"
    );
    assert_eq!(class(None, r#"{"after":{}}"#), "invalid_field");
    assert_eq!(class(None, r#"{"op":3}"#), "invalid_field");
    assert_eq!(class(None, &event("x", "null", ROW)), "unknown_op");
    assert_eq!(class(None, &event("c", "null", "null")), "invalid_field");
    assert_eq!(class(None, &event("c", "null", "[]")), "invalid_field");
    assert_eq!(
        class(None, &event("c", "null", r#"{"first_name":"A"}"#)),
        "missing_id"
    );
    assert_eq!(class(None, &event("d", "null", "null")), "missing_id");
    assert_eq!(
        class(None, &event("c", "null", r#"{"id":1.5}"#)),
        "invalid_field"
    );
    // a column the mapping names and the row lacks
    assert_eq!(
        class(None, &event("c", "null", r#"{"id":1,"first_name":"A"}"#)),
        "invalid_field"
    );
    // the key, or a full `before`, naming another row
    assert_eq!(class(Some(KEY2), &event("c", "null", ROW)), "id_mismatch");
    assert_eq!(class(None, &event("u", r#"{"id":8}"#, ROW)), "id_mismatch");
    // Debezium's placeholder for an unchanged TOASTed column is not the column's text
    let toasted =
        r#"{"id":7,"first_name":"__debezium_unavailable_value","last_name":"B","email":"e"}"#;
    assert_eq!(class(None, &event("u", "null", toasted)), "invalid_field");
    assert_eq!(
        class(
            None,
            &event(
                "c",
                "null",
                r#"{"id":7,"first_name":{},"last_name":"B","email":"e"}"#
            )
        ),
        "invalid_field"
    );
}

#[test]
fn limits_are_the_envelopes() {
    let mapping = RecordFormat::Debezium(customers());
    let value = fixture!("create.value.json");
    let small = RecordLimits {
        max_value_bytes: 100,
        ..RecordLimits::default()
    };
    let e = mapping.decode(Some(KEY1), Some(value), &small).unwrap_err();
    assert_eq!(e.class(), "too_large");
    let short_ids = RecordLimits {
        max_id_bytes: 5,
        ..RecordLimits::default()
    };
    let e = mapping
        .decode(Some(KEY1), Some(value), &short_ids)
        .unwrap_err();
    assert_eq!(e.class(), "field_too_large");
    let e = mapping.decode(Some(KEY1), None, &short_ids).unwrap_err();
    assert_eq!(e.class(), "field_too_large");
    let short_titles = RecordLimits {
        max_title_bytes: 5,
        ..RecordLimits::default()
    };
    let e = mapping
        .decode(Some(KEY1), Some(value), &short_titles)
        .unwrap_err();
    assert_eq!(e.class(), "field_too_large");
}

#[test]
fn composite_ids_prefixes_nulls_metadata_acl_and_source() {
    let m = DebeziumMapping {
        id_fields: vec!["tenant".into(), "slug".into()],
        id_prefix: String::new(),
        title_field: Some("title".into()),
        text_fields: vec!["summary".into(), "body".into(), "n".into()],
        content_type: ContentType::Markdown,
        metadata_fields: vec!["lang".into(), "tags".into(), "gone".into()],
        acl_field: Some("acl".into()),
        null_acl: None,
        source_field: None,
    };
    let value = r##"{"op":"c","before":null,"source":{"db":"shop","schema":"","table":"pages"},
        "after":{"tenant":"a/b","slug":"x%y","title":null,"summary":null,"body":"# B","n":3,
                 "lang":"en","tags":["t"],"gone":null,"acl":" group:b, group:a ,,group:b"}}"##;
    let f = RecordFormat::Debezium(m.clone());
    let Ok(Some(Change::Upsert(d))) =
        f.decode(None, Some(value.as_bytes()), &RecordLimits::default())
    else {
        panic!("an upsert")
    };
    assert_eq!(d.id, "a%2Fb/x%25y");
    assert_eq!(d.title, "");
    assert_eq!(d.text, "# B\n\n3");
    assert_eq!(d.content_type, ContentType::Markdown);
    assert_eq!(d.source, "debezium://shop/pages");
    assert_eq!(d.metadata["lang"], "\"en\"");
    assert_eq!(d.metadata["tags"], "[\"t\"]");
    assert_eq!(d.metadata["gone"], "null");
    assert_eq!(d.acl, vec!["group:a", "group:b"]);
    // an ACL array, checked like the envelope's
    let arr = value.replace(r#"" group:b, group:a ,,group:b""#, r#"["u:z","u:y"]"#);
    let Ok(Some(Change::Upsert(d))) =
        f.decode(None, Some(arr.as_bytes()), &RecordLimits::default())
    else {
        panic!("an upsert")
    };
    assert_eq!(d.acl, vec!["u:y", "u:z"]);
    let empty = value.replace(r#"" group:b, group:a ,,group:b""#, r#"["u:z",""]"#);
    let e = f
        .decode(None, Some(empty.as_bytes()), &RecordLimits::default())
        .unwrap_err();
    assert_eq!(e.class(), "invalid_field");
    assert!(e.to_string().contains("`acl[1]`"), "{e}");
    // a single id field is taken as it is; the source field overrides the default
    let single = DebeziumMapping {
        id_fields: vec!["tenant".into()],
        source_field: Some("slug".into()),
        ..m
    };
    let Ok(Some(Change::Upsert(d))) = RecordFormat::Debezium(single).decode(
        None,
        Some(value.as_bytes()),
        &RecordLimits::default(),
    ) else {
        panic!("an upsert")
    };
    assert_eq!((d.id.as_str(), d.source.as_str()), ("a/b", "x%y"));
}

#[test]
fn a_rejected_record_names_its_document() {
    let f = RecordFormat::Debezium(customers());
    let l = RecordLimits::default();
    let named = |k: Option<&[u8]>, v: &str| f.named_document(k, Some(v.as_bytes()), &l);
    let bad_row = event("c", "null", r#"{"id":7,"first_name":{}}"#);
    assert_eq!(named(Some(KEY1), &bad_row).as_deref(), Some("customers:1"));
    assert_eq!(named(None, &bad_row).as_deref(), Some("customers:7"));
    assert_eq!(
        named(None, &event("d", r#"{"id":9}"#, "null")).as_deref(),
        Some("customers:9")
    );
    assert_eq!(named(None, "{not json"), None);
}

#[test]
fn mappings_are_validated() {
    assert!(customers().validate().is_ok());
    let no_id = DebeziumMapping {
        id_fields: vec![],
        ..customers()
    };
    assert!(no_id.validate().unwrap_err().contains("id_fields"));
    let no_text = DebeziumMapping {
        text_fields: vec![],
        ..customers()
    };
    assert!(no_text.validate().unwrap_err().contains("text_fields"));
    let binary = DebeziumMapping {
        content_type: ContentType::Pdf,
        ..customers()
    };
    assert!(binary.validate().is_err());
    let empty_name = DebeziumMapping {
        metadata_fields: vec![String::new()],
        ..customers()
    };
    assert!(empty_name.validate().is_err());
}

/// Freshet's own format reads the envelope exactly as [`crate::envelope::decode`] does.
#[test]
fn the_freshet_format_is_the_envelope() {
    let l = RecordLimits::default();
    let v = br#"{"op":"delete","id":"a"}"#;
    assert_eq!(
        RecordFormat::Freshet.decode(None, Some(v), &l),
        crate::envelope::decode(None, Some(v), &l).map(Some)
    );
    assert_eq!(
        RecordFormat::Freshet
            .named_document(None, Some(v), &l)
            .as_deref(),
        Some("a")
    );
}

/// A row whose ACL column is null or names no principal is refused (`missing_acl`) unless the
/// source says such rows are public; reserved words are never principals; without an ACL
/// column a row states no ACL, which `require_acl` refuses unless `null_acl` is `public`.
#[test]
fn rows_without_principals_follow_null_acl() {
    let event = |acl: &str| {
        format!(
            r#"{{"op":"c","before":null,"source":{{"db":"d","schema":"s","table":"t"}},
                "after":{{"id":1,"first_name":"A","last_name":"K","email":"e","acl":{acl}}}}}"#
        )
    };
    let with = |null_acl| DebeziumMapping {
        acl_field: Some("acl".into()),
        null_acl,
        ..customers()
    };
    let strict = RecordLimits {
        require_acl: true,
        ..RecordLimits::default()
    };
    let run = |m: &DebeziumMapping, limits: &RecordLimits, acl: &str| {
        RecordFormat::Debezium(m.clone()).decode(None, Some(event(acl).as_bytes()), limits)
    };
    let acl_of = |r: Result<Option<Change>, DecodeError>| match r {
        Ok(Some(Change::Upsert(d))) => d.acl,
        other => panic!("an upsert, got {other:?}"),
    };
    for nobody in ["null", "[]", r#""""#, r#"" , ""#] {
        for m in [with(None), with(Some(NullAcl::Refuse))] {
            let e = run(&m, &RecordLimits::default(), nobody).unwrap_err();
            assert_eq!(e.class(), "missing_acl", "{nobody}");
            assert!(e.to_string().contains("null_acl"), "{e}");
        }
        let public = with(Some(NullAcl::Public));
        assert!(acl_of(run(&public, &strict, nobody)).is_empty(), "{nobody}");
    }
    assert_eq!(
        acl_of(run(&with(None), &strict, r#""group:a,group:b""#)),
        ["group:a", "group:b"]
    );
    for reserved in [r#""public""#, r#""group:a, *""#, r#"["Everyone"]"#] {
        let e = run(&with(Some(NullAcl::Public)), &strict, reserved).unwrap_err();
        assert_eq!(e.class(), "invalid_field", "{reserved}");
        assert!(e.to_string().contains("reserved"), "{e}");
    }
    // no ACL column: unstated (public), refused under require_acl unless null_acl is public
    let none = customers();
    assert!(acl_of(run(&none, &RecordLimits::default(), "null")).is_empty());
    assert_eq!(
        run(&none, &strict, "null").unwrap_err().class(),
        "missing_acl"
    );
    let public = DebeziumMapping {
        null_acl: Some(NullAcl::Public),
        ..customers()
    };
    assert!(acl_of(run(&public, &strict, "null")).is_empty());
    let refuse_all = DebeziumMapping {
        null_acl: Some(NullAcl::Refuse),
        ..customers()
    };
    assert!(refuse_all.validate().unwrap_err().contains("acl_field"));
    assert_eq!(NullAcl::parse("public"), Some(NullAcl::Public));
    assert_eq!(NullAcl::parse("refuse"), Some(NullAcl::Refuse));
    assert_eq!(NullAcl::parse("allow"), None);
}
