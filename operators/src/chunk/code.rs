//! Source code chunked at its definitions, with a real parser (tree-sitter grammars for Rust,
//! Python, JavaScript, TypeScript, Go and Java).
//!
//! - A definition (function, method, class, impl, trait, struct, interface, …) that fits the
//!   budget is one chunk, together with the comments, doc comments, attributes and decorators
//!   right above it (no blank line between); its section path is its symbol path
//!   (`["Engine", "retrieve"]`: the module, type and function names it sits in).
//! - A container too large for one chunk (an `impl`, a class, a trait) is chunked member by
//!   member; its header (up to its first member) starts its first chunk.
//! - A function too large for one chunk is cut between statements of its body (the signature,
//!   with its docs, starts the first chunk; a docstring, the first statement, stays with it).
//! - Code between definitions (imports, constants, top-level statements) is chunked as text
//!   under the enclosing path.
//!
//! Parsing never fails outright (tree-sitter recovers from syntax errors); a language whose
//! grammar cannot be loaded falls back to the text splitter.

use std::ops::Range;

use tree_sitter::{Node, Parser};

use super::recursive::Engine;
use super::Piece;
use crate::document::Language;

/// What a grammar calls its definitions.
struct Spec {
    /// Node kinds that are definitions.
    defs: &'static [&'static str],
    /// Kinds that wrap a definition (`export …`, `@decorator def …`), with the field holding it.
    wrappers: &'static [(&'static str, &'static str)],
    /// Kinds that belong to the definition below them (comments, attributes).
    attached: &'static [&'static str],
}

fn spec(lang: Language) -> Spec {
    match lang {
        Language::Rust => Spec {
            defs: &[
                "function_item",
                "function_signature_item",
                "impl_item",
                "trait_item",
                "mod_item",
                "struct_item",
                "enum_item",
                "union_item",
                "macro_definition",
            ],
            wrappers: &[],
            attached: &["line_comment", "block_comment", "attribute_item"],
        },
        Language::Python => Spec {
            defs: &["function_definition", "class_definition"],
            wrappers: &[("decorated_definition", "definition")],
            attached: &["comment"],
        },
        Language::JavaScript | Language::TypeScript => Spec {
            defs: &[
                "function_declaration",
                "generator_function_declaration",
                "class_declaration",
                "abstract_class_declaration",
                "method_definition",
                "interface_declaration",
                "type_alias_declaration",
                "enum_declaration",
                "lexical_declaration",
            ],
            wrappers: &[("export_statement", "declaration")],
            attached: &["comment"],
        },
        Language::Go => Spec {
            defs: &[
                "function_declaration",
                "method_declaration",
                "type_declaration",
            ],
            wrappers: &[],
            attached: &["comment"],
        },
        Language::Java => Spec {
            defs: &[
                "class_declaration",
                "interface_declaration",
                "enum_declaration",
                "record_declaration",
                "annotation_type_declaration",
                "method_declaration",
                "constructor_declaration",
            ],
            wrappers: &[],
            attached: &["line_comment", "block_comment"],
        },
    }
}

fn grammar(lang: Language) -> tree_sitter::Language {
    match lang {
        Language::Rust => tree_sitter_rust::LANGUAGE.into(),
        Language::Python => tree_sitter_python::LANGUAGE.into(),
        Language::JavaScript => tree_sitter_javascript::LANGUAGE.into(),
        Language::TypeScript => tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
        Language::Go => tree_sitter_go::LANGUAGE.into(),
        Language::Java => tree_sitter_java::LANGUAGE.into(),
    }
}

/// Chunks `engine.text` as `lang`; `budget(path)` is the token budget of a chunk with that
/// section path. `None` when the grammar cannot be loaded.
pub(crate) fn split_code(
    engine: &Engine<'_>,
    lang: Language,
    budget: &dyn Fn(&[String]) -> usize,
    overlap_tokens: usize,
) -> Option<Vec<Piece>> {
    let mut parser = Parser::new();
    parser.set_language(&grammar(lang)).ok()?;
    let tree = parser.parse(engine.text, None)?;
    let mut walk = Walk {
        engine,
        spec: spec(lang),
        lang,
        budget,
        overlap_tokens,
        prefix: None,
        out: Vec::new(),
    };
    walk.items(tree.root_node(), &[], tree.root_node().end_byte());
    walk.cover_gaps();
    Some(walk.out)
}

