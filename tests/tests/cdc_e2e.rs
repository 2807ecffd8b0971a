//! End to end, change data capture: the real `freshet` binary reads a Debezium topic of an
//! `articles` table (both converter shapes; snapshot reads, inserts, updates, deletes with their
//! tombstones, a primary-key change, a message event, an unchanged-TOAST update refused to the
//! DLQ) beside the ordinary document topic, across a SIGKILL and a clean restart. After each
//! phase both indexes hold exactly what the table's rows and the document topic say, with the
//! rows turned into documents by hand (`freshet_tests::cdc::document_of`), not by the decoder.

use std::time::Duration;

use anyhow::Result;
use freshet_kafka::admin;
use freshet_tests::cdc::{self, Table};
use freshet_tests::{expected_chunks, Case};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(180);

/// The case, its table as changed so far, and the document topic's records.
struct Cdc {
    case: Case,
    topic: String,
    table: Table,
    docs: Vec<(String, Option<Vec<u8>>)>,
    lsn: i64,
}

impl Cdc {
    fn send(&mut self, id: i64, wrapped: bool, value: Option<Vec<u8>>) -> Result<()> {
        self.lsn += 1;
        let topic = self.topic.clone();
        self.case
            .send_to(&topic, &cdc::key(id, wrapped), value.as_deref())
    }

    fn event(&mut self, op: &str, before: Value, after: Value, wrapped: bool) -> Vec<u8> {
        cdc::event(op, before, after, wrapped, self.lsn)
    }

    /// A snapshot read (`r`) or an insert (`c`).
    fn insert(&mut self, op: &str, row: Value, wrapped: bool) -> Result<()> {
        let id = row["id"].as_i64().unwrap_or_default();
        let v = self.event(op, Value::Null, row.clone(), wrapped);
        self.table.insert(id, row);
        self.send(id, wrapped, Some(v))
    }

    /// An update under `REPLICA IDENTITY DEFAULT`: `before` holds the key only.
    fn update(&mut self, row: Value, wrapped: bool) -> Result<()> {
        let id = row["id"].as_i64().unwrap_or_default();
        let v = self.event("u", json!({ "id": id }), row.clone(), wrapped);
        self.table.insert(id, row);
        self.send(id, wrapped, Some(v))
    }

    /// A delete and the tombstone that follows it.
    fn delete(&mut self, id: i64, wrapped: bool) -> Result<()> {
        let v = self.event("d", json!({ "id": id }), Value::Null, wrapped);
        self.table.remove(&id);
        self.send(id, wrapped, Some(v))?;
        self.send(id, wrapped, None)
    }

    /// `UPDATE … SET id = new`: delete of the old key, its tombstone, create of the new key.
    fn change_key(&mut self, old: i64, new_row: Value, wrapped: bool) -> Result<()> {
        self.delete(old, wrapped)?;
        self.insert("c", new_row, wrapped)
    }

    /// An update that leaves the TOASTed `body` unchanged: Debezium writes its placeholder,
    /// which cannot be indexed, so the record goes to the DLQ and the document leaves both
    /// indexes until the row's next full change.
    fn toast_update(&mut self, row: Value) -> Result<()> {
        let id = row["id"].as_i64().unwrap_or_default();
        let mut toasted = row;
        toasted["body"] = json!("__debezium_unavailable_value");
        let v = self.event("u", json!({ "id": id }), toasted, true);
        self.table.remove(&id);
        self.send(id, true, Some(v))
    }

    /// A record of the document topic.
    fn doc(&mut self, id: &str, value: Option<Value>) -> Result<()> {
        let bytes = value.map(|v| serde_json::to_vec(&v)).transpose()?;
        self.case.send(id, bytes.as_deref())?;
        self.docs.push((id.to_string(), bytes));
        Ok(())
    }

    /// Both indexes hold exactly the documents of the table's rows and of the document topic.
    fn assert_exact(&mut self) -> Result<()> {
        self.case.wait_indexed(WAIT)?;
        let mut log = self.docs.clone();
        log.extend(cdc::documents_of(&self.table));
        let expected = expected_chunks(&log)?;
        assert!(!expected.is_empty());
        self.case.assert_holds_exactly(&expected)?;
        let doc_ids: std::collections::BTreeSet<&str> =
            expected.values().map(|c| c.doc_id.as_str()).collect();
        for id in self.table.keys() {
            let want = format!("{}{id}", cdc::ID_PREFIX);
            assert!(doc_ids.contains(want.as_str()), "{want} is indexed");
        }
        Ok(())
    }
}

fn article(id: i64, version: u32) -> Value {
    let acl = if id % 2 == 0 {
        json!(["group:eng", format!("user:{id}")])
    } else {
        json!(format!("group:ops, user:{id}"))
    };
    let summary = (id % 3 != 0).then(|| format!("Summary of article {id}, version {version}."));
    let body = format!(
        "## Findings {id}\n\nThe river delta of article {id} moved its channel {version} times; \
         sediment and silt built a levee along the estuary.\n\n## Notes\n\nVersion {version}."
    );
    cdc::row(
        id,
        &format!("Article {id}"),
        summary.as_deref(),
        &body,
        if id % 4 == 0 { "de" } else { "en" },
        acl,
    )
}

