//! HTML to Markdown: the page is parsed with a real HTML5 parser (`scraper`/html5ever, so
//! entities are decoded and broken markup is repaired), boilerplate is dropped (navigation,
//! forms, asides, elements whose role or class names boilerplate), and the main content is
//! rendered as Markdown (headings as `#`, list items as `- `/`1. `, table cells joined by ` | `,
//! `<pre>` as a code fence), which the cleaner then cleans as Markdown.

use super::clean_title;

/// What [`html_to_markdown`] extracted from a page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HtmlText {
    /// Markdown-ish text of the main content (not yet cleaned).
    pub text: String,
    /// Text of the first `<title>`, whitespace collapsed; `None` if absent or empty.
    pub title: Option<String>,
}

/// Elements dropped with everything inside them.
const DROPPED_ELEMENTS: &[&str] = &[
    "head", "script", "style", "noscript", "template", "svg", "math", "nav", "aside", "form",
    "footer", "iframe", "object", "embed", "canvas", "button", "select", "input", "textarea",
    "dialog", "audio", "video", "map", "link", "meta", "base",
];

/// ARIA roles whose elements are dropped.
const DROPPED_ROLES: &[&str] = &[
    "navigation",
    "banner",
    "contentinfo",
    "complementary",
    "search",
    "menu",
    "menubar",
    "toolbar",
    "dialog",
    "alertdialog",
];

/// Exact `class` tokens / `id`s (lowercased) whose elements are dropped.
const DROPPED_CLASSES: &[&str] = &[
    "nav",
    "navbar",
    "navigation",
    "menu",
    "sidebar",
    "breadcrumb",
    "breadcrumbs",
    "cookie-banner",
    "cookie-consent",
    "share",
    "social",
    "advert",
    "advertisement",
    "ads",
    "skip-link",
];

/// Elements that make a paragraph break.
const PARA_ELEMENTS: &[&str] = &[
    "p",
    "section",
    "article",
    "main",
    "blockquote",
    "figure",
    "address",
    "details",
    "table",
    "dl",
    "ul",
    "ol",
    "fieldset",
    "center",
    "hgroup",
    "hr",
    "body",
];

/// Elements that make a line break.
const LINE_ELEMENTS: &[&str] = &[
    "div",
    "tr",
    "dt",
    "dd",
    "figcaption",
    "summary",
    "caption",
    "br",
    "option",
    "legend",
    "thead",
    "tbody",
    "tfoot",
];

fn heading_level(name: &str) -> Option<usize> {
    match name {
        "h1" => Some(1),
        "h2" => Some(2),
        "h3" => Some(3),
        "h4" => Some(4),
        "h5" => Some(5),
        "h6" => Some(6),
        _ => None,
    }
}

/// Whether an element is boilerplate. `header` is dropped only outside `article`, `main` and
/// `section` (inside them it usually holds the article's own heading).
fn is_boilerplate(el: &scraper::node::Element, sectioning_depth: usize) -> bool {
    let name = el.name();
    if DROPPED_ELEMENTS.contains(&name) || (name == "header" && sectioning_depth == 0) {
        return true;
    }
    if el.attr("hidden").is_some() {
        return true;
    }
    if el
        .attr("aria-hidden")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    {
        return true;
    }
    if let Some(role) = el.attr("role") {
        let role = role.trim().to_ascii_lowercase();
        if role.split_whitespace().any(|r| DROPPED_ROLES.contains(&r)) {
            return true;
        }
    }
    let listed = |v: &str| {
        v.split_whitespace()
            .any(|t| DROPPED_CLASSES.contains(&t.to_ascii_lowercase().as_str()))
    };
    el.attr("class").is_some_and(listed) || el.attr("id").is_some_and(listed)
}

fn is_sectioning(name: &str) -> bool {
    matches!(name, "article" | "main" | "section")
}

fn is_main(el: &scraper::node::Element) -> bool {
    el.name() == "main"
        || el
            .attr("role")
            .is_some_and(|r| r.trim().eq_ignore_ascii_case("main"))
}

