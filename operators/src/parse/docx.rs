//! DOCX (Office Open XML word processing) to Markdown: paragraphs in body order; a paragraph
//! whose style is a heading (its name `heading N`, or an outline level in `styles.xml`) becomes
//! a Markdown heading of that level, so headings give the section path; list paragraphs (a
//! `w:numPr` of their own or of their style, like `List Bullet 2`) become `-` items (`1.` for a
//! `List Number` style) indented by their level; tables become Markdown tables (the first
//! row is the header; a nested table's text stays in its cell). The title is `docProps/core.xml`'s
//! `dc:title`, else the first paragraph in the `Title` style. Deleted revisions (`w:delText`) are
//! left out.

use std::collections::HashMap;

use quick_xml::events::Event;
use quick_xml::Reader;

use super::xml::{attr, local, reference, text};
use super::zip::Archive;
use super::{text_over, Fault, ParseLimits, Parsed};
use crate::table::markdown_table;

const DOCUMENT: &str = "word/document.xml";

/// What a paragraph style means here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StyleRole {
    Heading(usize),
    Title,
    List { level: usize, ordered: bool },
}

/// A style being read from `styles.xml`.
#[derive(Default)]
struct StyleDef {
    id: String,
    name: String,
    outline: Option<usize>,
    numbered: bool,
    ilvl: Option<usize>,
}

impl StyleDef {
    fn role(&self) -> Option<StyleRole> {
        let name = self.name.to_ascii_lowercase();
        if name == "title" {
            return Some(StyleRole::Title);
        }
        if let Some(n) = name.strip_prefix("heading ") {
            if let Ok(level) = n.trim().parse::<usize>() {
                return Some(StyleRole::Heading(level.clamp(1, 6)));
            }
        }
        if let Some(level) = self.outline.filter(|l| *l < 9) {
            return Some(StyleRole::Heading((level + 1).min(6)));
        }
        if self.numbered {
            // `List Bullet 2` is the second level, unless the style gives its own.
            let from_name = name
                .rsplit(' ')
                .next()
                .and_then(|n| n.parse::<usize>().ok())
                .map_or(0, |n| n.saturating_sub(1));
            return Some(StyleRole::List {
                level: self.ilvl.unwrap_or(from_name).min(8),
                ordered: name.contains("number"),
            });
        }
        None
    }
}

pub(super) fn parse(bytes: &[u8], limits: &ParseLimits) -> Result<Parsed, Fault> {
    let mut zip = Archive::open(bytes, limits)?;
    let document = zip
        .text(DOCUMENT)?
        .ok_or_else(|| format!("no {DOCUMENT}: not a word processing document"))?;
    let styles = match zip.text("word/styles.xml")? {
        Some(xml) => style_roles(&xml)?,
        None => HashMap::new(),
    };
    let core_title = match zip.text("docProps/core.xml")? {
        Some(xml) => core_title(&xml)?,
        None => None,
    };
    let body = Body::read(&document, &styles, limits.max_text_bytes)?;
    Ok(Parsed {
        markdown: body.blocks.join("\n\n"),
        title: core_title.or(body.title),
        pages: Vec::new(),
    })
}

/// Style id → role, from `styles.xml` (see [`StyleDef::role`]).
fn style_roles(xml: &str) -> Result<HashMap<String, StyleRole>, String> {
    let mut reader = Reader::from_str(xml);
    let mut out = HashMap::new();
    let mut current: Option<StyleDef> = None;
    loop {
        match reader
            .read_event()
            .map_err(|e| format!("styles.xml: {e}"))?
        {
            Event::Start(e) | Event::Empty(e) => {
                let name = local(&e);
                if name == "style" {
                    current = attr(&e, "styleId").map(|id| StyleDef {
                        id,
                        ..StyleDef::default()
                    });
                    continue;
                }
                let Some(def) = current.as_mut() else {
                    continue;
                };
                let val = || attr(&e, "val");
                match name.as_str() {
                    "name" => def.name = val().unwrap_or_default(),
                    "outlineLvl" => def.outline = val().and_then(|v| v.parse().ok()),
                    "numPr" => def.numbered = true,
                    "ilvl" => def.ilvl = val().and_then(|v| v.parse().ok()),
                    _ => {}
                }
            }
            Event::End(e) if e.local_name().as_ref() == "style" => {
                if let Some(def) = current.take() {
                    if let Some(role) = def.role() {
                        out.insert(def.id, role);
                    }
                }
            }
            Event::Eof => return Ok(out),
            _ => {}
        }
    }
}

