//! Heading-aware chunking of Markdown.
//!
//! The text is cut at ATX headings (`#` to `######`, up to three spaces of indentation, not
//! inside fenced code blocks) into sections. Each section has a heading path, outermost first
//! (`["Install", "Linux"]`), and is split on its own with the recursive splitter (so no chunk
//! spans two sections and overlap never crosses a section boundary), with two Markdown rules:
//!
//! - the heading line is the start of its section's first chunk (unless the heading alone
//!   counts more than half of `max_tokens`, when it is just the first line of the section);
//!   a section with no body (a heading directly followed by another heading) is carried into
//!   the next section's first chunk, so consecutive headings stay together; a body-less section
//!   at the very end is a chunk of its own;
//! - a fenced code block is one paragraph: it is never split unless it alone exceeds
//!   `max_tokens` (then it is split by lines, and finer if need be);
//! - a table that does not fit is split by rows, whole rows per chunk, and every chunk of it has
//!   the header row as the last element of its section path (so it is embedded and searched
//!   with each); FAQ sections (two or more `Q:` lines each answered by an `A:` line) give one
//!   chunk per question and answer (`chunk/blocks.rs`); in a book (EPUB), a block quotation
//!   (`> ` lines) is chunked on its own and its chunks are marked `quote`.
//!
//! Text before the first heading is a section with an empty path.

use std::ops::Range;

use super::blocks::{self, Segment};
use super::fence::{FenceLine, Fences};
use super::recursive::Engine;
use super::separators::trim;
use super::tokens::TokenCounter;
use super::Piece;

/// Splits Markdown `text` into chunks of at most `max_tokens` tokens with about
/// `overlap_tokens` of overlap, each tagged with its heading path. Byte offsets.
pub fn split_markdown(
    text: &str,
    max_tokens: usize,
    overlap_tokens: usize,
    tokens: &dyn TokenCounter,
) -> Vec<Piece> {
    let engine = Engine::new(text, tokens, true);
    split_markdown_range(
        &engine,
        0..text.len(),
        &|_| max_tokens,
        overlap_tokens,
        false,
    )
}

/// [`split_markdown`] over `range` of the engine's text, with a token budget per section:
/// `budget(path)` for the section with heading path `path` (the chunker reserves each
/// section's embedding header). The overlap is at most half of each section's budget. With
/// `quotes`, a block quotation (`> ` lines) chunks on its own, its pieces marked `quote`.
pub(crate) fn split_markdown_range(
    engine: &Engine<'_>,
    range: Range<usize>,
    budget: &dyn Fn(&[String]) -> usize,
    overlap_tokens: usize,
    quotes: bool,
) -> Vec<Piece> {
    let text = engine.text;
    let secs = sections(text, range);
    let mut out = Vec::new();
    let mut pending: Option<usize> = None;
    let n = secs.len();
    for (i, s) in secs.into_iter().enumerate() {
        if engine.full() {
            break;
        }
        let (ba, bb) = trim(text, s.body.start, s.body.end);
        let max_tokens = budget(&s.path).max(1);
        let overlap_tokens = overlap_tokens.min(max_tokens / 2);
        if ba < bb {
            let segments = blocks::segments(text, ba..bb, quotes);
            if segments.iter().any(|g| !matches!(g, Segment::Text(_))) {
                let heading = s.heading.map(|h| pending.take().unwrap_or(h.start)..h.end);
                let sec = SectionSplit {
                    engine,
                    path: &s.path,
                    budget,
                    overlap_tokens,
                };
                out.extend(sec.split(heading, segments));
                continue;
            }
        }
        let mut pieces = match s.heading {
            None => {
                if ba >= bb {
                    continue;
                }
                engine.split(ba..bb, max_tokens, overlap_tokens, None)
            }
            Some(h) => {
                let start = pending.take().unwrap_or(h.start);
                if ba >= bb {
                    if i + 1 < n {
                        pending = Some(start);
                        continue;
                    }
                    engine.split(start..h.end, max_tokens, overlap_tokens, None)
                } else if engine.count(start, h.end) * 2 <= max_tokens {
                    engine.split(ba..bb, max_tokens, overlap_tokens, Some(start..h.end))
                } else {
                    engine.split(start..bb, max_tokens, overlap_tokens, None)
                }
            }
        };
        for p in &mut pieces {
            p.section = s.path.clone();
        }
        out.extend(pieces);
    }
    out
}

/// One section whose body holds tables or question/answer pairs.
struct SectionSplit<'e, 'a> {
    engine: &'e Engine<'a>,
    path: &'e [String],
    budget: &'e dyn Fn(&[String]) -> usize,
    overlap_tokens: usize,
}

