//! The dead-letter bookkeeping, the reading of dead letters for people and the replay rules.

use super::*;

#[test]
fn a_commit_resumes_at_the_first_pending_dead_letter() {
    let next = BTreeMap::from([(0, 40), (1, 7)]);
    let mut pending = Sent::new();
    assert_eq!(resume_marks(&next, &pending), next);
    pending.insert(("docs".into(), 2, 100), (0, 12));
    pending.insert(("docs".into(), 0, 5), (0, 30));
    pending.insert(("docs".into(), 1, 9), (2, 3));
    assert_eq!(
        resume_marks(&next, &pending),
        BTreeMap::from([(0, 12), (1, 7), (2, 3)])
    );
}

mod letters {
    use std::time::{Duration, UNIX_EPOCH};

    use freshet_kafka::{dlq_headers, Record};
    use freshet_operators::cdc::RecordFormat;
    use freshet_operators::limits::RecordLimits;

    use crate::dlq::letters::*;
    use crate::dlq::replay::*;
    use crate::topics::Topic;

    fn h(k: &str, v: &str) -> (String, Option<Vec<u8>>) {
        (k.to_string(), Some(v.as_bytes().to_vec()))
    }

    /// A dead letter as the producer writes it.
    fn record(offset: i64, key: &str, class: &str, failed_at_ms: i64) -> Record {
        Record {
            topic: "documents.dlq".into(),
            partition: 0,
            offset,
            key: Some(key.as_bytes().to_vec()),
            value: Some(br#"{"id":"x"}"#.to_vec()),
            headers: vec![
                h(dlq_headers::ERROR_CLASS, class),
                h(dlq_headers::ERROR_STAGE, "decode"),
                h(dlq_headers::ERROR_MESSAGE, "bad"),
                h(dlq_headers::SOURCE_TOPIC, "documents"),
                h(dlq_headers::SOURCE_PARTITION, "3"),
                h(dlq_headers::SOURCE_OFFSET, &(100 + offset).to_string()),
                h(dlq_headers::FAILED_AT_MS, &failed_at_ms.to_string()),
                h("content-type", "application/json"),
                h(dlq_headers::REPLAY_OF, "documents.dlq/0/1"),
            ],
            timestamp_ms: Some(failed_at_ms + 5),
        }
    }

    #[test]
    fn a_dead_letter_is_read_apart_from_its_original_headers() {
        let l = Letter::from_record(record(7, "k", "invalid_field", 1_000));
        assert_eq!(
            l.at,
            At {
                partition: 0,
                offset: 7
            }
        );
        assert_eq!(
            (l.class.as_str(), l.stage.as_str(), l.message.as_str()),
            ("invalid_field", "decode", "bad")
        );
        assert_eq!(
            l.source,
            Some(Source {
                topic: "documents".into(),
                partition: 3,
                offset: 107
            })
        );
        assert_eq!(l.time_ms(), Some(1_000));
        assert_eq!(
            l.headers,
            vec![
                h("content-type", "application/json"),
                h(dlq_headers::REPLAY_OF, "documents.dlq/0/1")
            ]
        );
        // Without the source headers it is still shown, but names no source.
        let mut r = record(8, "k", "invalid_field", 1_000);
        r.headers.retain(|(k, _)| k != dlq_headers::SOURCE_OFFSET);
        assert_eq!(Letter::from_record(r).source, None);
        // A file `freshet watch` refused names no record of a topic: it cannot be replayed.
        let mut file = record(9, "notes/a.md", "file_too_large", 1_000);
        for (k, v) in &mut file.headers {
            if k == dlq_headers::SOURCE_TOPIC {
                *v = Some(b"file".to_vec());
            }
            if k == dlq_headers::SOURCE_PARTITION || k == dlq_headers::SOURCE_OFFSET {
                *v = Some(b"-1".to_vec());
            }
        }
        let file = Letter::from_record(file);
        assert_eq!(file.source, None);
        assert_eq!(
            Verdict::of(&file, &ReplayScan::default(), true, true),
            Verdict::NoSource
        );
    }

    #[test]
    fn filters_take_class_key_and_time() {
        let l = Letter::from_record(record(1, "hr/pay.md", "invalid_field", 10_000));
        let f = |f: Filter| f.matches(&l);
        assert!(f(Filter::default()));
        assert!(f(Filter {
            class: Some("invalid_field".into()),
            ..Filter::default()
        }));
        assert!(!f(Filter {
            class: Some("malformed_json".into()),
            ..Filter::default()
        }));
        assert!(f(Filter {
            key: KeyMatch::Prefix(b"hr/".to_vec()),
            ..Filter::default()
        }));
        assert!(!f(Filter {
            key: KeyMatch::Prefix(b"eng/".to_vec()),
            ..Filter::default()
        }));
        assert!(f(Filter {
            key: KeyMatch::Exact(b"hr/pay.md".to_vec()),
            ..Filter::default()
        }));
        assert!(!f(Filter {
            key: KeyMatch::Exact(b"hr/".to_vec()),
            ..Filter::default()
        }));
        assert!(f(Filter {
            since_ms: Some(10_000),
            until_ms: Some(10_001),
            ..Filter::default()
        }));
        assert!(!f(Filter {
            since_ms: Some(10_001),
            ..Filter::default()
        }));
        assert!(!f(Filter {
            until_ms: Some(10_000),
            ..Filter::default()
        }));
        assert!(f(Filter {
            places: vec![At {
                partition: 0,
                offset: 1
            }],
            ..Filter::default()
        }));
        assert!(!f(Filter {
            places: vec![At {
                partition: 0,
                offset: 2
            }],
            ..Filter::default()
        }));
    }

    #[test]
    fn an_unknown_class_or_an_empty_window_is_refused() {
        for c in [
            "invalid_field",
            "malformed_json",
            "missing_acl",
            "crash_loop",
            "embedding_failed",
            "too_large",
            "file_too_large",
        ] {
            Filter {
                class: Some(c.into()),
                ..Filter::default()
            }
            .check()
            .unwrap();
        }
        let e = Filter {
            class: Some("invalid_acl".into()),
            ..Filter::default()
        }
        .check()
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("unknown dead-letter class \"invalid_acl\"") && e.contains("invalid_field"),
            "{e}"
        );
        let e = Filter {
            since_ms: Some(5),
            until_ms: Some(5),
            ..Filter::default()
        }
        .check()
        .unwrap_err();
        assert!(e.to_string().contains("nothing can match"), "{e}");
    }

