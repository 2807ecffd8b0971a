//! EPUB to Markdown: the package document (`META-INF/container.xml` → the OPF) gives the title
//! (`dc:title`), the language (`dc:language`) and the reading order (the spine); each XHTML
//! chapter in spine order goes through the HTML cleaner ([`crate::clean::html_to_markdown`]'s
//! rules), so its headings become section paths. A chapter that opens without a heading gets one
//! from its `<title>`, so every chapter starts a section. Items the spine marks `linear="no"`
//! are left out (their notes are still spliced in where they are referred to, and so are the
//! notes of an HTML file out of the spine that the book links to, as EPUB 2 books have them).
//!
//! Books as they are written (`notes.rs`, `package.rs`):
//! - footnotes and endnotes are spliced in at their references, `[注：…]` in a Chinese or
//!   Japanese book (its `dc:language`, else its script), `[Note: …]` otherwise, and are not
//!   kept a second time where they stood;
//! - front and back matter of the kinds [`ParseOptions::drop_matter`] lists (by default cover,
//!   table of contents, copyright page, index, colophon) is left out, found from the book's
//!   landmarks (EPUB 3 navigation document), its `<guide>` (EPUB 2), the navigation document
//!   itself (a table of contents), and `epub:type` on a page's body or its sections;
//! - block quotations become Markdown quotations (`> ` lines), which the chunker keeps as
//!   units of their own, marked `quote`.
//!
//! The book is read twice (notes first, then the text), each page parsed on its own: memory
//! holds one page at a time and the notes' text, which with the spliced text is held to the
//! text limit; a re-read entry does not count twice against the unpacking limit.

mod notes;
mod package;

use std::collections::HashSet;

use scraper::Html;

use super::zip::Archive;
use super::{text_over, Fault, ParseLimits, ParseOptions, Parsed};
use crate::clean::{render, RenderOptions};
use package::{epub_types, matter_kind, Matter, Package};
use quick_xml::events::Event;
use quick_xml::Reader;

use super::xml::{attr, local};

