//! Footnotes and endnotes of a book: found in a first reading of its spine ([`Scan`]), then
//! spliced in at their references in the second ([`Splices::apply`]).
//!
//! A note is an element marked as one (`epub:type` `footnote`, `endnote`, `rearnote`, `note`;
//! `role` `doc-footnote`, `doc-endnote`), an element with an id directly in a notes section
//! (`epub:type` `footnotes`/`endnotes`/`rearnotes`, `role` `doc-endnotes`/`doc-footnotes`, or a
//! list there), or, as EPUB 2 books write them, a paragraph or list item (or an anchor in one)
//! that opens with a link back into the book. A reference is a link to a note that is marked
//! as one (`noteref`, `doc-noteref`), or that points to a marked note, or to which the note
//! links back. Links inside notes, links out of the book and links to what is not a note are
//! left alone. The note's text (without its back-links) replaces the reference; the note
//! itself goes, and so does a notes section or file left with nothing but its headings. A note
//! nothing refers to stays where it is.

use std::collections::{HashMap, HashSet};

use ego_tree::NodeId;
use scraper::{Html, Node};

use super::package::{epub_types, roles};
use super::{dir_of, has_scheme, percent_decode, resolve};
use crate::parse::{text_over, Fault};

/// A note's place: its file and id.
type Place = (String, String);

/// A link with a fragment to a place in the book.
struct Link {
    file: String,
    node: NodeId,
    /// Marked as a note reference.
    typed: bool,
    target: Place,
    inside_note: bool,
}

/// A note: the element that goes once it is spliced, its text in runs (each with the place
/// the link it lies in points to), whether it is marked as a note, and the files it links
/// back to.
struct Note {
    node: NodeId,
    typed: bool,
    runs: Vec<(String, Option<Place>)>,
    backs: HashSet<String>,
}

impl Note {
    fn new(node: NodeId, typed: bool, runs: Vec<(String, Option<Place>)>) -> Note {
        let backs = runs
            .iter()
            .filter_map(|(_, t)| t.as_ref().map(|(f, _)| f.clone()))
            .collect();
        Note {
            node,
            typed,
            runs,
            backs,
        }
    }
}

/// What the first reading found.
#[derive(Default)]
pub(super) struct Scan {
    links: Vec<Link>,
    notes: HashMap<Place, Note>,
    note_bytes: usize,
    /// Letters of CJK scripts and of the others, for a book without a language.
    pub cjk: usize,
    pub other: usize,
}

/// Elements an EPUB 2 note is (or lies in).
const NOTE_BLOCKS: &[&str] = &["p", "li", "dd", "dt", "td", "div"];

fn is_note_type(t: &str) -> bool {
    matches!(t, "footnote" | "endnote" | "rearnote" | "note")
}

fn is_notes_section(el: &scraper::node::Element) -> bool {
    epub_types(el).any(|t| matches!(t, "footnotes" | "endnotes" | "rearnotes"))
        || roles(el).any(|r| matches!(r, "doc-endnotes" | "doc-footnotes"))
}

fn element(n: ego_tree::NodeRef<'_, Node>) -> Option<&scraper::node::Element> {
    n.value().as_element()
}

/// Where a link points inside the book, from `file`: a place, or `None` (no fragment, another
/// scheme, malformed).
fn link_target(file: &str, href: &str) -> Option<Place> {
    if has_scheme(href) {
        return None;
    }
    let (path, frag) = href.split_once('#')?;
    let id = percent_decode(frag);
    if id.trim().is_empty() {
        return None;
    }
    let path = if path.is_empty() {
        file.to_owned()
    } else {
        resolve(dir_of(file), path)
    };
    Some((path, id))
}

impl Scan {
    /// Reads one file of the spine (its dropped matter already gone: only what is still in the
    /// page is read, so a reference in dropped matter refers to nothing). The notes' text is
    /// held to `max_text` bytes in all.
    pub fn file(&mut self, file: &str, doc: &Html, max_text: usize) -> Result<(), Fault> {
        let mut notes_here: HashSet<NodeId> = HashSet::new();
        for n in doc.tree.root().descendants() {
            match n.value() {
                Node::Text(t) => {
                    for c in t.chars().filter(|c| c.is_alphanumeric()) {
                        if crate::chunk::is_cjk(c) {
                            self.cjk += 1;
                        } else {
                            self.other += 1;
                        }
                    }
                }
                Node::Element(el) => {
                    let Some(id) = el.attr("id").filter(|i| !i.trim().is_empty()) else {
                        continue;
                    };
                    if let Some(note) = self.note_at(file, n, el) {
                        self.note_bytes += note.runs.iter().map(|r| r.0.len()).sum::<usize>();
                        if self.note_bytes > max_text {
                            return Err(text_over(max_text));
                        }
                        notes_here.insert(note.node);
                        self.notes.insert((file.to_owned(), id.to_owned()), note);
                    }
                }
                _ => {}
            }
        }
        for n in doc.tree.root().descendants() {
            let Some(el) = element(n).filter(|e| e.name() == "a") else {
                continue;
            };
            let Some(target) = el.attr("href").and_then(|h| link_target(file, h)) else {
                continue;
            };
            let inside_note =
                n.ancestors().any(|a| notes_here.contains(&a.id())) || notes_here.contains(&n.id());
            self.links.push(Link {
                file: file.to_owned(),
                node: n.id(),
                typed: epub_types(el).any(|t| t == "noteref")
                    || roles(el).any(|r| r == "doc-noteref"),
                target,
                inside_note,
            });
        }
        Ok(())
    }

