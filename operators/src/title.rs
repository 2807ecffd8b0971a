//! A document's title from its own text, for the sources that build document envelopes from
//! files: the front matter's `title:` or the first heading of Markdown, the `<title>` of an HTML
//! page or else its first `<h1>`. (The cleaner gives an HTML document without a title its
//! `<title>` too.)

use scraper::{Html, Node};

use crate::document::ContentType;

/// The title `text` gives itself, by its content type; `None` for plain text or when it has
/// none. A binary document's title comes from its file when it is parsed ([`crate::parse`]).
pub fn title_of(content_type: ContentType, text: &str) -> Option<String> {
    match content_type {
        ContentType::Markdown => markdown_title(text),
        ContentType::Html => html_title(text),
        ContentType::PlainText
        | ContentType::Csv
        | ContentType::Code(_)
        | ContentType::Pdf
        | ContentType::Docx
        | ContentType::Epub => None,
    }
    .filter(|t| !t.is_empty())
}

/// The first heading of a Markdown text (ATX `# …` or setext), outside front matter and code
/// fences.
pub fn markdown_title(text: &str) -> Option<String> {
    let mut lines = text.lines().peekable();
    // YAML front matter: a `title:` there wins.
    if lines.peek().map(|l| l.trim_end()) == Some("---") {
        lines.next();
        let mut fm_title = None;
        for l in lines.by_ref() {
            let t = l.trim_end();
            if t == "---" || t == "..." {
                break;
            }
            if let Some(v) = t.strip_prefix("title:") {
                let v = v.trim().trim_matches(|c| c == '"' || c == '\'').trim();
                if !v.is_empty() {
                    fm_title = Some(v.to_string());
                }
            }
        }
        if fm_title.is_some() {
            return fm_title;
        }
    }
    let mut fence: Option<&str> = None;
    let mut prev: Option<&str> = None;
    for line in lines {
        let indent = line.len() - line.trim_start_matches(' ').len();
        let t = line.trim();
        if let Some(f) = fence {
            if indent < 4 && t.starts_with(f) {
                fence = None;
            }
            prev = None;
            continue;
        }
        if indent < 4 && (t.starts_with("```") || t.starts_with("~~~")) {
            fence = Some(&t[..3]);
            prev = None;
            continue;
        }
        if indent < 4 && t.starts_with('#') {
            let hashes = t.len() - t.trim_start_matches('#').len();
            let rest = &t[hashes..];
            if hashes <= 6 && (rest.is_empty() || rest.starts_with([' ', '\t'])) {
                let title = rest.trim().trim_end_matches('#').trim_end();
                if !title.is_empty() {
                    return Some(title.to_string());
                }
            }
        }
        if let Some(p) = prev {
            if indent < 4
                && !t.is_empty()
                && (t.chars().all(|c| c == '=') || t.chars().all(|c| c == '-'))
            {
                return Some(p.trim().to_string());
            }
        }
        prev = if t.is_empty() || indent >= 4 {
            None
        } else {
            Some(line)
        };
    }
    None
}

/// The `<title>` of an HTML page (not an SVG's), else its first `<h1>`: the text inside, entities
/// decoded, whitespace collapsed.
pub fn html_title(html: &str) -> Option<String> {
    let doc = Html::parse_document(html);
    let element = |name: &str| {
        doc.tree.nodes().find(|n| {
            n.value().as_element().is_some_and(|e| e.name() == name)
                && !n
                    .ancestors()
                    .any(|a| a.value().as_element().is_some_and(|e| e.name() == "svg"))
        })
    };
    ["title", "h1"].into_iter().find_map(|name| {
        let node = element(name)?;
        let text: String = node
            .descendants()
            .filter_map(|d| match d.value() {
                Node::Text(t) => Some(&**t),
                _ => None,
            })
            .collect();
        let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
        (!collapsed.is_empty()).then_some(collapsed)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_titles() {
        assert_eq!(
            markdown_title("intro\n\n## Sub ##\n# Top").as_deref(),
            Some("Sub")
        );
        assert_eq!(
            markdown_title("Title\n=====\ntext").as_deref(),
            Some("Title")
        );
        assert_eq!(
            markdown_title("```\n# not\n```\n# Yes").as_deref(),
            Some("Yes")
        );
        assert_eq!(
            markdown_title("---\ntitle: \"Front\"\n---\n# H").as_deref(),
            Some("Front")
        );
        assert_eq!(markdown_title("---\nx: 1\n---\n# H").as_deref(), Some("H"));
        assert_eq!(markdown_title("#hashtag\nplain"), None);
        assert_eq!(markdown_title("    # code"), None);
    }

    #[test]
    fn html_titles() {
        assert_eq!(
            html_title("<html><HEAD><Title lang=en>\n A &amp; B &#x41;</title></head>").as_deref(),
            Some("A & B A")
        );
        assert_eq!(
            html_title("<body><h1 class=x>Hello <em>you</em></h1></body>").as_deref(),
            Some("Hello you")
        );
        assert_eq!(html_title("<titles>no</titles>"), None);
        assert_eq!(html_title("<title></title><p>x</p>"), None);
        assert_eq!(
            html_title("<svg><title>icon</title></svg><h1>Page</h1>").as_deref(),
            Some("Page")
        );
        assert_eq!(html_title("<p>no title</p>"), None);
        assert_eq!(
            html_title("<h1>Hel<b>lo</b></h1>").as_deref(),
            Some("Hello")
        );
    }

    #[test]
    fn by_content_type() {
        assert_eq!(
            title_of(
                ContentType::Markdown,
                "# Top
text"
            )
            .as_deref(),
            Some("Top")
        );
        assert_eq!(
            title_of(ContentType::Html, "<title>T</title>").as_deref(),
            Some("T")
        );
        assert_eq!(title_of(ContentType::PlainText, "# Not a heading"), None);
    }
}
