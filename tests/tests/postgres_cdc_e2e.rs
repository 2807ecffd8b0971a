//! End to end with a real PostgreSQL (Debian's package, `deploy/start-postgres.sh`): a table's
//! inserts, updates (one statement over many rows too), deletes and primary-key changes are
//! captured by logical decoding (wal2json), written as Debezium's PostgreSQL connector writes
//! them (`freshet_tests::cdc::postgres`; Debezium itself is not run) in both converter shapes,
//! and read by the real `freshet` binary. After each batch, and across a restart, both indexes
//! hold exactly the documents the table's rows say, read back from the database.

use std::time::Duration;

use anyhow::Result;
use freshet_kafka::admin;
use freshet_tests::cdc::postgres::{debezium_records, Postgres};
use freshet_tests::cdc::{self, document_in};
use freshet_tests::{expected_chunks, Case};

const WAIT: Duration = Duration::from_secs(180);

/// Sends every change committed since the last call, alternating the converter's shapes.
fn ship(case: &mut Case, topic: &str, pg: &Postgres) -> Result<usize> {
    let changes = pg.changes()?;
    assert!(!changes.is_empty(), "the slot captured the changes");
    for (i, change) in changes.iter().enumerate() {
        for (key, value) in debezium_records(change, &pg.db, i % 2 == 0)? {
            case.send_to(topic, &key, value.as_deref())?;
        }
    }
    Ok(changes.len())
}

/// Both indexes hold exactly the documents of the rows the table holds now.
fn assert_table_indexed(case: &mut Case, pg: &Postgres) -> Result<usize> {
    case.wait_indexed(WAIT)?;
    let source = format!("debezium://{}/public.articles", pg.db);
    let rows = pg.rows("articles")?;
    let log: Vec<(String, Option<Vec<u8>>)> = rows
        .iter()
        .map(|r| {
            let (id, v) = document_in(r, &source);
            (id, Some(v))
        })
        .collect();
    let expected = expected_chunks(&log)?;
    case.assert_holds_exactly(&expected)?;
    Ok(rows.len())
}

#[test]
fn a_postgres_tables_changes_through_logical_decoding_keep_both_indexes_exact() -> Result<()> {
    let mut case = Case::new("pgcdc", 1)?;
    let topic = format!("cdc.{}", case.name);
    admin::ensure_topic(&case.kafka, &topic, 3)?;
    cdc::use_sources(&mut case, &topic)?;
    let db = format!(
        "cdc_{}",
        case.name.to_ascii_lowercase().replace(['.', '-'], "_")
    );
    let mut pg = Postgres::create(&db)?;
    pg.sql(
        "CREATE TABLE articles (id int PRIMARY KEY, title text, summary text, body text, \
         lang text, acl text)",
    )?;
    pg.create_slot(&db)?;

    pg.sql(
        "INSERT INTO articles SELECT i, 'Article ' || i, \
           CASE WHEN i % 3 = 0 THEN NULL ELSE 'Summary of article ' || i || '.' END, \
           '## Findings ' || i || E'\\n\\nThe river delta of article ' || i || \
             ' moved its channel; sediment built a levee.', \
           CASE WHEN i % 4 = 0 THEN 'de' ELSE 'en' END, \
           CASE WHEN i % 2 = 0 THEN 'group:eng, user:' || i ELSE NULL END \
         FROM generate_series(1, 12) AS i",
    )?;
    pg.sql("UPDATE articles SET body = body || E'\\n\\nRevised.' WHERE id IN (1, 2)")?;
    pg.sql("DELETE FROM articles WHERE id = 3")?;
    pg.sql("UPDATE articles SET id = 104, title = 'Article 104' WHERE id = 4")?;
    pg.sql(
        "BEGIN; UPDATE articles SET lang = 'fr' WHERE id > 8; \
         DELETE FROM articles WHERE id = 6; COMMIT",
    )?;
    ship(&mut case, &topic, &pg)?;
    case.start_pipeline()?;
    let rows = assert_table_indexed(&mut case, &pg)?;
    assert_eq!(rows, 10, "12 inserted, 2 deleted");

    // More changes while the pipeline is down; it resumes from its commit.
    case.stop_pipeline()?;
    pg.sql("UPDATE articles SET id = 204 WHERE id = 104")?;
    pg.sql("UPDATE articles SET summary = NULL, acl = 'group:ops' WHERE id = 1")?;
    pg.sql("DELETE FROM articles WHERE id IN (7, 8)")?;
    pg.sql("INSERT INTO articles VALUES (3, 'Article 3 again', NULL, 'Back.', 'en', NULL)")?;
    ship(&mut case, &topic, &pg)?;
    case.start_pipeline()?;
    let rows = assert_table_indexed(&mut case, &pg)?;
    assert_eq!(rows, 9);
    case.stop_pipeline()?;
    Ok(())
}
