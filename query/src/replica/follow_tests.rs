//! Tests of the replica's follower ([`super`]).

use super::*;

fn payload(next: Option<i64>) -> CommitPayload {
    let mut p = CommitPayload::new(Default::default(), 1);
    p.changelog_next = next;
    p
}

#[test]
fn an_index_the_topic_cannot_bring_up_to_date_is_built_again() {
    let dir = tempfile::tempdir().unwrap();
    let none = |_| Ok(None);
    let day = 86_400_000;
    let reason = |p: Option<CommitPayload>, marks, ts: Option<i64>| {
        rebuild_reason(dir.path(), p.as_ref(), marks, |_| Ok(ts), day).unwrap()
    };
    assert_eq!(reason(None, (0, 10), None), Some("new"));
    assert_eq!(reason(Some(payload(None)), (0, 10), None), Some("new"));
    assert_eq!(
        reason(Some(payload(Some(3))), (5, 10), None),
        Some("behind")
    );
    assert_eq!(
        reason(Some(payload(Some(11))), (0, 10), None),
        Some("behind")
    );
    assert_eq!(reason(Some(payload(Some(10))), (0, 10), None), None);
    let now = now_ms() as i64;
    assert_eq!(
        reason(Some(payload(Some(4))), (0, 10), Some(now - 1000)),
        None
    );
    assert_eq!(
        reason(Some(payload(Some(4))), (0, 10), Some(now - 2 * day as i64)),
        Some("stale")
    );
    std::fs::write(dir.path().join(REBUILD_FILE), b"").unwrap();
    assert_eq!(
        rebuild_reason(dir.path(), Some(&payload(Some(10))), (0, 10), none, day).unwrap(),
        Some("other_index")
    );
}

/// A live replica builds a batch's segment when the batch's last change arrives, serves
/// nothing of it before the marker, and commits it at the marker together with changes read
/// in between (a pipeline that restarted publishes the batch again).
#[test]
fn a_batch_is_staged_before_its_marker_and_served_only_after_it() {
    use freshet_core::testing::chunk;
    use freshet_tantivy::ChunkIndexReader;

    let cluster = rdkafka::mocking::MockCluster::new(1).unwrap();
    cluster.create_topic("changelog", 1, 1).unwrap();
    cluster.create_topic("unstaged", 1, 1).unwrap();
    let kafka = KafkaConfig::with_brokers(cluster.bootstrap_servers());
    let producer = freshet_kafka::DocumentProducer::new(&kafka).unwrap();
    let publish_to = |topic: &str, mut records: Vec<changelog::Encoded>, end: bool| {
        if end {
            changelog::mark_batch_end(&mut records);
        }
        let rows: Vec<_> = records
            .into_iter()
            .map(|e| (e.key, e.value, e.headers))
            .collect();
        producer.send_to_partition(topic, PARTITION, &rows).unwrap();
    };
    let publish = |records, end| publish_to("changelog", records, end);
    let marker = |epoch: u64| {
        let m = changelog::Marker {
            epoch,
            source_offsets: BTreeMap::from([(
                "docs".to_string(),
                BTreeMap::from([(0, epoch as i64)]),
            )]),
            committed_at_ms: now_ms(),
            index_id: Some("idx".into()),
        };
        changelog::encode_marker(&m, now_ms())
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("replica");
    let replication = ReplicationConfig {
        changelog_topic: "changelog".into(),
        ..Default::default()
    };
    let config = ReplicaConfig {
        enabled: true,
        path: path.clone(),
        poll_wait_ms: 50,
        ..Default::default()
    };
    let metrics = ReplicaMetrics::register(&mut freshet_service::metrics::Registrar::new("t"));
    let mut follower = Follower::open(&kafka, &replication, &config, metrics).unwrap();
    let read_to = |follower: &mut Follower, offset: i64| {
        let started = Instant::now();
        while follower.position < offset {
            follower.step().unwrap();
            assert!(started.elapsed() < Duration::from_secs(20), "not read");
        }
    };
    let segment_files = |path: &Path| {
        std::fs::read_dir(path)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension() == Some("idx".as_ref()))
            .count()
    };
    let committed = || ChunkIndexReader::open(&path).unwrap();
    let (a, b, c) = (
        chunk("d1", "alpha"),
        chunk("d2", "beta"),
        chunk("d3", "gamma"),
    );

    // The batch's changes, without their marker: built into a segment, not committed.
    publish(
        vec![
            changelog::encode_upsert(&a, 1),
            changelog::encode_upsert(&b, 1),
        ],
        true,
    );
    read_to(&mut follower, 2);
    assert_eq!(segment_files(&path), 1, "the batch's segment is built");
    assert_eq!(committed().last_payload().unwrap(), None);
    assert!(committed().load_all().unwrap().is_empty());
    assert!(
        !follower.caught_up(),
        "staged changes wait for their marker"
    );
    publish(vec![marker(1)], false);
    read_to(&mut follower, 3);
    let r = committed();
    assert_eq!(r.last_payload().unwrap().unwrap().changelog_next, Some(3));
    assert_eq!(r.load_all().unwrap().len(), 2);

    // Staged, then the batch published again differently before any marker: the marker
    // commits where the changes in order lead.
    publish(vec![changelog::encode_upsert(&c, 2)], true);
    read_to(&mut follower, 4);
    assert!(committed().get(&c.chunk_id).unwrap().is_none());
    let c2 = freshet_core::chunk::Chunk {
        text: "gamma again".into(),
        ..c.clone()
    };
    publish(
        vec![
            changelog::encode_delete(&a.chunk_id, 2),
            changelog::encode_upsert(&c2, 2),
        ],
        true,
    );
    read_to(&mut follower, 6);
    assert!(committed().get(&c.chunk_id).unwrap().is_none());
    publish(vec![marker(2)], false);
    read_to(&mut follower, 7);
    let r = committed();
    assert!(r.get(&a.chunk_id).unwrap().is_none());
    assert_eq!(r.get(&c.chunk_id).unwrap(), Some(c2));
    assert_eq!(r.load_all().unwrap().len(), 2);
    assert_eq!(r.last_payload().unwrap().unwrap().epoch, 2);
}

#[test]
fn a_record_without_headers_is_read_again_once_and_then_stops_the_replica() {
    let cluster = rdkafka::mocking::MockCluster::new(1).unwrap();
    cluster.create_topic("changelog", 1, 1).unwrap();
    let kafka = KafkaConfig::with_brokers(cluster.bootstrap_servers());
    // A chunk change as a broker that dropped its headers would hand it over.
    let producer = freshet_kafka::DocumentProducer::new(&kafka).unwrap();
    producer.send("changelog", b"chunk-1", Some(b"{}")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let replication = ReplicationConfig {
        changelog_topic: "changelog".into(),
        ..Default::default()
    };
    let config = ReplicaConfig {
        enabled: true,
        path: dir.path().join("replica"),
        poll_wait_ms: 100,
        ..Default::default()
    };
    let metrics = ReplicaMetrics::register(&mut freshet_service::metrics::Registrar::new("t"));
    let mut follower = Follower::open(&kafka, &replication, &config, metrics).unwrap();
    let started = Instant::now();
    let err = loop {
        if let Err(e) = follower.step() {
            break e;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "never stopped");
    };
    assert_eq!(follower.reread, Some(0), "read again from its own offset");
    let message = format!("{err:#}");
    assert!(
        message.contains("offset 0") && message.contains("\"none\""),
        "{message}"
    );
    assert_eq!(follower.position, 1);
}