/// Parses HTML and renders its main content as Markdown-ish text (not yet cleaned).
///
/// Boilerplate is dropped with its content: `head`, `script`, `style`, `noscript`, `template`,
/// `svg`, `math`, `nav`, `aside`, `form`, `footer`, embedded media and form controls, a `header`
/// that is not inside `article`/`main`/`section`, elements with a landmark role other than main
/// (`navigation`, `banner`, `contentinfo`, `complementary`, `search`, menus, dialogs), `hidden`
/// or `aria-hidden="true"` elements, and elements whose class or id is one of a few exact
/// boilerplate names (`sidebar`, `breadcrumb`, `cookie-banner`, …). If the page has a `<main>`
/// (or `role="main"`), only the first one is kept; otherwise, if it has `<article>`s, only the
/// outermost articles are kept.
pub fn html_to_markdown(html: &str) -> HtmlText {
    render(
        &scraper::Html::parse_document(html),
        &RenderOptions::default(),
    )
}

/// How [`render`] treats a parsed page beyond [`html_to_markdown`]'s rules.
#[derive(Clone, Debug, Default)]
pub(crate) struct RenderOptions {
    /// Block quotations as Markdown quotes (every line `> `) instead of plain paragraphs.
    pub quotes: bool,
    /// Elements kept even where they look like boilerplate (a book's notes in `<aside>`).
    pub keep: std::collections::HashSet<ego_tree::NodeId>,
}

/// [`html_to_markdown`] of a parsed page, with `options`.
pub(crate) fn render(doc: &scraper::Html, options: &RenderOptions) -> HtmlText {
    use ego_tree::iter::Edge;
    use scraper::Node;

    let title = page_title(doc);
    let boilerplate = |n: ego_tree::NodeRef<'_, Node>, el: &scraper::node::Element, depth| {
        !options.keep.contains(&n.id()) && is_boilerplate(el, depth)
    };

    // Find the content roots, skipping boilerplate subtrees.
    let mut main = None;
    let mut articles = Vec::new();
    {
        let mut skip = None;
        let mut sectioning = 0usize;
        let mut article_depth = 0usize;
        for edge in doc.tree.root().traverse() {
            match edge {
                Edge::Open(n) => {
                    if skip.is_some() {
                        continue;
                    }
                    let Node::Element(el) = n.value() else {
                        continue;
                    };
                    if boilerplate(n, el, sectioning) {
                        skip = Some(n.id());
                        continue;
                    }
                    if is_main(el) {
                        main = Some(n);
                        break;
                    }
                    if el.name() == "article" {
                        if article_depth == 0 {
                            articles.push(n);
                        }
                        article_depth += 1;
                    }
                    if is_sectioning(el.name()) {
                        sectioning += 1;
                    }
                }
                Edge::Close(n) => {
                    if let Some(id) = skip {
                        if id == n.id() {
                            skip = None;
                        }
                        continue;
                    }
                    let Node::Element(el) = n.value() else {
                        continue;
                    };
                    if el.name() == "article" {
                        article_depth = article_depth.saturating_sub(1);
                    }
                    if is_sectioning(el.name()) {
                        sectioning = sectioning.saturating_sub(1);
                    }
                }
            }
        }
    }
    let roots = match main {
        Some(m) => vec![m],
        None if !articles.is_empty() => articles,
        None => vec![doc.tree.root()],
    };

    let mut r = Renderer {
        quotes: options.quotes,
        ..Renderer::default()
    };
    for root in roots {
        r.para();
        let mut skip = None;
        for edge in root.traverse() {
            match edge {
                Edge::Open(n) => {
                    if skip.is_some() {
                        continue;
                    }
                    match n.value() {
                        Node::Text(t) => r.text(t),
                        Node::Element(el) => {
                            if boilerplate(n, el, r.sectioning) {
                                skip = Some(n.id());
                            } else {
                                r.open(el.name());
                            }
                        }
                        _ => {}
                    }
                }
                Edge::Close(n) => {
                    if let Some(id) = skip {
                        if id == n.id() {
                            skip = None;
                        }
                        continue;
                    }
                    if let Node::Element(el) = n.value() {
                        r.close(el.name());
                    }
                }
            }
        }
    }
    HtmlText { text: r.out, title }
}

