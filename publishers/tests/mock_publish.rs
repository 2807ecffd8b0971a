//! The sources against librdkafka's in-process mock cluster (no broker needed): what a
//! directory and a JSONL file become on the topic.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use freshet_kafka::{KafkaConfig, PartitionReader, Record, TopicProducer};
use freshet_publishers::{publish_dir, publish_jsonl, Mapping};
use rdkafka::mocking::MockCluster;

fn config(cluster: &MockCluster<'_, rdkafka::producer::DefaultProducerContext>) -> KafkaConfig {
    let mut cfg = KafkaConfig::with_brokers(cluster.bootstrap_servers());
    cfg.topic = "documents".into();
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
fn publish_dir_on_mock() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("documents", 1, 1).unwrap();
    let cfg = config(&cluster);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.md"), "# A\ntext").unwrap();
    std::fs::write(dir.path().join("b.htm"), "<title>B</title>").unwrap();
    std::fs::write(dir.path().join("c.txt"), [0xc3, 0x28]).unwrap();
    let producer = TopicProducer::new(&cfg, "documents").unwrap();
    let report = publish_dir(dir.path(), &producer, &Mapping::default()).unwrap();
    assert_eq!(report.published, 2);
    assert_eq!(report.bad.len(), 1);
    assert!(report.bad[0].path.ends_with("c.txt"));
    let mut r = PartitionReader::new(&cfg, "documents", &[0], &BTreeMap::new()).unwrap();
    let got = read_n(&mut r, 2);
    let keys: Vec<&[u8]> = got.iter().map(|r| r.key.as_deref().unwrap()).collect();
    assert_eq!(keys, [&b"a.md"[..], &b"b.htm"[..]]);
    let doc: serde_json::Value = serde_json::from_slice(got[0].value.as_ref().unwrap()).unwrap();
    assert_eq!(doc["title"], "A");
    assert_eq!(doc["source"], "file://a.md");
}

#[test]
fn publish_small_beir_file_on_mock() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("documents", 2, 1).unwrap();
    let cfg = config(&cluster);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("scifact.jsonl");
    std::fs::write(
        &path,
        concat!(
            r#"{"_id":"4983","title":"Microstructural development","text":"Alterations of the architecture.","metadata":{}}"#,
            "\n",
            r#"{"_id":"5836","title":"Induction of myelodysplasia","text":"Myelodysplastic syndromes (MDS)","metadata":{"url":"x"}}"#,
            "\n",
            "this is not json\n",
            "\n",
            r#"{"op":"delete","id":"4983"}"#,
            "\n",
        ),
    )
    .unwrap();
    let producer = TopicProducer::new(&cfg, "documents").unwrap();
    let report = publish_jsonl(&path, &producer, &Mapping::default()).unwrap();
    assert_eq!(report.published, 3);
    assert_eq!(report.upserts, 2);
    assert_eq!(report.deletes, 1);
    assert_eq!(report.bad.len(), 1);
    assert_eq!(report.bad[0].line, Some(3));

    let mut reader = PartitionReader::new(&cfg, &cfg.topic, &[0, 1], &BTreeMap::new()).unwrap();
    let got = read_n(&mut reader, 3);
    assert_eq!(got.len(), 3);
    let docs: Vec<serde_json::Value> = got
        .iter()
        .map(|r| serde_json::from_slice(r.value.as_ref().unwrap()).unwrap())
        .collect();
    let d = docs.iter().find(|d| d["id"] == "5836").unwrap();
    assert_eq!(d["op"], "upsert");
    assert_eq!(d["title"], "Induction of myelodysplasia");
    assert_eq!(d["content_type"], "text/plain");
    assert_eq!(d["source"], "beir:scifact");
    assert_eq!(d["metadata"]["url"], "x");
    assert_eq!(d["acl"], serde_json::json!([]));
    // Upsert and delete of one id share a partition, in order.
    let of_4983: Vec<&Record> = got
        .iter()
        .filter(|r| r.key.as_deref() == Some(&b"4983"[..]))
        .collect();
    assert_eq!(of_4983.len(), 2);
    assert_eq!(of_4983[0].partition, of_4983[1].partition);
    assert!(of_4983[0].offset < of_4983[1].offset);
}
