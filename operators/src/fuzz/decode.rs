//! The record decoders fuzzed: freshet's envelope and Debezium change events, on arbitrary
//! bytes and on structured but wrong JSON. Every record decodes to a change that holds the
//! envelope's guarantees, or to a classified error; the record's named document is computed
//! without a panic either way.

use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{json, Map, Value};

use super::{config, json_value, text, within_deadline};
use crate::cdc::{DebeziumMapping, RecordFormat};
use crate::document::{Change, ContentType};
use crate::envelope::DecodeError;
use crate::limits::RecordLimits;

const FIELDS: &[&str] = &[
    "op",
    "id",
    "title",
    "text",
    "content_type",
    "content_base64",
    "source",
    "metadata",
    "acl",
    "extra",
];

/// Small limits, so that generated records also cross them.
fn tight_limits() -> RecordLimits {
    RecordLimits {
        max_value_bytes: 4096,
        max_id_bytes: 16,
        max_title_bytes: 64,
        max_text_bytes: 1024,
        max_source_bytes: 64,
        max_metadata_bytes: 256,
        max_acl_entries: 4,
        max_principal_bytes: 16,
        ..RecordLimits::default()
    }
}

/// A value that is often right for its field and often wrong.
fn field_value(field: &'static str) -> BoxedStrategy<Value> {
    let right: BoxedStrategy<Value> = match field {
        "op" => select(vec!["upsert", "delete", "merge", "", "UPSERT"])
            .prop_map(Value::from)
            .boxed(),
        "id" => select(vec!["k0", "k1", "", " ", "a/b", "中文"])
            .prop_map(Value::from)
            .boxed(),
        "content_type" => select(vec![
            "text/plain",
            "text/markdown",
            "text/html",
            "text/csv",
            "text/x-rust",
            "pdf",
            "docx",
            "epub",
            "image/png",
            "",
        ])
        .prop_map(Value::from)
        .boxed(),
        "content_base64" => prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..256).prop_map(|b| {
                use base64::Engine as _;
                Value::from(base64::engine::general_purpose::STANDARD.encode(b))
            }),
            "[A-Za-z0-9+/=!]{0,40}".prop_map(Value::from),
        ]
        .boxed(),
        "metadata" => proptest::collection::btree_map("[a-z]{0,4}", json_value(2), 0..5)
            .prop_map(|m| Value::Object(m.into_iter().collect()))
            .boxed(),
        "acl" => proptest::collection::vec(
            prop_oneof![
                select(vec!["group:a", "group:b", "", " ", "user:x"]).prop_map(Value::from),
                json_value(1),
            ],
            0..7,
        )
        .prop_map(Value::Array)
        .boxed(),
        _ => text(20).prop_map(Value::from).boxed(),
    };
    prop_oneof![3 => right, 1 => json_value(3)].boxed()
}

/// An object with some of the envelope's fields (and unknown ones), each right or wrong.
fn envelope_object() -> impl Strategy<Value = Value> {
    proptest::collection::vec(select(FIELDS), 0..9)
        .prop_flat_map(|fields| {
            let values: Vec<_> = fields
                .into_iter()
                .map(|f| field_value(f).prop_map(move |v| (f.to_string(), v)))
                .collect();
            values
        })
        .prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<_, _>>()))
}

/// Bytes of a record part: arbitrary, arbitrary JSON, or JSON cut short.
fn record_bytes(object: BoxedStrategy<Value>) -> impl Strategy<Value = Option<Vec<u8>>> {
    prop_oneof![
        1 => Just(None),
        2 => proptest::collection::vec(any::<u8>(), 0..128).prop_map(Some),
        2 => json_value(3).prop_map(|v| Some(v.to_string().into_bytes())),
        6 => object.clone().prop_map(|v| Some(v.to_string().into_bytes())),
        2 => (object, any::<prop::sample::Index>()).prop_map(|(v, i)| {
            let b = v.to_string().into_bytes();
            let n = i.index(b.len() + 1);
            Some(b[..n].to_vec())
        }),
    ]
}

fn key_bytes() -> impl Strategy<Value = Option<Vec<u8>>> {
    prop_oneof![
        Just(None),
        proptest::collection::vec(any::<u8>(), 0..24).prop_map(Some),
        select(vec!["k0", "k1", "", "中文"]).prop_map(|k| Some(k.as_bytes().to_vec())),
        json_value(2).prop_map(|v| Some(v.to_string().into_bytes())),
    ]
}

