//! Blocks that chunk by their own units instead of by paragraphs: Markdown tables (by rows, the
//! header row repeated in every chunk's section path) and FAQ pages written as `Q:`/`A:` lines
//! (one question and its answer per chunk), and, where asked for (books), block quotations
//! (`> ` lines), chunked on their own. The Markdown splitter cuts a section's body into
//! [`Segment`]s; everything else stays ordinary text.

use std::ops::Range;

use super::fence::{FenceLine, Fences};

/// A part of a section body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Segment {
    Text(Range<usize>),
    /// A Markdown table: its header line, delimiter line and row lines (each without `\n`).
    Table {
        header: Range<usize>,
        delimiter: Range<usize>,
        rows: Vec<Range<usize>>,
    },
    /// One question with its answer, up to the next question.
    Pair(Range<usize>),
    /// A block quotation: consecutive `>` lines.
    Quote(Range<usize>),
}

impl Segment {
    pub(crate) fn range(&self) -> Range<usize> {
        match self {
            Segment::Text(r) | Segment::Pair(r) | Segment::Quote(r) => r.clone(),
            Segment::Table {
                header,
                delimiter,
                rows,
            } => header.start..rows.last().unwrap_or(delimiter).end,
        }
    }
}

/// The lines of `range` of `text` (byte ranges without `\n`) with whether each is outside
/// fenced code.
fn lines(text: &str, range: Range<usize>) -> Vec<(Range<usize>, bool)> {
    let mut out = Vec::new();
    let Some(s) = text.get(range.clone()) else {
        return out;
    };
    let mut fences = Fences::default();
    let mut pos = range.start;
    for line in s.split('\n') {
        let outside = fences.line(line) == FenceLine::Outside;
        out.push((pos..pos + line.len(), outside));
        pos += line.len() + 1;
    }
    out
}

/// Whether `line` is a table delimiter row (`| --- | :-: |`).
fn is_delimiter(line: &str) -> bool {
    let t = line.trim();
    let t = t.strip_prefix('|').unwrap_or(t);
    let t = t.strip_suffix('|').unwrap_or(t);
    !t.is_empty()
        && t.split('|').all(|cell| {
            let c = cell.trim();
            let c = c.strip_prefix(':').unwrap_or(c);
            let c = c.strip_suffix(':').unwrap_or(c);
            !c.is_empty() && c.bytes().all(|b| b == b'-')
        })
}

fn is_row(line: &str) -> bool {
    !line.trim().is_empty() && line.contains('|')
}

/// A question line: `Q:`, `Q.`, `Question:` (any case, maybe bold or after `-`/`#`).
fn is_question(line: &str) -> bool {
    marker(line, &["q", "question"])
}

fn is_answer(line: &str) -> bool {
    marker(line, &["a", "answer"])
}

fn marker(line: &str, words: &[&str]) -> bool {
    let t = line
        .trim_start()
        .trim_start_matches(['#', '-', '*', '_', ' '])
        .to_ascii_lowercase();
    words.iter().any(|w| {
        t.strip_prefix(w).is_some_and(|rest| {
            let rest = rest.trim_start_matches(['*', '_']);
            rest.starts_with(':') || rest.starts_with(". ")
        })
    })
}

/// A block quotation line: `>` after at most three spaces.
fn is_quote(line: &str) -> bool {
    let rest = line.trim_start_matches(' ');
    line.len() - rest.len() <= 3 && rest.starts_with('>')
}

/// Cuts `range` of `text` into segments: tables, block quotations (with `quotes`), and — when
/// it holds at least two questions each followed by an answer — question/answer pairs; the rest
/// is text. Segments are in order and cover the non-blank part of `range`.
pub(crate) fn segments(text: &str, range: Range<usize>, quotes: bool) -> Vec<Segment> {
    let lines = lines(text, range.clone());
    let line = |i: usize| &text[lines[i].0.clone()];
    let mut out = Vec::new();
    let mut text_start = range.start;
    let push_text = |out: &mut Vec<Segment>, a: usize, b: usize| {
        if text.get(a..b).is_some_and(|s| !s.trim().is_empty()) {
            out.push(Segment::Text(a..b));
        }
    };
    // Questions followed by an answer before the next question.
    let questions: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].1 && is_question(line(i)))
        .collect();
    let answered: Vec<usize> = questions
        .iter()
        .enumerate()
        .filter(|(k, &q)| {
            let next = questions.get(k + 1).copied().unwrap_or(lines.len());
            (q..next).any(|i| lines[i].1 && is_answer(line(i)))
        })
        .map(|(_, &q)| q)
        .collect();
    let faq = answered.len() >= 2 && answered.len() == questions.len();
    let mut i = 0;
    while i < lines.len() {
        if faq && answered.first() == Some(&i) {
            push_text(&mut out, text_start, lines[i].0.start);
            for (k, &q) in answered.iter().enumerate() {
                let end = answered.get(k + 1).map_or(range.end, |&n| lines[n].0.start);
                out.push(Segment::Pair(lines[q].0.start..end));
            }
            return trimmed(text, out);
        }
        if quotes && lines[i].1 && is_quote(line(i)) {
            let mut j = i + 1;
            while j < lines.len() && lines[j].1 && is_quote(line(j)) {
                j += 1;
            }
            push_text(&mut out, text_start, lines[i].0.start);
            out.push(Segment::Quote(lines[i].0.start..lines[j - 1].0.end));
            text_start = lines.get(j).map_or(range.end, |l| l.0.start);
            i = j;
            continue;
        }
        let table = lines[i].1
            && is_row(line(i))
            && i + 1 < lines.len()
            && lines[i + 1].1
            && is_delimiter(line(i + 1));
        if table {
            let mut j = i + 2;
            while j < lines.len() && lines[j].1 && is_row(line(j)) && !is_delimiter(line(j)) {
                j += 1;
            }
            push_text(&mut out, text_start, lines[i].0.start);
            out.push(Segment::Table {
                header: lines[i].0.clone(),
                delimiter: lines[i + 1].0.clone(),
                rows: lines[i + 2..j].iter().map(|l| l.0.clone()).collect(),
            });
            text_start = lines.get(j).map_or(range.end, |l| l.0.start);
            i = j;
            continue;
        }
        i += 1;
    }
    push_text(&mut out, text_start, range.end);
    trimmed(text, out)
}

