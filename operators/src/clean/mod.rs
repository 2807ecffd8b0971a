//! Text cleaning: what the chunker, the embedder and the full-text index read.
//!
//! For every content type:
//! - line ends `\r\n` and `\r` become `\n`; vertical tab, form feed, NEL and U+2028 become `\n`,
//!   U+2029 (paragraph separator) a blank line;
//! - Unicode NFKC (full-width letters and digits become ASCII, ligatures are split, …);
//! - control characters other than `\n` and `\t` are dropped, and so are invisible format
//!   characters that carry nothing for search (zero-width space, BOM/ZWNBSP, soft hyphen, word
//!   joiner, directional marks and embeddings). ZWJ and ZWNJ are kept: emoji sequences and
//!   several scripts need them;
//! - runs of spaces and tabs within a line become one space, trailing spaces go, whitespace-only
//!   lines become empty, 3+ newlines become one blank line, and the text is trimmed.
//!
//! Plain text lines are also trimmed at the start. Markdown keeps each line's leading
//! indentation (nested lists, indented code), and lines inside fenced code blocks are kept
//! exactly (only the character-level steps above apply to them).
//!
//! HTML is first turned into Markdown without its boilerplate ([`html_to_markdown`], in
//! `html.rs`), which is then cleaned as Markdown.

use std::borrow::Cow;

use unicode_normalization::UnicodeNormalization;

use crate::chunk::fence::{FenceLine, Fences};
use crate::document::{ContentType, Document};

mod html;

pub use html::{html_to_markdown, HtmlText};
pub(crate) use html::{render, RenderOptions};

/// Cleans a document: its text by content type (see the module docs), its title (one line).
/// An HTML document with an empty title takes the page's `<title>`. Every other field is copied.
pub fn clean(doc: &Document) -> Document {
    let (text, html_title) = match doc.content_type {
        ContentType::Html => {
            let h = html_to_markdown(&doc.text);
            (normalize(&h.text, Mode::Markdown), h.title)
        }
        // Binary documents reach the cleaner parsed to Markdown (see `prepare`).
        ContentType::Markdown | ContentType::Pdf | ContentType::Docx | ContentType::Epub => {
            (normalize(&doc.text, Mode::Markdown), None)
        }
        ContentType::Csv | ContentType::Code(_) => (clean_text(&doc.text, doc.content_type), None),
        ContentType::PlainText => (normalize(&doc.text, Mode::Plain), None),
    };
    let mut title = clean_title(&doc.title);
    if title.is_empty() {
        if let Some(t) = html_title {
            title = clean_title(&t);
        }
    }
    Document {
        id: doc.id.clone(),
        title,
        text,
        content_type: doc.content_type,
        source: doc.source.clone(),
        metadata: doc.metadata.clone(),
        acl: doc.acl.clone(),
    }
}

/// Cleans a text of the given content type (HTML is converted to Markdown first).
pub fn clean_text(text: &str, content_type: ContentType) -> String {
    match content_type {
        ContentType::Html => normalize(&html_to_markdown(text).text, Mode::Markdown),
        ContentType::Markdown | ContentType::Pdf | ContentType::Docx | ContentType::Epub => {
            normalize(text, Mode::Markdown)
        }
        // Characters first (NFKC, controls), then the table; its lines then as Markdown.
        ContentType::Csv => {
            let table = crate::table::csv_to_markdown(&char_level(text)).unwrap_or_default();
            normalize(&table, Mode::Markdown)
        }
        // Code keeps its indentation: characters only, trailing spaces and blank edges gone.
        ContentType::Code(_) => char_level(text)
            .lines()
            .map(str::trim_end)
            .collect::<Vec<_>>()
            .join("\n")
            .trim_matches('\n')
            .to_owned(),
        ContentType::PlainText => normalize(text, Mode::Plain),
    }
}

