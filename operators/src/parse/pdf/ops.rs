//! A PDF's content counted before the reader runs it: `pdf-extract` parses a page's whole
//! content into memory at once (about half a kilobyte per operation) and draws a form again
//! each time a page names it, with no bound, and recurses without end into a form that draws
//! itself or a page tree that loops. [`check`] reads every page's content (its streams already
//! decoded, see [`super::streams`]) token by token, following the forms it draws, and refuses a
//! file
//!
//! - whose page content, or one form, holds more than [`ParseLimits::max_page_tokens`]
//!   operators and operands, or is longer than [`ParseLimits::max_stream_bytes`];
//! - whose pages run more than [`ParseLimits::max_operations`] operators in all, a form counted
//!   each time it is drawn;
//! - whose forms draw themselves or nest deeper than [`MAX_FORM_DEPTH`], or whose page tree
//!   loops;
//!
//! and checks the deadline as it goes, every few thousand tokens.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use pdf_extract::{Dictionary, Document, Object, ObjectId};

use super::streams::in_time;
use crate::parse::{Fault, ParseLimits};

/// How deep forms may draw forms.
pub(super) const MAX_FORM_DEPTH: usize = 32;

/// How far up a page's `Parent` chain is followed.
const MAX_TREE_DEPTH: usize = 256;

/// Called with every operator and the name operand just before it, if any.
type OnOperator<'f> = &'f mut dyn FnMut(&[u8], Option<&[u8]>);

/// Tokens between two looks at the clock.
const CLOCK_EVERY: u64 = 4096;

/// What reading a content stream found.
#[derive(Default)]
struct Counts {
    tokens: u64,
    operators: u64,
}

struct Check<'d> {
    doc: &'d Document,
    limits: &'d ParseLimits,
    deadline: Instant,
    /// Operators run so far, forms counted each time they are drawn.
    operators: u64,
    /// Operators one drawing of a form runs (its own and its forms'), by form and resources.
    forms: HashMap<(ObjectId, usize), u64>,
    /// The forms being drawn, outermost first.
    drawing: Vec<ObjectId>,
}

/// Refuses a file over the content limits (see the module docs).
pub(super) fn check(doc: &Document, limits: &ParseLimits, deadline: Instant) -> Result<(), Fault> {
    let mut c = Check {
        doc,
        limits,
        deadline,
        operators: 0,
        forms: HashMap::new(),
        drawing: Vec::new(),
    };
    let empty = Dictionary::new();
    for (number, page_id) in doc.get_pages() {
        let page = doc
            .get_dictionary(page_id)
            .map_err(|_| format!("page {number} is not a dictionary"))?;
        let resources = inherited_resources(doc, page)
            .map_err(|()| Fault::from(format!("the page tree above page {number} loops")))?
            .unwrap_or(&empty);
        let mut content: Vec<&[u8]> = Vec::new();
        for id in doc.get_page_contents(page_id) {
            if let Ok(s) = doc.get_object(id).and_then(Object::as_stream) {
                content.push(&s.content);
            }
        }
        let len: usize = content.iter().map(|s| s.len() + 1).sum();
        if len as u64 > limits.max_stream_bytes {
            return Err(Fault::OverLimit(format!(
                "page {number}'s content is {len} bytes, over the limit of {}",
                limits.max_stream_bytes
            )));
        }
        let ops = c.run(&content, resources, &format!("page {number}"))?;
        c.charge(ops)?;
    }
    Ok(())
}

