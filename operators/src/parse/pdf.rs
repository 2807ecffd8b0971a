//! PDF to Markdown, page by page: the glyphs `pdf-extract` places on each page are laid out
//! again here, so that
//!
//! - lines are rebuilt from glyph positions (not from drawing order), a wide horizontal gap
//!   splitting a line into segments;
//! - a page with a gutter (a vertical strip in its middle that no body line crosses) is read
//!   column by column, left before right, between the full-width lines (titles) that cut across;
//! - lines repeated at the top or bottom of most pages (running headers and footers, page
//!   numbers included: digits compare equal) are dropped;
//! - lines of a paragraph are joined, a word hyphenated across a line end joined again;
//! - lines set larger than the document's body text become headings, the largest size `#`, the
//!   next `##`, …, so they give the chunks' section paths; a line opening with a bullet glyph is
//!   a list item.
//!
//! Every page keeps its number: [`Parsed::pages`] holds each page's Markdown. A PDF without a
//! glyph is `no_text` (scans need OCR, which freshet does not do); one that is encrypted with a
//! password, damaged or over the limits (pages, glyphs, two minutes of reading) is
//! `unparseable`. `pdf-extract` can panic on malformed files: the panic is caught and the file
//! is `unparseable`.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use pdf_extract::{MediaBox, OutputDev, OutputError, Transform};

use super::{ParseLimits, Parsed};

/// Pages one PDF may have.
const MAX_PAGES: usize = 5_000;
/// Glyphs one PDF may place (a bound on memory: about 60 bytes each).
const MAX_GLYPHS: usize = 20_000_000;
/// How long reading one PDF's pages may take (checked as glyphs arrive): a file that makes the
/// reader crawl is refused rather than holding up the pipeline.
const MAX_READ: Duration = Duration::from_secs(120);

pub(super) fn parse(bytes: &[u8], _limits: &ParseLimits) -> Result<Parsed, String> {
    let result = catch_unwind(AssertUnwindSafe(|| extract(bytes)));
    let (pages, title) = match result {
        Ok(r) => r?,
        Err(_) => return Err("the PDF reader failed on this file (malformed PDF)".into()),
    };
    let laid_out = layout_document(&pages);
    Ok(Parsed {
        markdown: laid_out.join("\n\n"),
        title,
        pages: laid_out,
    })
}

/// Each page's glyphs, and the document's title (its info dictionary's `Title`).
fn extract(bytes: &[u8]) -> Result<(Vec<Page>, Option<String>), String> {
    let mut doc =
        pdf_extract::Document::load_mem(bytes).map_err(|e| format!("not a readable PDF: {e}"))?;
    if doc.is_encrypted() {
        // Encrypted for permissions only (an empty user password) is still readable.
        doc.decrypt("")
            .map_err(|_| "encrypted with a password".to_string())?;
    }
    let n = doc.get_pages().len();
    if n > MAX_PAGES {
        return Err(format!("{n} pages, over the limit of {MAX_PAGES}"));
    }
    let title = info_title(&doc);
    let mut collector = Collector {
        deadline: Some(Instant::now() + MAX_READ),
        ..Collector::default()
    };
    let read = pdf_extract::output_doc(&doc, &mut collector);
    if collector.over {
        return Err(format!("more than {MAX_GLYPHS} glyphs"));
    }
    if collector.late {
        return Err(format!(
            "reading its pages took over {} s",
            MAX_READ.as_secs()
        ));
    }
    read.map_err(|e| format!("cannot read the pages: {e:?}"))?;
    Ok((collector.pages, title))
}

fn info_title(doc: &pdf_extract::Document) -> Option<String> {
    let info = doc.trailer.get(b"Info").ok()?;
    let dict = match info {
        pdf_extract::Object::Reference(id) => doc.get_dictionary(*id).ok()?,
        pdf_extract::Object::Dictionary(d) => d,
        _ => return None,
    };
    let raw = dict.get(b"Title").ok()?.as_str().ok()?;
    let title = match raw {
        // UTF-16BE with its byte-order mark, else PDFDocEncoding (Latin-1 for text).
        [0xfe, 0xff, rest @ ..] => String::from_utf16_lossy(
            &rest
                .chunks(2)
                .map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]))
                .collect::<Vec<_>>(),
        ),
        _ => raw.iter().map(|&b| b as char).collect(),
    };
    let title = title.split_whitespace().collect::<Vec<_>>().join(" ");
    (!title.is_empty()).then_some(title)
}