    #[test]
    fn times_are_rfc3339_dates_or_durations_ago() {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let at = |s: &str| parse_time(s, now).unwrap();
        assert_eq!(at("2026-11-26T05:00:00Z"), 1_795_669_200_000);
        assert_eq!(at("2026-11-26T13:00:00+08:00"), 1_795_669_200_000);
        assert_eq!(at("2026-11-26 05:00:00"), 1_795_669_200_000);
        assert_eq!(at("2026-11-26T05:00"), 1_795_669_200_000);
        assert_eq!(at("2026-11-26"), 1_795_651_200_000);
        assert_eq!(at("2h"), 1_800_000_000_000 - 7_200_000);
        assert_eq!(at("7d"), 1_800_000_000_000 - 7 * 86_400_000);
        for bad in ["yesterday", "2026-13-01", "2026-11-26T25:00:00Z", "", "-2h"] {
            let e = parse_time(bad, now).unwrap_err().to_string();
            assert!(e.contains("is not a time"), "{bad}: {e}");
        }
        assert_eq!(format_time(1_795_669_200_000), "2026-11-26T05:00:00Z");
    }

    #[test]
    fn places_are_partition_and_offset() {
        assert_eq!(
            "0:17".parse::<At>().unwrap(),
            At {
                partition: 0,
                offset: 17
            }
        );
        assert_eq!(
            "17".parse::<At>().unwrap(),
            At {
                partition: 0,
                offset: 17
            }
        );
        assert_eq!("2:0".parse::<At>().unwrap().to_string(), "2:0");
        for bad in ["", "x", "1:", "-1:3", "1:-3", "1:2:3"] {
            assert!(bad.parse::<At>().is_err(), "{bad}");
        }
    }

    #[test]
    fn bytes_are_shown_safely() {
        assert_eq!(shown("文档 ok".as_bytes(), 100), "文档 ok");
        assert_eq!(shown(b"a\nb\x1b[31m\\", 100), "a\\nb\\u{1b}[31m\\\\");
        assert_eq!(shown(b"\xff\xfeok", 100), "\\xff\\xfeok");
        assert_eq!(shown("文档文档".as_bytes(), 2), "文档…");
        assert_eq!(shown(b"abc", 3), "abc");
    }

    #[test]
    fn a_selection_keeps_the_newest_and_counts_them_all() {
        let letters = vec![
            Letter::from_record(record(1, "a", "invalid_field", 30)),
            Letter::from_record(record(2, "b", "malformed_json", 10)),
            Letter::from_record(record(3, "c", "invalid_field", 20)),
        ];
        let s = Selection::newest(letters.clone(), Some(2));
        assert_eq!(s.matched, 3);
        let kept: Vec<i64> = s.letters.iter().map(|l| l.at.offset).collect();
        assert_eq!(kept, [3, 1]);
        assert_eq!(s.by_class.get("invalid_field"), Some(&2));
        assert_eq!(s.by_class.get("malformed_json"), Some(&1));
        assert_eq!(Selection::newest(letters, None).letters.len(), 3);
    }