/// The text of the page's first `<title>` (not an SVG's), cleaned as a title; `None` when empty.
fn page_title(doc: &scraper::Html) -> Option<String> {
    use scraper::Node;
    doc.tree
        .nodes()
        .find(|n| {
            n.value().as_element().is_some_and(|e| e.name() == "title")
                && !n
                    .ancestors()
                    .any(|a| a.value().as_element().is_some_and(|e| e.name() == "svg"))
        })
        .map(|n| {
            let mut t = String::new();
            for d in n.descendants() {
                if let Node::Text(x) = d.value() {
                    t.push_str(x);
                }
            }
            clean_title(&t)
        })
        .filter(|t| !t.is_empty())
}

#[derive(Default)]
struct Renderer {
    out: String,
    /// Open heading elements; the marker is written for the outermost only.
    heading: usize,
    /// (start of the marker, end of the marker) of the open heading.
    heading_marker: (usize, usize),
    /// Open `pre` elements and the code collected inside the outermost.
    pre: usize,
    code: String,
    /// Open lists: ordered?, items so far.
    lists: Vec<(bool, usize)>,
    /// Open `article`/`main`/`section` elements.
    sectioning: usize,
    /// Block quotations as `> ` lines; the open ones, and where the outermost starts.
    quotes: bool,
    quote_depth: usize,
    quote_start: usize,
}

impl Renderer {
    fn trim_trailing_spaces(&mut self) {
        while self.out.ends_with(' ') {
            self.out.pop();
        }
    }

    fn para(&mut self) {
        if self.pre > 0 {
            self.code.push('\n');
            return;
        }
        if self.heading > 0 {
            self.space();
            return;
        }
        self.trim_trailing_spaces();
        if self.out.is_empty() {
            return;
        }
        while !self.out.ends_with("\n\n") {
            self.out.push('\n');
        }
    }

    fn line(&mut self) {
        if self.pre > 0 {
            self.code.push('\n');
            return;
        }
        if self.heading > 0 {
            self.space();
            return;
        }
        self.trim_trailing_spaces();
        if !self.out.is_empty() && !self.out.ends_with('\n') {
            self.out.push('\n');
        }
    }

    fn space(&mut self) {
        if !self.out.is_empty() && !self.out.ends_with([' ', '\n']) {
            self.out.push(' ');
        }
    }

    fn at_line_start(&self) -> bool {
        self.out.is_empty() || self.out.ends_with('\n')
    }

    fn text(&mut self, t: &str) {
        if self.pre > 0 {
            self.code.push_str(t);
            return;
        }
        let mut collapsed = String::with_capacity(t.len());
        let mut prev_ws = self.out.is_empty() || self.out.ends_with([' ', '\n']);
        for c in t.chars() {
            if c.is_whitespace() {
                if !prev_ws {
                    collapsed.push(' ');
                }
                prev_ws = true;
            } else {
                collapsed.push(c);
                prev_ws = false;
            }
        }
        if collapsed.is_empty() {
            return;
        }
        if self.at_line_start() && self.heading == 0 {
            let s = collapsed.as_str();
            if s.starts_with('#') || s.starts_with("```") || s.starts_with("~~~") {
                // Would read as a Markdown heading or code fence.
                self.out.push('\\');
            }
        }
        self.out.push_str(&collapsed);
    }

