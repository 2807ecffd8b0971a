//! Live tests against a real broker (tansu in freshet's deployment).
//!
//! Built with the `live` feature only (`deploy/test.sh` enables it, starts the broker and sets
//! `FRESHET_KAFKA_BROKERS`); under that feature a missing broker address is a failure.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use freshet_kafka::{
    admin, dlq_headers, partitions_for_worker, DlqProducer, DocumentProducer, Failure, KafkaConfig,
    PartitionReader, Record,
};

fn live_config(test: &str) -> KafkaConfig {
    // RUST_LOG=librdkafka=debug,freshet_kafka=debug shows the client's view of the broker.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let brokers = std::env::var("FRESHET_KAFKA_BROKERS").unwrap_or_else(|_| {
        panic!(
            "FRESHET_KAFKA_BROKERS is not set: the live Kafka tests ({test}) need the broker that \
             deploy/test.sh starts"
        )
    });
    let unique = format!(
        "{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let mut cfg = KafkaConfig::with_brokers(brokers);
    cfg.topic = format!("freshet-test-{test}-{unique}");
    cfg.dlq_topic = format!("{}.dlq", cfg.topic);
    cfg.group_id = format!("freshet-test-{test}-{unique}");
    cfg.client_properties
        .insert("session.timeout.ms".into(), "6000".into());
    // e.g. FRESHET_KAFKA_DEBUG=eos,protocol (with RUST_LOG=librdkafka=debug).
    if let Ok(debug) = std::env::var("FRESHET_KAFKA_DEBUG") {
        cfg.client_properties.insert("debug".into(), debug);
    }
    // Extra librdkafka properties for experiments: FRESHET_KAFKA_PROPS="linger.ms=50,acks=1".
    if let Ok(props) = std::env::var("FRESHET_KAFKA_PROPS") {
        for kv in props.split(',').filter(|kv| !kv.is_empty()) {
            let (k, v) = kv.split_once('=').expect("FRESHET_KAFKA_PROPS: k=v,k=v");
            cfg.client_properties.insert(k.into(), v.into());
        }
    }
    cfg
}

/// Polls until `n` records have been read or `timeout` passes.
fn read_n(reader: &mut PartitionReader, n: usize, timeout: Duration) -> Vec<Record> {
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    while out.len() < n && Instant::now() < deadline {
        out.extend(
            reader
                .poll_batch(n - out.len(), Duration::from_millis(500))
                .unwrap(),
        );
    }
    out
}

fn key_of(i: usize) -> Vec<u8> {
    format!("doc-{i:03}").into_bytes()
}

fn value_of(i: usize) -> Option<Vec<u8>> {
    // Record 42 is a tombstone.
    (i != 42).then(|| format!("{{\"n\":{i}}}").into_bytes())
}

/// Produces the 100 test records; returns the next offset per partition.
fn produce_100(cfg: &KafkaConfig) -> BTreeMap<i32, i64> {
    let producer = DocumentProducer::new(cfg).unwrap();
    // A few one at a time, the rest pipelined.
    let mut next: BTreeMap<i32, i64> = BTreeMap::new();
    for i in 0..5 {
        let (p, o) = producer
            .send(&cfg.topic, &key_of(i), value_of(i).as_deref())
            .unwrap();
        let e = next.entry(p).or_default();
        *e = (*e).max(o + 1);
    }
    let n = producer
        .send_many(&cfg.topic, (5..100).map(|i| (key_of(i), value_of(i))))
        .unwrap();
    assert_eq!(n, 95);
    producer.flush().unwrap();
    next
}

