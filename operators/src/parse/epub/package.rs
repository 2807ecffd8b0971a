//! What the parser needs of an EPUB's package: the package document (title, language,
//! manifest, spine, EPUB 2 `<guide>`), the EPUB 3 navigation document's landmarks, and where
//! each kind of front and back matter lies according to them.

use std::collections::HashMap;

use quick_xml::events::Event;
use quick_xml::Reader;

use super::super::xml::{attr, local, reference, text};
use super::{dir_of, resolve};

/// One manifest item.
pub(super) struct Item {
    pub href: String,
    pub media_type: String,
    pub properties: String,
}

/// The package document: title, language, manifest (id → item), spine (ids, with whether each
/// is in the linear reading order), guide references (type, href).
#[derive(Default)]
pub(super) struct Package {
    pub title: Option<String>,
    pub language: Option<String>,
    pub manifest: HashMap<String, Item>,
    pub spine: Vec<(String, bool)>,
    pub guide: Vec<(String, String)>,
}

impl Package {
    pub fn read(xml: &str) -> Result<Package, String> {
        let mut reader = Reader::from_str(xml);
        let mut p = Package::default();
        // The element whose text is being read (`title`, `language`) and its text.
        let mut reading: Option<&'static str> = None;
        let mut buf = String::new();
        loop {
            match reader
                .read_event()
                .map_err(|e| format!("package document: {e}"))?
            {
                Event::Start(e) | Event::Empty(e) => match local(&e).as_str() {
                    "title" if p.title.is_none() && reading.is_none() => {
                        reading = Some("title");
                        buf.clear();
                    }
                    "language" if p.language.is_none() && reading.is_none() => {
                        reading = Some("language");
                        buf.clear();
                    }
                    "item" => {
                        if let (Some(id), Some(href)) = (attr(&e, "id"), attr(&e, "href")) {
                            let item = Item {
                                href,
                                media_type: attr(&e, "media-type").unwrap_or_default(),
                                properties: attr(&e, "properties").unwrap_or_default(),
                            };
                            p.manifest.insert(id, item);
                        }
                    }
                    "itemref" => {
                        let linear = attr(&e, "linear").is_none_or(|l| l != "no");
                        if let Some(id) = attr(&e, "idref") {
                            p.spine.push((id, linear));
                        }
                    }
                    "reference" => {
                        if let (Some(kind), Some(href)) = (attr(&e, "type"), attr(&e, "href")) {
                            p.guide.push((kind, href));
                        }
                    }
                    _ => {}
                },
                Event::End(e) => {
                    let name = e.local_name();
                    if let Some(what) = reading.filter(|w| *w == name.as_ref()) {
                        reading = None;
                        let t = buf.trim();
                        if !t.is_empty() {
                            match what {
                                "title" => p.title = Some(t.to_owned()),
                                _ => p.language = Some(t.to_owned()),
                            }
                        }
                    }
                }
                Event::Text(t) if reading.is_some() => buf.push_str(&text(&t)),
                Event::GeneralRef(r) if reading.is_some() => buf.extend(reference(&r)),
                Event::Eof => return Ok(p),
                _ => {}
            }
        }
    }

    /// The navigation document's href (EPUB 3: the manifest item with property `nav`).
    pub fn nav(&self) -> Option<&str> {
        self.manifest
            .values()
            .find(|i| i.properties.split_whitespace().any(|p| p == "nav"))
            .map(|i| i.href.as_str())
    }
}

/// A kind of front or back matter by its EPUB name (`epub:type`, landmarks, guide types):
/// EPUB 2 guide spellings become the EPUB 3 ones; `None` for what is not matter (body text,
/// chapters, notes).
pub(crate) fn matter_kind(name: &str) -> Option<&'static str> {
    let name = name.trim().to_ascii_lowercase();
    let kind = match name.as_str() {
        "title-page" => "titlepage",
        "acknowledgements" => "acknowledgments",
        "contents" => "toc",
        other => super::super::MATTER_KINDS.iter().find(|k| **k == other)?,
    };
    Some(kind)
}

/// The `epub:type` tokens of an element.
pub(super) fn epub_types(el: &scraper::node::Element) -> impl Iterator<Item = &str> {
    el.attr("epub:type").unwrap_or("").split_whitespace()
}

/// The `role` tokens of an element.
pub(super) fn roles(el: &scraper::node::Element) -> impl Iterator<Item = &str> {
    el.attr("role").unwrap_or("").split_whitespace()
}

/// Where the book's own metadata puts front and back matter: whole files and parts of files
/// (an element id), each with its kinds.
#[derive(Default, Debug)]
pub(super) struct Matter {
    pub files: HashMap<String, Vec<&'static str>>,
    pub parts: HashMap<(String, String), Vec<&'static str>>,
}

impl Matter {
    /// Records `href` (relative to `dir`, maybe with a fragment) as matter of `kind`.
    pub fn add(&mut self, dir: &str, href: &str, kind: &str) {
        let Some(kind) = matter_kind(kind) else {
            return;
        };
        if super::has_scheme(href) {
            return;
        }
        let path = resolve(dir, href);
        match href
            .split_once('#')
            .map(|(_, f)| f)
            .filter(|f| !f.is_empty())
        {
            Some(frag) => {
                let id = super::percent_decode(frag);
                self.parts.entry((path, id)).or_default().push(kind);
            }
            None => self.files.entry(path).or_default().push(kind),
        }
    }

    /// The EPUB 3 navigation document at `nav_path`: it is the table of contents itself, and
    /// its `landmarks` list names the matter.
    pub fn add_nav(&mut self, nav_path: &str, xhtml: &str) {
        self.files
            .entry(nav_path.to_owned())
            .or_default()
            .push("toc");
        let doc = scraper::Html::parse_document(xhtml);
        let dir = dir_of(nav_path);
        for n in doc.tree.root().descendants() {
            let Some(el) = n.value().as_element() else {
                continue;
            };
            if el.name() != "nav" || !epub_types(el).any(|t| t == "landmarks") {
                continue;
            }
            for d in n.descendants() {
                let Some(a) = d.value().as_element().filter(|a| a.name() == "a") else {
                    continue;
                };
                if let Some(href) = a.attr("href") {
                    for kind in epub_types(a) {
                        self.add(dir, href, kind);
                    }
                }
            }
        }
    }
}
