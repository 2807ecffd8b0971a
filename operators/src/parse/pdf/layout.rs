//! A PDF's pages laid out again from the glyphs the reader places on them (see [`super`]):
//! lines from baselines, columns, running headers and footers, paragraphs and hyphenation,
//! headings by size, list items and tables, as Markdown page by page.

use std::collections::HashMap;

/// One glyph: its left edge and baseline (from the top of the page), advance and size, and
/// where its text lies in its page's [`Page::text`]. 24 bytes: a page of glyphs is held in
/// memory until the document is laid out.
#[derive(Clone, Copy, Debug)]
pub(super) struct Glyph {
    pub(super) x: f32,
    pub(super) y: f32,
    pub(super) width: f32,
    pub(super) size: f32,
    pub(super) start: u32,
    pub(super) end: u32,
}

/// One page's glyphs, their texts one after the other in `text`.
#[derive(Clone, Debug, Default)]
pub(super) struct Page {
    pub(super) width: f64,
    pub(super) height: f64,
    pub(super) glyphs: Vec<Glyph>,
    pub(super) text: String,
}

impl Page {
    fn text_of(&self, g: &Glyph) -> &str {
        self.text
            .get(g.start as usize..g.end as usize)
            .unwrap_or("")
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
    let f = f64::from;
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
                let text = page.text_of(g);
                let gap = f(g.x) - s.x1;
                if gap <= 1.5 * f(g.size) {
                    if gap > 0.15 * f(g.size) && !s.text.ends_with(' ') && text != " " {
                        s.text.push(' ');
                    }
                    s.text.push_str(text);
                    s.x1 = s.x1.max(f(g.x) + f(g.width));
                    s.size = s.size.max(f(g.size));
                    continue;
                }
            }
            // A wide gap (or the line's first glyph) starts a segment.
            out.extend(seg.take());
            seg = Some(Segment {
                x0: f(g.x),
                x1: f(g.x) + f(g.width),
                y: f(g.y),
                size: f(g.size),
                text: page.text_of(g).to_owned(),
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
pub(super) fn layout_document(pages: &[Page]) -> Vec<String> {
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