    /// The note an element with an id is, if it is one.
    fn note_at(
        &self,
        file: &str,
        n: ego_tree::NodeRef<'_, Node>,
        el: &scraper::node::Element,
    ) -> Option<Note> {
        if matches!(el.name(), "body" | "html" | "head") {
            return None;
        }
        let marked_el = |e: &scraper::node::Element| {
            epub_types(e).any(is_note_type)
                || roles(e).any(|r| matches!(r, "doc-footnote" | "doc-endnote"))
        };
        let marked = marked_el(el);
        // An id inside a marked note without one of its own (`<aside epub:type="footnote">
        // <p id="n1">`): the note is the marked element.
        if !marked {
            if let Some(p) = n
                .parent()
                .filter(|p| element(*p).is_some_and(|pe| marked_el(pe) && pe.attr("id").is_none()))
            {
                return Some(Note::new(p.id(), true, runs(file, p)));
            }
        }
        let in_section = n.parent().is_some_and(|p| {
            element(p).is_some_and(|pe| {
                is_notes_section(pe)
                    || (matches!(pe.name(), "ol" | "ul" | "dl")
                        && p.parent().and_then(element).is_some_and(is_notes_section))
            })
        });
        if marked || in_section {
            return Some(Note::new(n.id(), true, runs(file, n)));
        }
        // EPUB 2: a paragraph or list item (or the anchor, span or sup opening one) whose text
        // opens with a link into the book.
        let block = if NOTE_BLOCKS.contains(&el.name()) {
            n
        } else {
            let parent = n
                .parent()
                .filter(|p| element(*p).is_some_and(|e| NOTE_BLOCKS.contains(&e.name())))?;
            let first = parent.children().find(|c| {
                c.value().is_element() || c.value().as_text().is_some_and(|t| !t.trim().is_empty())
            })?;
            if !matches!(el.name(), "a" | "span" | "sup") || first.id() != n.id() {
                return None;
            }
            parent
        };
        // The first text must lie in a link with a place (checked before the whole is read).
        let first_text = block
            .descendants()
            .find(|d| d.value().as_text().is_some_and(|t| !t.trim().is_empty()))?;
        let in_link = first_text
            .ancestors()
            .take_while(|a| a.id() != block.id())
            .any(|a| {
                element(a).is_some_and(|e| {
                    e.name() == "a"
                        && e.attr("href")
                            .is_some_and(|h| link_target(file, h).is_some())
                })
            })
            || element(block).is_some_and(|e| {
                e.name() == "a"
                    && e.attr("href")
                        .is_some_and(|h| link_target(file, h).is_some())
            });
        if !in_link {
            return None;
        }
        let runs = runs(file, block);
        let size: usize = runs.iter().map(|r| r.0.len()).sum();
        (size <= 16 * 1024).then(|| Note::new(block.id(), false, runs))
    }

    /// The files the links read so far point into.
    pub fn linked_files(&self) -> HashSet<&str> {
        self.links.iter().map(|l| l.target.0.as_str()).collect()
    }

    /// Which links are note references, and the text each gets. The spliced text is held to
    /// `max_text` bytes in all.
    pub fn resolve(
        self,
        marker: impl Fn(&str) -> String,
        max_text: usize,
    ) -> Result<Splices, Fault> {
        let mut out = Splices::default();
        let mut refs_of: HashMap<&Place, Vec<&Link>> = HashMap::new();
        for l in &self.links {
            let Some(note) = self.notes.get(&l.target) else {
                continue;
            };
            let links_back = note.backs.contains(&l.file);
            if !l.inside_note && (l.typed || note.typed || links_back) {
                refs_of.entry(&l.target).or_default().push(l);
            }
        }
        let mut bytes = 0usize;
        for (place, note) in &self.notes {
            let Some(refs) = refs_of.get(place) else {
                if note.typed {
                    out.orphans
                        .entry(place.0.clone())
                        .or_default()
                        .push(note.node);
                }
                continue;
            };
            let from: HashSet<&str> = refs.iter().map(|l| l.file.as_str()).collect();
            let mut text = String::new();
            for (t, link) in &note.runs {
                if link
                    .as_ref()
                    .is_some_and(|(f, _)| from.contains(f.as_str()))
                {
                    continue;
                }
                text.push_str(t);
            }
            let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
            let text = text.trim_start_matches(['.', ':', '：', '、', ')', '）', ' ']);
            if text.is_empty() {
                continue;
            }
            let spliced = marker(text);
            for l in refs {
                bytes += spliced.len();
                if bytes > max_text {
                    return Err(text_over(max_text));
                }
                out.refs
                    .entry(l.file.clone())
                    .or_default()
                    .push((l.node, spliced.clone()));
            }
            out.spliced
                .entry(place.0.clone())
                .or_default()
                .insert(note.node);
        }
        Ok(out)
    }
}

