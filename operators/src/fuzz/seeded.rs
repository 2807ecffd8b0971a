//! Seeded robustness tests: a few hundred random and adversarial inputs through decode,
//! clean, hash and chunking, checking that nothing panics and that the chunk invariants hold.

use crate::chunk::tests::{check_chunks, Rng};
use crate::chunk::tokens::tests::{test_counter, FastCounter};
use crate::chunk::{CharCounter, Chunk, ChunkKind, ChunkStrategy, ChunkerConfig, TokenCounter};
use crate::clean::clean;
use crate::document::{Change, ContentType, Document};
use crate::envelope::decode;
use crate::limits::RecordLimits;
use crate::prepare::prepare_full;

pub(crate) const PIECES: &[&str] = &[
    "the",
    "quick",
    "brown",
    "fox",
    "data",
    "cell",
    "qzx",
    "Ünïcödé",
    " ",
    " ",
    " ",
    "\n",
    "\n",
    "\n\n",
    "\n\n\n",
    "\t",
    ".",
    "!",
    "?",
    ",",
    "。",
    "！",
    "中文",
    "日本語",
    "的是一个测试",
    "한국어",
    "🚀",
    "👨\u{200D}👩\u{200D}👧",
    "e\u{301}",
    "\u{301}\u{302}\u{303}",
    "\u{0}",
    "\u{7}",
    "\u{1b}",
    "\u{7f}",
    "\u{200B}",
    "\u{FEFF}",
    "\u{00AD}",
    "\r\n",
    "\r",
    "\u{2028}",
    "\u{2029}",
    "# ",
    "## ",
    "###### ",
    "#",
    "```",
    "```rust\n",
    "~~~",
    "    ",
    "- ",
    "1. ",
    "> ",
    "|",
    "<p>",
    "</p>",
    "<div>",
    "</div>",
    "<h2>",
    "</h2>",
    "<script>",
    "</script>",
    "<nav>",
    "<pre>",
    "</pre>",
    "<li>",
    "<br>",
    "&amp;",
    "&#x4E2D;",
    "&nbsp;",
    "<",
    ">",
    "Ａｂｃ",
    "ﬁ",
    "สวัสดีครับ",
    "مرحبا",
    "\u{202E}",
    "\u{E000}",
    "\u{10FFFF}",
    "1-2-3-4-5-6-7-8-9",
];

fn random_text(rng: &mut Rng) -> String {
    let n = match rng.below(10) {
        0 => 0,
        1..=6 => rng.range(1, 60),
        _ => rng.range(60, 600),
    };
    let mut s = String::new();
    for _ in 0..n {
        match rng.below(40) {
            0 => s.push_str(&"x".repeat(rng.range(50, 400))),
            1 => s.push_str(&"中".repeat(rng.range(20, 200))),
            2 => {
                // any scalar value
                let c = char::from_u32(rng.below(0x11_0000) as u32).unwrap_or('?');
                s.push(c);
            }
            _ => s.push_str(PIECES[rng.below(PIECES.len())]),
        }
    }
    s
}

fn random_config(rng: &mut Rng) -> ChunkerConfig {
    let max = rng.range(1, 80);
    let parent = rng.range(1, 200);
    let child = rng.range(1, parent);
    ChunkerConfig {
        strategy: [
            ChunkStrategy::Recursive,
            ChunkStrategy::Markdown,
            ChunkStrategy::ParentChild,
        ][rng.below(3)],
        max_tokens: max,
        overlap_tokens: rng.range(0, max / 2),
        parent_max_tokens: parent,
        child_max_tokens: child,
        child_overlap_tokens: rng.range(0, child / 2),
        ..ChunkerConfig::default()
    }
}

/// Every invariant a chunk list must hold for the cleaned document it came from: the shared
/// per-chunk checks, then parent-child structure and coverage of the text.
pub(crate) fn check(doc: &Document, chunks: &[Chunk], cfg: &ChunkerConfig, t: &dyn TokenCounter) {
    check_chunks(doc, chunks, cfg, t);
    let chars: Vec<char> = doc.text.chars().collect();
    let mut parent: Option<&Chunk> = None;
    let mut covered = vec![false; chars.len()];
    let (parent_child, _) = cfg.resolve(doc.content_type);
    for c in chunks {
        let (s, e) = (c.char_start as usize, c.char_end as usize);
        assert!(s < e && e <= chars.len(), "bad span {s}..{e}");
        match c.kind {
            ChunkKind::Parent => {
                assert!(parent_child && c.parent_id.is_none());
                parent = Some(c);
            }
            ChunkKind::Leaf => {
                if parent_child {
                    let p = parent.expect("child without parent");
                    assert_eq!(c.parent_id.as_ref(), Some(&p.chunk_id));
                    assert!(c.char_start >= p.char_start && c.char_end <= p.char_end);
                    assert_eq!(c.section, p.section);
                } else {
                    assert!(c.parent_id.is_none());
                }
                covered[s..e].iter_mut().for_each(|x| *x = true);
            }
        }
    }
    for (i, c) in chars.iter().enumerate() {
        assert!(
            covered[i] || c.is_whitespace(),
            "character {i} ({c:?}) is in no chunk"
        );
    }
}

