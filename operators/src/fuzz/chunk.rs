//! Cleaning and chunking fuzzed: generated texts of every content type (plain, Markdown, HTML
//! with deep nesting, CSV, source code in each language, damaged real sources) through
//! `prepare_full` with every strategy and generated budgets. Invariants: the checks of
//! [`check`](super::seeded::check) (span = text, trimmed, token counts, every leaf's embedded
//! input within its budget, unique ids, indexes, inherited fields, parent-child structure,
//! every non-blank character covered), ids that are the documented function of (document,
//! kind, text, occurrence), the same chunks on a second run, and the chunks of a Markdown
//! section unchanged by an edit of a later section.

use proptest::prelude::*;
use proptest::sample::{select, Index};

use super::seeded::{check, PIECES};
use super::{config, text, within_deadline};
use crate::chunk::tokens::tests::{test_counter, FastCounter};
use crate::chunk::{chunk_id, CharCounter, ChunkStrategy, ChunkerConfig, TokenCounter};
use crate::document::{ContentType, Document, Language};
use crate::prepare::prepare_full;

const CODE: &[(&str, Language)] = &[
    (
        include_str!("../../tests/fixtures/code/engine.rs"),
        Language::Rust,
    ),
    (
        include_str!("../../tests/fixtures/code/reader.py"),
        Language::Python,
    ),
    (
        include_str!("../../tests/fixtures/code/store.js"),
        Language::JavaScript,
    ),
    (
        include_str!("../../tests/fixtures/code/queue.ts"),
        Language::TypeScript,
    ),
    (
        include_str!("../../tests/fixtures/code/server.go"),
        Language::Go,
    ),
    (
        include_str!("../../tests/fixtures/code/Index.java"),
        Language::Java,
    ),
];

const CODE_PIECES: &[&str] = &[
    "fn f() {",
    "def g(x):\n    ",
    "class C {",
    "}",
    "{",
    "(",
    ")",
    ";",
    "\n",
    "\n\n",
    "    ",
    "func h() {",
    "function k() {",
    "interface I {",
    "public void m() {",
    "import x",
    "//",
    "#",
    "/*",
    "*/",
    "\"",
    "'",
    "`",
    "r#\"",
    "\"\"\"",
    "impl T for U {",
    "=>",
    "return 1;",
    "中文",
    "🚀",
];

/// Text for a content type: for code, a real source damaged with code pieces, or code pieces.
fn text_for(ct: ContentType) -> BoxedStrategy<String> {
    match ct {
        ContentType::Code(lang) => {
            let source = CODE.iter().find(|(_, l)| *l == lang).map_or("", |(s, _)| s);
            let edits = proptest::collection::vec((any::<Index>(), select(CODE_PIECES)), 0..8);
            prop_oneof![
                3 => edits.prop_map(move |edits| {
                    let mut s = source.to_owned();
                    for (i, piece) in edits {
                        let at = i.index(s.len() + 1);
                        let at = (0..=at).rev().find(|&a| s.is_char_boundary(a)).unwrap_or(0);
                        s.insert_str(at, piece);
                    }
                    s
                }),
                1 => proptest::collection::vec(prop_oneof![select(CODE_PIECES), select(PIECES)], 0..200)
                    .prop_map(|v| v.concat()),
            ]
            .boxed()
        }
        ContentType::Csv => {
            let field = prop_oneof![
                "[a-z ]{0,12}",
                text(3),
                Just("\"quoted, with \"\"quotes\"\"\"".to_owned()),
                Just("\"line\nbreak\"".to_owned()),
                Just("\"unclosed".to_owned()),
            ];
            proptest::collection::vec(proptest::collection::vec(field, 0..6), 0..30)
                .prop_map(|rows| {
                    rows.iter().map(|r| r.join(",")).collect::<Vec<_>>().join("\n")
                })
                .boxed()
        }
        ContentType::Html => prop_oneof![
            3 => text(200),
            1 => (select(vec!["div", "p", "li", "section", "table", "b", "nav", "pre"]), 0usize..5000, text(20), any::<bool>())
                .prop_map(|(tag, depth, t, closed)| {
                    let mut s = format!("<{tag}>").repeat(depth);
                    s.push_str(&t);
                    if closed {
                        s.push_str(&format!("</{tag}>").repeat(depth));
                    }
                    s
                }),
        ]
        .boxed(),
        _ => text(200).boxed(),
    }
}

