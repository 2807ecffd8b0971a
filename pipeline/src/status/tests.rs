//! The status board: freshness buckets and window, dead letters counted incrementally with the
//! newest kept, lag and health.

use std::collections::BTreeMap;

use freshet_kafka::{dlq_headers, Record};

use super::dead_letters::{Tally, LATEST};
use super::freshness::{Freshness, Sample};
use super::*;
use crate::dlq::letters::Letter;

#[test]
fn freshness_buckets_ages_by_commit_time() {
    let mut f = Freshness::new(900, 10);
    let t0 = 1_764_143_000_000; // a multiple of 10 s
    f.observe(t0 + 1_000, [100, 300, 200]);
    f.observe(t0 + 9_999, [50]);
    f.observe(t0 + 10_000, [1_000, 2_000]);
    assert_eq!(
        f.samples(t0 + 10_000),
        vec![
            Sample {
                t_ms: t0,
                p50_ms: 100,
                max_ms: 300,
                records: 4
            },
            Sample {
                t_ms: t0 + 10_000,
                p50_ms: 1_000,
                max_ms: 2_000,
                records: 2
            },
        ]
    );
}

#[test]
fn freshness_forgets_what_left_the_window_and_stays_bounded() {
    let mut f = Freshness::new(60, 10);
    let t0 = 1_764_143_000_000;
    f.observe(t0, [5]);
    f.observe(t0 + 30_000, [7]);
    // The first bucket ends at t0 + 10 s: out of the window from t0 + 70 s.
    assert_eq!(f.samples(t0 + 69_999).len(), 2);
    assert_eq!(f.samples(t0 + 70_000).len(), 1);
    f.observe(t0 + 70_000, [9]);
    assert_eq!(
        f.samples(t0 + 70_000)
            .iter()
            .map(|s| s.p50_ms)
            .collect::<Vec<_>>(),
        vec![7, 9]
    );
    // An hour of commits every second keeps at most window / bucket + 1 buckets.
    for s in 0..3_600 {
        f.observe(t0 + 100_000 + s * 1_000, [s]);
    }
    let samples = f.samples(t0 + 100_000 + 3_599_000);
    assert!(f.held() <= 7, "{} buckets held", f.held());
    // The six buckets that end within the last minute and the one under way, 10 s each.
    assert_eq!(samples.iter().map(|s| s.records).sum::<u64>(), 70);
}

#[test]
fn a_full_bucket_keeps_a_sample_for_its_median_and_its_exact_max() {
    let mut f = Freshness::new(900, 10);
    let t0 = 1_764_143_000_000;
    f.observe(t0, (0..100_000).map(|i| i % 1_000));
    f.observe(t0, [999_999]);
    let s = &f.samples(t0)[0];
    assert_eq!((s.records, s.max_ms), (100_001, 999_999));
    assert!(
        (400..600).contains(&s.p50_ms),
        "median of a uniform 0..1000: {s:?}"
    );
}

fn h(k: &str, v: &str) -> (String, Option<Vec<u8>>) {
    (k.to_string(), Some(v.as_bytes().to_vec()))
}

fn letter(partition: i32, offset: i64, key: &str, class: &str, at_ms: i64) -> Letter {
    Letter::from_record(Record {
        topic: "documents.dlq".into(),
        partition,
        offset,
        key: Some(key.as_bytes().to_vec()),
        value: Some(b"{}".to_vec()),
        headers: vec![
            h(dlq_headers::ERROR_CLASS, class),
            h(dlq_headers::ERROR_STAGE, "decode"),
            h(dlq_headers::ERROR_MESSAGE, "bad\nline"),
            h(dlq_headers::SOURCE_TOPIC, "docs"),
            h(dlq_headers::SOURCE_PARTITION, "0"),
            h(dlq_headers::SOURCE_OFFSET, &(40 + offset).to_string()),
            h(dlq_headers::FAILED_AT_MS, &at_ms.to_string()),
        ],
        timestamp_ms: Some(at_ms),
    })
}