impl<'d> Check<'d> {
    /// Operators one run of `content` (with `resources`) costs, the forms it draws included.
    fn run(
        &mut self,
        content: &[&[u8]],
        resources: &'d Dictionary,
        what: &str,
    ) -> Result<u64, Fault> {
        let mut draws: Vec<Vec<u8>> = Vec::new();
        let mut counts = Counts::default();
        for part in content {
            lex(
                part,
                &mut counts,
                self.deadline,
                self.limits,
                &mut |op, name| {
                    if op == b"Do" {
                        if let Some(n) = name {
                            draws.push(n.to_vec());
                        }
                    }
                },
            )?;
            if counts.tokens > self.limits.max_page_tokens {
                return Err(Fault::OverLimit(format!(
                    "{what} holds more than {} content operators and operands",
                    self.limits.max_page_tokens
                )));
            }
        }
        let mut total = counts.operators;
        if draws.is_empty() {
            return Ok(total);
        }
        let xobjects =
            deref(self.doc, resources.get(b"XObject").ok()).and_then(|o| o.as_dict().ok());
        for name in draws {
            let Some(entry) = xobjects.and_then(|x| x.get(&name).ok()) else {
                continue;
            };
            let Object::Reference(id) = entry else {
                continue;
            };
            total = total.saturating_add(self.form(*id, resources)?);
            if total > self.limits.max_operations {
                return Err(self.over_operations());
            }
        }
        Ok(total)
    }

    /// Operators one drawing of form `id` costs (memoized per form and resources).
    fn form(&mut self, id: ObjectId, caller: &'d Dictionary) -> Result<u64, Fault> {
        let Ok(stream) = self.doc.get_object(id).and_then(Object::as_stream) else {
            return Ok(0);
        };
        let resources = deref(self.doc, stream.dict.get(b"Resources").ok())
            .and_then(|o| o.as_dict().ok())
            .unwrap_or(caller);
        let key = (id, resources as *const Dictionary as usize);
        if let Some(&ops) = self.forms.get(&key) {
            return Ok(ops);
        }
        if self.drawing.contains(&id) {
            return Err(Fault::from(format!("form {} {} draws itself", id.0, id.1)));
        }
        if self.drawing.len() >= MAX_FORM_DEPTH {
            return Err(Fault::OverLimit(format!(
                "its forms draw forms more than {MAX_FORM_DEPTH} deep"
            )));
        }
        if stream.content.len() as u64 > self.limits.max_stream_bytes {
            return Err(Fault::OverLimit(format!(
                "form {} {} is over {} bytes",
                id.0, id.1, self.limits.max_stream_bytes
            )));
        }
        self.drawing.push(id);
        let ops = self.run(
            &[&stream.content],
            resources,
            &format!("form {} {}", id.0, id.1),
        );
        self.drawing.pop();
        let ops = ops?;
        self.forms.insert(key, ops);
        Ok(ops)
    }

    fn charge(&mut self, ops: u64) -> Result<(), Fault> {
        self.operators = self.operators.saturating_add(ops);
        if self.operators > self.limits.max_operations {
            return Err(self.over_operations());
        }
        Ok(())
    }

    fn over_operations(&self) -> Fault {
        Fault::OverLimit(format!(
            "its pages run more than {} content operators",
            self.limits.max_operations
        ))
    }
}

/// The object `o` names (following one reference).
fn deref<'a>(doc: &'a Document, o: Option<&'a Object>) -> Option<&'a Object> {
    match o? {
        Object::Reference(id) => doc.get_object(*id).ok(),
        o => Some(o),
    }
}

/// A page's resources, inherited up its `Parent` chain as the reader looks them up; `Err` when
/// the chain loops (the reader would recurse without end).
fn inherited_resources<'a>(
    doc: &'a Document,
    page: &'a Dictionary,
) -> Result<Option<&'a Dictionary>, ()> {
    let mut seen = HashSet::new();
    let mut dict = page;
    for _ in 0..MAX_TREE_DEPTH {
        if let Some(r) = deref(doc, dict.get(b"Resources").ok()).and_then(|o| o.as_dict().ok()) {
            return Ok(Some(r));
        }
        let Ok(parent) = dict.get(b"Parent").and_then(Object::as_reference) else {
            return Ok(None);
        };
        if !seen.insert(parent) {
            return Err(());
        }
        let Ok(next) = doc.get_dictionary(parent) else {
            return Ok(None);
        };
        dict = next;
    }
    Err(())
}

fn is_white(b: u8) -> bool {
    matches!(b, 0 | 9 | 10 | 12 | 13 | 32)
}

fn is_delimiter(b: u8) -> bool {
    matches!(
        b,
        b'(' | b')' | b'<' | b'>' | b'[' | b']' | b'{' | b'}' | b'/' | b'%'
    )
}

