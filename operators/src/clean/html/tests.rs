//! Tests of the HTML to Markdown renderer.

use super::*;
use crate::clean::clean_text;
use crate::document::ContentType;

fn html(s: &str) -> String {
    clean_text(s, ContentType::Html)
}

#[test]
fn html_boilerplate_is_dropped() {
    let page = r#"<!doctype html><html><head><title> My  Page </title>
        <style>body{color:red}</style><script>var x = "<p>no</p>";</script></head>
        <body>
          <header><nav><ul><li>Home</li><li>About</li></ul></nav><h1>Site</h1></header>
          <div class="sidebar">Sidebar junk</div>
          <div role="navigation">Role nav</div>
          <p>Intro &amp; more&nbsp;text &eacute; &#x4E2D;</p>
          <div><div><div><p>Deep <b>bold</b> <a href="x">link</a></p></div></div></div>
          <aside>Aside</aside>
          <form><input value="x"><button>Go</button></form>
          <p hidden>Hidden</p><p aria-hidden="true">Aria hidden</p>
          <noscript>Enable JS</noscript>
          <!-- a comment -->
          <footer>Copyright</footer>
        </body></html>"#;
    let h = html_to_markdown(page);
    assert_eq!(h.title.as_deref(), Some("My Page"));
    let out = html(page);
    assert_eq!(out, "Intro & more text é 中\n\nDeep bold link");
}

#[test]
fn html_main_and_article() {
    let page = "<body><p>outside</p><main><header><h1>Article   title</h1></header>\
                <p>Body</p><footer>f</footer></main><p>after</p></body>";
    assert_eq!(html(page), "# Article title\n\nBody");
    let page = "<body><p>teaser</p><article><h2>A</h2><p>a</p><article><p>nested</p>\
                </article></article><div>x</div><article><h2>B</h2><p>b</p></article></body>";
    assert_eq!(html(page), "## A\n\na\n\nnested\n\n## B\n\nb");
    let page = "<div role=\"main\"><p>m</p></div><p>other</p>";
    assert_eq!(html(page), "m");
}

#[test]
fn html_structure_to_markdown() {
    let page = "<h1>Top <small>x</small></h1><p>para one<br>line two</p>\
        <h2></h2>\
        <ul><li>a</li><li>b<ul><li>c</li></ul></li></ul><ol><li>x</li><li>y</li></ol>\
        <table><tr><th>k</th><th>v</th></tr><tr><td>1</td><td>2</td></tr></table>\
        <pre><code>fn main() {\n    x();\n}</code></pre><h3>T<br>wo</h3><p># not a heading</p>";
    assert_eq!(
        html(page),
        "# Top x\n\npara one\nline two\n\n- a\n- b\n  - c\n\n1. x\n2. y\n\nk | v\n1 | 2\n\n\
         ```\nfn main() {\n    x();\n}\n```\n\n### T wo\n\n\\# not a heading"
    );
    // code containing a fence gets a longer fence
    assert_eq!(html("<pre>a\n```\nb</pre>"), "````\na\n```\nb\n````");
}

#[test]
fn html_broken_and_deep_markup() {
    assert_eq!(html("<p>unclosed <b>bold<p>next"), "unclosed bold\n\nnext");
    assert_eq!(html(""), "");
    assert_eq!(html("plain text &lt;tag&gt;"), "plain text <tag>");
    let deep = format!("{}deep{}", "<div>".repeat(3_000), "</div>".repeat(3_000));
    assert_eq!(html(&deep), "deep");
    let deep = format!("{}x", "<span><b>".repeat(300));
    assert_eq!(html(&deep), "x");
}

#[test]
fn block_quotations_as_markdown_quotes_when_asked() {
    let page =
        "<p>before</p><blockquote><p>one</p><blockquote><p>two</p></blockquote></blockquote>\
                <p>after</p>";
    let doc = scraper::Html::parse_document(page);
    let quoted = render(
        &doc,
        &RenderOptions {
            quotes: true,
            ..RenderOptions::default()
        },
    );
    assert_eq!(quoted.text.trim(), "before\n\n> one\n>\n> two\n\nafter");
    // A web page's quotations stay paragraphs.
    assert_eq!(html(page), "before\n\none\n\ntwo\n\nafter");
}
