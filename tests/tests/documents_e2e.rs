//! Files through the real broker, pipeline, Milvus and model: PDF, DOCX and EPUB made by the
//! tools people use (fpdf2, python-docx, ebooklib: `tests/fixtures/make_test_documents.py`) are
//! published as `freshet publish --dir` publishes them, parsed by the pipeline into chunks
//! whose section paths are the files' headings, and searchable by both routes; files without
//! text and damaged ones are dead-lettered with their class while their neighbours are
//! indexed; a PDF's chunks answer with their pages (hits and packed citations); a Rust file is
//! chunked at its definitions; the unchanged file sent again is recognised before parsing and
//! writes nothing.

use std::path::Path;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use freshet_kafka::Record;
use freshet_publishers::{file_document, Mapping};
use freshet_tests::{expected_chunks, workspace_root, Case};

const WAIT: Duration = Duration::from_secs(180);

type Log = Vec<(String, Option<Vec<u8>>)>;

/// Sends `dir/name` as `freshet publish --dir dir` would.
fn send_file(case: &mut Case, log: &mut Log, dir: &Path, name: &str) -> Result<()> {
    let out = file_document(dir, &dir.join(name), &Mapping::default())
        .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    case.send(&out.id, out.value.as_deref())?;
    log.push((out.id, out.value));
    Ok(())
}

fn header(rec: &Record, name: &str) -> String {
    rec.header(name)
        .flatten()
        .map(|v| String::from_utf8_lossy(v).to_string())
        .unwrap_or_default()
}

