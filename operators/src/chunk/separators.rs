//! Where text can be split, coarsest first: paragraphs (a fenced code block is one in
//! Markdown), lines, sentences, clauses, words (every CJK character is one), grapheme clusters,
//! characters. Each level yields trimmed, non-empty byte ranges. Every splitter cuts text at
//! these ranges, so the rules for Chinese and Japanese text live here:
//!
//! - a sentence ends at `。！？` (and `｡`) anywhere, at `.` `!` `?` `…` before whitespace or the
//!   end, and at `!` `?` `…` between CJK text; a run of them (`！？`, `……`) ends it once, and
//!   the closing quotes and brackets after it (`」』”’）》`…) belong to the sentence;
//! - a clause ends at `；：，、` anywhere and at `;` `:` `,` before whitespace or between CJK
//!   text (with any closing brackets after it): a sentence too big for the budget is cut there
//!   before it is cut between words;
//! - a word never starts with closing punctuation nor ends with an opening quote or bracket:
//!   inside CJK text, punctuation belongs to the character it follows (or, opening, precedes).

use unicode_segmentation::UnicodeSegmentation;

use super::fence::{FenceLine, Fences};

/// A separator level, coarsest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Level {
    Paragraph,
    Line,
    Sentence,
    Clause,
    Word,
    Grapheme,
    Char,
}

impl Level {
    pub(crate) fn next(self) -> Level {
        match self {
            Level::Paragraph => Level::Line,
            Level::Line => Level::Sentence,
            Level::Sentence => Level::Clause,
            Level::Clause => Level::Word,
            Level::Word => Level::Grapheme,
            Level::Grapheme | Level::Char => Level::Char,
        }
    }
}

/// Characters of scripts written without spaces between words (each one is a word).
pub(crate) fn is_cjk(c: char) -> bool {
    matches!(c,
        '\u{3000}'..='\u{303F}'   // CJK symbols and punctuation
        | '\u{3040}'..='\u{30FF}' // Hiragana, Katakana
        | '\u{31F0}'..='\u{31FF}' // Katakana extensions
        | '\u{3400}'..='\u{4DBF}' // CJK extension A
        | '\u{4E00}'..='\u{9FFF}' // CJK unified ideographs
        | '\u{F900}'..='\u{FAFF}' // CJK compatibility ideographs
        | '\u{FF00}'..='\u{FFEF}' // half-width and full-width forms
        | '\u{20000}'..='\u{2FA1F}' // CJK extensions B-F, compatibility supplement
    )
}

/// `[a, b)` without leading and trailing whitespace.
pub(crate) fn trim(text: &str, a: usize, b: usize) -> (usize, usize) {
    let Some(s) = text.get(a..b) else {
        return (a, a);
    };
    let start = a + (s.len() - s.trim_start().len());
    let end = a + s.trim_end().len();
    if start >= end {
        (a, a)
    } else {
        (start, end)
    }
}

fn push_trimmed(out: &mut Vec<(usize, usize)>, text: &str, a: usize, b: usize) {
    let (a, b) = trim(text, a, b);
    if a < b {
        out.push((a, b));
    }
}

/// Lines of `[a, b)` as byte ranges without the `\n`.
fn lines(text: &str, a: usize, b: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
    let s = text.get(a..b).unwrap_or("");
    let mut pos = a;
    s.split('\n').map(move |l| {
        let r = (pos, pos + l.len());
        pos += l.len() + 1;
        r
    })
}

/// Trimmed, non-empty pieces of `[a, b)` at `level`.
pub(crate) fn segments(
    text: &str,
    a: usize,
    b: usize,
    level: Level,
    markdown: bool,
) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let Some(s) = text.get(a..b) else {
        return out;
    };
    match level {
        Level::Paragraph => paragraphs(&mut out, text, a, b, markdown),
        Level::Line => {
            for (ls, le) in lines(text, a, b) {
                push_trimmed(&mut out, text, ls, le);
            }
        }
        Level::Sentence => sentences(&mut out, text, s, a, b),
        Level::Clause => clauses(&mut out, text, s, a, b),
        Level::Word => words(&mut out, text, s, a, b),
        Level::Grapheme => {
            for (i, g) in s.grapheme_indices(true) {
                push_trimmed(&mut out, text, a + i, a + i + g.len());
            }
        }
        Level::Char => {
            for (i, c) in s.char_indices() {
                if !c.is_whitespace() {
                    out.push((a + i, a + i + c.len_utf8()));
                }
            }
        }
    }
    out
}