#[test]
fn topics_produce_split_read_commit_resume() {
    let cfg = live_config("main");
    admin::ensure_topic(&cfg, &cfg.topic, 4).unwrap();
    admin::ensure_topic(&cfg, &cfg.topic, 4).unwrap(); // idempotent
    let parts = admin::partitions(&cfg, &cfg.topic).unwrap();
    assert_eq!(parts, vec![0, 1, 2, 3]);

    produce_100(&cfg);

    // Two workers split the partitions and together see every record exactly once.
    let mut readers: Vec<PartitionReader> = (0..2)
        .map(|w| {
            PartitionReader::new(
                &cfg,
                &cfg.topic,
                &partitions_for_worker(&parts, w, 2),
                &BTreeMap::new(),
            )
            .unwrap()
        })
        .collect();
    assert_eq!(readers[0].partitions(), &[0, 2]);
    assert_eq!(readers[1].partitions(), &[1, 3]);
    let mut all = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while all.len() < 100 && Instant::now() < deadline {
        for r in readers.iter_mut() {
            let batch = r.poll_batch(100, Duration::from_millis(300)).unwrap();
            for rec in &batch {
                assert!(r.partitions().contains(&rec.partition));
            }
            all.extend(batch);
        }
    }
    // Nothing more arrives.
    for r in readers.iter_mut() {
        assert!(r
            .poll_batch(10, Duration::from_millis(500))
            .unwrap()
            .is_empty());
    }
    assert_eq!(all.len(), 100, "every record exactly once");
    let mut by_key: BTreeMap<Vec<u8>, &Record> = BTreeMap::new();
    for rec in &all {
        assert!(
            by_key.insert(rec.key.clone().unwrap(), rec).is_none(),
            "duplicate"
        );
        assert_eq!(rec.topic, cfg.topic);
        assert!(rec.timestamp_ms.is_some());
    }
    for i in 0..100 {
        let rec = by_key[&key_of(i)];
        assert_eq!(rec.value, value_of(i), "value of record {i}");
    }
    assert!(by_key[&key_of(42)].value.is_none(), "tombstone stays null");
    // The same key always lands in the same partition (murmur2).
    let producer = DocumentProducer::new(&cfg).unwrap();
    let (p, o) = producer
        .send(&cfg.topic, &key_of(7), Some(b"again"))
        .unwrap();
    assert_eq!(p, by_key[&key_of(7)].partition);
    assert!(o > by_key[&key_of(7)].offset);

    // Per-partition offsets are dense and ordered.
    let mut next: BTreeMap<i32, i64> = BTreeMap::new();
    for rec in &all {
        let e = next.entry(rec.partition).or_insert(0);
        assert_eq!(rec.offset, *e, "offsets in order without gaps");
        *e += 1;
    }
    let mut hw = BTreeMap::new();
    for r in &readers {
        hw.extend(r.high_watermarks().unwrap());
    }
    let mut expect_hw = next.clone();
    *expect_hw.get_mut(&p).unwrap() += 1;
    for part in &parts {
        assert_eq!(hw[part], expect_hw.get(part).copied().unwrap_or(0));
    }

    // Commit part-way: reader 0 commits everything it read minus the last record of each
    // partition; reader 1 commits nothing.
    assert!(readers[0].committed().unwrap().is_empty());
    let mut commit: BTreeMap<i32, i64> = BTreeMap::new();
    for part in readers[0].partitions() {
        if let Some(n) = next.get(part) {
            commit.insert(*part, n - 1);
        }
    }
    assert!(!commit.is_empty());
    readers[0].commit(&commit).unwrap();
    assert_eq!(readers[0].committed().unwrap(), commit);
    assert!(readers[0]
        .commit(&BTreeMap::from([(readers[1].partitions()[0], 0)]))
        .is_err());
    drop(readers);

    // A new reader of all partitions resumes at the committed offsets (and at the earliest
    // offset where the group has none).
    let mut resumed = PartitionReader::new(&cfg, &cfg.topic, &parts, &BTreeMap::new()).unwrap();
    assert_eq!(resumed.committed().unwrap(), commit);
    let expected: usize = parts
        .iter()
        .map(|p| {
            let end = expect_hw.get(p).copied().unwrap_or(0);
            (end - commit.get(p).copied().unwrap_or(0)) as usize
        })
        .sum();
    let got = read_n(&mut resumed, expected, Duration::from_secs(30));
    assert_eq!(got.len(), expected);
    for p in &parts {
        let first = got.iter().find(|r| r.partition == *p);
        if let Some(first) = first {
            assert_eq!(first.offset, commit.get(p).copied().unwrap_or(0));
        }
    }
    assert!(resumed
        .poll_batch(10, Duration::from_millis(500))
        .unwrap()
        .is_empty());
    drop(resumed);

    // Start offsets override the committed ones.
    let p0 = *commit.keys().next().unwrap();
    let mut overridden =
        PartitionReader::new(&cfg, &cfg.topic, &[p0], &BTreeMap::from([(p0, 0)])).unwrap();
    let n0 = expect_hw[&p0] as usize;
    let got = read_n(&mut overridden, n0, Duration::from_secs(30));
    assert_eq!(got.len(), n0);
    assert_eq!(got[0].offset, 0);
    assert!(PartitionReader::new(&cfg, &cfg.topic, &[0], &BTreeMap::from([(1, 0)])).is_err());
}