/// Segments with their text trimmed of surrounding whitespace (empty ones dropped).
fn trimmed(text: &str, segments: Vec<Segment>) -> Vec<Segment> {
    segments
        .into_iter()
        .filter_map(|s| match s {
            Segment::Text(r) => {
                let (a, b) = super::separators::trim(text, r.start, r.end);
                (a < b).then_some(Segment::Text(a..b))
            }
            Segment::Pair(r) => {
                let (a, b) = super::separators::trim(text, r.start, r.end);
                (a < b).then_some(Segment::Pair(a..b))
            }
            Segment::Quote(r) => {
                let (a, b) = super::separators::trim(text, r.start, r.end);
                (a < b).then_some(Segment::Quote(a..b))
            }
            table => Some(table),
        })
        .collect()
}

/// The header row as a section-path element: its cells, trimmed, joined by ` | `.
pub(crate) fn header_label(text: &str, header: &Range<usize>) -> String {
    let line = text[header.clone()].trim();
    let line = line.strip_prefix('|').unwrap_or(line);
    let line = line.strip_suffix('|').unwrap_or(line);
    line.split('|')
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<String> {
        segments(text, 0..text.len(), true)
            .iter()
            .map(|s| match s {
                Segment::Text(r) => format!("text:{}", &text[r.clone()]),
                Segment::Pair(r) => format!("pair:{}", &text[r.clone()]),
                Segment::Quote(r) => format!("quote:{}", &text[r.clone()]),
                Segment::Table { rows, .. } => format!("table:{}", rows.len()),
            })
            .collect()
    }

    #[test]
    fn tables_and_text_around_them() {
        let t = "intro\n\n| a | b |\n|---|:-:|\n| 1 | 2 |\n| 3 | 4 |\n\nafter";
        assert_eq!(kinds(t), ["text:intro", "table:2", "text:after"]);
        // no delimiter: not a table; a fence hides one
        assert_eq!(kinds("| a |\n| b |"), ["text:| a |\n| b |"]);
        let fenced = "```\n| a |\n|---|\n| 1 |\n```";
        assert_eq!(kinds(fenced), [format!("text:{fenced}")]);
        assert_eq!(header_label(t, &(7..16)), "a | b");
    }

    #[test]
    fn question_answer_pairs() {
        let t = "FAQ\n\nQ: What is a freshet?\nA: A spring flood.\n\n**Q:** Why?\n**A:** Snowmelt.";
        assert_eq!(
            kinds(t),
            [
                "text:FAQ",
                "pair:Q: What is a freshet?\nA: A spring flood.",
                "pair:**Q:** Why?\n**A:** Snowmelt."
            ]
        );
        // one pair, or a question without an answer: no FAQ
        assert_eq!(kinds("Q: one?\nA: yes."), ["text:Q: one?\nA: yes."]);
        let unanswered = "Q: a?\nA: b.\nQ: c?\nnothing";
        assert_eq!(kinds(unanswered), [format!("text:{unanswered}")]);
        assert!(is_question("Question. Where?") && is_answer("- answer: here"));
        assert!(!is_question("Quantity: 3"));
    }

    #[test]
    fn block_quotations_where_asked_for() {
        let t = "before\n\n> quoted\n> more\n>\n> after a break\n\nafter";
        assert_eq!(
            kinds(t),
            [
                "text:before",
                "quote:> quoted\n> more\n>\n> after a break",
                "text:after"
            ]
        );
        assert_eq!(segments(t, 0..t.len(), false), [Segment::Text(0..t.len())]);
        let fenced = "```\n> not a quote\n```";
        assert_eq!(kinds(fenced), [format!("text:{fenced}")]);
    }
}
