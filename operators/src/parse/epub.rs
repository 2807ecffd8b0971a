//! EPUB to Markdown: the package document (`META-INF/container.xml` → the OPF) gives the title
//! (`dc:title`) and the reading order (the spine); each XHTML chapter in spine order goes through
//! the HTML cleaner ([`crate::clean::html_to_markdown`]), so its headings become section paths.
//! A chapter that opens without a heading gets one from its `<title>`, so every chapter starts a
//! section. Items the spine marks `linear="no"` (notes, covers) are left out.

use std::collections::HashMap;

use quick_xml::events::Event;
use quick_xml::Reader;

use super::xml::{attr, local, reference, text};
use super::zip::Archive;
use super::{text_over, Fault, ParseLimits, Parsed};
use crate::clean::html_to_markdown;

pub(super) fn parse(bytes: &[u8], limits: &ParseLimits) -> Result<Parsed, Fault> {
    let mut zip = Archive::open(bytes, limits)?;
    let container = zip
        .text("META-INF/container.xml")?
        .ok_or("no META-INF/container.xml: not an EPUB")?;
    let opf_path = rootfile(&container)?;
    let opf = zip
        .text(&opf_path)?
        .ok_or_else(|| format!("the package document {opf_path} is missing"))?;
    let package = Package::read(&opf)?;
    let base = opf_path.rsplit_once('/').map_or("", |(dir, _)| dir);
    let mut chapters: Vec<String> = Vec::new();
    let mut text_bytes = 0usize;
    for idref in &package.spine {
        if text_bytes > limits.max_text_bytes {
            return Err(text_over(limits.max_text_bytes));
        }
        let Some((href, media_type)) = package.manifest.get(idref) else {
            continue;
        };
        if !media_type.contains("html") {
            continue;
        }
        let path = resolve(base, href);
        let Some(xhtml) = zip.text(&path)? else {
            return Err(format!("spine item {path} is missing").into());
        };
        let html = html_to_markdown(&xhtml);
        let body = html.text.trim();
        if body.is_empty() {
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
    if package.spine.is_empty() {
        return Err("the package document has no spine".into());
    }
    Ok(Parsed {
        markdown: chapters.join("\n\n"),
        title: package.title,
        pages: Vec::new(),
    })
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

/// What the parser needs of the OPF: title, manifest (id → href, media type), spine (ids).
#[derive(Default)]
struct Package {
    title: Option<String>,
    manifest: HashMap<String, (String, String)>,
    spine: Vec<String>,
}

impl Package {
    fn read(xml: &str) -> Result<Package, String> {
        let mut reader = Reader::from_str(xml);
        let mut p = Package::default();
        let mut in_title = false;
        let mut title = String::new();
        loop {
            match reader
                .read_event()
                .map_err(|e| format!("package document: {e}"))?
            {
                Event::Start(e) | Event::Empty(e) => match local(&e).as_str() {
                    "title" if p.title.is_none() && title.is_empty() => in_title = true,
                    "item" => {
                        if let (Some(id), Some(href)) = (attr(&e, "id"), attr(&e, "href")) {
                            let media = attr(&e, "media-type").unwrap_or_default();
                            p.manifest.insert(id, (href, media));
                        }
                    }
                    "itemref" => {
                        let linear = attr(&e, "linear").is_none_or(|l| l != "no");
                        if let (true, Some(id)) = (linear, attr(&e, "idref")) {
                            p.spine.push(id);
                        }
                    }
                    _ => {}
                },
                Event::End(e) if e.local_name().as_ref() == "title" && in_title => {
                    in_title = false;
                    let t = title.trim();
                    if !t.is_empty() {
                        p.title = Some(t.to_owned());
                    }
                }
                Event::Text(t) if in_title => title.push_str(&text(&t)),
                Event::GeneralRef(r) if in_title => title.extend(reference(&r)),
                Event::Eof => return Ok(p),
                _ => {}
            }
        }
    }
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
mod tests {
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
}