struct Walk<'e, 'a> {
    engine: &'e Engine<'a>,
    spec: Spec,
    lang: Language,
    budget: &'e dyn Fn(&[String]) -> usize,
    overlap_tokens: usize,
    /// A container's header, to start the next chunk emitted.
    prefix: Option<Range<usize>>,
    out: Vec<Piece>,
}

impl Walk<'_, '_> {
    fn text(&self, n: Node<'_>) -> &str {
        &self.engine.text[n.byte_range()]
    }

    fn is_def(&self, n: Node<'_>) -> bool {
        let kind = n.kind();
        if let Some((_, field)) = self.spec.wrappers.iter().find(|(k, _)| *k == kind) {
            return n
                .child_by_field_name(field)
                .is_some_and(|inner| self.is_def(inner));
        }
        if kind == "lexical_declaration" {
            // `const f = () => …` / `= function …`: a function by another name.
            return self.declarator_function(n).is_some();
        }
        self.spec.defs.contains(&kind)
    }

    /// The name and value of a `const f = () => …` declaration whose value is a function.
    fn declarator_function<'t>(&self, n: Node<'t>) -> Option<(Node<'t>, Node<'t>)> {
        let mut cursor = n.walk();
        let d = n
            .named_children(&mut cursor)
            .find(|c| c.kind() == "variable_declarator")?;
        let value = d.child_by_field_name("value")?;
        matches!(
            value.kind(),
            "arrow_function" | "function_expression" | "function"
        )
        .then(|| d.child_by_field_name("name").map(|name| (name, value)))
        .flatten()
    }

    /// The definition a wrapper holds (the node itself otherwise).
    fn inner<'t>(&self, n: Node<'t>) -> Node<'t> {
        match self.spec.wrappers.iter().find(|(k, _)| *k == n.kind()) {
            Some((_, field)) => n
                .child_by_field_name(field)
                .map_or(n, |inner| self.inner(inner)),
            None => n,
        }
    }

    /// The symbol path elements a definition adds (`[Type, method]` for a Go method).
    fn names(&self, def: Node<'_>) -> Vec<String> {
        let n = self.inner(def);
        let field = |f: &str| n.child_by_field_name(f).map(|c| self.text(c).to_owned());
        let name = match (self.lang, n.kind()) {
            (Language::Rust, "impl_item") => field("type").map(|t| match field("trait") {
                Some(tr) => format!("{t} ({tr})"),
                None => t,
            }),
            (Language::Go, "method_declaration") => {
                let recv = n
                    .child_by_field_name("receiver")
                    .map(|r| self.text(r).to_owned())
                    .and_then(|r| receiver_type(&r));
                return recv
                    .into_iter()
                    .chain(field("name"))
                    .filter(|s| !s.is_empty())
                    .collect();
            }
            (Language::Go, "type_declaration") => {
                let mut cursor = n.walk();
                let spec = n
                    .named_children(&mut cursor)
                    .find(|c| c.kind() == "type_spec" || c.kind() == "type_alias");
                spec.and_then(|s| s.child_by_field_name("name"))
                    .map(|c| self.text(c).to_owned())
            }
            (_, "lexical_declaration") => self
                .declarator_function(n)
                .map(|(name, _)| self.text(name).to_owned()),
            _ => field("name"),
        };
        let name = name.unwrap_or_else(|| {
            let first = self.text(n).lines().next().unwrap_or("").trim();
            first.chars().take(60).collect()
        });
        vec![name.split_whitespace().collect::<Vec<_>>().join(" ")]
    }

    /// The member list of a container definition, when it has one with definitions in it.
    fn members<'t>(&self, def: Node<'t>) -> Option<Node<'t>> {
        let n = self.inner(def);
        let body = n.child_by_field_name("body")?;
        let mut cursor = body.walk();
        let has_defs = body.named_children(&mut cursor).any(|c| self.is_def(c));
        has_defs.then_some(body)
    }

    /// The statements of a function's body (its block, or the block's statement list).
    fn statements<'t>(&self, def: Node<'t>) -> Vec<Node<'t>> {
        let mut n = self.inner(def);
        if n.kind() == "lexical_declaration" {
            if let Some((_, value)) = self.declarator_function(n) {
                n = value;
            }
        }
        let Some(mut body) = n.child_by_field_name("body") else {
            return Vec::new();
        };
        let mut cursor = body.walk();
        let children: Vec<Node<'t>> = body.named_children(&mut cursor).collect();
        if let [only] = children.as_slice() {
            if only.kind() == "statement_list" {
                body = *only;
            }
        }
        let mut cursor = body.walk();
        let out = body.named_children(&mut cursor).collect();
        out
    }

    /// Chunks the named children of `node` (a file, or a container's member list) up to `end`.
    fn items(&mut self, node: Node<'_>, path: &[String], end: usize) {
        let mut cursor = node.walk();
        let children: Vec<Node<'_>> = node.named_children(&mut cursor).collect();
        let mut run: Option<usize> = None;
        // Where the last definition ended: what lies between it and the next item (a separator)
        // belongs to it.
        let mut after_def: Option<usize> = None;
        for (i, &c) in children.iter().enumerate() {
            if self.engine.full() {
                return;
            }
            if !self.is_def(c) {
                if let Some(e) = after_def.take() {
                    self.tail(e..c.start_byte(), path);
                }
                run.get_or_insert(c.start_byte());
                continue;
            }
            // Comments and attributes right above (no blank line) belong to the definition.
            let mut start = c.start_byte();
            let mut k = i;
            while k > 0 {
                let prev = children[k - 1];
                let gap = &self.engine.text[prev.end_byte()..start];
                if !self.spec.attached.contains(&prev.kind()) || gap.matches('\n').count() > 1 {
                    break;
                }
                k -= 1;
                start = prev.start_byte();
            }
            if let Some(e) = after_def.take() {
                self.tail(e..start, path);
            }
            if let Some(r) = run.take() {
                if r < start {
                    self.text_run(r..start, path);
                }
            }
            self.definition(c, start, path);
            after_def = Some(c.end_byte());
        }
        // The text after the last item (separators, a container's closing brace) is chunked
        // too: every character of the source is in a chunk.
        let last = children.last().map_or(end, |c| c.end_byte()).max(end);
        if let Some(r) = run {
            self.text_run(r..last, path);
        } else if let Some(e) = after_def {
            self.tail(e..last, path);
        }
        // A header with nothing after it is a chunk of its own.
        if let Some(p) = self.prefix.take() {
            self.emit_split(p, path);
        }
    }

    fn definition(&mut self, def: Node<'_>, start: usize, path: &[String]) {
        let mut sub = path.to_vec();
        sub.extend(self.names(def));
        let range = start..def.end_byte();
        let max = (self.budget)(&sub).max(1);
        if self.engine.count(range.start, range.end) <= max {
            self.emit(range, &sub);
            return;
        }
        if let Some(body) = self.members(def) {
            // The header (signature, docs, up to the first member) starts the first chunk.
            let mut cursor = body.walk();
            let first = body
                .named_children(&mut cursor)
                .next()
                .map_or(body.start_byte(), |c| c.start_byte());
            // A pending outer header lies right before this one: they start the chunk together.
            let header_start = self.prefix.take().map_or(start, |p| p.start);
            self.prefix = Some(header_start..first);
            self.items(body, &sub, body.end_byte());
            return;
        }
        let statements = self.statements(def);
        if statements.is_empty() {
            self.emit_split(range, &sub);
            return;
        }
        // Between statements: whole statements per chunk, the signature with the first.
        let mut from = start;
        let mut i = 0;
        while i < statements.len() && !self.engine.full() {
            let mut end = None;
            let mut j = i;
            while j < statements.len() && self.engine.count(from, statements[j].end_byte()) <= max {
                end = Some(statements[j].end_byte());
                j += 1;
            }
            let done = match end {
                Some(e) => {
                    self.emit(from..e, &sub);
                    i = j;
                    e
                }
                None if from < statements[i].start_byte() => {
                    self.emit_split(from..statements[i].start_byte(), &sub);
                    statements[i].start_byte()
                }
                None => {
                    self.emit_split(statements[i].byte_range(), &sub);
                    i += 1;
                    statements[i - 1].end_byte()
                }
            };
            // Separators between statements and the body's closing brace stay with the chunk
            // before them.
            let next = statements.get(i).map_or(range.end, |s| s.start_byte());
            self.tail(done..next, &sub);
            from = next;
        }
    }

    /// Whatever the walk left between and after its pieces (tokens a grammar keeps outside every
    /// item, text around a syntax error) joins the piece before it, or is a chunk of its own:
    /// every character of the source is in a chunk.
    fn cover_gaps(&mut self) {
        let pieces = std::mem::take(&mut self.out);
        let mut covered = 0;
        for mut p in pieces {
            // A piece starts and ends with text (a header cut alone can end with its newline).
            let text = &self.engine.text[p.start..p.end];
            let trimmed = text.trim();
            if trimmed.is_empty() {
                continue;
            }
            if trimmed.len() != text.len() {
                p.start += text.len() - text.trim_start().len();
                p.end = p.start + trimmed.len();
                p.tokens = self.engine.count(p.start, p.end);
            }
            if p.start > covered {
                let path = self
                    .out
                    .last()
                    .map_or(p.section.clone(), |l| l.section.clone());
                self.tail(covered..p.start, &path);
            }
            covered = covered.max(p.end);
            self.out.push(p);
        }
        let end = self.engine.text.len();
        if end > covered {
            let path = self
                .out
                .last()
                .map(|l| l.section.clone())
                .unwrap_or_default();
            self.tail(covered..end, &path);
        }
    }

    /// What follows a definition up to the next item (a separator, a closing brace): part of
    /// the definition's last chunk when it fits there, else a chunk of its own.
    fn tail(&mut self, range: Range<usize>, path: &[String]) {
        let text = self.engine.text.get(range.clone()).unwrap_or("").trim_end();
        if text.trim_start().is_empty() {
            return;
        }
        let range = range.start..range.start + text.len();
        if let Some(last) = self.out.last_mut().filter(|p| p.end == range.start) {
            let tokens = self.engine.count(last.start, range.end);
            if tokens <= (self.budget)(&last.section).max(1) {
                last.end = range.end;
                last.tokens = tokens;
                return;
            }
        }
        self.text_run(range, path);
    }

    /// Code between definitions, split as text.
    fn text_run(&mut self, range: Range<usize>, path: &[String]) {
        let s = &self.engine.text[range.clone()];
        if s.trim().is_empty() {
            return;
        }
        self.emit_split(range, path);
    }

    /// One chunk (with a pending header before it, if it fits with it).
    fn emit(&mut self, range: Range<usize>, path: &[String]) {
        let max = (self.budget)(path).max(1);
        let start = match self.prefix.take() {
            Some(p) if self.engine.count(p.start, range.end) <= max => p.start,
            Some(p) => {
                self.emit_split(p, path);
                range.start
            }
            None => range.start,
        };
        let tokens = self.engine.count(start, range.end);
        self.engine.cut_one();
        self.out.push(Piece {
            start,
            end: range.end,
            tokens,
            section: path.to_vec(),
            quote: false,
        });
    }

    /// `range` through the text splitter (a pending header starts it).
    fn emit_split(&mut self, range: Range<usize>, path: &[String]) {
        let max = (self.budget)(path).max(1);
        let overlap = self.overlap_tokens.min(max / 2);
        // A header starts the first chunk when it takes at most half of it; else it goes first.
        let prefix = match self.prefix.take() {
            Some(p) if p.end <= range.start && self.engine.count(p.start, p.end) * 2 <= max => {
                Some(p)
            }
            Some(p) => {
                let mut alone = self.engine.split(p, max, overlap, None);
                for piece in &mut alone {
                    piece.section = path.to_vec();
                }
                self.out.extend(alone);
                None
            }
            None => None,
        };
        let mut pieces = self.engine.split(range, max, overlap, prefix);
        for p in &mut pieces {
            p.section = path.to_vec();
        }
        self.out.extend(pieces);
    }
}

/// The type of a Go method receiver (`(s *Server)` → `Server`).
fn receiver_type(receiver: &str) -> Option<String> {
    let inner = receiver
        .trim()
        .trim_start_matches('(')
        .trim_end_matches(')');
    let ty = inner.split_whitespace().last()?;
    let ty = ty.trim_start_matches('*');
    let ty = ty.split('[').next().unwrap_or(ty);
    (!ty.is_empty()).then(|| ty.to_owned())
}

#[cfg(test)]
mod tests;
