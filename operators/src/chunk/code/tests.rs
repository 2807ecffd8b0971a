use std::collections::BTreeMap;

use super::*;
use crate::chunk::tests::check_chunks;
use crate::chunk::tokens::tests::test_counter;
use crate::chunk::{chunk_document, CharCounter, Chunk, ChunkerConfig, TokenCounter};
use crate::document::{ContentType, Document};

fn doc(text: &str, lang: Language) -> Document {
    Document {
        id: "code".into(),
        title: String::new(),
        text: text.into(),
        content_type: ContentType::Code(lang),
        source: "src".into(),
        metadata: BTreeMap::new(),
        acl: Vec::new(),
    }
}

fn chunks(text: &str, lang: Language, max: usize, t: &dyn TokenCounter) -> Vec<Chunk> {
    let d = doc(text, lang);
    let cfg = ChunkerConfig {
        max_tokens: max,
        overlap_tokens: 0,
        ..ChunkerConfig::default()
    };
    let out = chunk_document(&d, "h", &cfg, t);
    check_chunks(&d, &out, &cfg, t);
    out
}

/// The section path of the chunk holding `needle`, and that chunk's text.
fn at<'c>(chunks: &'c [Chunk], needle: &str) -> (Vec<&'c str>, &'c str) {
    let c = chunks
        .iter()
        .find(|c| c.text.contains(needle))
        .unwrap_or_else(|| panic!("{needle:?} in no chunk: {chunks:#?}"));
    (c.section.iter().map(String::as_str).collect(), &c.text)
}

const RUST: &str = include_str!("../../../tests/fixtures/code/engine.rs");
const PYTHON: &str = include_str!("../../../tests/fixtures/code/reader.py");
const JS: &str = include_str!("../../../tests/fixtures/code/store.js");
const TS: &str = include_str!("../../../tests/fixtures/code/queue.ts");
const GO: &str = include_str!("../../../tests/fixtures/code/server.go");
const JAVA: &str = include_str!("../../../tests/fixtures/code/Index.java");
const SOURCES: [(&str, Language); 6] = [
    (RUST, Language::Rust),
    (PYTHON, Language::Python),
    (JS, Language::JavaScript),
    (TS, Language::TypeScript),
    (GO, Language::Go),
    (JAVA, Language::Java),
];

/// With room for each definition, every one is a chunk of its own under its symbol path,
/// its doc comments and attributes with it.
#[test]
fn definitions_with_their_docs_under_their_symbol_paths() {
    let t = CharCounter;
    let c = chunks(RUST, Language::Rust, 400, &t);
    let (path, text) = at(&c, "pub struct Engine");
    assert_eq!(path, ["Engine"]);
    assert!(text.starts_with("/// Scores documents for a query.\n#[derive(Debug, Default)]"));
    // the impl is too large for one chunk: member by member, its header with the first
    let (path, text) = at(&c, "pub fn add");
    assert_eq!(path, ["Engine", "add"]);
    assert!(
        text.starts_with("impl Engine {\n    /// Adds a document."),
        "{text}"
    );
    let (path, text) = at(&c, "pub fn retrieve");
    assert_eq!(path, ["Engine", "retrieve"]);
    assert!(text.starts_with("/// Counts the query's words"), "{text}");
    assert_eq!(at(&c, "fn helper").0, ["tests"]);
    assert_eq!(
        at(&c, "use std::collections::HashMap;").0,
        Vec::<&str>::new()
    );

    let c = chunks(PYTHON, Language::Python, 160, &t);
    assert_eq!(at(&c, "def level").0, ["Gauge", "level"]);
    assert!(at(&c, "def level").1.starts_with("# Reads the level"));
    // the class is too large: its header and docstring, then member by member
    let (path, text) = at(&c, "A river gauge.");
    assert_eq!(
        (path, text),
        (
            vec!["Gauge"],
            "class Gauge:\n    \"\"\"A river gauge.\"\"\""
        )
    );
    assert_eq!(at(&c, "def __init__").0, ["Gauge", "__init__"]);
    let (path, text) = at(&c, "def load");
    assert_eq!(path, ["load"]);
    assert!(text.starts_with("@staticmethod"), "decorators stay: {text}");
    assert!(text.contains("\"\"\"Loads gauges"), "the docstring stays");

    let c = chunks(JS, Language::JavaScript, 120, &t);
    assert_eq!(at(&c, "put(id, text)").0, ["Store", "put"]);
    assert!(at(&c, "put(id, text)")
        .1
        .starts_with("/** Puts a document. */"));
    assert_eq!(at(&c, "store.docs.size").0, ["count"]);
    assert_eq!(at(&c, "function helper").0, ["helper"]);

    let c = chunks(TS, Language::TypeScript, 200, &t);
    assert_eq!(at(&c, "priority: number").0, ["Item"]);
    assert_eq!(at(&c, "push(item: T)").0, ["Queue", "push"]);
    assert_eq!(at(&c, "\"high\" | \"low\"").0, ["Priority"]);

    let c = chunks(GO, Language::Go, 200, &t);
    assert_eq!(at(&c, "func (s *Server) Get").0, ["Server", "Get"]);
    assert!(at(&c, "func (s *Server) Get")
        .1
        .starts_with("// Get returns a document."));
    assert_eq!(at(&c, "docs map[string]string\n").0, ["Server"]);
    assert_eq!(at(&c, "func New()").0, ["New"]);

    let c = chunks(JAVA, Language::Java, 200, &t);
    assert_eq!(at(&c, "public void add").0, ["Index", "add"]);
    assert!(at(&c, "public void add")
        .1
        .contains("/** Adds a document. */"));
    assert_eq!(at(&c, "public String get").0, ["Index", "get"]);
    assert_eq!(at(&c, "void changed").0, ["Index", "Listener"]);
}

