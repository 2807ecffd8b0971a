//! The sealing policy's decisions, rows and time in (pure; no Milvus).

use std::time::{Duration, Instant};

use super::policy::{Decision, FlushPolicy, SealState, Trigger, MAX_RETRY_PAUSE};
use super::Sealer;
use crate::config::MilvusConfig;

fn policy(rows: u64, interval_ms: Option<u64>) -> FlushPolicy {
    FlushPolicy {
        rows,
        interval: interval_ms.map(Duration::from_millis),
    }
}

#[test]
fn nothing_written_nothing_flushed() {
    let t0 = Instant::now();
    let s = SealState::new(policy(100, Some(1000)));
    assert_eq!(s.decide(t0), Decision::Idle);
    assert_eq!(s.decide(t0 + Duration::from_secs(3600)), Decision::Idle);
}

#[test]
fn flushes_after_enough_rows() {
    let t0 = Instant::now();
    let mut s = SealState::new(policy(100, None));
    s.wrote(60, t0);
    assert_eq!(s.decide(t0), Decision::Idle, "no age limit: waits for rows");
    s.wrote(39, t0);
    assert_eq!(s.decide(t0), Decision::Idle);
    s.wrote(1, t0);
    assert_eq!(s.decide(t0), Decision::Flush(Trigger::Rows));
    assert_eq!(s.started(), 100);
    assert_eq!(s.decide(t0), Decision::Idle, "one flush at a time");
    s.wrote(500, t0);
    assert_eq!(s.decide(t0), Decision::Idle, "not while one runs");
    assert_eq!(s.unflushed(), 600);
    s.finished(true, t0);
    assert_eq!(
        s.unflushed(),
        500,
        "rows written during the flush wait for the next"
    );
    assert_eq!(s.decide(t0), Decision::Flush(Trigger::Rows));
}

#[test]
fn flushes_when_the_oldest_row_is_old_enough() {
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let mut s = SealState::new(policy(1000, Some(500)));
    s.wrote(1, t0);
    s.wrote(1, t0 + ms(400));
    assert_eq!(s.decide(t0 + ms(100)), Decision::WaitUntil(t0 + ms(500)));
    assert_eq!(s.decide(t0 + ms(500)), Decision::Flush(Trigger::Age));
    assert_eq!(s.started(), 2);
    s.finished(true, t0 + ms(600));
    assert_eq!(s.decide(t0 + ms(700)), Decision::Idle);
    // The clock starts again with the next row.
    s.wrote(3, t0 + ms(800));
    assert_eq!(s.decide(t0 + ms(900)), Decision::WaitUntil(t0 + ms(1300)));
}

#[test]
fn rows_written_during_a_flush_keep_their_age() {
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let mut s = SealState::new(policy(0, Some(500)));
    s.wrote(5, t0);
    assert_eq!(s.decide(t0 + ms(500)), Decision::Flush(Trigger::Age));
    s.started();
    s.wrote(7, t0 + ms(600));
    s.finished(true, t0 + ms(2000));
    // The row of 600 ms is already past its 500 ms.
    assert_eq!(s.decide(t0 + ms(2000)), Decision::Flush(Trigger::Age));
}

#[test]
fn a_failed_flush_gives_its_rows_back_and_retries_later() {
    let t0 = Instant::now();
    let s1 = Duration::from_secs(1);
    let mut s = SealState::new(policy(10, Some(60_000)));
    s.wrote(10, t0);
    assert_eq!(s.started(), 10);
    s.wrote(2, t0 + s1);
    s.finished(false, t0 + s1);
    assert_eq!(s.unflushed(), 12, "nothing is forgotten");
    assert_eq!(s.decide(t0 + s1), Decision::WaitUntil(t0 + 2 * s1));
    assert_eq!(s.decide(t0 + 2 * s1), Decision::Flush(Trigger::Retry));
    assert_eq!(s.started(), 12);
    s.finished(false, t0 + 2 * s1);
    assert_eq!(
        s.decide(t0 + 2 * s1),
        Decision::WaitUntil(t0 + 4 * s1),
        "pause doubles"
    );
    for _ in 0..20 {
        s.started();
        s.finished(false, t0);
    }
    assert_eq!(
        s.decide(t0),
        Decision::WaitUntil(t0 + MAX_RETRY_PAUSE),
        "pause is bounded"
    );
    s.started();
    s.finished(true, t0);
    assert_eq!(s.unflushed(), 0);
    s.wrote(3, t0);
    assert_eq!(
        s.decide(t0),
        Decision::WaitUntil(t0 + 60 * s1),
        "success resets the retry"
    );
}

#[test]
fn off_when_both_thresholds_are_zero() {
    let cfg = MilvusConfig {
        flush_rows: 0,
        flush_interval: Duration::ZERO,
        ..Default::default()
    };
    assert_eq!(Sealer::policy(&cfg), None);
    assert!(Sealer::start(cfg, None, None).unwrap().is_none());
    let t0 = Instant::now();
    let mut s = SealState::new(policy(0, None));
    s.wrote(1_000_000, t0);
    assert_eq!(s.decide(t0 + Duration::from_secs(86_400)), Decision::Idle);
    // The default: by rows only.
    assert_eq!(
        Sealer::policy(&MilvusConfig::default()),
        Some(FlushPolicy {
            rows: 4096,
            interval: None
        })
    );
    let by_age = MilvusConfig {
        flush_rows: 0,
        flush_interval: Duration::from_secs(10),
        ..Default::default()
    };
    assert_eq!(
        Sealer::policy(&by_age),
        Some(FlushPolicy {
            rows: 0,
            interval: Some(Duration::from_secs(10))
        })
    );
}