impl SectionSplit<'_, '_> {
    /// The section's chunks, segment by segment; `heading` starts the first one (alone when it
    /// takes more than half the budget).
    fn split(&self, heading: Option<Range<usize>>, segments: Vec<Segment>) -> Vec<Piece> {
        let e = self.engine;
        let max = (self.budget)(self.path).max(1);
        let overlap = self.overlap_tokens.min(max / 2);
        let mut out = Vec::new();
        let mut prefix = heading;
        if let Some(h) = prefix.clone() {
            if e.count(h.start, h.end) * 2 > max {
                out.extend(self.tag(e.split(h, max, overlap, None), self.path));
                prefix = None;
            }
        }
        for seg in segments {
            match seg {
                Segment::Text(r) | Segment::Pair(r) => {
                    let pieces = e.split(r, max, overlap, prefix.take());
                    out.extend(self.tag(pieces, self.path));
                }
                Segment::Quote(r) => {
                    let mut pieces = self.tag(e.split(r, max, overlap, prefix.take()), self.path);
                    for p in &mut pieces {
                        p.quote = true;
                    }
                    out.extend(pieces);
                }
                Segment::Table {
                    header,
                    delimiter,
                    rows,
                } => {
                    let start = prefix.take().map_or(header.start, |p| p.start);
                    let end = rows.last().unwrap_or(&delimiter).end;
                    let whole = e.count(start, end);
                    if whole <= max {
                        out.extend(self.tag(vec![piece(start, end, whole)], self.path));
                        continue;
                    }
                    let mut path = self.path.to_vec();
                    path.push(blocks::header_label(e.text, &header));
                    let max = (self.budget)(&path).max(1);
                    let pieces = table_rows(e, start, &delimiter, &rows, max);
                    out.extend(self.tag(pieces, &path));
                }
            }
        }
        out
    }

    fn tag(&self, mut pieces: Vec<Piece>, path: &[String]) -> Vec<Piece> {
        for p in &mut pieces {
            p.section = path.to_vec();
        }
        pieces
    }
}

fn piece(start: usize, end: usize, tokens: usize) -> Piece {
    Piece {
        start,
        end,
        tokens,
        ..Piece::default()
    }
}

/// A table's rows in chunks of whole rows within `max` tokens; the first chunk also holds what
/// precedes the rows from `start` (the header and delimiter lines, a heading). A row over `max`
/// alone is split like any text.
fn table_rows(
    e: &Engine<'_>,
    start: usize,
    delimiter: &Range<usize>,
    rows: &[Range<usize>],
    max: usize,
) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut from = start;
    let mut i = 0;
    if rows.is_empty() {
        return e.split(start..delimiter.end, max, 0, None);
    }
    while i < rows.len() && !e.full() {
        let mut end = None;
        let mut j = i;
        while j < rows.len() {
            let n = e.count(from, rows[j].end);
            if n > max {
                break;
            }
            end = Some((rows[j].end, n));
            j += 1;
        }
        match end {
            Some((end, n)) => {
                e.cut_one();
                out.push(piece(from, end, n));
                i = j;
            }
            None if from < rows[i].start => {
                // The header (and heading) alone: their own chunk, then the rows.
                out.extend(e.split(from..delimiter.end, max, 0, None));
            }
            None => {
                out.extend(e.split(rows[i].clone(), max, 0, None));
                i += 1;
            }
        }
        if let Some(r) = rows.get(i) {
            from = r.start;
        }
    }
    out
}

/// A heading and the text up to the next heading.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Section {
    /// The heading line (without its `\n`); `None` for text before the first heading.
    pub heading: Option<Range<usize>>,
    pub body: Range<usize>,
    pub path: Vec<String>,
}

/// Cuts `range` of `text` at ATX headings outside code fences.
pub(crate) fn sections(text: &str, range: Range<usize>) -> Vec<Section> {
    let mut out = Vec::new();
    let Some(s) = text.get(range.clone()) else {
        return out;
    };
    let mut fences = Fences::default();
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut heading: Option<Range<usize>> = None;
    let mut path = Vec::new();
    let mut body_start = range.start;
    let mut pos = range.start;
    for line in s.split('\n') {
        let (ls, le) = (pos, pos + line.len());
        pos = le + 1;
        if fences.line(line) != FenceLine::Outside {
            continue;
        }
        let Some((level, title)) = atx_heading(line) else {
            continue;
        };
        out.push(Section {
            heading: heading.take(),
            body: body_start..ls,
            path: std::mem::take(&mut path),
        });
        while stack.last().is_some_and(|(l, _)| *l >= level) {
            stack.pop();
        }
        stack.push((level, title.to_owned()));
        // An indented heading's chunk starts at its `#` (chunk texts are trimmed).
        heading = Some(ls + (line.len() - line.trim_start_matches(' ').len())..le);
        path = stack.iter().map(|(_, t)| t.clone()).collect();
        body_start = le;
    }
    out.push(Section {
        heading,
        body: body_start..range.end,
        path,
    });
    out
}