/// `dc:title` of `docProps/core.xml`, if not empty.
fn core_title(xml: &str) -> Result<Option<String>, String> {
    let mut reader = Reader::from_str(xml);
    let mut in_title = false;
    let mut title = String::new();
    loop {
        match reader.read_event().map_err(|e| format!("core.xml: {e}"))? {
            Event::Start(e) if e.local_name().as_ref() == "title" => in_title = true,
            Event::End(e) if e.local_name().as_ref() == "title" => in_title = false,
            Event::Text(t) if in_title => title.push_str(&text(&t)),
            Event::GeneralRef(r) if in_title => title.extend(reference(&r)),
            Event::Eof => break,
            _ => {}
        }
    }
    let title = title.trim().to_owned();
    Ok((!title.is_empty()).then_some(title))
}

/// One paragraph being read.
#[derive(Default)]
struct Para {
    style: Option<String>,
    list_level: Option<usize>,
    text: String,
}

/// The body being read: finished Markdown blocks, and the table and paragraph in progress.
#[derive(Default)]
struct Body {
    blocks: Vec<String>,
    title: Option<String>,
    para: Option<Para>,
    in_text: bool,
    table_depth: usize,
    rows: Vec<Vec<String>>,
    row: Vec<String>,
    cell: String,
    /// Bytes of text read so far: the body stops once they pass the text limit.
    text_bytes: usize,
}

impl Body {
    fn read(
        xml: &str,
        styles: &HashMap<String, StyleRole>,
        max_text_bytes: usize,
    ) -> Result<Body, Fault> {
        let mut reader = Reader::from_str(xml);
        let mut body = Body::default();
        loop {
            if body.text_bytes > max_text_bytes {
                return Err(text_over(max_text_bytes));
            }
            match reader
                .read_event()
                .map_err(|e| format!("{DOCUMENT}: {e}"))?
            {
                Event::Start(e) => body.open(&local(&e), &e, false),
                Event::Empty(e) => body.open(&local(&e), &e, true),
                Event::End(e) => {
                    let name = e.local_name().as_ref().to_owned();
                    body.close(&name, styles);
                }
                Event::Text(t) if body.in_text => body.push(&text(&t)),
                Event::GeneralRef(r) if body.in_text => {
                    if let Some(s) = reference(&r) {
                        body.push(&s);
                    }
                }
                Event::Eof => return Ok(body),
                _ => {}
            }
        }
    }

    fn push(&mut self, s: &str) {
        if let Some(p) = self.para.as_mut() {
            p.text.push_str(s);
            self.text_bytes += s.len();
        }
    }

    fn open(&mut self, name: &str, e: &quick_xml::events::BytesStart<'_>, empty: bool) {
        match name {
            "p" if !empty => self.para = Some(Para::default()),
            "pStyle" => {
                if let Some(p) = self.para.as_mut() {
                    p.style = attr(e, "val");
                }
            }
            "numPr" => {
                if let Some(p) = self.para.as_mut() {
                    p.list_level.get_or_insert(0);
                }
            }
            "ilvl" => {
                if let Some(p) = self.para.as_mut() {
                    let level = attr(e, "val").and_then(|v| v.parse().ok()).unwrap_or(0);
                    p.list_level = Some(usize::min(level, 8));
                }
            }
            "t" if !empty => self.in_text = true,
            "tab" => self.push("\t"),
            "br" | "cr" => self.push("\n"),
            "tbl" if !empty => {
                self.table_depth += 1;
                if self.table_depth == 1 {
                    self.rows.clear();
                }
            }
            "tr" if !empty && self.table_depth == 1 => self.row.clear(),
            "tc" if !empty && self.table_depth == 1 => self.cell.clear(),
            _ => {}
        }
    }