/// One glyph: its left edge and baseline (from the top of the page), advance and size.
#[derive(Clone, Debug)]
struct Glyph {
    x: f64,
    y: f64,
    width: f64,
    size: f64,
    text: String,
}

#[derive(Clone, Debug, Default)]
struct Page {
    width: f64,
    height: f64,
    glyphs: Vec<Glyph>,
}

#[derive(Default)]
struct Collector {
    pages: Vec<Page>,
    current: Page,
    height: f64,
    glyphs: usize,
    over: bool,
    deadline: Option<Instant>,
    late: bool,
}

impl OutputDev for Collector {
    fn begin_page(
        &mut self,
        _page_num: u32,
        media_box: &MediaBox,
        _art_box: Option<(f64, f64, f64, f64)>,
    ) -> Result<(), OutputError> {
        self.height = media_box.ury - media_box.lly;
        self.current = Page {
            width: (media_box.urx - media_box.llx).abs(),
            height: self.height.abs(),
            glyphs: Vec::new(),
        };
        Ok(())
    }

    fn end_page(&mut self) -> Result<(), OutputError> {
        self.pages.push(std::mem::take(&mut self.current));
        Ok(())
    }

    fn output_character(
        &mut self,
        trm: &Transform,
        width: f64,
        _spacing: f64,
        font_size: f64,
        text: &str,
    ) -> Result<(), OutputError> {
        self.glyphs += 1;
        if self.glyphs > MAX_GLYPHS {
            self.over = true;
            return Err(OutputError::IoError(std::io::Error::other(
                "too many glyphs",
            )));
        }
        if self.glyphs.is_multiple_of(4096) && self.deadline.is_some_and(|d| Instant::now() > d) {
            self.late = true;
            return Err(OutputError::IoError(std::io::Error::other("too slow")));
        }
        // The size the glyph is drawn at: the font size through the text matrix.
        let vx = font_size * (trm.m11 + trm.m21);
        let vy = font_size * (trm.m12 + trm.m22);
        let size = (vx * vy).abs().sqrt();
        let (x, y) = (trm.m31, self.height - trm.m32);
        if !(x.is_finite() && y.is_finite() && size.is_finite()) || size <= 0.0 {
            return Ok(());
        }
        self.current.glyphs.push(Glyph {
            x,
            y,
            width: width * size,
            size,
            text: text.to_owned(),
        });
        Ok(())
    }

    fn begin_word(&mut self) -> Result<(), OutputError> {
        Ok(())
    }
    fn end_word(&mut self) -> Result<(), OutputError> {
        Ok(())
    }
    fn end_line(&mut self) -> Result<(), OutputError> {
        Ok(())
    }
}

/// A run of glyphs on one baseline without a wide gap: a line, or a line of one column.
#[derive(Clone, Debug)]
struct Segment {
    x0: f64,
    x1: f64,
    y: f64,
    size: f64,
    text: String,
}

/// The segments of a page (by line, then x).
fn segments(page: &Page) -> Vec<Segment> {
    let mut glyphs: Vec<&Glyph> = page.glyphs.iter().collect();
    glyphs.sort_by(|a, b| a.y.total_cmp(&b.y).then(a.x.total_cmp(&b.x)));
    // Lines: glyphs whose baselines are within half a glyph size.
    let mut lines: Vec<Vec<&Glyph>> = Vec::new();
    for g in glyphs {
        match lines.last_mut() {
            Some(line) if (g.y - line[0].y).abs() <= 0.5 * g.size.max(line[0].size) => line.push(g),
            _ => lines.push(vec![g]),
        }
    }
    let mut out = Vec::new();
    for mut line in lines {
        line.sort_by(|a, b| a.x.total_cmp(&b.x));
        let mut seg: Option<Segment> = None;
        for g in line {
            if let Some(s) = seg.as_mut() {
                let gap = g.x - s.x1;
                if gap <= 1.5 * g.size {
                    if gap > 0.15 * g.size && !s.text.ends_with(' ') && g.text != " " {
                        s.text.push(' ');
                    }
                    s.text.push_str(&g.text);
                    s.x1 = s.x1.max(g.x + g.width);
                    s.size = s.size.max(g.size);
                    continue;
                }
            }
            // A wide gap (or the line's first glyph) starts a segment.
            out.extend(seg.take());
            seg = Some(Segment {
                x0: g.x,
                x1: g.x + g.width,
                y: g.y,
                size: g.size,
                text: g.text.clone(),
            });
        }
        out.extend(seg);
    }
    out.retain(|s| !s.text.trim().is_empty());
    for s in &mut out {
        s.text = s.text.split_whitespace().collect::<Vec<_>>().join(" ");
    }
    out
}