#[test]
fn random_documents_through_prepare() {
    let hf = test_counter();
    let fast = FastCounter::default();
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    for i in 0..300 {
        let text = random_text(&mut rng);
        let ct = [
            ContentType::PlainText,
            ContentType::Markdown,
            ContentType::Html,
        ][rng.below(3)];
        let cfg = random_config(&mut rng);
        // the real tokenizer is slow in debug builds: a sixth of the runs
        let t: &dyn TokenCounter = match i % 6 {
            0 => &hf,
            1..=3 => &fast,
            _ => &CharCounter,
        };
        let doc = Document {
            id: format!("d{i}"),
            title: random_text(&mut rng).chars().take(50).collect(),
            text,
            content_type: ct,
            source: "fuzz".into(),
            metadata: Default::default(),
            acl: vec![],
        };
        let p = prepare_full(doc.clone(), &cfg, t).expect("valid config");
        check(&p.cleaned, &p.chunks, &cfg, t);
        if i % 10 == 0 {
            let again = prepare_full(doc.clone(), &cfg, t).unwrap();
            assert_eq!(again, p, "not deterministic");
        }
        // cleaning plain text is idempotent
        if ct == ContentType::PlainText {
            assert_eq!(clean(&p.cleaned), p.cleaned);
        }
    }
}

#[test]
fn random_records_through_decode() {
    let mut rng = Rng(0xdec0_de00_1111_2222);
    let limits = RecordLimits::default();
    let fields = [
        "op",
        "id",
        "title",
        "text",
        "content_type",
        "source",
        "metadata",
        "acl",
        "extra",
        "lang",
    ];
    let values = [
        "null",
        "true",
        "3",
        "-1.5e3",
        "\"\"",
        "\"upsert\"",
        "\"delete\"",
        "\"text/html\"",
        "\"x\"",
        "\"中文\\u0000\\ud83d\\ude80\"",
        "[]",
        "[\"group:a\",\"\"]",
        "[\"group:b\",\"group:a\"]",
        "[1,{\"a\":[]}]",
        "{}",
        "{\"b\":{\"c\":null},\"a\":1}",
    ];
    for _ in 0..500 {
        let key: Option<Vec<u8>> = match rng.below(4) {
            0 => None,
            1 => Some((0..rng.below(12)).map(|_| rng.below(256) as u8).collect()),
            _ => Some(format!("k{}", rng.below(3)).into_bytes()),
        };
        let value: Option<Vec<u8>> = match rng.below(6) {
            0 => None,
            1 => Some((0..rng.below(64)).map(|_| rng.below(256) as u8).collect()),
            _ => {
                let n = rng.below(7);
                let body: Vec<String> = (0..n)
                    .map(|_| {
                        let f = fields[rng.below(fields.len())];
                        let v = if f == "id" && rng.below(2) == 0 {
                            format!("\"k{}\"", rng.below(3))
                        } else {
                            values[rng.below(values.len())].to_string()
                        };
                        format!("\"{f}\":{v}")
                    })
                    .collect();
                let mut s = format!("{{{}}}", body.join(",")).into_bytes();
                if rng.below(10) == 0 {
                    // cut anywhere, possibly inside a UTF-8 sequence
                    s.truncate(rng.below(s.len() + 1));
                }
                Some(s)
            }
        };
        match decode(key.as_deref(), value.as_deref(), &limits) {
            Ok(Change::Upsert(d)) => {
                assert!(!d.id.is_empty());
                assert!(
                    d.acl.windows(2).all(|w| w[0] < w[1]),
                    "acl sorted and unique"
                );
                assert!(d.acl.iter().all(|p| !p.is_empty()));
                for v in d.metadata.values() {
                    serde_json::from_str::<serde_json::Value>(v).expect("metadata is JSON");
                }
            }
            Ok(Change::Delete { id }) => assert!(!id.is_empty()),
            Err(e) => {
                assert!(crate::envelope::DecodeError::CLASSES.contains(&e.class()));
                assert!(!e.to_string().is_empty());
            }
        }
    }
}

#[test]
fn pathological_inputs_take_linear_time() {
    // Each input is ~200 KB; with a cheap counter, chunking must stay fast even in debug.
    let t = FastCounter::default();
    let words = crate::chunk::test_words::WORDS;
    let one_sentence: Vec<&str> = words.iter().cycle().take(40_000).copied().collect();
    let inputs = [
        ("one sentence", one_sentence.join(" ")),
        ("one line of CJK", "中文日本語的是一个测试".repeat(6_000)),
        ("one word of many tokens", "a-".repeat(100_000)),
        ("one line per word", one_sentence.join("\n")),
        ("tiny paragraphs", one_sentence.join("\n\n")),
        (
            "one fence",
            format!("```\n{}\n```", one_sentence.join("\n")),
        ),
        (
            "headings",
            one_sentence
                .iter()
                .map(|w| format!("# {w}"))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        ("combining marks", format!("a{}", "\u{301}".repeat(60_000))),
    ];
    for (name, text) in inputs {
        for strategy in [
            ChunkStrategy::Recursive,
            ChunkStrategy::Markdown,
            ChunkStrategy::ParentChild,
        ] {
            let cfg = ChunkerConfig {
                strategy,
                ..ChunkerConfig::default()
            };
            let doc = Document {
                id: "p".into(),
                title: String::new(),
                text: text.clone(),
                content_type: ContentType::PlainText,
                source: String::new(),
                metadata: Default::default(),
                acl: vec![],
            };
            let start = std::time::Instant::now();
            let p = prepare_full(doc, &cfg, &t).unwrap();
            let el = start.elapsed();
            assert!(el.as_secs_f64() < 5.0, "{name} / {strategy:?}: {el:?}");
            check(&p.cleaned, &p.chunks, &cfg, &t);
        }
    }
}