/// Paragraphs: runs of lines between blank lines; in Markdown a fenced code block is one.
fn paragraphs(out: &mut Vec<(usize, usize)>, text: &str, a: usize, b: usize, markdown: bool) {
    let mut fences = Fences::default();
    let mut cur: Option<(usize, usize)> = None;
    for (ls, le) in lines(text, a, b) {
        let line = &text[ls..le];
        let role = if markdown {
            fences.line(line)
        } else {
            FenceLine::Outside
        };
        match role {
            FenceLine::Open => {
                if let Some((ps, pe)) = cur.take() {
                    push_trimmed(out, text, ps, pe);
                }
                cur = Some((ls, le));
            }
            FenceLine::Inside => {
                let ps = cur.map_or(ls, |c| c.0);
                cur = Some((ps, le));
            }
            FenceLine::Close => {
                let ps = cur.map_or(ls, |c| c.0);
                push_trimmed(out, text, ps, le);
                cur = None;
            }
            FenceLine::Outside => {
                if line.trim().is_empty() {
                    if let Some((ps, pe)) = cur.take() {
                        push_trimmed(out, text, ps, pe);
                    }
                } else {
                    let ps = cur.map_or(ls, |c| c.0);
                    cur = Some((ps, le));
                }
            }
        }
    }
    if let Some((ps, pe)) = cur {
        push_trimmed(out, text, ps, pe);
    }
}

/// Closing quotes and brackets: they end with the sentence or clause before them.
pub(crate) fn is_closer(c: char) -> bool {
    matches!(
        c,
        '"' | '\''
            | '”'
            | '’'
            | ')'
            | ']'
            | '»'
            | '」'
            | '』'
            | '）'
            | '》'
            | '〉'
            | '】'
            | '〕'
            | '〗'
            | '］'
            | '｝'
            | '﹂'
            | '﹄'
    )
}

/// Opening quotes and brackets (ASCII `"` and `'` are closers only).
pub(crate) fn is_opener(c: char) -> bool {
    matches!(
        c,
        '“' | '‘'
            | '('
            | '['
            | '«'
            | '「'
            | '『'
            | '（'
            | '《'
            | '〈'
            | '【'
            | '〔'
            | '〖'
            | '［'
            | '｛'
            | '﹁'
            | '﹃'
    )
}

/// Sentence-ending punctuation.
pub(crate) fn is_terminator(c: char) -> bool {
    matches!(c, '.' | '!' | '?' | '…' | '。' | '！' | '？' | '｡')
}

/// Clause marks.
pub(crate) fn is_clause_mark(c: char) -> bool {
    matches!(c, '；' | ';' | '：' | ':' | '，' | ',' | '、' | '､')
}

/// Punctuation that belongs to the text before it: closers, sentence ends, clause marks.
fn is_trailing(c: char) -> bool {
    is_closer(c) || is_terminator(c) || is_clause_mark(c)
}

/// Whether CJK text goes on at `n` (a CJK character or an opening quote).
fn cjk_goes_on(n: char) -> bool {
    is_cjk(n) || is_opener(n)
}

/// Cuts `s` (at `a` in `text`) after every mark `is_end` accepts, past any run of marks and the
/// closing brackets after it. `strong(c)` marks end anywhere; the others only before
/// whitespace or the end, or between CJK text.
fn cut_after(
    out: &mut Vec<(usize, usize)>,
    text: &str,
    (s, a, b): (&str, usize, usize),
    is_mark: impl Fn(char) -> bool,
    strong: impl Fn(char) -> bool,
    between_cjk: impl Fn(char) -> bool,
) {
    let chars: Vec<(usize, char)> = s.char_indices().collect();
    let mut seg_start = a;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i].1;
        if !is_mark(c) {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        while j < chars.len() && is_mark(chars[j].1) {
            j += 1;
        }
        while j < chars.len() && is_closer(chars[j].1) {
            j += 1;
        }
        let next = chars.get(j).map(|x| x.1);
        let boundary = strong(c)
            || match next {
                None => true,
                Some(n) => {
                    n.is_whitespace()
                        || (between_cjk(c) && cjk_goes_on(n) && i > 0 && is_cjk(chars[i - 1].1))
                }
            };
        if boundary {
            let end = chars.get(j).map_or(b, |x| a + x.0);
            push_trimmed(out, text, seg_start, end);
            seg_start = end;
        }
        i = j;
    }
    push_trimmed(out, text, seg_start, b);
}