/// Orders a page's segments: by line, or column by column when the page has a gutter.
fn reading_order(mut segs: Vec<Segment>, width: f64) -> Vec<Segment> {
    segs.sort_by(|a, b| a.y.total_cmp(&b.y).then(a.x0.total_cmp(&b.x0)));
    let Some(gutter) = gutter(&segs, width) else {
        return segs;
    };
    // Bands between full-width segments; in each band the left column, then the right.
    let mut band = 0usize;
    let mut keyed: Vec<((usize, usize, usize), Segment)> = Vec::new();
    for (i, s) in segs.into_iter().enumerate() {
        let key = if s.x0 < gutter && s.x1 > gutter {
            band += 1;
            let k = (band, 0, i);
            band += 1;
            k
        } else {
            (band, usize::from(s.x0 >= gutter), i)
        };
        keyed.push((key, s));
    }
    keyed.sort_by_key(|(k, _)| *k);
    keyed.into_iter().map(|(_, s)| s).collect()
}

/// The x of a vertical strip in the middle half of the page that at most a tenth of the
/// segments cross, with at least two segments on either side; `None` for one column.
fn gutter(segs: &[Segment], width: f64) -> Option<f64> {
    if segs.len() < 4 || width <= 0.0 {
        return None;
    }
    let bins = width.ceil() as usize + 1;
    let mut cover = vec![0usize; bins];
    for s in segs {
        let a = s.x0.max(0.0) as usize;
        let b = (s.x1.max(0.0) as usize).min(bins - 1);
        for c in cover.iter_mut().take(b + 1).skip(a) {
            *c += 1;
        }
    }
    let allowed = segs.len() / 10;
    let (lo, hi) = ((width * 0.25) as usize, (width * 0.75) as usize);
    let mut best: Option<(usize, usize)> = None;
    let mut run_start = None;
    let top = hi.min(bins - 1);
    for (x, &c) in cover.iter().enumerate().take(top + 1).skip(lo) {
        if c <= allowed {
            run_start.get_or_insert(x);
        } else if let Some(s) = run_start.take() {
            if best.is_none_or(|(a, b)| x - s > b - a) {
                best = Some((s, x));
            }
        }
    }
    if let Some(s) = run_start {
        let end = top;
        if best.is_none_or(|(a, b)| end - s > b - a) {
            best = Some((s, end));
        }
    }
    let (a, b) = best?;
    if ((b - a) as f64) < width * 0.02 {
        return None;
    }
    let g = (a + b) as f64 / 2.0;
    let left = segs.iter().filter(|s| s.x1 <= g).count();
    let right = segs.iter().filter(|s| s.x0 >= g).count();
    (left >= 2 && right >= 2).then_some(g)
}

/// A line's text with digits as `#` and case folded: running headers and footers compare equal
/// whatever page number they carry.
fn repeat_key(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii_digit() {
            if !out.ends_with('#') {
                out.push('#');
            }
        } else {
            out.extend(c.to_lowercase());
        }
    }
    out
}

/// Every page's Markdown, running headers and footers removed.
fn layout_document(pages: &[Page]) -> Vec<String> {
    let mut segs: Vec<Vec<Segment>> = pages.iter().map(segments).collect();
    let heights: Vec<f64> = pages.iter().map(|p| p.height).collect();
    remove_running_lines(&mut segs, &heights);
    let (body, headings) = text_sizes(&segs);
    segs.into_iter()
        .zip(pages)
        .map(|(s, p)| page_markdown(&reading_order(s, p.width), body, &headings))
        .collect()
}