/// The text under `n` (in `file`) in runs, each with the place the link it lies in points to.
fn runs(file: &str, n: ego_tree::NodeRef<'_, Node>) -> Vec<(String, Option<Place>)> {
    let mut out: Vec<(String, Option<Place>)> = Vec::new();
    for d in n.descendants() {
        let Node::Text(t) = d.value() else {
            continue;
        };
        let mut link = None;
        for a in d.ancestors() {
            if let Some(el) = element(a) {
                if matches!(el.name(), "script" | "style") {
                    link = Some(None);
                    break;
                }
                if el.name() == "a" {
                    if let Some(href) = el.attr("href") {
                        link = Some(Some(href.to_owned()));
                        break;
                    }
                }
            }
            if a.id() == n.id() {
                break;
            }
        }
        match link {
            Some(None) => continue,
            Some(Some(href)) => out.push((t.to_string(), link_target(file, &href))),
            None => out.push((t.to_string(), None)),
        }
    }
    out
}

/// What the second reading does to each file: references replaced by their notes' text,
/// spliced notes removed, notes nothing refers to kept.
#[derive(Default)]
pub(super) struct Splices {
    refs: HashMap<String, Vec<(NodeId, String)>>,
    spliced: HashMap<String, HashSet<NodeId>>,
    orphans: HashMap<String, Vec<NodeId>>,
}

impl Splices {
    /// Applies the splices of `file` to its page; returns whether a note was taken out of it
    /// and the elements the renderer must keep (notes in `<aside>`s nothing refers to).
    pub fn apply(&self, file: &str, doc: &mut Html) -> (bool, HashSet<NodeId>) {
        for (node, text) in self.refs.get(file).into_iter().flatten() {
            let Some(r) = doc.tree.get(*node) else {
                continue;
            };
            // A reference alone in its `<sup>` takes the `<sup>` with it.
            let target = match r.parent() {
                Some(p)
                    if element(p).is_some_and(|e| e.name() == "sup")
                        && p.children().all(|c| {
                            c.id() == r.id()
                                || c.value().as_text().is_some_and(|t| t.trim().is_empty())
                        }) =>
                {
                    p.id()
                }
                _ => r.id(),
            };
            let Some(mut t) = doc.tree.get_mut(target) else {
                continue;
            };
            if t.parent().is_none() {
                continue;
            }
            t.insert_before(Node::Text(scraper::node::Text {
                text: text.as_str().into(),
            }));
            t.detach();
        }
        let spliced = self.spliced.get(file);
        let mut removed = false;
        for node in spliced.into_iter().flatten() {
            if let Some(mut n) = doc.tree.get_mut(*node) {
                n.detach();
                removed = true;
            }
        }
        if removed {
            // Notes sections left with nothing but headings go too.
            let empty: Vec<NodeId> = doc
                .tree
                .root()
                .descendants()
                .filter(|n| element(*n).is_some_and(is_notes_section))
                .filter(|n| {
                    n.descendants().all(|d| {
                        d.value().as_text().is_none_or(|t| t.trim().is_empty())
                            || d.ancestors().any(|a| {
                                element(a).is_some_and(|e| {
                                    matches!(e.name(), "h1" | "h2" | "h3" | "h4" | "h5" | "h6")
                                })
                            })
                    })
                })
                .map(|n| n.id())
                .collect();
            for id in empty {
                if let Some(mut n) = doc.tree.get_mut(id) {
                    n.detach();
                }
            }
        }
        let mut keep = HashSet::new();
        for node in self.orphans.get(file).into_iter().flatten() {
            if let Some(n) = doc.tree.get(*node) {
                keep.insert(n.id());
                let asides = n
                    .ancestors()
                    .filter(|a| element(*a).is_some_and(|e| e.name() == "aside"));
                keep.extend(asides.map(|a| a.id()));
            }
        }
        (removed, keep)
    }
}