/// Reads `content` token by token into `counts`, calling `on_op` with every operator and the
/// name operand just before it, if any.
fn lex(
    content: &[u8],
    counts: &mut Counts,
    deadline: Instant,
    limits: &ParseLimits,
    on_op: OnOperator<'_>,
) -> Result<(), Fault> {
    let n = content.len();
    let mut i = 0;
    let mut last_name: Option<(usize, usize)> = None;
    while i < n {
        let c = content[i];
        if is_white(c) {
            i += 1;
            continue;
        }
        counts.tokens += 1;
        if counts.tokens.is_multiple_of(CLOCK_EVERY) {
            in_time(deadline, limits.max_read)?;
            if counts.tokens > limits.max_page_tokens {
                // The caller says which page or form.
                return Ok(());
            }
        }
        match c {
            b'%' => {
                counts.tokens -= 1;
                while i < n && content[i] != b'\n' && content[i] != b'\r' {
                    i += 1;
                }
            }
            b'(' => {
                let mut depth = 0usize;
                while i < n {
                    match content[i] {
                        b'\\' => i += 1,
                        b'(' => depth += 1,
                        b')' => {
                            depth -= 1;
                            if depth == 0 {
                                i += 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
            }
            b'<' if content.get(i + 1) == Some(&b'<') => i += 2,
            b'<' => {
                while i < n && content[i] != b'>' {
                    i += 1;
                }
                i += 1;
            }
            b'>' => {
                counts.tokens -= 1;
                i += if content.get(i + 1) == Some(&b'>') {
                    2
                } else {
                    1
                };
            }
            b'[' | b'{' => i += 1,
            b']' | b'}' | b')' => {
                counts.tokens -= 1;
                i += 1;
            }
            b'/' => {
                let start = i + 1;
                i += 1;
                while i < n && !is_white(content[i]) && !is_delimiter(content[i]) {
                    i += 1;
                }
                last_name = Some((start, i));
            }
            _ => {
                let start = i;
                while i < n && !is_white(content[i]) && !is_delimiter(content[i]) {
                    i += 1;
                }
                let word = &content[start..i];
                let operand = matches!(word[0], b'0'..=b'9' | b'+' | b'-' | b'.')
                    || matches!(word, b"true" | b"false" | b"null");
                if operand {
                    continue;
                }
                counts.operators += 1;
                on_op(word, last_name.map(|(a, b)| &content[a..b]));
                last_name = None;
                if word == b"ID" {
                    // Inline image data: up to `EI` between white space.
                    i += 1;
                    while i + 2 <= n {
                        if &content[i..i + 2] == b"EI"
                            && i > 0
                            && is_white(content[i - 1])
                            && content.get(i + 2).is_none_or(|b| is_white(*b))
                        {
                            break;
                        }
                        i += 1;
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(content: &[u8]) -> (u64, u64, Vec<String>) {
        let mut c = Counts::default();
        let mut draws = Vec::new();
        let far = Instant::now() + std::time::Duration::from_secs(60);
        lex(
            content,
            &mut c,
            far,
            &ParseLimits::default(),
            &mut |op, name| {
                if op == b"Do" {
                    draws.push(String::from_utf8_lossy(name.unwrap_or(b"?")).into_owned());
                }
            },
        )
        .unwrap();
        (c.operators, c.tokens, draws)
    }

    #[test]
    fn tokens_and_operators() {
        let (ops, tokens, _) = counts(b"BT /F1 12 Tf 72 720 Td (a (nested) \\) string) Tj ET");
        assert_eq!((ops, tokens), (5, 10));
        let (ops, tokens, _) =
            counts(b"[(A) -120 (B)] TJ <414243> Tj % comment Tj\n q 1 0 0 1 0 0 cm Q");
        assert_eq!(ops, 5);
        assert_eq!(tokens, 5 + 4 + 1 + 6);
        let (ops, _, draws) = counts(b"q /Fm1 Do Q /Im2 Do BI /W 2 /H 2 ID \x00EI\xff EI Q");
        assert_eq!(draws, ["Fm1", "Im2"]);
        assert_eq!(ops, 8);
        let (ops, _, _) = counts(b"<< /MCID 0 >> BDC true false null EMC");
        assert_eq!(ops, 2);
    }
}
