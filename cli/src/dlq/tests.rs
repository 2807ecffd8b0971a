//! `freshet dlq`'s flags and output: filters checked before the broker is asked, tables aligned
//! with CJK keys, user bytes shown safely.

use std::time::{Duration, UNIX_EPOCH};

use clap::Parser;
use freshet_kafka::{dlq_headers, Record};
use freshet_pipeline::dlq::letters::{At, KeyMatch, Letter, Selection, Source};
use freshet_pipeline::dlq::replay::{ReplayScan, Replays, Verdict};

use super::*;

fn h(k: &str, v: &[u8]) -> (String, Option<Vec<u8>>) {
    (k.to_string(), Some(v.to_vec()))
}

fn letter(offset: i64, key: &[u8], class: &str, message: &[u8], value: &[u8]) -> Letter {
    Letter::from_record(Record {
        topic: "documents.dlq".into(),
        partition: 0,
        offset,
        key: Some(key.to_vec()),
        value: Some(value.to_vec()),
        headers: vec![
            h(dlq_headers::ERROR_CLASS, class.as_bytes()),
            h(dlq_headers::ERROR_STAGE, b"decode"),
            h(dlq_headers::ERROR_MESSAGE, message),
            h(dlq_headers::SOURCE_TOPIC, b"documents"),
            h(dlq_headers::SOURCE_PARTITION, b"1"),
            h(dlq_headers::SOURCE_OFFSET, offset.to_string().as_bytes()),
            h(dlq_headers::FAILED_AT_MS, b"1795669200000"),
            h("trace", b"a\x1bb"),
        ],
        timestamp_ms: None,
    })
}

#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    filter: FilterArgs,
}

fn filter(args: &[&str]) -> Result<Filter> {
    let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let flags = Flags::try_parse_from(std::iter::once("x").chain(args.iter().copied()))?;
    flags.filter.filter(now)
}

#[test]
fn flags_make_the_filter_and_bad_ones_are_refused() {
    let f = filter(&[
        "--class",
        "invalid_field",
        "--key-prefix",
        "hr/",
        "--since",
        "2h",
    ])
    .unwrap();
    assert_eq!(f.class.as_deref(), Some("invalid_field"));
    assert_eq!(f.key, KeyMatch::Prefix(b"hr/".to_vec()));
    assert_eq!(f.since_ms, Some(1_800_000_000_000 - 7_200_000));
    assert_eq!(
        filter(&["--key", "a"]).unwrap().key,
        KeyMatch::Exact(b"a".to_vec())
    );
    let e = |args: &[&str]| format!("{:#}", filter(args).unwrap_err());
    assert!(e(&["--class", "bogus"]).contains("unknown dead-letter class"));
    assert!(e(&["--since", "last tuesday"]).contains("--since: \"last tuesday\" is not a time"));
    assert!(e(&["--since", "1h", "--until", "2h"]).contains("nothing can match"));
    assert!(e(&["--limit", "0"]).contains("--limit 0"));
    assert!(e(&["--key", "a", "--key-prefix", "b"]).contains("cannot be used with"));
}