fn content_type() -> impl Strategy<Value = ContentType> {
    prop_oneof![
        3 => select(vec![ContentType::PlainText, ContentType::Markdown, ContentType::Html]),
        1 => Just(ContentType::Csv),
        2 => select(CODE.iter().map(|(_, l)| ContentType::Code(*l)).collect::<Vec<_>>()),
    ]
}

const STRATEGIES: [ChunkStrategy; 4] = [
    ChunkStrategy::Recursive,
    ChunkStrategy::Markdown,
    ChunkStrategy::ParentChild,
    ChunkStrategy::Syntax,
];

/// A valid chunker config: any strategy, the default per-type map or none or one override.
fn chunker_config() -> impl Strategy<Value = ChunkerConfig> {
    (
        select(STRATEGIES.to_vec()),
        1usize..120,
        1usize..300,
        any::<Index>(),
        any::<Index>(),
        any::<Index>(),
        0..3usize,
        (content_type(), select(STRATEGIES.to_vec())),
    )
        .prop_map(|(strategy, max, parent, child, ov, cov, map, (ct, s))| {
            let child = 1 + child.index(parent);
            let mut cfg = ChunkerConfig {
                strategy,
                max_tokens: max,
                overlap_tokens: ov.index(max / 2 + 1),
                parent_max_tokens: parent,
                child_max_tokens: child,
                child_overlap_tokens: cov.index(child / 2 + 1),
                ..ChunkerConfig::default()
            };
            match map {
                0 => {}
                1 => cfg.per_content_type.clear(),
                _ => {
                    cfg.per_content_type.insert(ct, s);
                }
            }
            cfg
        })
}

fn document(id: &str, title: String, text: String, ct: ContentType) -> Document {
    Document {
        id: id.into(),
        title,
        text,
        content_type: ct,
        source: "fuzz".into(),
        metadata: [("lang".to_string(), "\"en\"".to_string())].into(),
        acl: vec!["group:a".into()],
    }
}

/// The token counter of a case: the BERT-like test tokenizer (slow in debug builds: one case
/// in six), a fast BERT-like counter, or characters.
fn with_counter<T>(which: usize, f: impl FnOnce(&dyn TokenCounter) -> T) -> T {
    match which {
        0 => f(&test_counter()),
        1..=3 => f(&FastCounter::default()),
        _ => f(&CharCounter),
    }
}

fn check_all(doc: Document, cfg: ChunkerConfig, counter: usize) {
    within_deadline("prepare", move || {
        with_counter(counter, |t| {
            let p = prepare_full(doc.clone(), &cfg, t).expect("a valid config");
            check(&p.cleaned, &p.chunks, &cfg, t);
            for (i, c) in p.chunks.iter().enumerate() {
                let occurrence = p.chunks[..i]
                    .iter()
                    .filter(|e| e.kind == c.kind && e.text == c.text)
                    .count() as u32;
                assert_eq!(
                    c.chunk_id,
                    chunk_id(&doc.id, c.kind, &c.text, occurrence),
                    "the id is not a function of (document, kind, text, occurrence)"
                );
            }
            let again = prepare_full(doc, &cfg, t).expect("a valid config");
            assert_eq!(again, p, "a second run chunks differently");
        })
    })
}

proptest! {
    #![proptest_config(config(96))]

    #[test]
    fn every_content_type_and_strategy(
        (ct, text) in content_type().prop_flat_map(|ct| (Just(ct), text_for(ct))),
        title in text(4),
        cfg in chunker_config(),
        counter in 0usize..6,
    ) {
        check_all(document("d", title, text, ct), cfg, counter);
    }

    /// The leaves of a Markdown section keep their text and ids when a later section changes.
    #[test]
    fn ids_survive_edits_of_a_later_section(
        first in text(60).prop_map(|s| s.replace(['`', '~'], "")),
        second in text(60),
        edited in text(60),
        max in 8usize..100,
        counter in 1usize..6,
    ) {
        let cfg = ChunkerConfig {
            strategy: ChunkStrategy::Markdown,
            max_tokens: max,
            overlap_tokens: max / 4,
            ..ChunkerConfig::default()
        };
        let leaves = move |body: String| {
            let cfg = cfg.clone();
            within_deadline("prepare", move || {
                with_counter(counter, |t| {
                    let doc = document("d", String::new(), body, ContentType::Markdown);
                    let p = prepare_full(doc, &cfg, t).expect("a valid config");
                    p.chunks
                        .into_iter()
                        .filter(|c| c.section.first().map(String::as_str) == Some("Alpha"))
                        .map(|c| (c.chunk_id, c.text, c.char_start, c.char_end))
                        .collect::<Vec<_>>()
                })
            })
        };
        let a = leaves(format!("# Alpha\n\n{first}\n\n# Omega\n\n{second}"));
        let b = leaves(format!("# Alpha\n\n{first}\n\n# Omega\n\n{edited}"));
        prop_assert_eq!(a, b);
    }
}