/// An ATX heading line: its level and its text (closing `#`s removed). Empty headings are not
/// headings here.
pub(crate) fn atx_heading(line: &str) -> Option<(usize, &str)> {
    let rest = line.trim_start_matches(' ');
    if line.len() - rest.len() > 3 {
        return None;
    }
    let n = rest.bytes().take_while(|&b| b == b'#').count();
    if n == 0 || n > 6 {
        return None;
    }
    let after = &rest[n..];
    if !after.is_empty() && !after.starts_with([' ', '\t']) {
        return None;
    }
    let mut title = after.trim();
    let stripped = title.trim_end_matches('#');
    if stripped.len() != title.len() && (stripped.is_empty() || stripped.ends_with([' ', '\t'])) {
        title = stripped.trim_end();
    }
    (!title.is_empty()).then_some((n, title))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::tokens::tests::test_counter;
    use crate::chunk::tokens::CharCounter;

    fn run(text: &str, max: usize, overlap: usize) -> Vec<(Vec<String>, String)> {
        let t = test_counter();
        let pieces = split_markdown(text, max, overlap, &t);
        for p in &pieces {
            assert!(p.tokens <= max, "over budget: {:?}", &text[p.start..p.end]);
            assert_eq!(p.tokens, t.count(&text[p.start..p.end]));
        }
        pieces
            .into_iter()
            .map(|p| (p.section, text[p.start..p.end].to_owned()))
            .collect()
    }

    fn path(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn headings() {
        assert_eq!(atx_heading("# Title"), Some((1, "Title")));
        assert_eq!(atx_heading("###   Deep  ###"), Some((3, "Deep")));
        assert_eq!(atx_heading("   ## x #"), Some((2, "x")));
        assert_eq!(atx_heading("## C#"), Some((2, "C#")));
        assert_eq!(atx_heading("#hashtag"), None);
        assert_eq!(atx_heading("    # indented code"), None);
        assert_eq!(atx_heading("####### seven"), None);
        assert_eq!(atx_heading("#"), None);
        assert_eq!(atx_heading("## ##"), None);
        assert_eq!(atx_heading("\\# escaped"), None);
    }

    #[test]
    fn section_paths() {
        let text = "intro\n# Install\nsteps\n## Linux\napt\n```sh\n# not a heading\n```\n## Mac\nbrew\n# Use\nrun";
        let got = run(text, 100, 0);
        assert_eq!(
            got,
            vec![
                (path(&[]), "intro".to_string()),
                (path(&["Install"]), "# Install\nsteps".to_string()),
                (
                    path(&["Install", "Linux"]),
                    "## Linux\napt\n```sh\n# not a heading\n```".to_string()
                ),
                (path(&["Install", "Mac"]), "## Mac\nbrew".to_string()),
                (path(&["Use"]), "# Use\nrun".to_string()),
            ]
        );
    }

    #[test]
    fn empty_sections_join_the_next() {
        let text = "# A\n\n## B\n\ntext here\n\n# C";
        let got = run(text, 100, 0);
        assert_eq!(
            got,
            vec![
                (path(&["A", "B"]), "# A\n\n## B\n\ntext here".to_string()),
                (path(&["C"]), "# C".to_string()),
            ]
        );
        assert_eq!(
            run("# Only", 10, 0),
            vec![(path(&["Only"]), "# Only".to_string())]
        );
    }

    #[test]
    fn heading_stays_with_first_chunk() {
        let body: Vec<String> = (0..6).map(|_| ["the"; 9].join(" ") + ".").collect();
        let text = format!("## Title here\n\n{}", body.join("\n\n"));
        let got = run(&text, 14, 2);
        assert!(got.len() > 2);
        assert!(
            got[0].1.starts_with("## Title here\n\nthe"),
            "{:?}",
            got[0].1
        );
        assert!(got.iter().all(|(p, _)| *p == path(&["Title here"])));
        assert_eq!(got.iter().filter(|(_, t)| t.contains("Title")).count(), 1);
        // a first paragraph too big to go with the heading is split so its start can
        let text = format!("# H\n\n{}", vec!["the"; 40].join(" "));
        let got = run(&text, 12, 0);
        assert!(got[0].1.starts_with("# H\n\nthe the"), "{:?}", got[0].1);
    }

    #[test]
    fn code_fences_are_not_split() {
        let code = (0..8)
            .map(|i| format!("let x{i} = {i};"))
            .collect::<Vec<_>>()
            .join("\n\n");
        let text = format!("# Code\n\nthe intro.\n\n```rust\n{code}\n```\n\nthe end.");
        let t = test_counter();
        let fence_tokens = t.count(&format!("```rust\n{code}\n```"));
        let got = run(&text, fence_tokens + 1, 0);
        let fence = got.iter().find(|(_, s)| s.contains("```rust")).unwrap();
        assert!(fence.1.contains(&code), "fence split: {got:#?}");
        // a fence larger than the budget is split by lines
        let got = run(&text, 20, 0);
        assert!(got
            .iter()
            .all(|(_, s)| !s.contains("```rust") || !s.contains("x7")));
        assert!(got.iter().any(|(_, s)| s.contains("let x3 = 3;")));
    }

    #[test]
    fn overlap_does_not_cross_sections() {
        let para = vec!["the"; 30].join(" ");
        let text = format!("# A\n\n{para}\n\n# B\n\n{para}");
        let pieces = split_markdown(&text, 12, 4, &CharCounter);
        let b_start = text.find("# B").unwrap();
        let first_b = pieces.iter().find(|p| p.section == path(&["B"])).unwrap();
        assert_eq!(first_b.start, b_start);
    }
}