    fn open(&mut self, name: &str) {
        if is_sectioning(name) {
            self.sectioning += 1;
        }
        if self.pre > 0 {
            if name == "pre" {
                self.pre += 1;
            } else if name == "br" {
                self.code.push('\n');
            }
            return;
        }
        if let Some(level) = heading_level(name) {
            if self.heading == 0 {
                self.para();
                let start = self.out.len();
                for _ in 0..level {
                    self.out.push('#');
                }
                self.out.push(' ');
                self.heading_marker = (start, self.out.len());
            }
            self.heading += 1;
            return;
        }
        match name {
            "blockquote" if self.quotes => {
                self.para();
                if self.quote_depth == 0 {
                    self.quote_start = self.out.len();
                }
                self.quote_depth += 1;
            }
            "pre" => {
                self.para();
                self.pre = 1;
                self.code.clear();
            }
            "ul" | "ol" => {
                if self.lists.is_empty() {
                    self.para();
                } else {
                    self.line();
                }
                self.lists.push((name == "ol", 0));
            }
            "li" => {
                self.line();
                if self.heading > 0 {
                    return;
                }
                let depth = self.lists.len().saturating_sub(1);
                for _ in 0..depth {
                    self.out.push_str("  ");
                }
                match self.lists.last_mut() {
                    Some((true, n)) => {
                        *n += 1;
                        let n = *n;
                        self.out.push_str(&format!("{n}. "));
                    }
                    Some((false, _)) | None => self.out.push_str("- "),
                }
            }
            "td" | "th" => {
                let line_start = self.out.rfind('\n').map_or(0, |i| i + 1);
                if !self.out[line_start..].trim().is_empty() {
                    self.trim_trailing_spaces();
                    self.out.push_str(" | ");
                }
            }
            _ if PARA_ELEMENTS.contains(&name) => self.para(),
            _ if LINE_ELEMENTS.contains(&name) => self.line(),
            _ => {}
        }
    }

    fn close(&mut self, name: &str) {
        if is_sectioning(name) {
            self.sectioning = self.sectioning.saturating_sub(1);
        }
        if self.pre > 0 {
            if name == "pre" {
                self.pre -= 1;
                if self.pre == 0 {
                    self.flush_code();
                }
            }
            return;
        }
        if heading_level(name).is_some() {
            if self.heading == 0 {
                return;
            }
            self.heading -= 1;
            if self.heading == 0 {
                let (start, end) = self.heading_marker;
                if self.out.len() >= end && self.out[end..].trim().is_empty() {
                    self.out.truncate(start);
                }
                self.para();
            }
            return;
        }
        match name {
            "blockquote" if self.quotes && self.quote_depth > 0 => {
                self.quote_depth -= 1;
                if self.quote_depth == 0 {
                    self.quote_lines();
                }
            }
            "ul" | "ol" => {
                self.lists.pop();
                if self.lists.is_empty() {
                    self.para();
                } else {
                    self.line();
                }
            }
            "li" => self.line(),
            _ if PARA_ELEMENTS.contains(&name) => self.para(),
            _ if LINE_ELEMENTS.contains(&name) && name != "br" => self.line(),
            _ => {}
        }
    }

    /// The outermost block quotation, rendered since `quote_start`, as `> ` lines.
    fn quote_lines(&mut self) {
        let start = self.quote_start.min(self.out.len());
        let body = self.out[start..].trim().to_owned();
        self.out.truncate(start);
        for (i, line) in body.lines().enumerate() {
            if i > 0 {
                self.out.push('\n');
            }
            if line.trim().is_empty() {
                self.out.push('>');
            } else {
                self.out.push_str("> ");
                self.out.push_str(line);
            }
        }
        self.para();
    }

    fn flush_code(&mut self) {
        let code = std::mem::take(&mut self.code);
        let code = code.trim_matches('\n').trim_end();
        if code.trim().is_empty() {
            return;
        }
        let mut longest = 0usize;
        let mut run = 0usize;
        for c in code.chars() {
            if c == '`' {
                run += 1;
                longest = longest.max(run);
            } else {
                run = 0;
            }
        }
        let fence = "`".repeat((longest + 1).max(3));
        self.para();
        self.out.push_str(&fence);
        self.out.push('\n');
        self.out.push_str(code);
        self.out.push('\n');
        self.out.push_str(&fence);
        self.para();
    }
}

#[cfg(test)]
mod tests;