/// A file that fits is one chunk; a function over the budget is cut between statements,
/// its signature and docs with the first ones, every chunk under the function's path.
#[test]
fn a_long_function_splits_between_statements() {
    let t = CharCounter;
    // one chunk per definition however much room there is
    let sections: Vec<Vec<String>> = chunks(GO, Language::Go, 10_000, &t)
        .into_iter()
        .map(|c| c.section)
        .collect();
    assert_eq!(
        sections,
        [
            vec![],
            vec!["Server".to_string()],
            vec!["Server".into(), "Get".into()],
            vec!["New".into()]
        ]
    );
    let c = chunks(RUST, Language::Rust, 220, &t);
    let parts: Vec<&Chunk> = c
        .iter()
        .filter(|c| c.section == ["Engine", "retrieve"])
        .collect();
    assert!(parts.len() >= 2, "{c:#?}");
    assert!(parts[0].text.starts_with("/// Counts the query's words"));
    assert!(parts[0]
        .text
        .ends_with("let words: Vec<&str> = query.split_whitespace().collect();"));
    for p in &parts {
        // the last one also holds the closing braces of the function and the impl
        let text = p
            .text
            .trim_end_matches(|c: char| c == '}' || c.is_whitespace());
        let ends_statement = text.ends_with(';') || text.ends_with("collect()");
        assert!(ends_statement, "whole statements: {:?}", p.text);
    }
}

/// With the model's tokenizer stand-in, every language's chunks keep every invariant.
#[test]
fn every_language_keeps_the_chunk_invariants() {
    let t = test_counter();
    for (text, lang) in SOURCES {
        for max in [24, 64, 256] {
            let c = chunks(text, lang, max, &t);
            assert!(!c.is_empty(), "{lang:?}");
        }
    }
}

/// Damaged sources (spans cut out, bytes shuffled in): the parser recovers, and the
/// chunks keep every invariant.
#[test]
fn damaged_sources_still_chunk() {
    let t = test_counter();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n.max(1) as u64) as usize
    };
    let sources = SOURCES;
    for round in 0..120 {
        let (text, lang) = sources[round % sources.len()];
        let mut chars: Vec<char> = text.chars().collect();
        for _ in 0..1 + next(4) {
            let a = next(chars.len());
            let b = (a + next(40)).min(chars.len());
            if next(2) == 0 {
                chars.drain(a..b);
            } else {
                let junk: Vec<char> = "{}()[];:\"'`/*#\n\t".chars().collect();
                let c = junk[next(junk.len())];
                chars.insert(a, c);
            }
        }
        let damaged: String = chars.into_iter().collect();
        chunks(&damaged, lang, 48, &t);
    }
}

#[test]
fn go_receivers() {
    assert_eq!(receiver_type("(s *Server)").as_deref(), Some("Server"));
    assert_eq!(receiver_type("(q Queue[T])").as_deref(), Some("Queue"));
    assert_eq!(receiver_type("()"), None);
}
