//! Fast checks against librdkafka's in-process mock cluster (no broker needed).

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use freshet_kafka::{
    admin, dlq_headers, DlqProducer, DocumentProducer, KafkaConfig, PartitionReader, Record,
};
use rdkafka::mocking::MockCluster;

fn config(cluster: &MockCluster<'_, rdkafka::producer::DefaultProducerContext>) -> KafkaConfig {
    let mut cfg = KafkaConfig::with_brokers(cluster.bootstrap_servers());
    cfg.client_properties
        .insert("session.timeout.ms".into(), "6000".into());
    cfg
}

fn read_n(reader: &mut PartitionReader, n: usize) -> Vec<Record> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut out = Vec::new();
    while out.len() < n && Instant::now() < deadline {
        out.extend(
            reader
                .poll_batch(n - out.len(), Duration::from_millis(200))
                .unwrap(),
        );
    }
    out
}

#[test]
fn produce_read_commit_resume_on_mock() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("documents", 2, 1).unwrap();
    let cfg = config(&cluster);
    assert_eq!(admin::partitions(&cfg, "documents").unwrap(), vec![0, 1]);

    let producer = DocumentProducer::new(&cfg).unwrap();
    let n = producer
        .send_many(
            "documents",
            (0..20).map(|i| {
                let key = format!("k{i}").into_bytes();
                let value = (i != 3).then(|| format!("v{i}").into_bytes());
                (key, value)
            }),
        )
        .unwrap();
    assert_eq!(n, 20);

    let mut reader = PartitionReader::new(&cfg, "documents", &[0, 1], &BTreeMap::new()).unwrap();
    let got = read_n(&mut reader, 20);
    assert_eq!(got.len(), 20);
    let k3 = got
        .iter()
        .find(|r| r.key.as_deref() == Some(&b"k3"[..]))
        .unwrap();
    assert_eq!(k3.value, None);

    let mut next = BTreeMap::new();
    for r in &got {
        next.insert(r.partition, r.offset + 1);
    }
    reader.commit(&next).unwrap();
    assert_eq!(reader.committed().unwrap(), next);
    let hw = reader.high_watermarks().unwrap();
    assert_eq!(hw.values().sum::<i64>(), 20);
    drop(reader);

    producer.send("documents", b"k-new", Some(b"new")).unwrap();
    let mut resumed = PartitionReader::new(&cfg, "documents", &[0, 1], &BTreeMap::new()).unwrap();
    let got = read_n(&mut resumed, 1);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].key.as_deref(), Some(&b"k-new"[..]));
    assert!(resumed
        .poll_batch(5, Duration::from_millis(300))
        .unwrap()
        .is_empty());
}

#[test]
fn dlq_on_mock() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("documents", 1, 1).unwrap();
    cluster.create_topic("documents.dlq", 1, 1).unwrap();
    let cfg = config(&cluster);

    let dlq = DlqProducer::new(&cfg).unwrap();
    let original = Record {
        topic: "documents".into(),
        partition: 0,
        offset: 9,
        key: Some(b"k".to_vec()),
        value: None,
        headers: vec![("h".into(), Some(b"1".to_vec()))],
        timestamp_ms: None,
    };
    let failure = freshet_kafka::Failure {
        class: "malformed_json",
        stage: "decode",
        message: "boom",
    };
    dlq.send(&original, &failure).unwrap();
    let mut r = PartitionReader::new(&cfg, "documents.dlq", &[0], &BTreeMap::new()).unwrap();
    let got = read_n(&mut r, 1);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].key.as_deref(), Some(&b"k"[..]));
    assert_eq!(got[0].value, None);
    assert_eq!(
        got[0].header(dlq_headers::ERROR_MESSAGE),
        Some(Some(&b"boom"[..]))
    );
    assert_eq!(got[0].header("h"), Some(Some(&b"1"[..])));
}

