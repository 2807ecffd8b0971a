//! Tables, CSV and FAQs: chunked by whole rows or question-answer pairs.

use super::*;

/// A table too large for one chunk is cut by whole rows; every chunk carries the header row as
/// the last element of its section path (so it is embedded and searched with each), the first
/// one also holds the header lines themselves, and every row is in exactly one chunk.
#[test]
fn a_large_table_chunks_by_rows_with_its_header() {
    let t = test_counter();
    let mut text =
        String::from("# Gauges\n\nReadings below.\n\n| site | flow | note |\n|---|---|---|\n");
    for i in 0..40 {
        text.push_str(&format!("| river {i} | {i}.5 | the quick brown fox |\n"));
    }
    text.push_str("\nAfter the table.");
    let d = doc(&text, ContentType::Markdown);
    let cfg = ChunkerConfig {
        max_tokens: 80,
        overlap_tokens: 8,
        ..ChunkerConfig::default()
    };
    let chunks = chunk_document(&d, "h", &cfg, &t);
    check_chunks(&d, &chunks, &cfg, &t);
    let header = vec!["Gauges".to_string(), "site | flow | note".to_string()];
    let table: Vec<&Chunk> = chunks.iter().filter(|c| c.section == header).collect();
    assert!(table.len() >= 3, "{chunks:#?}");
    assert!(table[0]
        .text
        .contains("| site | flow | note |\n|---|---|---|"));
    let mut rows = 0;
    for c in &table {
        for line in c.text.lines().filter(|l| l.starts_with("| river")) {
            assert!(line.ends_with("fox |"), "a whole row: {line:?}");
            rows += 1;
        }
        assert!(!c.text.contains("After the table"));
    }
    assert_eq!(rows, 40, "every row once");
    assert!(chunks
        .iter()
        .any(|c| c.section == ["Gauges"] && c.text.contains("After the table.")));
    // a table that fits stays whole, under its section
    let small = "# S\n\n| a | b |\n|---|---|\n| 1 | 2 |";
    let d = doc(small, ContentType::Markdown);
    let c = chunk_document(&d, "h", &cfg, &t);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].section, ["S"]);
}

/// CSV is cleaned into a Markdown table and chunked by rows the same way.
#[test]
fn csv_chunks_by_rows_with_its_header() {
    let t = test_counter();
    let mut csv = String::from("site,flow\n");
    for i in 0..60 {
        csv.push_str(&format!("river {i},{i}.5\n"));
    }
    let d = doc(&csv, ContentType::Csv);
    let cfg = ChunkerConfig {
        max_tokens: 60,
        overlap_tokens: 0,
        ..ChunkerConfig::default()
    };
    let p = crate::prepare::prepare_full(d, &cfg, &t).unwrap();
    assert!(p
        .cleaned
        .text
        .starts_with("| site | flow |\n| --- | --- |\n| river 0 | 0.5 |"));
    assert!(p.chunks.len() > 1);
    assert!(p.chunks.iter().all(|c| c.section == ["site | flow"]));
    let rows: usize = p
        .chunks
        .iter()
        .map(|c| c.text.lines().filter(|l| l.starts_with("| river")).count())
        .sum();
    assert_eq!(rows, 60);
}

/// A FAQ gives one chunk per question and answer, whether its questions are `Q:`/`A:` lines
/// (Markdown or plain text) or headings.
#[test]
fn a_faq_chunks_one_pair_each() {
    let t = test_counter();
    let cfg = ChunkerConfig::default();
    let lines = "Questions people ask.\n\n\
                 Q: What is a freshet?\nA: The flood of a river from melting snow.\n\n\
                 Q: When does it come?\nA: In the spring.\n\n\
                 Q: Is it dangerous?\nA: It can be, near the river.";
    for ct in [ContentType::Markdown, ContentType::PlainText] {
        let d = doc(lines, ct);
        let chunks = chunk_document(&d, "h", &cfg, &t);
        check_chunks(&d, &chunks, &cfg, &t);
        let texts: Vec<&str> = chunks.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "Questions people ask.",
                "Q: What is a freshet?\nA: The flood of a river from melting snow.",
                "Q: When does it come?\nA: In the spring.",
                "Q: Is it dangerous?\nA: It can be, near the river."
            ],
            "{ct:?}"
        );
    }
    let headings =
        "# FAQ\n\n## What is a freshet?\n\nThe flood of a river.\n\n## When?\n\nIn the spring.";
    let d = doc(headings, ContentType::Markdown);
    let chunks = chunk_document(&d, "h", &cfg, &t);
    let sections: Vec<Vec<String>> = chunks.iter().map(|c| c.section.clone()).collect();
    assert_eq!(
        sections,
        [
            vec!["FAQ".to_string(), "What is a freshet?".to_string()],
            vec!["FAQ".to_string(), "When?".to_string()]
        ]
    );
}