#[test]
fn poll_batch_respects_max_records_and_max_wait() {
    let cfg = live_config("poll");
    admin::ensure_topic(&cfg, &cfg.topic, 1).unwrap();
    let producer = DocumentProducer::new(&cfg).unwrap();
    let n = producer
        .send_many(&cfg.topic, (0..50).map(|i| (key_of(i), value_of(i))))
        .unwrap();
    assert_eq!(n, 50);
    let mut reader = PartitionReader::new(&cfg, &cfg.topic, &[0], &BTreeMap::new()).unwrap();
    let t = Instant::now();
    let first = reader.poll_batch(10, Duration::from_secs(20)).unwrap();
    assert_eq!(first.len(), 10);
    assert!(
        t.elapsed() < Duration::from_secs(15),
        "returns once max_records are read"
    );
    let rest = read_n(&mut reader, 40, Duration::from_secs(20));
    assert_eq!(rest.len(), 40);
    let offsets: Vec<i64> = first.iter().chain(&rest).map(|r| r.offset).collect();
    assert_eq!(offsets, (0..50).collect::<Vec<_>>());
    let t = Instant::now();
    assert!(reader
        .poll_batch(10, Duration::from_millis(700))
        .unwrap()
        .is_empty());
    let waited = t.elapsed();
    assert!(waited >= Duration::from_millis(650), "waited {waited:?}");
    assert!(waited < Duration::from_secs(3), "waited {waited:?}");
    // A record produced while polling is returned before max_wait.
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            producer.send(&cfg.topic, b"late", Some(b"v")).unwrap();
        });
        let t = Instant::now();
        let got = reader.poll_batch(1, Duration::from_secs(20)).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].key.as_deref(), Some(&b"late"[..]));
        eprintln!(
            "produce->consume with a waiting reader took {:?}",
            t.elapsed()
        );
        assert!(t.elapsed() < Duration::from_secs(10));
    });
    // Fewer records than max_records: the poll returns them without waiting out max_wait.
    producer
        .send_many(&cfg.topic, (50..53).map(|i| (key_of(i), value_of(i))))
        .unwrap();
    let t = Instant::now();
    let mut got = Vec::new();
    while got.len() < 3 && t.elapsed() < Duration::from_secs(30) {
        got.extend(reader.poll_batch(100, Duration::from_secs(30)).unwrap());
    }
    assert_eq!(got.len(), 3);
    assert!(
        t.elapsed() < Duration::from_secs(15),
        "a partial batch waited {:?}",
        t.elapsed()
    );
}

#[test]
fn dlq_carries_original_record_and_headers() {
    let cfg = live_config("dlq");
    admin::ensure_topic(&cfg, &cfg.dlq_topic, 1).unwrap();
    let dlq = DlqProducer::new(&cfg).unwrap();
    let original = Record {
        topic: cfg.topic.clone(),
        partition: 3,
        offset: 1234,
        key: Some(b"doc-9".to_vec()),
        value: Some(b"{not json".to_vec()),
        headers: vec![
            ("trace-id".into(), Some(b"abc".to_vec())),
            ("empty".into(), None),
        ],
        timestamp_ms: Some(1),
    };
    let before = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let failure = Failure {
        class: "malformed_json",
        stage: "decode",
        message: "expected value at line 1 column 2",
    };
    dlq.send(&original, &failure).unwrap();
    let tombstone = Record {
        key: None,
        value: None,
        headers: vec![],
        offset: 1235,
        ..original.clone()
    };
    dlq.send(
        &tombstone,
        &Failure {
            message: "null",
            ..failure
        },
    )
    .unwrap();
    dlq.flush().unwrap();

    let mut reader = PartitionReader::new(&cfg, &cfg.dlq_topic, &[0], &BTreeMap::new()).unwrap();
    let got = read_n(&mut reader, 2, Duration::from_secs(30));
    assert_eq!(got.len(), 2);
    let d = &got[0];
    assert_eq!(d.key, original.key);
    assert_eq!(d.value, original.value);
    let h = |name: &str| {
        d.header(name)
            .flatten()
            .map(|v| String::from_utf8(v.to_vec()).unwrap())
    };
    assert_eq!(
        h(dlq_headers::ERROR_CLASS).as_deref(),
        Some("malformed_json")
    );
    assert_eq!(h(dlq_headers::ERROR_STAGE).as_deref(), Some("decode"));
    assert_eq!(
        h(dlq_headers::ERROR_MESSAGE).as_deref(),
        Some("expected value at line 1 column 2")
    );
    assert_eq!(h(dlq_headers::SOURCE_TOPIC), Some(cfg.topic.clone()));
    assert_eq!(h(dlq_headers::SOURCE_PARTITION).as_deref(), Some("3"));
    assert_eq!(h(dlq_headers::SOURCE_OFFSET).as_deref(), Some("1234"));
    let at: i64 = h(dlq_headers::FAILED_AT_MS).unwrap().parse().unwrap();
    assert!(at >= before);
    assert_eq!(h("trace-id").as_deref(), Some("abc"));
    assert_eq!(d.header("empty"), Some(None));
    let names: BTreeSet<&str> = d.headers.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names.len(), 9);

    let t = &got[1];
    assert_eq!(t.key, None);
    assert_eq!(t.value, None);
    assert_eq!(
        t.header(dlq_headers::SOURCE_OFFSET),
        Some(Some(&b"1235"[..]))
    );
}