/// Cleans a title: the character-level steps, then all whitespace (newlines too) collapsed to
/// single spaces, trimmed.
pub fn clean_title(title: &str) -> String {
    let chars = char_level(title);
    let mut out = String::with_capacity(chars.len());
    for word in chars.split(char::is_whitespace).filter(|w| !w.is_empty()) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Plain,
    Markdown,
}

/// Invisible format characters that are dropped.
fn is_dropped_format(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{180E}'
            | '\u{200B}'
            | '\u{200E}'
            | '\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{2069}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
            | '\u{FFFE}'
            | '\u{FFFF}'
    )
}

/// Line ends, NFKC, dropped characters.
fn char_level(text: &str) -> String {
    let mut s = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' => {
                if chars.peek() != Some(&'\n') {
                    s.push('\n');
                }
            }
            '\u{0B}' | '\u{0C}' | '\u{85}' | '\u{2028}' => s.push('\n'),
            '\u{2029}' => s.push_str("\n\n"),
            c => s.push(c),
        }
    }
    s.nfkc()
        .filter(|&c| c == '\n' || c == '\t' || !(c.is_control() || is_dropped_format(c)))
        .collect()
}

/// Collapses one line outside code fences; `""` for a whitespace-only line.
fn collapse_line(line: &str, mode: Mode) -> Cow<'_, str> {
    let body = line.trim_start();
    let indent = match mode {
        Mode::Markdown => &line[..line.len() - body.len()],
        Mode::Plain => "",
    };
    let body = body.trim_end();
    if body.is_empty() {
        return Cow::Borrowed("");
    }
    let needs_work = {
        let mut prev_ws = false;
        let mut bad = false;
        for c in body.chars() {
            let ws = c.is_whitespace();
            if ws && (prev_ws || c != ' ') {
                bad = true;
                break;
            }
            prev_ws = ws;
        }
        bad
    };
    if !needs_work {
        return match mode {
            // `line` starts with `indent`, and `body` follows it
            Mode::Markdown => Cow::Borrowed(&line[..indent.len() + body.len()]),
            Mode::Plain => Cow::Borrowed(body),
        };
    }
    let mut out = String::with_capacity(line.len());
    out.push_str(indent);
    let mut first = true;
    for word in body.split(char::is_whitespace).filter(|w| !w.is_empty()) {
        if !first {
            out.push(' ');
        }
        first = false;
        out.push_str(word);
    }
    Cow::Owned(out)
}