fn envelope(id: &str, text: &str) -> Value {
    json!({"op": "upsert", "id": id, "title": format!("Doc {id}"), "text": text,
           "content_type": "text/markdown", "source": format!("test://{id}")})
}

/// A case reading its document topic (`partitions`) and a Debezium topic of 3 partitions.
fn two_topics(name: &str, partitions: i32) -> Result<Cdc> {
    let mut case = Case::new(name, partitions)?;
    let topic = format!("cdc.{}", case.name);
    admin::ensure_topic(&case.kafka, &topic, 3)?;
    cdc::use_sources(&mut case, &topic)?;
    Ok(Cdc {
        case,
        topic,
        table: Table::new(),
        docs: Vec::new(),
        lsn: 0,
    })
}

#[test]
fn a_tables_changes_keep_both_indexes_exact_beside_the_document_topic() -> Result<()> {
    let mut t = two_topics("cdc", 2)?;

    // The snapshot, in both converter shapes, and documents on the other topic.
    for id in 1..=12 {
        t.insert("r", article(id, 1), id % 2 == 0)?;
    }
    for n in 1..=3 {
        t.doc(
            &format!("doc-{n}"),
            Some(envelope(&format!("doc-{n}"), "Plain doc.")),
        )?;
    }
    t.case.start_pipeline()?;
    t.assert_exact()?;

    // Streaming changes; the pipeline is killed halfway and restarted.
    t.update(article(1, 2), true)?;
    t.update(article(2, 2), false)?;
    t.delete(3, true)?;
    t.change_key(4, article(104, 2), true)?;
    t.insert("c", article(13, 1), false)?;
    t.doc("doc-2", None)?;
    std::thread::sleep(Duration::from_millis(500));
    t.case.kill_pipeline()?;
    t.delete(6, false)?;
    t.change_key(5, article(105, 3), false)?;
    t.update(article(104, 3), true)?;
    t.toast_update(article(7, 2))?;
    t.insert("c", article(14, 1), true)?;
    let message = json!({"before": null, "after": null, "op": "m",
                         "source": {"db": "shop", "schema": "", "table": ""},
                         "message": {"prefix": "audit", "content": "e30="}});
    let topic = t.topic.clone();
    t.case
        .send_to(&topic, b"", Some(&serde_json::to_vec(&message)?))?;
    t.doc("doc-4", Some(envelope("doc-4", "Another plain doc.")))?;
    t.case.start_pipeline()?;
    t.assert_exact()?;
    let dlq = t.case.dlq_records(1, Duration::from_secs(30))?;
    assert_eq!(
        dlq.len(),
        1,
        "the TOAST placeholder is refused, nothing else"
    );
    let header = |n: &str| {
        dlq[0]
            .header(n)
            .flatten()
            .map(|v| String::from_utf8_lossy(v).to_string())
    };
    assert_eq!(
        header("freshet.error.class").as_deref(),
        Some("invalid_field")
    );
    assert_eq!(
        header("freshet.source.topic").as_deref(),
        Some(t.topic.as_str())
    );

    // A clean restart, then more changes: the refused row comes back, a re-inserted key, a
    // row updated back to its first version, deletes of everything in one shape.
    t.case.stop_pipeline()?;
    t.update(article(7, 3), false)?;
    t.insert("c", article(3, 4), true)?;
    t.update(article(1, 1), false)?;
    t.delete(8, true)?;
    t.delete(104, false)?;
    t.change_key(105, article(5, 5), true)?;
    t.case.start_pipeline()?;
    t.assert_exact()?;
    t.case.stop_pipeline()?;
    Ok(())
}

/// A two-process cluster shares both topics' partitions; after a SIGKILL of both, the restarted
/// cluster resumes every topic (process 0 from the index commit, process 1 from the group's
/// offsets) and converges.
#[test]
fn a_two_process_cluster_reads_both_topics_and_recovers() -> Result<()> {
    let mut t = two_topics("cdc-cluster", 2)?;
    for id in 1..=8 {
        t.insert("r", article(id, 1), id % 2 == 1)?;
    }
    t.doc("doc-1", Some(envelope("doc-1", "Plain doc.")))?;
    t.case.start_cluster(2)?;
    t.assert_exact()?;
    t.update(article(2, 2), true)?;
    t.change_key(3, article(103, 2), false)?;
    t.delete(4, true)?;
    t.case.kill_pipeline()?;
    t.insert("c", article(9, 1), false)?;
    t.update(article(103, 3), true)?;
    t.doc("doc-2", Some(envelope("doc-2", "Second plain doc.")))?;
    t.case.start_cluster(2)?;
    t.assert_exact()?;
    t.case.stop_pipeline()?;
    Ok(())
}