#[test]
fn send_many_publishes_5k_documents_fast() {
    let cfg = live_config("bulk");
    admin::ensure_topic(&cfg, &cfg.topic, 4).unwrap();
    let producer = DocumentProducer::new(&cfg).unwrap();
    let body = "lorem ipsum dolor sit amet ".repeat(80); // ~2 KiB
    let t = Instant::now();
    let n = producer
        .send_many(
            &cfg.topic,
            (0..5000).map(|i| {
                let doc = serde_json::json!({"op": "upsert", "id": format!("d{i}"), "text": body});
                (
                    format!("d{i}").into_bytes(),
                    Some(serde_json::to_vec(&doc).unwrap()),
                )
            }),
        )
        .unwrap();
    let took = t.elapsed();
    eprintln!("send_many: 5000 x ~2 KiB documents in {took:?}");
    assert_eq!(n, 5000);
    // An empty value is not a tombstone.
    producer.send(&cfg.topic, b"empty", Some(b"")).unwrap();

    let parts = admin::partitions(&cfg, &cfg.topic).unwrap();
    let mut reader = PartitionReader::new(&cfg, &cfg.topic, &parts, &BTreeMap::new()).unwrap();
    let t = Instant::now();
    let got = read_n(&mut reader, 5001, Duration::from_secs(120));
    eprintln!("read 5001 records in {:?}", t.elapsed());
    assert_eq!(got.len(), 5001);
    let hw: i64 = reader.high_watermarks().unwrap().values().sum();
    assert_eq!(hw, 5001);
    let empty = got
        .iter()
        .find(|r| r.key.as_deref() == Some(&b"empty"[..]))
        .unwrap();
    assert_eq!(empty.value.as_deref(), Some(&b""[..]));
}

/// A record read again by partition and offset, long after it was consumed: key, value and
/// headers as produced; an offset the partition does not hold is `None`.
#[test]
fn read_one_fetches_a_record_by_offset() {
    let cfg = live_config("read_one");
    admin::ensure_topic(&cfg, &cfg.topic, 2).unwrap();
    let producer = DocumentProducer::new(&cfg).unwrap();
    let mut sent = Vec::new();
    for i in 0..5 {
        let v = format!("{{\"i\":{i}}}");
        sent.push(
            producer
                .send(&cfg.topic, format!("k{i}").as_bytes(), Some(v.as_bytes()))
                .unwrap(),
        );
    }
    let (p, o) = sent[3];
    let r = PartitionReader::read_one(&cfg, &cfg.topic, p, o, Duration::from_secs(30))
        .unwrap()
        .expect("the record is there");
    assert_eq!((r.partition, r.offset), (p, o));
    assert_eq!(r.key.as_deref(), Some(&b"k3"[..]));
    assert_eq!(r.value.as_deref(), Some(&br#"{"i":3}"#[..]));
    let past = sent
        .iter()
        .filter(|(q, _)| *q == p)
        .map(|(_, o)| o)
        .max()
        .unwrap()
        + 1;
    let none = PartitionReader::read_one(&cfg, &cfg.topic, p, past, Duration::from_secs(2));
    assert!(matches!(none, Ok(None)), "{none:?}");
}