/// Found by fuzzing: the syntax splitter left out what lies between and after the items of a
/// definition it splits (a field's trailing comma, a struct's or impl's closing brace).
#[test]
fn every_character_of_a_source_is_in_a_chunk() {
    for (source, lang) in CODE {
        for max in 1..80 {
            let cfg = ChunkerConfig {
                max_tokens: max,
                overlap_tokens: 0,
                ..ChunkerConfig::default()
            };
            for counter in [1, 4] {
                let doc = document(
                    "d",
                    String::new(),
                    source.to_string(),
                    ContentType::Code(*lang),
                );
                with_counter(counter, |t| {
                    let p = prepare_full(doc, &cfg, t).expect("a valid config");
                    check(&p.cleaned, &p.chunks, &cfg, t);
                });
            }
        }
    }
}

/// Found by fuzzing (a damaged JavaScript source): a `)` after a class, outside every item of
/// the syntax tree, was in no chunk.
#[test]
fn text_outside_every_syntax_item_is_in_a_chunk() {
    let source = CODE[2].0.replacen("  }\n}\n", "  }\n})\n", 1);
    assert_ne!(source, CODE[2].0);
    let source = format!("r#\"///*function k() {{ {source}");
    for max in 2..40 {
        let cfg = ChunkerConfig {
            max_tokens: max,
            overlap_tokens: max / 4,
            ..ChunkerConfig::default()
        };
        let doc = document(
            "d",
            "\r".into(),
            source.clone(),
            ContentType::Code(Language::JavaScript),
        );
        let t = FastCounter::default();
        let p = prepare_full(doc, &cfg, &t).expect("a valid config");
        check(&p.cleaned, &p.chunks, &cfg, &t);
    }
}

/// Found by fuzzing (`PROPTEST_CASES=10000`): a heading indented by a space started its chunk
/// with that space.
#[test]
fn an_indented_heading_starts_its_chunk_at_its_mark() {
    let cfg = ChunkerConfig {
        max_tokens: 83,
        overlap_tokens: 4,
        ..ChunkerConfig::default()
    };
    for text in ["- \r\n # the\na", "x\n   ## two\nbody", " # first\ntext"] {
        let doc = document(
            "d",
            "<script>\u{2029}".into(),
            text.into(),
            ContentType::Markdown,
        );
        let t = FastCounter::default();
        let p = prepare_full(doc, &cfg, &t).expect("a valid config");
        check(&p.cleaned, &p.chunks, &cfg, &t);
        assert!(
            p.chunks.iter().any(|c| c.text.starts_with('#')),
            "{:?}",
            p.chunks
        );
    }
}

/// Found by fuzzing (`PROPTEST_CASES=10000`): in a damaged Rust source (`impl E//ngine {`), a
/// container's header cut alone kept its trailing newline.
#[test]
fn a_header_cut_alone_is_trimmed() {
    let text = CODE[0].0.replacen("impl Engine", "impl E//ngine", 1);
    let mut cfg = ChunkerConfig {
        strategy: ChunkStrategy::Syntax,
        max_tokens: 49,
        overlap_tokens: 8,
        parent_max_tokens: 36,
        child_max_tokens: 26,
        child_overlap_tokens: 12,
        ..ChunkerConfig::default()
    };
    cfg.per_content_type.clear();
    let doc = document("d", String::new(), text, ContentType::Code(Language::Rust));
    let t = FastCounter::default();
    let p = prepare_full(doc, &cfg, &t).expect("a valid config");
    check(&p.cleaned, &p.chunks, &cfg, &t);
}