/// A record written again where it was read: the partition named, not the key's, and its
/// headers in order.
#[test]
fn send_record_on_mock() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("documents", 4, 1).unwrap();
    let cfg = config(&cluster);
    let producer = DocumentProducer::new(&cfg).unwrap();
    let headers = vec![
        ("a".to_string(), Some(b"1".to_vec())),
        ("n".to_string(), None),
        (dlq_headers::REPLAY_OF.to_string(), Some(b"d/0/7".to_vec())),
    ];
    let mut placed = Vec::new();
    for p in [3, 1] {
        placed.push(
            producer
                .send_record("documents", p, Some(b"same-key"), Some(b"v"), &headers)
                .unwrap(),
        );
    }
    assert_eq!(placed, vec![(3, 0), (1, 0)]);
    let mut r = PartitionReader::new(&cfg, "documents", &[1, 3], &BTreeMap::new()).unwrap();
    let got = read_n(&mut r, 2);
    assert_eq!(got.len(), 2);
    for rec in &got {
        assert_eq!(rec.key.as_deref(), Some(&b"same-key"[..]));
        assert_eq!(rec.value.as_deref(), Some(&b"v"[..]));
        assert_eq!(rec.headers, headers);
    }
    assert!(producer
        .send_record("documents", -1, None, None, &[])
        .is_err());
}

#[test]
fn a_reader_that_polls_without_waiting_is_woken_when_records_arrive() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("documents", 1, 1).unwrap();
    let cfg = config(&cluster);
    let mut reader = PartitionReader::new(&cfg, "documents", &[0], &BTreeMap::new()).unwrap();
    let (tx, rx) = mpsc::channel();
    reader.wake_on_records(move || {
        let _ = tx.send(());
    });
    // Nothing to read yet; drain whatever wake-ups the assignment itself caused.
    assert!(reader.poll_batch(10, Duration::ZERO).unwrap().is_empty());
    while rx.try_recv().is_ok() {}

    let producer = DocumentProducer::new(&cfg).unwrap();
    producer
        .send_many("documents", [(b"k".to_vec(), Some(b"v".to_vec()))])
        .unwrap();
    // The reader is not polled until it is woken: the wake-up alone says the record is there.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut got = Vec::new();
    while got.is_empty() && Instant::now() < deadline {
        if rx.recv_timeout(Duration::from_secs(1)).is_ok() {
            got = reader.poll_batch(10, Duration::ZERO).unwrap();
        }
    }
    assert_eq!(got.len(), 1, "no wake-up brought the record");
    assert_eq!(got[0].value.as_deref(), Some(&b"v"[..]));
}

#[test]
fn the_fetched_high_watermark_needs_no_request_and_covers_what_was_read() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("changelog", 1, 1).unwrap();
    let cfg = config(&cluster);
    let producer = DocumentProducer::new(&cfg).unwrap();
    let mut reader = PartitionReader::new(&cfg, "changelog", &[0], &BTreeMap::new()).unwrap();
    assert_eq!(
        reader.fetched_high_watermark(0),
        None,
        "no fetch response yet"
    );
    let sent = (0..5).map(|i| (format!("k{i}").into_bytes(), Some(b"v".to_vec())));
    assert_eq!(producer.send_many("changelog", sent).unwrap(), 5);
    let got = read_n(&mut reader, 5);
    assert_eq!(got.len(), 5);
    let high = reader.fetched_high_watermark(0).expect("a fetch answered");
    assert_eq!(high, 5, "the log end the fetch carried");
    assert_eq!(reader.high_watermarks().unwrap()[&0], high);
    assert_eq!(reader.fetched_high_watermark(1), None, "not assigned");
    // Records written after the reader's last fetch show only once a fetch carries them.
    producer.send("changelog", b"k5", Some(b"v")).unwrap();
    assert_eq!(read_n(&mut reader, 1).len(), 1);
    assert_eq!(reader.fetched_high_watermark(0), Some(6));
}
