//! Where text can be split, coarsest first: paragraphs (a fenced code block is one in
//! Markdown), lines, sentences, words (every CJK character is one), grapheme clusters,
//! characters. Each level yields trimmed, non-empty byte ranges.

use unicode_segmentation::UnicodeSegmentation;

use super::fence::{FenceLine, Fences};

/// A separator level, coarsest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Level {
    Paragraph,
    Line,
    Sentence,
    Word,
    Grapheme,
    Char,
}

impl Level {
    pub(crate) fn next(self) -> Level {
        match self {
            Level::Paragraph => Level::Line,
            Level::Line => Level::Sentence,
            Level::Sentence => Level::Word,
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

/// Sentences: ended by `.`, `!`, `?` or `…` before whitespace or the end (after any closing
/// quotes and brackets), by `。！？` anywhere, and by `!`/`?` between CJK characters.
fn sentences(out: &mut Vec<(usize, usize)>, text: &str, s: &str, a: usize, b: usize) {
    let chars: Vec<(usize, char)> = s.char_indices().collect();
    let mut seg_start = a;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i].1;
        let cjk_end = matches!(c, '。' | '！' | '？' | '｡');
        let latin_end = matches!(c, '.' | '!' | '?' | '…');
        if !(cjk_end || latin_end) {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        while j < chars.len()
            && matches!(chars[j].1, '.' | '!' | '?' | '…' | '。' | '！' | '？' | '｡')
        {
            j += 1;
        }
        while j < chars.len()
            && matches!(
                chars[j].1,
                '"' | '\'' | '”' | '’' | ')' | ']' | '»' | '」' | '』' | '）'
            )
        {
            j += 1;
        }
        let next = chars.get(j).map(|x| x.1);
        let boundary = cjk_end
            || match next {
                None => true,
                Some(n) => {
                    n.is_whitespace()
                        || (matches!(c, '!' | '?') && is_cjk(n) && i > 0 && is_cjk(chars[i - 1].1))
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

/// Words: runs without whitespace; inside a word every CJK character is a word of its own.
fn words(out: &mut Vec<(usize, usize)>, text: &str, s: &str, a: usize, b: usize) {
    let mut word_start: Option<usize> = None;
    let flush = |out: &mut Vec<(usize, usize)>, ws: usize, we: usize| {
        // Inside a word, every CJK character is a word of its own.
        let w = &text[ws..we];
        if !w.chars().any(is_cjk) {
            out.push((ws, we));
            return;
        }
        let mut run: Option<usize> = None;
        for (i, c) in w.char_indices() {
            if is_cjk(c) {
                if let Some(r) = run.take() {
                    out.push((ws + r, ws + i));
                }
                out.push((ws + i, ws + i + c.len_utf8()));
            } else if run.is_none() {
                run = Some(i);
            }
        }
        if let Some(r) = run {
            out.push((ws + r, we));
        }
    };
    for (i, c) in s.char_indices() {
        if c.is_whitespace() {
            if let Some(ws) = word_start.take() {
                flush(out, ws, a + i);
            }
        } else if word_start.is_none() {
            word_start = Some(a + i);
        }
    }
    if let Some(ws) = word_start {
        flush(out, ws, b);
    }
}