/// Sentences: ended by `.`, `!`, `?` or `…` before whitespace or the end (after any closing
/// quotes and brackets), by `。！？` anywhere, and by `!`, `?`, `…` between CJK text.
fn sentences(out: &mut Vec<(usize, usize)>, text: &str, s: &str, a: usize, b: usize) {
    cut_after(
        out,
        text,
        (s, a, b),
        is_terminator,
        |c| matches!(c, '。' | '！' | '？' | '｡'),
        |c| matches!(c, '!' | '?' | '…'),
    );
}

/// Clauses: ended by `；：，、` anywhere, and by `;`, `:`, `,` before whitespace or the end or
/// between CJK text.
fn clauses(out: &mut Vec<(usize, usize)>, text: &str, s: &str, a: usize, b: usize) {
    cut_after(
        out,
        text,
        (s, a, b),
        is_clause_mark,
        |c| matches!(c, '；' | '：' | '，' | '、' | '､'),
        |_| true,
    );
}

/// Whether `pos` in `text` ends a sentence, looking no further than `limit`: the end, a line
/// end, or a sentence boundary of [`Level::Sentence`].
pub(crate) fn ends_sentence(text: &str, from: usize, pos: usize, limit: usize) -> bool {
    let rest = text.get(pos..limit).unwrap_or("");
    let rest = rest.trim_start_matches([' ', '\t', '\r']);
    if rest.is_empty() || rest.starts_with('\n') {
        return true;
    }
    // Enough text after `pos` to see the run of marks and closers that ends a sentence.
    let mut look = (pos + 64).min(limit);
    while !text.is_char_boundary(look) {
        look += 1;
    }
    segments(text, from, look, Level::Sentence, false)
        .iter()
        .any(|&(_, e)| e == pos)
}

/// Words: runs without whitespace; inside a word every CJK character is a word of its own,
/// with the punctuation after it (and opening quotes before it) attached.
fn words(out: &mut Vec<(usize, usize)>, text: &str, s: &str, a: usize, b: usize) {
    let mut word_start: Option<usize> = None;
    for (i, c) in s.char_indices() {
        if c.is_whitespace() {
            if let Some(ws) = word_start.take() {
                cjk_words(out, text, ws, a + i);
            }
        } else if word_start.is_none() {
            word_start = Some(a + i);
        }
    }
    if let Some(ws) = word_start {
        cjk_words(out, text, ws, b);
    }
}

/// One whitespace-free word: as it is without CJK characters, else cut before every CJK
/// character that is not punctuation, keeping punctuation with its text.
fn cjk_words(out: &mut Vec<(usize, usize)>, text: &str, ws: usize, we: usize) {
    let w = &text[ws..we];
    if !w.chars().any(is_cjk) {
        out.push((ws, we));
        return;
    }
    let mut start = ws;
    // Whether the word so far holds text (not only opening quotes), and whether it ends with
    // a CJK character or trailing punctuation after one.
    let mut has_text = false;
    let mut after_cjk = false;
    let mut opening = false;
    for (i, c) in w.char_indices() {
        let at = ws + i;
        let cut = if is_trailing(c) && (after_cjk || is_cjk(c)) {
            false
        } else if is_opener(c) {
            let cut = has_text && !opening;
            opening = true;
            cut
        } else if is_cjk(c) {
            let cut = has_text && !opening;
            opening = false;
            cut
        } else {
            // Other text: a word after CJK text, joined to a run of its own kind.
            let cut = has_text && after_cjk && !opening;
            opening = false;
            cut
        };
        if cut {
            out.push((start, at));
            start = at;
        }
        if !is_opener(c) {
            has_text = true;
        }
        after_cjk = if is_trailing(c) {
            after_cjk || is_cjk(c)
        } else {
            is_cjk(c)
        };
    }
    if start < we {
        out.push((start, we));
    }
}