/// Drops the lines in a page's top or bottom margin (its outer 10%), among its first or last
/// two, that recur there on at least 60% of the pages (and on two at least).
fn remove_running_lines(pages: &mut [Vec<Segment>], heights: &[f64]) {
    if pages.len() < 2 {
        return;
    }
    let edges = |segs: &[Segment], height: f64| -> Vec<usize> {
        let mut by_y: Vec<usize> = (0..segs.len()).collect();
        by_y.sort_by(|&a, &b| segs[a].y.total_cmp(&segs[b].y));
        let n = by_y.len();
        let mut e: Vec<usize> = by_y.iter().take(2).copied().collect();
        e.extend(by_y.iter().skip(n.saturating_sub(2)).copied());
        e.retain(|&i| segs[i].y < height * 0.1 || segs[i].y > height * 0.9);
        e.sort_unstable();
        e.dedup();
        e
    };
    let mut counts: HashMap<String, usize> = HashMap::new();
    for (segs, &h) in pages.iter().zip(heights) {
        let mut seen: Vec<String> = edges(segs, h)
            .into_iter()
            .map(|i| repeat_key(&segs[i].text))
            .collect();
        seen.sort();
        seen.dedup();
        for k in seen {
            *counts.entry(k).or_insert(0) += 1;
        }
    }
    let needed = ((pages.len() as f64) * 0.6).ceil().max(2.0) as usize;
    for (segs, &h) in pages.iter_mut().zip(heights) {
        let drop: Vec<usize> = edges(segs, h)
            .into_iter()
            .filter(|&i| counts.get(&repeat_key(&segs[i].text)).copied().unwrap_or(0) >= needed)
            .collect();
        let mut i = 0;
        segs.retain(|_| {
            let keep = !drop.contains(&i);
            i += 1;
            keep
        });
    }
}

/// The body text size of a document (the size most of its text is set in) and its heading
/// sizes, largest first: sizes (to half a point) at least 8% larger than the body, of lines
/// short enough to be headings; at most six.
fn text_sizes(pages: &[Vec<Segment>]) -> (f64, Vec<f64>) {
    let mut weighted: Vec<(f64, usize)> = pages
        .iter()
        .flatten()
        .map(|s| (s.size, s.text.chars().count()))
        .collect();
    weighted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total: usize = weighted.iter().map(|w| w.1).sum();
    let mut seen = 0;
    let mut body = weighted.first().map_or(0.0, |w| w.0);
    for (size, n) in &weighted {
        seen += n;
        if seen * 2 >= total {
            body = *size;
            break;
        }
    }
    let mut headings: Vec<f64> = pages
        .iter()
        .flatten()
        .filter(|s| s.size >= body * 1.08 && s.text.chars().count() <= 120)
        .map(|s| (s.size * 2.0).round() / 2.0)
        .collect();
    headings.sort_by(|a, b| b.total_cmp(a));
    headings.dedup();
    headings.truncate(6);
    (body, headings)
}

/// Bullet glyphs a list item may start with (Symbol and Wingdings private-use ones included).
const BULLETS: &[char] = &[
    '\u{2022}', '\u{25cf}', '\u{25aa}', '\u{25e6}', '\u{2023}', '\u{2043}', '\u{f0b7}', '\u{f0a7}',
    '\u{f0d8}', '\u{f076}', '\u{f0fc}',
];

/// A line opening with a bullet glyph as a Markdown list item (`- …`).
fn list_item(text: &str) -> Option<String> {
    let rest = text.strip_prefix(BULLETS)?;
    Some(format!("- {}", rest.trim_start()))
}