pub(super) fn parse(
    bytes: &[u8],
    limits: &ParseLimits,
    options: &ParseOptions,
) -> Result<Parsed, Fault> {
    let mut zip = Archive::open(bytes, limits)?;
    let container = zip
        .text("META-INF/container.xml")?
        .ok_or("no META-INF/container.xml: not an EPUB")?;
    let opf_path = rootfile(&container)?;
    let opf = zip
        .text(&opf_path)?
        .ok_or_else(|| format!("the package document {opf_path} is missing"))?;
    let package = Package::read(&opf)?;
    if package.spine.is_empty() {
        return Err("the package document has no spine".into());
    }
    let base = dir_of(&opf_path);
    let mut matter = Matter::default();
    for (kind, href) in &package.guide {
        matter.add(base, href, kind);
    }
    if let Some(nav) = package.nav() {
        let nav_path = resolve(base, nav);
        if let Some(xhtml) = zip.text(&nav_path)? {
            matter.add_nav(&nav_path, &xhtml);
        }
    }
    let drop: Vec<&str> = options
        .drop_matter
        .iter()
        .filter_map(|k| matter_kind(k))
        .collect();
    // The spine's pages: (path, in the reading order).
    let pages: Vec<(String, bool)> = package
        .spine
        .iter()
        .filter_map(|(idref, linear)| {
            let item = package.manifest.get(idref)?;
            item.media_type
                .contains("html")
                .then(|| (resolve(base, &item.href), *linear))
        })
        .collect();
    // A page, parsed, its dropped matter gone (`None`: the page is such matter); `Err` when
    // it is missing.
    let read = |zip: &mut Archive<'_>, path: &str| -> Result<Option<Html>, Fault> {
        let Some(xhtml) = zip.text(path)? else {
            return Err(format!("spine item {path} is missing").into());
        };
        let mut doc = Html::parse_document(&xhtml);
        Ok((!drop_matter(&mut doc, path, &matter, &drop)).then_some(doc))
    };

    // First reading: the notes and the links to them.
    let mut scan = notes::Scan::default();
    for (path, linear) in &pages {
        match read(&mut zip, path) {
            Ok(Some(doc)) => scan.file(path, &doc, limits.max_text_bytes)?,
            Ok(None) => {}
            // A page out of the reading order may be missing; one in it may not (below).
            Err(Fault::Damaged(_)) if !linear => {}
            Err(e) => return Err(e),
        }
    }
    // EPUB 2 books may keep their notes in a file out of the spine, reached only by its links:
    // such a file is read for its notes (its text is not in the reading order).
    let in_spine: HashSet<&str> = pages.iter().map(|(p, _)| p.as_str()).collect();
    let mut off_spine: Vec<String> = package
        .manifest
        .values()
        .filter(|item| item.media_type.contains("html"))
        .map(|item| resolve(base, &item.href))
        .filter(|path| !in_spine.contains(path.as_str()))
        .collect();
    let linked = scan.linked_files();
    off_spine.retain(|path| linked.contains(path.as_str()));
    off_spine.sort();
    for path in &off_spine {
        match read(&mut zip, path) {
            Ok(Some(doc)) => scan.file(path, &doc, limits.max_text_bytes)?,
            Ok(None) | Err(Fault::Damaged(_)) => {}
            Err(e) => return Err(e),
        }
    }
    let cjk = match package.language.as_deref() {
        Some(lang) => is_cjk_language(lang),
        None => scan.cjk > scan.other,
    };
    let marker = |note: &str| {
        if cjk {
            format!("[注：{note}]")
        } else {
            format!(" [Note: {note}]")
        }
    };
    let splices = scan.resolve(marker, limits.max_text_bytes)?;

    // Second reading: the text, notes spliced in.
    let mut chapters: Vec<String> = Vec::new();
    let mut text_bytes = 0usize;
    for (path, linear) in &pages {
        if text_bytes > limits.max_text_bytes {
            return Err(text_over(limits.max_text_bytes));
        }
        if !linear {
            continue;
        }
        let Some(mut doc) = read(&mut zip, path)? else {
            continue;
        };
        let (notes_removed, keep) = splices.apply(path, &mut doc);
        let html = render(&doc, &RenderOptions { quotes: true, keep });
        let body = html.text.trim();
        // A notes page left with its headings alone.
        let only_headings = body
            .lines()
            .all(|l| l.trim().is_empty() || l.starts_with('#'));
        if body.is_empty() || (notes_removed && only_headings) {
            continue;
        }
        match html.title.filter(|t| !t.trim().is_empty()) {
            Some(title) if !body.starts_with('#') => {
                chapters.push(format!("# {}\n\n{body}", title.trim()));
            }
            _ => chapters.push(body.to_owned()),
        }
        text_bytes += chapters.last().map_or(0, String::len) + 2;
    }
    Ok(Parsed {
        markdown: chapters.join("\n\n"),
        title: package.title,
        pages: Vec::new(),
    })
}

/// Whether a `dc:language` tag is Chinese or Japanese.
fn is_cjk_language(tag: &str) -> bool {
    let primary = tag.trim().split(['-', '_']).next().unwrap_or("");
    matches!(
        primary.to_ascii_lowercase().as_str(),
        "zh" | "ja" | "jpn" | "zho" | "chi" | "yue" | "lzh" | "cmn" | "wuu"
    )
}

