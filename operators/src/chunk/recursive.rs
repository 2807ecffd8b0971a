//! Recursive, token-counted text splitting.
//!
//! A range of text is split at the coarsest separator that makes its pieces fit: paragraphs
//! (blank lines; in Markdown mode a fenced code block is one paragraph), lines, sentences
//! (`.`, `!`, `?` followed by whitespace or the end; `。！？` anywhere; `!`, `?`, `…` between
//! CJK text; closing quotes and brackets stay with their sentence), clauses (`；：，、`, and
//! `;`, `:`, `,` before whitespace), words (whitespace; inside a run of CJK characters every
//! character is a word, with its punctuation), grapheme clusters, and characters as the last
//! resort (`separators.rs` holds the rules). Every strategy cuts through here, so no chunk
//! starts or ends inside a sentence unless that sentence alone exceeds the budget, nor inside a
//! clause unless that clause does; a sentence that fits alone is not cut to keep a heading
//! with it (the heading becomes a chunk of its own).
//!
//! # How pieces become chunks
//!
//! The range is tokenized once: if it fits, it is one chunk. Otherwise every piece is estimated
//! from that tokenization's spans when the counter gives them ([`TokenCounter::token_spans`]),
//! else counted once on its own; the tokenizer is never run over the text quadratically. A
//! piece that does not fit in `max_tokens` is split at the next finer separator; pieces that
//! fit are merged:
//!
//! - **Paragraphs and lines** are merged in *content-defined groups*: after each piece the group
//!   ends with probability `tokens / (max_tokens / 2)`, decided by a hash of the piece's token
//!   count (so a piece of at least half the budget always ends its group). A group that fits is
//!   one chunk; a group that does not is packed greedily. A group boundary depends only on the
//!   piece before it, and packing only on token counts, so editing a paragraph without changing
//!   its token count changes exactly the chunks that contain (or, via overlap, start with) text
//!   of that paragraph. An edit that changes the count can also move later boundaries in its
//!   group, or merge/split its group with the next one; paragraphs of at least half the budget
//!   are always chunked on their own, so with those every edit stays local.
//! - **Sentences and finer pieces** (only ever inside a paragraph or line that is itself too
//!   long) are packed greedily up to `max_tokens`.
//!
//! Overlap: each chunk after the first starts with the last ~`overlap_tokens` of the previous
//! chunk, starting at a word boundary (a whitespace boundary), never in the middle of a word
//! and never at the previous chunk's own start. Where the previous chunk holds CJK text (whose
//! characters are not words), the overlap starts at a sentence start of that text, or, in a
//! sentence over budget that the previous chunk ends inside, at a clause start (a character
//! when that part has no clause mark); when none fits, the chunk has no overlap. Packing reserves the full
//! `overlap_tokens` for it (so where a chunk ends never depends on the previous chunk's text);
//! when the next piece and that reserve do not fit together, the chunk has no overlap.
//!
//! Every chunk is trimmed of whitespace, and its token count is verified with
//! [`TokenCounter::count`]; a chunk over budget is shrunk. The only chunk that can exceed
//! `max_tokens` is a single character that alone counts more than `max_tokens`.

use std::cell::OnceCell;

use super::separators::{ends_sentence, is_cjk, segments, trim, Level};
use super::tokens::TokenCounter;
use super::Piece;

/// Splits `text` (plain text rules) into chunks of at most `max_tokens` tokens with about
/// `overlap_tokens` of overlap. Offsets in the result are byte offsets into `text`.
pub fn split_recursive(
    text: &str,
    max_tokens: usize,
    overlap_tokens: usize,
    tokens: &dyn TokenCounter,
) -> Vec<Piece> {
    let engine = Engine::new(text, tokens, false);
    engine.split(0..text.len(), max_tokens, overlap_tokens, None)
}