fn normalize(text: &str, mode: Mode) -> String {
    let chars = char_level(text);
    let mut out = String::with_capacity(chars.len());
    let mut fences = Fences::default();
    let mut pending_blank = false;
    for line in chars.split('\n') {
        let inside = mode == Mode::Markdown && fences.line(line) == FenceLine::Inside;
        let line: Cow<'_, str> = if inside {
            Cow::Borrowed(line)
        } else {
            collapse_line(line, mode)
        };
        if !inside && line.is_empty() {
            pending_blank = true;
            continue;
        }
        if !out.is_empty() {
            out.push('\n');
            if pending_blank {
                out.push('\n');
            }
        }
        pending_blank = false;
        out.push_str(&line);
    }
    let trimmed = out.trim();
    if trimmed.len() == out.len() {
        out
    } else {
        trimmed.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn plain(s: &str) -> String {
        clean_text(s, ContentType::PlainText)
    }
    fn md(s: &str) -> String {
        clean_text(s, ContentType::Markdown)
    }

    #[test]
    fn nfkc_full_width_and_compatibility() {
        assert_eq!(plain("ＡＢＣ１２３！"), "ABC123!");
        assert_eq!(plain("ﬁne ① ㎏"), "fine 1 kg");
        assert_eq!(plain("a\u{3000}b\u{00A0}c"), "a b c");
        // composed form
        assert_eq!(plain("e\u{0301}"), "\u{e9}");
    }

    #[test]
    fn cjk_is_kept() {
        let s = "中文文本。日本語のテキスト、한국어 텍스트";
        assert_eq!(plain(s), s);
        // half-width katakana becomes full-width
        assert_eq!(plain("ｶﾀｶﾅ"), "カタカナ");
    }

    #[test]
    fn zero_width_and_control_chars() {
        assert_eq!(
            plain("a\u{200B}b\u{FEFF}c\u{00AD}d\u{2060}e\u{200E}f"),
            "abcdef"
        );
        assert_eq!(plain("a\u{0}b\u{7}c\u{1b}[0m\u{7f}d"), "abc[0md");
        // ZWJ sequences survive
        let family = "👨\u{200D}👩\u{200D}👧";
        assert_eq!(plain(family), family);
        assert_eq!(plain("\u{200B}\u{200B}"), "");
    }

    #[test]
    fn line_ends_and_whitespace() {
        assert_eq!(plain("a\r\nb\rc\n"), "a\nb\nc");
        assert_eq!(plain("  a \t  b  \n\t c\t"), "a b\nc");
        assert_eq!(plain("a\n\n\n\n\nb"), "a\n\nb");
        assert_eq!(plain("a\n \t \n  \nb"), "a\n\nb");
        assert_eq!(plain("a\u{2029}b\u{2028}c\u{0C}d"), "a\n\nb\nc\nd");
        assert_eq!(plain("\n\n  x  \n\n"), "x");
        assert_eq!(plain(""), "");
        assert_eq!(plain(" \n\t\r\n "), "");
    }

    #[test]
    fn title_is_one_line() {
        assert_eq!(
            clean_title("  Ｔｉｔｌｅ\n of\tthe\u{200B} doc  "),
            "Title of the doc"
        );
    }

    #[test]
    fn markdown_keeps_structure() {
        let src = "# Title\n\n- a   item\n  - nested\n\n\n\n1. one\n\n    indented code\n";
        assert_eq!(
            md(src),
            "# Title\n\n- a item\n  - nested\n\n1. one\n\n    indented code"
        );
    }

    #[test]
    fn markdown_fences_untouched() {
        let src =
            "Text   here\n\n```rust\nfn  main() {\n\n\n\n    let\tx = 1;   \n}\n```\nafter   x";
        let out = md(src);
        assert_eq!(
            out,
            "Text here\n\n```rust\nfn  main() {\n\n\n\n    let\tx = 1;   \n}\n```\nafter x"
        );
        // NFKC and control characters still apply inside fences
        assert_eq!(md("```\nＡ\u{7}B\r\n```"), "```\nAB\n```");
        // unclosed fence runs to the end
        assert_eq!(md("~~~\n a   b\n\n\n\n"), "~~~\n a   b");
    }

    #[test]
    fn clean_document() {
        let d = Document {
            id: "i".into(),
            title: String::new(),
            text: "<title>T</title><p>Ｈｉ</p>".into(),
            content_type: ContentType::Html,
            source: "s".into(),
            metadata: BTreeMap::from([("a".into(), "1".into())]),
            acl: vec!["group:x".into()],
        };
        let c = clean(&d);
        assert_eq!(c.title, "T");
        assert_eq!(c.text, "Hi");
        assert_eq!(c.content_type, ContentType::Html);
        assert_eq!((c.id.as_str(), c.source.as_str()), ("i", "s"));
        assert_eq!(c.metadata, d.metadata);
        assert_eq!(c.acl, d.acl);
        // an explicit title wins over <title>
        let c = clean(&Document {
            title: " Mine ".into(),
            ..d.clone()
        });
        assert_eq!(c.title, "Mine");
        // cleaning is idempotent
        for ct in [ContentType::PlainText, ContentType::Markdown] {
            let d = Document {
                text: "a \t b\r\n\n\n\n```\n x  \n```\nＡ\u{200B}".into(),
                content_type: ct,
                ..d.clone()
            };
            let once = clean(&d);
            assert_eq!(clean(&once), once);
        }
    }
}