/// Takes the matter of a `drop` kind out of a page: `true` when the whole page is such matter
/// (named so by the book's landmarks or guide, the navigation document, or its `<body>`'s
/// `epub:type`); else the sections marked so (`epub:type`, or a landmark's fragment) go.
fn drop_matter(doc: &mut Html, path: &str, matter: &Matter, drop: &[&str]) -> bool {
    let dropped = |kind: &str| matter_kind(kind).is_some_and(|k| drop.contains(&k));
    if matter
        .files
        .get(path)
        .is_some_and(|kinds| kinds.iter().any(|k| dropped(k)))
    {
        return true;
    }
    let mut parts = Vec::new();
    for n in doc.tree.root().descendants() {
        let Some(el) = n.value().as_element() else {
            continue;
        };
        let by_type = epub_types(el).any(dropped);
        let by_landmark = el.attr("id").is_some_and(|id| {
            matter
                .parts
                .get(&(path.to_owned(), id.to_owned()))
                .is_some_and(|kinds| kinds.iter().any(|k| dropped(k)))
        });
        if !(by_type || by_landmark) {
            continue;
        }
        if matches!(el.name(), "body" | "html") {
            return true;
        }
        // A landmark at an empty anchor marks no part.
        let has_text = n
            .descendants()
            .any(|d| d.value().as_text().is_some_and(|t| !t.trim().is_empty()));
        if by_type || has_text {
            parts.push(n.id());
        }
    }
    for id in parts {
        if let Some(mut n) = doc.tree.get_mut(id) {
            if n.parent().is_some() {
                n.detach();
            }
        }
    }
    false
}

/// The package document's path from `container.xml`.
fn rootfile(xml: &str) -> Result<String, String> {
    let mut reader = Reader::from_str(xml);
    loop {
        match reader
            .read_event()
            .map_err(|e| format!("container.xml: {e}"))?
        {
            Event::Start(e) | Event::Empty(e) if local(&e) == "rootfile" => {
                if let Some(p) = attr(&e, "full-path").filter(|p| !p.is_empty()) {
                    return Ok(p);
                }
            }
            Event::Eof => return Err("container.xml names no rootfile".into()),
            _ => {}
        }
    }
}

/// The folder of a path in the archive (`OEBPS/text/ch1.xhtml` → `OEBPS/text`).
fn dir_of(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(dir, _)| dir)
}

/// Whether an href names a scheme (`http:`, `mailto:`): it points out of the book.
fn has_scheme(href: &str) -> bool {
    let head = href.split(['/', '#', '?']).next().unwrap_or("");
    head.split_once(':').is_some_and(|(scheme, _)| {
        scheme
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    })
}

/// `href` (relative, maybe percent-encoded, maybe with a fragment) against the OPF's folder.
fn resolve(base: &str, href: &str) -> String {
    let href = href.split('#').next().unwrap_or("");
    let href = percent_decode(href);
    let mut parts: Vec<&str> = base.split('/').filter(|s| !s.is_empty()).collect();
    for seg in href.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    parts.join("/")
}

/// `%XX` escapes decoded (invalid ones kept as they are).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
pub(crate) mod tests;

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn hrefs_resolve_against_the_package_folder() {
        assert_eq!(
            resolve("OEBPS", "text/ch1.xhtml#s1"),
            "OEBPS/text/ch1.xhtml"
        );
        assert_eq!(resolve("OEBPS/pkg", "../ch%201.xhtml"), "OEBPS/ch 1.xhtml");
        assert_eq!(resolve("", "ch.xhtml"), "ch.xhtml");
        assert_eq!(percent_decode("a%2"), "a%2");
        assert_eq!(percent_decode("%e4%b8%ad"), "中");
    }

    #[test]
    fn schemes_and_languages() {
        assert!(has_scheme("http://example.com/#x") && has_scheme("mailto:a@b"));
        assert!(!has_scheme("notes.xhtml#n1") && !has_scheme("../a:b/c.xhtml#x"));
        assert!(!has_scheme("#n1") && !has_scheme(""));
        assert!(is_cjk_language("zh-Hans-CN") && is_cjk_language("ja") && is_cjk_language("ZH"));
        assert!(!is_cjk_language("en-GB") && !is_cjk_language("ko"));
    }
}