/// What splitting one document needs: the text, the counter, whether paragraphs follow
/// Markdown (fenced code blocks are kept whole), and how many pieces it may cut: once it has cut
/// more, every splitter stops ([`Engine::full`]), so a document over the chunk limit costs no
/// more than the limit.
pub(crate) struct Engine<'a> {
    pub(crate) text: &'a str,
    counter: &'a dyn TokenCounter,
    markdown: bool,
    cut: std::cell::Cell<usize>,
    max_pieces: usize,
}

/// Token spans of a range of the text, for estimates without re-tokenizing.
struct Spans {
    starts: Vec<usize>,
    ends: Vec<usize>,
}

impl<'a> Engine<'a> {
    pub(crate) fn new(text: &'a str, counter: &'a dyn TokenCounter, markdown: bool) -> Self {
        Engine {
            text,
            counter,
            markdown,
            cut: std::cell::Cell::new(0),
            max_pieces: usize::MAX,
        }
    }

    /// The engine stops once it has cut more than `max` pieces.
    pub(crate) fn with_max_pieces(mut self, max: usize) -> Self {
        self.max_pieces = max;
        self
    }

    /// Counts a piece cut.
    pub(crate) fn cut_one(&self) {
        self.cut.set(self.cut.get().saturating_add(1));
    }

    /// More pieces cut than allowed: the splitters stop.
    pub(crate) fn full(&self) -> bool {
        self.cut.get() > self.max_pieces
    }

    /// Exact token count of `text[a..b]`.
    pub(crate) fn count(&self, a: usize, b: usize) -> usize {
        self.text.get(a..b).map_or(0, |s| self.counter.count(s))
    }

    /// Token spans of `text[a..b]`, shifted to text offsets; `None` if the counter has none or
    /// they are not monotone.
    fn spans(&self, a: usize, b: usize) -> Option<Spans> {
        let s = self.text.get(a..b)?;
        let v = self.counter.token_spans(s)?;
        let ok = v.iter().all(|&(x, y)| x <= y && y <= s.len())
            && v.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1);
        ok.then(|| Spans {
            starts: v.iter().map(|t| a + t.0).collect(),
            ends: v.iter().map(|t| a + t.1).collect(),
        })
    }

    /// Splits `range` into chunks. `prefix` is a range before `range` (a heading) that must
    /// start the first chunk. The result depends only on the text of `prefix` and `range`.
    pub(crate) fn split(
        &self,
        range: std::ops::Range<usize>,
        max_tokens: usize,
        overlap_tokens: usize,
        prefix: Option<std::ops::Range<usize>>,
    ) -> Vec<Piece> {
        if self.full() {
            return Vec::new();
        }
        let max = max_tokens.max(1);
        let (a, b) = trim(self.text, range.start, range.end);
        let base = prefix.as_ref().map_or(a, |p| p.start.min(a));
        let mut run = Run {
            e: self,
            max,
            overlap: overlap_tokens.min(max / 2),
            out: Vec::new(),
            prev: None,
            prefix: prefix.map(|p| (p.start, p.end, self.count(p.start, p.end))),
            span_range: (base, b),
            spans: OnceCell::new(),
        };
        if a < b {
            // One tokenization of the whole range: its exact count (a text that fits is done)
            // and, when the counter gives spans, the estimates for splitting.
            let start = run.prefix.map_or(a, |p| p.0);
            let whole = match run.spans() {
                Some(s) => s.starts.len(),
                None => self.count(start, b),
            };
            if whole <= max {
                run.emit(start, b, whole);
            } else {
                run.process(a, b, Level::Paragraph);
            }
        }
        run.flush_prefix();
        run.out
    }
}

#[derive(Clone, Copy, Debug)]
struct Unit {
    a: usize,
    b: usize,
    t: usize,
}

/// What starts a chunk before its own pieces.
#[derive(Clone, Copy, Debug)]
enum Lead {
    /// A heading: must be in the first chunk.
    Forced { start: usize, t: usize },
    /// Overlap with the previous chunk: dropped if it does not fit.
    Overlap { start: usize },
}

