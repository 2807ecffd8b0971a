//! The Pathway filters and answer shapes.

use serde_json::json;

use super::filter::{glob_matcher, jmespath_subset, PathCondition, PathwayFilter};
use super::*;

#[test]
fn globs_read_as_pathway_globmatch() {
    let m = |g: &str, s: &str| glob_matcher(g, "g").unwrap().is_match(s);
    assert!(m("docs/*.md", "docs/a.md"));
    assert!(!m("docs/*.md", "docs/sub/a.md"));
    assert!(!m("docs/*.md", "xdocs/a.md"));
    // `**` is any number of segments, none included.
    assert!(m("**/*.pdf", "a/b/c.pdf"));
    assert!(m("**/*.pdf", "c.pdf"));
    assert!(m("a/**/b", "a/b"));
    assert!(m("a/**/b", "a/x/y/b"));
    assert!(m("docs/**", "docs/a/b"));
    assert!(m("file?.txt", "file1.txt") && !m("file?.txt", "file12.txt"));
    assert!(m("[ab].md", "a.md") && !m("[ab].md", "c.md"));
    assert!(m("[!ab].md", "c.md") && !m("[!ab].md", "a.md"));
    // Regex metacharacters and backslashes are literal.
    assert!(m("a+(b).md", "a+(b).md") && !m("a+(b).md", "aa(b).md"));
    assert!(m(r"c:\x\*.md", r"c:\x\y.md"));
    assert!(m("test://vol*", "test://volcano"));
    assert!(glob_matcher("[", "g").is_err());
    assert!(glob_matcher(&"a".repeat(2000), "g").is_err());
}

#[test]
fn jmespath_subset_reads_the_common_forms() {
    let f = jmespath_subset("lang == 'en' && year == `2020` && contains(tags, 'x&&y')").unwrap();
    assert_eq!(
        serde_json::Value::Object(f.metadata),
        json!({"lang": "en", "year": 2020, "tags": "x&&y"})
    );
    assert!(f.path.is_empty());
    for bad in [
        "lang != 'en'",
        "a.b == 'x'",
        "lang == en",
        "lang == 'en' || x == 'y'",
        "lang == 'a' && lang == 'b'",
        "year == `{`",
        "globmatch('*.md', title)",
        "globmatch(`1`, path)",
        "globmatch('*.md')",
        "path == `1`",
        "contains(path)",
    ] {
        assert!(jmespath_subset(bad).is_err(), "{bad}");
    }
}

#[test]
fn path_conditions_select_sources_as_pathway_does() {
    let f = jmespath_subset(
        "contains(path, 'guide') && globmatch('docs/**/*.md', path) && lang == 'en'",
    )
    .unwrap();
    assert_eq!(
        serde_json::Value::Object(f.metadata.clone()),
        json!({"lang": "en"})
    );
    assert_eq!(f.path.len(), 2);
    assert!(f.path_holds("docs/en/guide.md"));
    assert!(f.path_holds("docs/guide-2.md"));
    assert!(!f.path_holds("docs/en/intro.md"), "no 'guide'");
    assert!(!f.path_holds("notes/guide.md"), "not under docs/");
    assert!(!f.path_holds("docs/guide.txt"));
    // A comma inside the pattern is part of it.
    let f = jmespath_subset("globmatch('{a,b}.md', path)").unwrap();
    assert!(f.path_holds("a.md") && f.path_holds("b.md") && !f.path_holds("c.md"));
    let f = jmespath_subset("path == 'test://comet'").unwrap();
    assert!(matches!(&f.path[..], [PathCondition::Equals(s)] if s == "test://comet"));
    assert!(f.path_holds("test://comet") && !f.path_holds("test://comet2"));
    // filepath_globpattern adds its glob to the filter's.
    let f = PathwayFilter::of(Some("contains(path, 'a')"), Some("*.md")).unwrap();
    assert!(f.path_holds("a.md") && !f.path_holds("a.txt") && !f.path_holds("b.md"));
    let f = PathwayFilter::of(Some("  "), Some("")).unwrap();
    assert!(f.path.is_empty() && f.metadata.is_empty());
}

#[test]
fn inputs_list_document_metadata() {
    let c = freshet_core::chunk::Chunk {
        metadata_json: r#"{"lang":"en","path":"overwritten"}"#.into(),
        ..freshet_core::testing::chunk("d1", "text")
    };
    assert_eq!(
        inputs_answer(std::slice::from_ref(&c), false),
        json!([{"lang": "en", "path": "test://d1", "doc_id": "d1", "title": "Title of d1"}])
    );
    assert_eq!(
        inputs_answer(&[c], true)[0]["_indexing_status"],
        json!("INDEXED")
    );
    let r = parse_inputs(br#"{"metadata_filter": null, "filepath_globpattern": null}"#).unwrap();
    assert!(r.metadata_filter.is_none() && r.return_status.is_none());
    assert!(parse_inputs(b"").unwrap().metadata_filter.is_none());
    assert!(parse_inputs(b"{\"return_status\": 3}").is_err());
}