    #[test]
    fn a_summary_names_the_replay() {
        let l = Letter::from_record(record(4, "k\n", "invalid_field", 1_795_669_200_000));
        let replay = Source {
            topic: "documents".into(),
            partition: 3,
            offset: 200,
        };
        let json = serde_json::to_value(l.summary(Some(Some(&replay)))).unwrap();
        assert_eq!(json["replayed"], true);
        assert_eq!(json["at"], "0:4");
        assert_eq!(json["key"], "k\\n");
        assert_eq!(json["time"], "2026-11-26T05:00:00Z");
        assert_eq!(json["replayed_as"]["offset"], 200);
        assert_eq!(json["value_bytes"], 10);
        let unknown = serde_json::to_value(l.summary(None)).unwrap();
        assert!(unknown["replayed"].is_null() && unknown["replayed_as"].is_null());
        assert_eq!(
            serde_json::to_value(l.summary(Some(None))).unwrap()["replayed"],
            false
        );
    }

    #[test]
    fn a_source_topic_not_read_leaves_its_replays_unknown_and_stops_a_replay() {
        let l = Letter::from_record(record(1, "k", "invalid_field", 1));
        let placed = Source {
            topic: "documents".into(),
            partition: 3,
            offset: 9,
        };
        let mut scan = ReplayScan::default();
        assert_eq!(scan.replayed(&l), Some(None));
        scan.found.insert(l.at, placed.clone());
        assert_eq!(scan.replayed(&l), Some(Some(&placed)));
        scan.found.clear();
        scan.unreadable
            .insert("documents".into(), "the topic is not on the broker".into());
        assert_eq!(scan.replayed(&l), None);
        let e = scan.complete().unwrap_err().to_string();
        assert!(
            e.contains("none is replayed") && e.contains("not on the broker"),
            "{e}"
        );
        assert_eq!(
            ReplayScan::default().complete().unwrap(),
            ReplayScan::default()
        );
    }

    #[test]
    fn a_replay_names_its_dead_letter_once_and_is_not_repeated() {
        let l = Letter::from_record(record(9, "k", "invalid_field", 1));
        let headers = replay_headers(&l, "documents.dlq");
        // The original's headers, its earlier origin replaced by this one.
        assert_eq!(
            headers,
            vec![
                h("content-type", "application/json"),
                h(dlq_headers::REPLAY_OF, "documents.dlq/0/9")
            ]
        );
        let none = ReplayScan::default();
        assert_eq!(Verdict::of(&l, &none, false, false), Verdict::Replay);
        let placed = Source {
            topic: "documents".into(),
            partition: 3,
            offset: 500,
        };
        let mut scan = ReplayScan::default();
        scan.found.insert(l.at, placed.clone());
        // Replayed before: never again, with a fix or over newer records either.
        for (fixed, superseded_too) in [(false, false), (true, false), (true, true)] {
            assert_eq!(
                Verdict::of(&l, &scan, fixed, superseded_too),
                Verdict::Replayed(placed.clone())
            );
        }
        // A newer record of its key: left out unless asked.
        let newer = Source {
            topic: "documents".into(),
            partition: 3,
            offset: 120,
        };
        let mut scan = ReplayScan::default();
        scan.newer.insert(l.at, newer.clone());
        assert_eq!(
            Verdict::of(&l, &scan, true, false),
            Verdict::Superseded(newer)
        );
        assert_eq!(Verdict::of(&l, &scan, true, true), Verdict::Replay);
        let mut null = Letter::from_record(record(10, "k", "invalid_field", 1));
        null.value = None;
        assert_eq!(Verdict::of(&null, &none, false, false), Verdict::NullValue);
        assert_eq!(Verdict::of(&null, &none, true, false), Verdict::Replay);
        null.source = None;
        assert_eq!(Verdict::of(&null, &none, true, true), Verdict::NoSource);
    }

    #[test]
    fn a_fix_must_decode_under_its_topic() {
        let l = Letter::from_record(record(1, "doc-1", "invalid_field", 1));
        let topics = [Topic {
            name: "documents".into(),
            format: RecordFormat::Freshet,
        }];
        let limits = RecordLimits::default();
        check_fix(
            &l,
            br#"{"id":"doc-1","text":"hello","acl":["group:hr"]}"#,
            &topics,
            &limits,
        )
        .unwrap();
        let e = check_fix(&l, b"{not json", &topics, &limits).unwrap_err();
        assert!(format!("{e:#}").contains("not JSON"), "{e:#}");
        let e = check_fix(
            &l,
            br#"{"id":"doc-1","text":"t","ACL":["group:hr"]}"#,
            &topics,
            &limits,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("refused again (invalid_field)"), "{e}");
        let e = check_fix(&l, br#"{"id":"other","text":"t"}"#, &topics, &limits).unwrap_err();
        assert!(e.to_string().contains("id_mismatch"), "{e}");
        let other = [Topic {
            name: "crm".into(),
            format: RecordFormat::Freshet,
        }];
        let e = check_fix(&l, br#"{"id":"doc-1","text":"t"}"#, &other, &limits).unwrap_err();
        assert!(e.to_string().contains("does not read"), "{e}");
    }
}
