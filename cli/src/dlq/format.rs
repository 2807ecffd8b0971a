//! What `freshet dlq` prints: the table and JSON lines of `list`, the counts per class, one
//! dead letter whole (`show`) and the plan of a `replay`. Keys, messages, headers and values
//! are user data: they are shown through [`shown`] (control characters and bytes that are not
//! UTF-8 escaped), and columns are aligned by their width on a terminal (CJK counts two).

use std::fmt::Write;

use anyhow::Result;
use freshet_pipeline::dlq::letters::{format_time, shown, Letter, Selection, Source};
use freshet_pipeline::dlq::replay::{ReplayScan, Verdict};
use unicode_width::UnicodeWidthStr;

/// The widest a key is shown in a table (characters).
const KEY_CHARS: usize = 40;
/// The widest a message is shown in a table (characters).
const MESSAGE_CHARS: usize = 100;
/// How much of a value `show` previews (characters).
const PREVIEW_CHARS: usize = 4000;

/// Rows under a header, each cell padded to its column's width; the last column is not
/// padded.
fn columns(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.width()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.width());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.push_str(&" ".repeat(widths[i] - cell.width() + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn key_cell(l: &Letter, chars: usize) -> String {
    match &l.key {
        Some(k) => shown(k, chars),
        None => "(null)".into(),
    }
}

fn place(s: &Source) -> String {
    format!("{} {}:{}", s.topic, s.partition, s.offset)
}

/// `list`'s table.
pub fn table(sel: &Selection, replays: &ReplayScan) -> String {
    let rows: Vec<Vec<String>> = sel
        .letters
        .iter()
        .map(|l| {
            vec![
                l.at.to_string(),
                l.time_ms().map(format_time).unwrap_or_else(|| "-".into()),
                key_cell(l, KEY_CHARS),
                shown(l.class.as_bytes(), 40),
                shown(l.stage.as_bytes(), 20),
                match (&l.source, replays.replayed(l)) {
                    (None, _) => "-".into(),
                    (Some(_), Some(Some(_))) => "yes".into(),
                    (Some(_), Some(None)) => "no".into(),
                    (Some(_), None) => "?".into(),
                },
                shown(l.message.as_bytes(), MESSAGE_CHARS),
            ]
        })
        .collect();
    columns(
        &["AT", "TIME", "KEY", "CLASS", "STAGE", "REPLAYED", "MESSAGE"],
        &rows,
    )
}

/// `list --json`: one [`freshet_pipeline::dlq::letters::Summary`] a line.
pub fn json_lines(sel: &Selection, replays: &ReplayScan) -> Result<String> {
    let mut out = String::new();
    for l in &sel.letters {
        out.push_str(&serde_json::to_string(&l.summary(replays.replayed(l)))?);
        out.push('\n');
    }
    Ok(out)
}

/// How many matched, by class, and how many are shown.
pub fn counts(sel: &Selection) -> String {
    let mut out = format!(
        "{} dead letter{} match",
        sel.matched,
        if sel.matched == 1 { "" } else { "s" }
    );
    if sel.letters.len() < sel.matched {
        let _ = write!(out, " ({} newest shown)", sel.letters.len());
    }
    out.push_str(": ");
    let by: Vec<String> = sel
        .by_class
        .iter()
        .map(|(c, n)| format!("{} {n}", shown(c.as_bytes(), 40)))
        .collect();
    out.push_str(&by.join(", "));
    out.push('\n');
    out
}

/// `show`: the dead letter whole.
/// `replayed`: whether and where it was replayed, `None` when that is not known; `newer`: the
/// newest record of its key after it on the source topic.
pub fn show(
    l: &Letter,
    dlq_topic: &str,
    replayed: Option<Option<&Source>>,
    newer: Option<&Source>,
) -> String {
    let mut out = String::new();
    let mut field = |name: &str, value: String| {
        let _ = writeln!(out, "{name:<10} {value}");
    };
    field("at", format!("{dlq_topic} {}", l.at));
    field(
        "failed at",
        l.failed_at_ms
            .map(format_time)
            .unwrap_or_else(|| "-".into()),
    );
    field("class", shown(l.class.as_bytes(), usize::MAX));
    field("stage", shown(l.stage.as_bytes(), usize::MAX));
    field("message", shown(l.message.as_bytes(), usize::MAX));
    field(
        "source",
        match &l.source {
            Some(s) => place(s),
            None => "(none: not a record of a topic, e.g. a file `freshet watch` refused)".into(),
        },
    );
    field(
        "replayed",
        match (&l.source, replayed) {
            (_, Some(Some(s))) => format!("yes, as {}", place(s)),
            (None, _) => "no (cannot be: no source record)".into(),
            (Some(_), Some(None)) => "no".into(),
            (Some(s), None) => format!("not known ({} could not be read)", s.topic),
        },
    );
    if let Some(n) = newer {
        field(
            "newer",
            format!(
                "{} has this key too: a replay would undo it (--even-if-superseded)",
                place(n)
            ),
        );
    }
    field("key", key_cell(l, usize::MAX));
    let _ = writeln!(out, "headers    {}", l.headers.len());
    for (k, v) in &l.headers {
        let v = match v {
            Some(v) => shown(v, 200),
            None => "(null)".into(),
        };
        let _ = writeln!(out, "  {}: {v}", shown(k.as_bytes(), 100));
    }
    match &l.value {
        None => out.push_str("value      (null)\n"),
        Some(v) => {
            let kind = if std::str::from_utf8(v).is_err() {
                "not UTF-8"
            } else if serde_json::from_slice::<serde_json::Value>(v).is_ok() {
                "JSON"
            } else {
                "text"
            };
            let _ = writeln!(
                out,
                "value      {} bytes, {kind} (`--raw` writes it unchanged)",
                v.len()
            );
            for line in preview(v) {
                let _ = writeln!(out, "  {line}");
            }
        }
    }
    out
}

/// The first [`PREVIEW_CHARS`] characters of `value`, line by line, each shown safely.
fn preview(value: &[u8]) -> Vec<String> {
    let mut left = PREVIEW_CHARS;
    let mut lines = Vec::new();
    for line in value.split(|b| *b == b'\n') {
        if left == 0 {
            lines.push("…".into());
            break;
        }
        let s = shown(line, left);
        left = left.saturating_sub(line.len().max(1));
        lines.push(s);
    }
    lines
}

/// `replay`'s plan: each dead letter and what the replay does with it.
pub fn plan(plan: &[(&Letter, Verdict)]) -> String {
    let rows: Vec<Vec<String>> = plan
        .iter()
        .map(|(l, v)| {
            vec![
                l.at.to_string(),
                key_cell(l, KEY_CHARS),
                shown(l.class.as_bytes(), 40),
                l.source.as_ref().map(place).unwrap_or_else(|| "-".into()),
                match v {
                    Verdict::Replayed(s) => format!("replayed before, as {}", place(s)),
                    Verdict::Superseded(s) => format!(
                        "superseded by {} (--even-if-superseded replays it over that)",
                        place(s)
                    ),
                    v => v.as_str().into(),
                },
            ]
        })
        .collect();
    columns(&["AT", "KEY", "CLASS", "SOURCE", "REPLAY"], &rows)
}