struct Run<'e, 'a> {
    e: &'e Engine<'a>,
    max: usize,
    overlap: usize,
    out: Vec<Piece>,
    prev: Option<(usize, usize)>,
    prefix: Option<(usize, usize, usize)>,
    /// The range the spans cover (prefix and range), and the spans once computed.
    span_range: (usize, usize),
    spans: OnceCell<Option<Spans>>,
}

impl Run<'_, '_> {
    fn spans(&self) -> Option<&Spans> {
        self.spans
            .get_or_init(|| self.e.spans(self.span_range.0, self.span_range.1))
            .as_ref()
    }

    fn has_spans(&self) -> bool {
        self.spans().is_some()
    }

    /// Planning estimate of the tokens of `text[a..b]`: from the spans when the counter gives
    /// them (tokens that overlap the range), else an exact count.
    fn estimate(&self, a: usize, b: usize) -> usize {
        match self.spans() {
            Some(s) if a < b => {
                let n1 = s.starts.partition_point(|&x| x < b);
                let n0 = s.ends.partition_point(|&x| x <= a);
                n1.saturating_sub(n0)
            }
            Some(_) => 0,
            None => self.e.count(a, b),
        }
    }

    fn emit(&mut self, a: usize, b: usize, tokens: usize) {
        self.e.cut_one();
        self.out.push(Piece {
            start: a,
            end: b,
            tokens,
            ..Piece::default()
        });
        self.prev = Some((a, b));
        self.prefix = None;
    }

    /// Emits a pending heading prefix as a chunk of its own.
    fn flush_prefix(&mut self) {
        if let Some((a, b, _)) = self.prefix.take() {
            let (a, b) = trim(self.e.text, a, b);
            if a < b {
                let c = self.e.count(a, b);
                self.emit(a, b, c);
            }
        }
    }

    fn lead(&self, next_start: usize) -> Option<Lead> {
        if let Some((start, _, t)) = self.prefix {
            return Some(Lead::Forced { start, t });
        }
        let (ps, pe) = self.prev?;
        if self.overlap == 0 || pe > next_start {
            return None;
        }
        self.overlap_start(ps, pe)
            .map(|(start, _)| Lead::Overlap { start })
    }