/// What every decoded record must hold, whatever it was.
fn check_decoded(r: &Result<Option<Change>, DecodeError>, limits: &RecordLimits) {
    match r {
        Ok(Some(Change::Upsert(d))) => {
            assert!(!d.id.is_empty(), "an upsert without an id");
            assert!(d.id.len() <= limits.max_id_bytes, "id over its limit");
            assert!(
                d.acl.windows(2).all(|w| w[0] < w[1]),
                "acl not sorted and unique: {:?}",
                d.acl
            );
            assert!(d.acl.iter().all(|p| !p.is_empty()), "empty principal");
            assert!(d.acl.len() <= limits.max_acl_entries);
            for v in d.metadata.values() {
                serde_json::from_str::<Value>(v).expect("metadata values are JSON");
            }
            if !d.content_type.is_binary() {
                assert!(d.text.len() <= limits.max_text_bytes, "text over its limit");
            }
        }
        Ok(Some(Change::Delete { id })) => {
            assert!(!id.is_empty());
            assert!(id.len() <= limits.max_id_bytes);
        }
        Ok(None) => {}
        Err(e) => {
            assert!(DecodeError::CLASSES.contains(&e.class()), "{}", e.class());
            assert!(!e.to_string().is_empty());
        }
    }
}

fn run(format: RecordFormat, key: Option<Vec<u8>>, value: Option<Vec<u8>>, tight: bool) {
    within_deadline("decode", move || {
        let limits = if tight {
            tight_limits()
        } else {
            RecordLimits::default()
        };
        let r = format.decode(key.as_deref(), value.as_deref(), &limits);
        if matches!(format, RecordFormat::Freshet) {
            assert!(
                !matches!(r, Ok(None)),
                "the envelope always yields a change"
            );
        }
        check_decoded(&r, &limits);
        if let Some(id) = format.named_document(key.as_deref(), value.as_deref(), &limits) {
            assert!(!id.is_empty() && id.len() <= limits.max_id_bytes);
        }
    })
}

fn mapping() -> DebeziumMapping {
    DebeziumMapping {
        id_fields: vec!["tenant".into(), "id".into()],
        id_prefix: "t:".into(),
        title_field: Some("title".into()),
        text_fields: vec!["body".into(), "summary".into()],
        content_type: ContentType::Markdown,
        metadata_fields: vec!["lang".into(), "tags".into()],
        acl_field: Some("acl".into()),
        null_acl: None,
        source_field: Some("url".into()),
    }
}

const ROW_FIELDS: &[&str] = &[
    "tenant", "id", "title", "body", "summary", "lang", "tags", "acl", "url", "other",
];

fn row() -> impl Strategy<Value = Value> {
    let cell = prop_oneof![
        3 => text(10).prop_map(Value::from),
        1 => Just(Value::from(crate::cdc::mapping::UNAVAILABLE_VALUE)),
        2 => json_value(2),
    ];
    prop_oneof![
        1 => Just(Value::Null),
        1 => json_value(2),
        6 => proptest::collection::btree_map(select(ROW_FIELDS), cell, 0..10)
            .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
    ]
}

/// A Debezium change event, often valid, with or without its schema wrapper.
fn debezium_event() -> impl Strategy<Value = Value> {
    let op = prop_oneof![
        4 => select(vec!["c", "r", "u", "d", "m", "t", ""]).prop_map(Value::from),
        1 => json_value(1),
    ];
    (op, row(), row(), any::<bool>(), any::<bool>()).prop_map(
        |(op, before, after, schema, drop_op)| {
            let mut e = json!({"before": before, "after": after,
                           "source": {"db": "d", "schema": "s", "table": "pages"}});
            if !drop_op {
                e["op"] = op;
            }
            if schema {
                json!({"schema": {"type": "struct"}, "payload": e})
            } else {
                e
            }
        },
    )
}

fn debezium_key() -> impl Strategy<Value = Option<Vec<u8>>> {
    prop_oneof![
        2 => key_bytes(),
        3 => row().prop_map(|r| Some(r.to_string().into_bytes())),
        1 => row().prop_map(|r| Some(json!({"schema": null, "payload": r}).to_string().into_bytes())),
    ]
}

proptest! {
    #![proptest_config(config(400))]

    #[test]
    fn envelope_arbitrary_bytes(key in key_bytes(), value in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..512)), tight in any::<bool>()) {
        run(RecordFormat::Freshet, key, value, tight);
    }

    #[test]
    fn envelope_near_valid_json(key in key_bytes(), value in record_bytes(envelope_object().boxed()), tight in any::<bool>()) {
        run(RecordFormat::Freshet, key, value, tight);
    }

    #[test]
    fn debezium_arbitrary_bytes(key in key_bytes(), value in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..512)), tight in any::<bool>()) {
        run(RecordFormat::Debezium(mapping()), key, value, tight);
    }

    #[test]
    fn debezium_near_valid_events(key in debezium_key(), event in debezium_event(), cut in proptest::option::of(any::<prop::sample::Index>()), tight in any::<bool>()) {
        let mut bytes = event.to_string().into_bytes();
        if let Some(i) = cut {
            bytes.truncate(i.index(bytes.len() + 1));
        }
        run(RecordFormat::Debezium(mapping()), key, Some(bytes), tight);
    }
}