#[test]
fn the_table_aligns_wide_keys_and_escapes_user_bytes() {
    let a = letter(
        3,
        "报告/季度.md".as_bytes(),
        "invalid_field",
        b"bad \"ACL\"\n\x1b[2J",
        b"{}",
    );
    let b = letter(4, b"k\xff", "malformed_json", b"expected value", b"{");
    let sel = Selection::newest(vec![a.clone(), b], None);
    let replays = ReplayScan {
        found: Replays::from([(
            a.at,
            Source {
                topic: "documents".into(),
                partition: 1,
                offset: 90,
            },
        )]),
        ..ReplayScan::default()
    };
    let t = format::table(&sel, &replays);
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines.len(), 3, "{t}");
    assert!(lines[0].starts_with("AT   TIME"), "{t}");
    // The class column starts at the same terminal column on every line.
    let class_at: Vec<usize> = lines
        .iter()
        .map(|l| {
            let i = ["CLASS", "invalid_field", "malformed_json"]
                .iter()
                .find_map(|c| l.find(c))
                .unwrap();
            unicode_width::UnicodeWidthStr::width(&l[..i])
        })
        .collect();
    assert!(class_at.windows(2).all(|w| w[0] == w[1]), "{t}");
    assert!(
        lines[1].contains("报告/季度.md") && lines[1].contains(" yes "),
        "{t}"
    );
    assert!(lines[1].contains("bad \"ACL\"\\n\\u{1b}[2J"), "{t}");
    assert!(
        lines[2].contains("k\\xff") && lines[2].contains(" no "),
        "{t}"
    );
    assert!(!t.contains('\x1b'), "{t}");
    assert_eq!(
        format::counts(&sel),
        "2 dead letters match: invalid_field 1, malformed_json 1\n"
    );
    let json = format::json_lines(&sel, &replays).unwrap();
    let first: serde_json::Value = serde_json::from_str(json.lines().next().unwrap()).unwrap();
    assert_eq!(first["key"], "报告/季度.md");
    assert_eq!(first["replayed_as"]["offset"], 90);
    // A source topic that could not be read: not known, neither yes nor no.
    let unknown = ReplayScan {
        unreadable: [("documents".to_string(), "gone".to_string())].into(),
        ..ReplayScan::default()
    };
    let t = format::table(&Selection::newest(vec![a.clone()], None), &unknown);
    assert!(t.lines().nth(1).is_some_and(|l| l.contains(" ? ")), "{t}");
    let newer = Source {
        topic: "documents".into(),
        partition: 1,
        offset: 12,
    };
    let s = format::show(&a, "documents.dlq", unknown.replayed(&a), Some(&newer));
    assert!(
        s.contains("newer      documents 1:12 has this key too: a replay would undo it"),
        "{s}"
    );
    assert!(
        s.contains("replayed   not known (documents could not be read)"),
        "{s}"
    );
}

#[test]
fn show_prints_everything_safely_and_a_plan_says_what_happens() {
    let l = letter(
        5,
        b"doc-1",
        "invalid_field",
        b"m",
        "{\"id\":\"doc-1\",\n\"text\":\"中文\x07\"}".as_bytes(),
    );
    let s = format::show(&l, "documents.dlq", Some(None), None);
    assert!(s.contains("at         documents.dlq 0:5"), "{s}");
    assert!(s.contains("failed at  2026-11-26T05:00:00Z"), "{s}");
    assert!(s.contains("source     documents 1:5"), "{s}");
    assert!(s.contains("replayed   no\n"), "{s}");
    assert!(s.contains("  trace: a\\u{1b}b"), "{s}");
    // A control character inside a JSON string is not JSON.
    assert!(s.contains("32 bytes, text"), "{s}");
    let json = letter(6, b"doc-1", "invalid_field", b"m", br#"{"id":"doc-1"}"#);
    assert!(format::show(&json, "documents.dlq", Some(None), None).contains("14 bytes, JSON"));
    assert!(s.contains("  \"text\":\"中文\\u{7}\"}"), "{s}");
    assert!(!s.contains('\x1b') && !s.contains('\x07'), "{s}");
    let placed = Source {
        topic: "documents".into(),
        partition: 1,
        offset: 77,
    };
    assert!(format::show(&l, "documents.dlq", Some(Some(&placed)), None)
        .contains("replayed   yes, as documents 1:77"));
    let p = format::plan(&[
        (&l, Verdict::Replay),
        (&l, Verdict::Replayed(placed.clone())),
        (&l, Verdict::Superseded(placed)),
    ]);
    assert!(p.contains("superseded by documents 1:77"), "{p}");
    assert!(
        p.contains(" replay\n") && p.contains("replayed before, as documents 1:77"),
        "{p}"
    );
}

#[test]
fn show_takes_a_place_or_a_key() {
    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        c: DlqCommand,
    }
    let parse =
        |args: &[&str]| Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied()));
    match parse(&["show", "2:17"]).map(|c| c.c) {
        Ok(DlqCommand::Show { at, .. }) => assert_eq!(
            at,
            Some(At {
                partition: 2,
                offset: 17
            })
        ),
        _ => panic!("show 2:17"),
    }
    assert!(parse(&["show"]).is_err());
    assert!(parse(&["show", "x:1"]).is_err());
    assert!(parse(&["show", "1", "--key", "k"]).is_err());
    assert!(parse(&["replay", "--yes", "--dry-run"]).is_err());
}