#[test]
fn dead_letters_are_counted_by_class_and_read_on_from_where_the_last_read_stopped() {
    let mut t = Tally::default();
    assert_eq!(t.from(&[0, 1]), BTreeMap::from([(0, -2), (1, -2)]));
    t.add(letter(0, 0, "doc-1", "unparseable", 1_000));
    t.add(letter(0, 1, "doc-2", "too_large", 2_000));
    t.add(letter(1, 5, "文档-3", "unparseable", 3_000));
    // The next read starts past what was read, per partition; a new partition from its start.
    assert_eq!(
        t.from(&[0, 1, 2]),
        BTreeMap::from([(0, 2), (1, 6), (2, -2)])
    );
    t.add(letter(0, 2, "doc-4", "unparseable", 4_000));
    let v = t.view();
    assert_eq!(
        v.by_class,
        BTreeMap::from([("too_large".into(), 1), ("unparseable".into(), 3)])
    );
    assert_eq!(v.total, 4);
    let newest = &v.latest[0];
    assert_eq!((newest.partition, newest.offset), (0, 2));
    assert_eq!(newest.key.as_deref(), Some("doc-4"));
    assert_eq!(newest.message, "bad\\nline", "shown safely");
    assert_eq!(newest.source.as_deref(), Some("docs/0@42"));
    assert_eq!(newest.time_ms, Some(4_000));
    assert_eq!(newest.replayed, None, "not looked for yet");
    assert_eq!(v.latest[1].key.as_deref(), Some("文档-3"));
}

#[test]
fn only_the_newest_dead_letters_are_kept_but_all_are_counted() {
    let mut t = Tally::default();
    for i in 0..(LATEST as i64 + 15) {
        // Out of time order across partitions.
        t.add(letter(
            (i % 2) as i32,
            i,
            &format!("k{i}"),
            "invalid_field",
            10_000 - i * 7 % 50,
        ));
    }
    let v = t.view();
    assert_eq!(v.total, LATEST as u64 + 15);
    assert_eq!(v.latest.len(), LATEST);
    let times: Vec<i64> = v.latest.iter().map(|l| l.time_ms.unwrap()).collect();
    assert!(
        times.windows(2).all(|w| w[0] >= w[1]),
        "newest first: {times:?}"
    );
}

#[test]
fn lag_is_the_high_watermark_past_the_committed_offset() {
    let b = Board::default();
    b.lag("docs", 1, Some(120), 125);
    b.lag("docs", 0, None, 3);
    let v = b.view(0, true);
    assert_eq!(
        v.partitions,
        vec![
            PartitionLag {
                topic: "docs".into(),
                partition: 0,
                committed: None,
                high_watermark: 3,
                lag: 3
            },
            PartitionLag {
                topic: "docs".into(),
                partition: 1,
                committed: Some(120),
                high_watermark: 125,
                lag: 5
            },
        ]
    );
    assert!(v.health.kafka.ok, "{:?}", v.health.kafka);
}

#[test]
fn health_says_unknown_before_the_services_answered() {
    let v = Board::default().view(0, false).health;
    for h in [&v.kafka, &v.milvus, &v.model] {
        assert!(!h.ok && h.detail.starts_with("unknown"), "{h:?}");
    }
}

#[test]
fn a_stall_makes_its_service_unhealthy_until_it_resumes() {
    let b = Board::default();
    b.model_loaded("all-MiniLM-L6-v2");
    b.lag("docs", 0, Some(1), 1);
    b.milvus_wrote();
    let v = b.view(0, true).health;
    assert!(v.kafka.ok && v.milvus.ok && v.model.ok, "{v:?}");
    assert_eq!(v.model.detail, "all-MiniLM-L6-v2");
    b.stalled("milvus", "writing to Milvus: connection refused");
    b.stalled("dlq", "producing a dead letter: timed out");
    b.stalled("embedding_server", "embedding: 503");
    b.stalled("tantivy", "writing to tantivy: No space left on device");
    let v = b.view(0, true).health;
    assert!(
        !v.tantivy.ok && v.tantivy.detail.contains("No space"),
        "{v:?}"
    );
    assert!(
        !v.milvus.ok && v.milvus.detail.contains("connection refused"),
        "{v:?}"
    );
    assert!(
        !v.kafka.ok && v.kafka.detail.contains("dead letters"),
        "{v:?}"
    );
    assert!(!v.model.ok && v.model.detail.contains("503"), "{v:?}");
    for at in ["milvus", "dlq", "embedding_server", "tantivy"] {
        b.resumed(at);
    }
    let v = b.view(0, true).health;
    assert!(
        v.kafka.ok && v.milvus.ok && v.model.ok && v.tantivy.ok,
        "{v:?}"
    );
}

#[test]
fn a_broker_error_after_its_last_answer_is_unhealthy() {
    let b = Board::default();
    b.lag("docs", 0, Some(1), 1);
    b.kafka_failed("fetching watermarks: broker transport failure");
    let v = b.view(0, true).health;
    assert!(
        !v.kafka.ok && v.kafka.detail.contains("transport failure"),
        "{v:?}"
    );
    b.lag("docs", 0, Some(1), 1);
    assert!(b.view(0, true).health.kafka.ok);
    b.model_failed("no such file");
    assert!(!b.view(0, true).health.model.ok);
}