/// One page's segments (in reading order) as Markdown paragraphs, list items and headings
/// (levels by the document's heading sizes, largest first).
fn page_markdown(segs: &[Segment], body: f64, headings: &[f64]) -> String {
    let level_of = |s: &Segment| {
        if s.text.chars().count() > 120 || s.size < body * 1.08 {
            return None;
        }
        let rounded = (s.size * 2.0).round() / 2.0;
        headings.iter().position(|h| *h == rounded).map(|i| i + 1)
    };
    let mut blocks: Vec<String> = Vec::new();
    let mut para = String::new();
    let mut prev: Option<&Segment> = None;
    let tables = table_rows(segs);
    let mut i = 0;
    while i < segs.len() {
        if let Some((end, table)) = tables
            .iter()
            .find(|(start, _, _)| *start == i)
            .map(|t| (t.1, &t.2))
        {
            if !para.is_empty() {
                blocks.push(std::mem::take(&mut para));
            }
            blocks.push(table.clone());
            prev = None;
            i = end;
            continue;
        }
        let s = &segs[i];
        i += 1;
        let heading = level_of(s);
        let item = list_item(&s.text);
        let joined = prev.is_some_and(|p| {
            heading.is_none()
                && item.is_none()
                && level_of(p).is_none()
                && (s.size - p.size).abs() <= 0.05 * p.size
                && s.y > p.y
                && s.y - p.y <= 1.8 * p.size.max(s.size)
                && (s.x0 - p.x0).abs() < 0.5 * (p.x1 - p.x0).max(1.0)
        });
        if !joined && !para.is_empty() {
            blocks.push(std::mem::take(&mut para));
        }
        prev = Some(s);
        if let Some(level) = heading {
            blocks.push(format!("{} {}", "#".repeat(level), s.text));
            continue;
        }
        join_line(&mut para, item.as_deref().unwrap_or(&s.text));
    }
    if !para.is_empty() {
        blocks.push(para);
    }
    // Consecutive list items form one list.
    let mut out: Vec<String> = Vec::new();
    for b in blocks {
        match out.last_mut() {
            Some(last) if b.starts_with("- ") && last.starts_with("- ") => {
                last.push('\n');
                last.push_str(&b);
            }
            _ => out.push(b),
        }
    }
    out.join("\n\n")
}

/// Runs of at least two consecutive lines that each hold the same number (two or more) of
/// segments on one baseline, with their cells starting at the same x: tables, as
/// `(first segment, end, Markdown table)`.
fn table_rows(segs: &[Segment]) -> Vec<(usize, usize, String)> {
    // Lines: consecutive segments on one baseline.
    let mut lines: Vec<(usize, usize)> = Vec::new();
    let mut start = 0;
    for i in 1..=segs.len() {
        let same = i < segs.len() && (segs[i].y - segs[start].y).abs() < 0.3 * segs[start].size;
        if !same {
            lines.push((start, i));
            start = i;
        }
    }
    let cells = |l: &(usize, usize)| l.1 - l.0;
    let aligned = |a: &(usize, usize), b: &(usize, usize)| {
        cells(a) == cells(b)
            && (0..cells(a)).all(|k| (segs[a.0 + k].x0 - segs[b.0 + k].x0).abs() < 2.0)
    };
    let mut out = Vec::new();
    let mut k = 0;
    while k < lines.len() {
        let mut j = k + 1;
        while cells(&lines[k]) >= 2 && j < lines.len() && aligned(&lines[k], &lines[j]) {
            j += 1;
        }
        if j - k >= 2 {
            let rows: Vec<Vec<String>> = lines[k..j]
                .iter()
                .map(|&(a, b)| segs[a..b].iter().map(|s| s.text.clone()).collect())
                .collect();
            if let Some(t) = crate::table::markdown_table(&rows) {
                out.push((lines[k].0, lines[j - 1].1, t));
            }
            k = j;
        } else {
            k += 1;
        }
    }
    out
}

/// Appends a line to a paragraph: a word hyphenated across the line end is joined again.
fn join_line(para: &mut String, line: &str) {
    if para.is_empty() {
        para.push_str(line);
        return;
    }
    let hyphenated = para.ends_with('-')
        && para[..para.len() - 1]
            .chars()
            .last()
            .is_some_and(char::is_alphabetic)
        && line.chars().next().is_some_and(char::is_lowercase);
    if hyphenated {
        para.pop();
    } else {
        para.push(' ');
    }
    para.push_str(line);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hyphenation_and_repeat_keys() {
        let mut p = String::from("the measure-");
        join_line(&mut p, "ment was taken");
        assert_eq!(p, "the measurement was taken");
        let mut p = String::from("north-");
        join_line(&mut p, "East wind");
        assert_eq!(p, "north- East wind");
        assert_eq!(repeat_key("Page 3 of 12"), repeat_key("page 10 of 12"));
    }
}