    fn close(&mut self, name: &str, styles: &HashMap<String, StyleRole>) {
        match name {
            "t" => self.in_text = false,
            "p" => {
                if let Some(p) = self.para.take() {
                    self.finish_paragraph(p, styles);
                }
            }
            "tc" if self.table_depth == 1 => {
                let cell = std::mem::take(&mut self.cell);
                self.row.push(cell.trim().to_owned());
            }
            "tr" if self.table_depth == 1 => {
                let row = std::mem::take(&mut self.row);
                self.rows.push(row);
            }
            "tbl" if self.table_depth > 0 => {
                self.table_depth -= 1;
                if self.table_depth == 0 {
                    let rows = std::mem::take(&mut self.rows);
                    if let Some(t) = markdown_table(&rows) {
                        self.blocks.push(t);
                    }
                }
            }
            _ => {}
        }
    }

    fn finish_paragraph(&mut self, p: Para, styles: &HashMap<String, StyleRole>) {
        let line = p.text.split_whitespace().collect::<Vec<_>>().join(" ");
        if line.is_empty() {
            return;
        }
        if self.table_depth > 0 {
            if !self.cell.is_empty() {
                self.cell.push(' ');
            }
            self.cell.push_str(&line);
            return;
        }
        let role = p
            .style
            .as_deref()
            .and_then(|s| styles.get(s).copied())
            .or_else(|| {
                // Without styles.xml, the built-in ids (`Heading1`, `Title`) still say it.
                let s = p.style.as_deref()?;
                if s.eq_ignore_ascii_case("title") {
                    return Some(StyleRole::Title);
                }
                let n = s
                    .strip_prefix("Heading")
                    .or_else(|| s.strip_prefix("heading"))?;
                n.parse::<usize>()
                    .ok()
                    .map(|l| StyleRole::Heading(l.clamp(1, 6)))
            });
        let list = match (role, p.list_level) {
            (_, Some(level)) => Some((level, false)),
            (Some(StyleRole::List { level, ordered }), None) => Some((level, ordered)),
            _ => None,
        };
        let block = match (role, list) {
            (Some(StyleRole::Heading(level)), _) => format!("{} {line}", "#".repeat(level)),
            (Some(StyleRole::Title), _) => {
                self.title.get_or_insert_with(|| line.clone());
                format!("# {line}")
            }
            (_, Some((level, ordered))) => {
                let marker = if ordered { "1." } else { "-" };
                let item = format!("{}{marker} {line}", "  ".repeat(level));
                // Consecutive items form one list.
                if let Some(last) = self.blocks.last_mut() {
                    let head = last.trim_start();
                    if head.starts_with("- ") || head.starts_with("1. ") {
                        last.push('\n');
                        last.push_str(&item);
                        return;
                    }
                }
                item
            }
            _ => escape_block_start(&line),
        };
        self.blocks.push(block);
    }
}

/// A paragraph that would read as Markdown structure (`# x`, `- x`, `1. x`) is escaped.
fn escape_block_start(line: &str) -> String {
    let t = line.trim_start();
    let structural = t.starts_with('#')
        || t.starts_with("- ")
        || t.starts_with("* ")
        || t.starts_with("+ ")
        || t.starts_with('>')
        || t.starts_with("```");
    if structural {
        format!("\\{t}")
    } else {
        line.to_owned()
    }
}