    /// The earliest overlap start `o` in `(ps, pe)` with `estimate(o, pe) <= overlap`: a word
    /// boundary, except in sentences with CJK text ([`Self::cjk_overlap_starts`]).
    fn overlap_start(&self, ps: usize, pe: usize) -> Option<(usize, usize)> {
        let text = self.e.text.get(ps..pe)?;
        let cands = if text.chars().any(is_cjk) {
            self.cjk_overlap_starts(ps, pe)
        } else {
            self.word_starts(ps, pe)
        };
        // cands[k] grows with k (longer overlap); find the largest k that fits.
        let (mut lo, mut hi) = (None, cands.len());
        let mut l = 0usize;
        while l < hi {
            let mid = (l + hi) / 2;
            let t = self.estimate(cands[mid], pe);
            if t <= self.overlap {
                lo = Some((cands[mid], t));
                l = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo.filter(|&(_, t)| t > 0)
    }

    /// Word starts in `(ps, pe)`, nearest to `pe` first; enough of them to cover the overlap
    /// budget.
    fn word_starts(&self, ps: usize, pe: usize) -> Vec<usize> {
        let text = self.e.text.get(ps..pe).unwrap_or("");
        let limit = self.overlap * 4 + 8;
        let mut cands = Vec::new();
        let mut next: Option<char> = None;
        for (i, c) in text.char_indices().rev() {
            if let Some(n) = next {
                let boundary = !n.is_whitespace() && (c.is_whitespace() || is_cjk(n) || is_cjk(c));
                if boundary {
                    cands.push(ps + i + c.len_utf8());
                    if cands.len() >= limit {
                        break;
                    }
                }
            }
            next = Some(c);
        }
        cands
    }

    /// Overlap starts in `(ps, pe)` when the previous chunk holds CJK text, nearest to `pe`
    /// first: sentence starts, word starts inside sentences without CJK text, and, in a
    /// sentence the previous chunk was cut inside (one over budget), its clause starts, or its
    /// word starts when that part of it has no clause mark.
    fn cjk_overlap_starts(&self, ps: usize, pe: usize) -> Vec<usize> {
        let text = self.e.text;
        let limit = self.span_range.1.max(pe);
        let mut look = (pe + 64).min(limit);
        while !text.is_char_boundary(look) {
            look += 1;
        }
        let cut_inside = !ends_sentence(text, ps, pe, limit);
        let mut cands = Vec::new();
        for (sa, sb) in segments(text, ps, look, Level::Sentence, false) {
            if sa >= pe {
                break;
            }
            if sa > ps {
                cands.push(sa);
            }
            let part = (sa.max(ps), sb.min(pe));
            let cjk = text[part.0..part.1].chars().any(is_cjk);
            let inner = if !cjk {
                segments(text, part.0, part.1, Level::Word, false)
            } else if cut_inside && sb > pe {
                let clauses = segments(text, part.0, part.1, Level::Clause, false);
                if clauses.len() > 1 {
                    clauses
                } else {
                    segments(text, part.0, part.1, Level::Word, false)
                }
            } else {
                Vec::new()
            };
            cands.extend(inner.iter().map(|w| w.0).filter(|&o| o > part.0));
        }
        cands.sort_unstable_by(|a, b| b.cmp(a));
        cands.dedup();
        cands
    }

    /// Emits `[a, b)` (a whole group) as one chunk if it fits with its lead.
    fn try_whole(&mut self, a: usize, b: usize, t: usize) -> bool {
        match self.lead(a) {
            Some(Lead::Forced { start, t: lt }) => {
                if lt + t <= self.max {
                    let c = self.e.count(start, b);
                    if c <= self.max {
                        self.emit(start, b, c);
                        return true;
                    }
                }
                return false;
            }
            // The full overlap budget is reserved, so that whether a group fits does not depend
            // on the previous chunk's text.
            Some(Lead::Overlap { start, .. }) if self.overlap + t <= self.max => {
                let c = self.e.count(start, b);
                if c <= self.max {
                    self.emit(start, b, c);
                    return true;
                }
            }
            Some(Lead::Overlap { .. }) | None => {}
        }
        if t <= self.max {
            let c = self.e.count(a, b);
            if c <= self.max {
                self.emit(a, b, c);
                return true;
            }
        }
        false
    }

    /// Splits `[a, b)` (known not to fit) at `level`.
    fn process(&mut self, a: usize, b: usize, level: Level) {
        if self.e.full() {
            return;
        }
        let segs = segments(self.e.text, a, b, level, self.e.markdown);
        if segs.is_empty() {
            return;
        }
        if segs.len() == 1 && level < Level::Char {
            let (sa, sb) = segs[0];
            // One sentence (or clause) that fits without the heading is not cut for it.
            let alone = level >= Level::Sentence
                && self.prefix.is_some()
                && self.estimate(sa, sb) <= self.max;
            if !alone {
                self.process(sa, sb, level.next());
                return;
            }
        }
        let units: Vec<Unit> = segs
            .into_iter()
            .map(|(a, b)| Unit {
                a,
                b,
                t: self.estimate(a, b),
            })
            .collect();
        if matches!(level, Level::Paragraph | Level::Line) {
            let target = (self.max / 2).max(1);
            let mut i = 0;
            while i < units.len() && !self.e.full() {
                let mut j = i + 1;
                while j < units.len() && !self.ends_group(units[j - 1], target) {
                    j += 1;
                }
                let g = &units[i..j];
                let (ga, gb) = (g[0].a, g[g.len() - 1].b);
                let t = if self.has_spans() {
                    self.estimate(ga, gb)
                } else {
                    g.iter().map(|u| u.t).sum()
                };
                if !self.try_whole(ga, gb, t) {
                    self.greedy(g, level);
                }
                i = j;
            }
        } else {
            self.greedy(&units, level);
        }
    }

    /// Group end after `u`: probability `u.t / target`, from a hash of its token count.
    fn ends_group(&self, u: Unit, target: usize) -> bool {
        let h = mix64(u.t as u64);
        // h / 2^64 < t / target
        (u128::from(h)) * (target as u128) < (u.t as u128) << 64
    }

    fn fits(&self, u: Unit) -> bool {
        match self.prefix {
            Some((_, _, pt)) => pt + u.t <= self.max,
            None => u.t <= self.max,
        }
    }

    /// Packs units greedily; units that do not fit are split at the next level.
    fn greedy(&mut self, units: &[Unit], level: Level) {
        let mut k = 0;
        while k < units.len() && !self.e.full() {
            let u = units[k];
            if !self.fits(u) && self.prefix.is_some() && level >= Level::Sentence && u.t <= self.max
            {
                // A sentence (or clause) that fits alone is not cut for the heading's sake:
                // the heading goes alone.
                self.flush_prefix();
                continue;
            }
            if !self.fits(u) {
                self.too_big(u, level);
                k += 1;
                continue;
            }
            let mut lead = self.lead(u.a);
            if let Some(Lead::Overlap { .. }) = lead {
                if self.overlap + u.t > self.max {
                    lead = None;
                }
            }
            // An overlap reserves the full overlap budget, so that where this chunk ends does
            // not depend on the previous chunk's text.
            let (start, reserve) = match lead {
                Some(Lead::Forced { start, t }) => (start, t),
                Some(Lead::Overlap { start, .. }) => (start, self.overlap),
                None => (u.a, 0),
            };
            let mut sum = reserve + u.t;
            let mut e = k + 1;
            while e < units.len() {
                let next = if self.has_spans() {
                    reserve + self.estimate(u.a, units[e].b)
                } else {
                    sum + units[e].t
                };
                if next > self.max {
                    break;
                }
                sum = next;
                e += 1;
            }
            let c = self.e.count(start, units[e - 1].b);
            if c <= self.max {
                self.emit(start, units[e - 1].b, c);
                k = e;
                continue;
            }
            // Over budget after all: the largest prefix of the units that fits.
            if let Some((m, c)) = largest_fitting(e - k - 1, self.max, |m| {
                self.e.count(start, units[k + m - 1].b)
            }) {
                self.emit(start, units[k + m - 1].b, c);
                k += m;
                continue;
            }
            if let Some(Lead::Overlap { .. }) = lead {
                let c = self.e.count(u.a, u.b);
                if c <= self.max {
                    self.emit(u.a, u.b, c);
                    k += 1;
                    continue;
                }
            }
            self.too_big(u, level);
            k += 1;
        }
    }

    /// A unit that does not fit: split it further, or at the last level emit it as it is.
    fn too_big(&mut self, u: Unit, level: Level) {
        if level < Level::Char {
            self.process(u.a, u.b, level.next());
            return;
        }
        // One character over budget (with the heading): the heading goes alone first.
        if let Some((_, _, pt)) = self.prefix {
            let c = self.e.count(u.a, u.b);
            if pt + c > self.max {
                self.flush_prefix();
            }
        }
        let start = self.prefix.map_or(u.a, |p| p.0);
        let c = self.e.count(start, u.b);
        self.emit(start, u.b, c);
    }
}

/// Largest `m` in `1..=n` with `count(m) <= max` (binary search, assuming `count` grows with
/// `m`; the result is always checked), with its count.
fn largest_fitting(n: usize, max: usize, count: impl Fn(usize) -> usize) -> Option<(usize, usize)> {
    let (mut lo, mut hi) = (0usize, n + 1);
    let mut best = None;
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        let c = count(mid);
        if c <= max {
            lo = mid;
            best = Some((mid, c));
        } else {
            hi = mid;
        }
    }
    best
}

/// splitmix64 finaliser: a fixed pseudo-random function.
fn mix64(x: u64) -> u64 {
    let mut h = x ^ 0x9e37_79b9_7f4a_7c15;
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests;