#[test]
fn docx_and_epub_are_parsed_indexed_and_bad_files_dead_lettered() -> Result<()> {
    let fixtures = workspace_root().join("operators/tests/fixtures/parse");
    let mut case = Case::new("documents", 2)?;
    let mut log: Log = Vec::new();
    for name in [
        "report.docx",
        "empty.docx",
        "truncated.docx",
        "book.epub",
        "headers.pdf",
        "two-column.pdf",
        "scanned.pdf",
        "encrypted.pdf",
        "truncated.pdf",
    ] {
        send_file(&mut case, &mut log, &fixtures, name)?;
    }
    send_file(
        &mut case,
        &mut log,
        &workspace_root().join("operators/tests/fixtures/code"),
        "engine.rs",
    )?;
    let note = serde_json::json!({"title": "Note", "text": "A plain neighbour about estuaries.",
                                  "content_type": "text/markdown"});
    case.send_json("note.md", &note)?;
    log.push(("note.md".into(), Some(serde_json::to_vec(&note)?)));
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;

    // Both indexes hold what the operators make of the files, record by record.
    let expected = expected_chunks(&log)?;
    case.assert_holds_exactly(&expected)?;
    let chunks = case.tantivy_chunks()?;
    let table = chunks
        .iter()
        .find(|c| c.doc_id == "report.docx" && c.text.contains("| Upstream | 12.5 |"))
        .context("the DOCX table, as Markdown, in a chunk")?;
    assert_eq!(table.section, ["Introduction", "Results"]);
    assert_eq!(
        table.title, "Quarterly River Report",
        "the file's own title"
    );
    let glaciers = chunks
        .iter()
        .find(|c| c.doc_id == "book.epub" && c.text.contains("Meltwater"))
        .context("the EPUB's first chapter")?;
    assert_eq!(glaciers.section, ["Source", "Glaciers"]);
    assert_eq!(glaciers.title, "The River Book");
    ensure!(chunks.iter().any(|c| c.doc_id == "note.md"));
    let retrieve = chunks
        .iter()
        .find(|c| c.doc_id == "engine.rs" && c.text.contains("pub fn retrieve"))
        .context("the Rust function")?;
    assert_eq!(
        retrieve.section[0], "Engine",
        "a symbol path: {:?}",
        retrieve.section
    );
    ensure!(!chunks
        .iter()
        .any(|c| c.doc_id == "empty.docx" || c.doc_id == "truncated.docx"));

    // The bad files are dead-lettered with their class, at the prepare stage.
    let dlq = case.dlq_records(5, Duration::from_secs(60))?;
    let mut classes: Vec<(String, String, String)> = dlq
        .iter()
        .map(|r| {
            (
                String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()).to_string(),
                header(r, "freshet.error.class"),
                header(r, "freshet.error.stage"),
            )
        })
        .collect();
    classes.sort();
    assert_eq!(
        classes,
        [
            ("empty.docx", "no_text", "prepare"),
            ("encrypted.pdf", "unparseable", "prepare"),
            ("scanned.pdf", "no_text", "prepare"),
            ("truncated.docx", "unparseable", "prepare"),
            ("truncated.pdf", "unparseable", "prepare"),
        ]
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
    );

    // Searchable by both routes through the query node.
    let node = case.start_query(&[])?;
    for (query, doc) in [
        ("flow measured at upstream gauge sites", "report.docx"),
        ("meltwater from glaciers adds flow in summer", "book.epub"),
    ] {
        for mode in ["bm25", "vector"] {
            let body = serde_json::json!({"query": query, "k": 3, "mode": mode});
            node.wait_for(&body, WAIT, |ids| ids.iter().any(|i| i == doc))?;
        }
    }

    // Every chunk of a PDF knows its pages, and answers with them, in its hit and its citation.
    for c in chunks.iter().filter(|c| c.doc_id.ends_with(".pdf")) {
        let m: serde_json::Value = serde_json::from_str(&c.metadata_json)?;
        ensure!(
            m["page_start"].as_u64().is_some() && m["page_end"].as_u64().is_some(),
            "{c:?}"
        );
    }
    let body = serde_json::json!({"query": "snowmelt raised the upper river gauges in April",
                                  "k": 3, "mode": "bm25", "pack": {"budget_tokens": 1500}});
    node.wait_for(&body, WAIT, |ids| {
        ids.first().map(String::as_str) == Some("headers.pdf")
    })?;
    let answer = node.retrieve(&body)?;
    let top = &answer["results"][0];
    assert_eq!(
        (top["page_start"].as_u64(), top["page_end"].as_u64()),
        (Some(2), Some(2))
    );
    assert_eq!(top["metadata"]["page_start"], 2);
    let citation = &answer["citations"][0];
    assert_eq!(citation["page_start"], 2);
    let context = answer["context"].as_str().unwrap_or_default();
    ensure!(context.starts_with("[1] River Survey (p. 2)"), "{context}");
    let two = chunks
        .iter()
        .find(|c| c.doc_id == "two-column.pdf" && c.text.contains("First page: The upper river"))
        .context("the two-column PDF")?;
    ensure!(
        two.text
            .contains("control room.\n\nFirst page: The lower river"),
        "the left column before the right: {}",
        two.text
    );

    // The same file again: recognised before parsing, nothing written.
    let writes = |case: &Case| -> Result<f64> {
        Ok(case
            .metrics()?
            .iter()
            .filter(|(k, _)| k.starts_with("freshet_pipeline_sink_writes_total"))
            .map(|(_, v)| v)
            .sum())
    };
    let unchanged = "freshet_pipeline_documents_total{outcome=\"unchanged\"}";
    let (writes_before, unchanged_before) = (writes(&case)?, case.metric(unchanged).unwrap_or(0.0));
    send_file(&mut case, &mut log, &fixtures, "report.docx")?;
    case.wait_indexed(WAIT)?;
    assert_eq!(case.metric(unchanged)?, unchanged_before + 1.0);
    assert_eq!(
        writes(&case)?,
        writes_before,
        "an unchanged file writes nothing"
    );
    case.assert_holds_exactly(&expected_chunks(&log)?)?;
    drop(node);
    case.stop_pipeline()?;
    Ok(())
}
