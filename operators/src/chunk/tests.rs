//! Tests of `chunk_document` and the chunker config.

use std::collections::{BTreeMap, HashSet};
use std::ops::Range;

use super::header::embed_input;
use super::test_words::WORDS;
use super::tokens::tests::{test_counter, FastCounter};
use super::*;

/// xorshift64*: deterministic test randomness.
pub(crate) struct Rng(pub u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    pub(crate) fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }
}

fn doc(text: &str, ct: ContentType) -> Document {
    Document {
        id: "doc-1".into(),
        title: "Title".into(),
        text: text.into(),
        content_type: ct,
        source: "src".into(),
        metadata: BTreeMap::from([
            ("lang".to_string(), "\"en\"".to_string()),
            ("n".to_string(), "3".to_string()),
        ]),
        acl: vec!["group:a".into()],
    }
}

/// A paragraph of about `words` known words, in sentences.
fn paragraph(rng: &mut Rng, words: usize) -> String {
    let mut out = String::new();
    let mut left = words;
    while left > 0 {
        let n = rng.range(5, 15).min(left);
        left -= n;
        let s: Vec<&str> = (0..n).map(|_| WORDS[rng.below(WORDS.len())]).collect();
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&s.join(" "));
        out.push('.');
    }
    out
}

fn char_len(s: &str) -> usize {
    s.chars().count()
}

/// Invariants every chunk list holds: exact spans, trimmed text, token budgets, unique ids,
/// dense indexes per kind, fields inherited from the document.
pub(crate) fn check_chunks(
    d: &Document,
    chunks: &[Chunk],
    cfg: &ChunkerConfig,
    t: &dyn TokenCounter,
) {
    let chars: Vec<char> = d.text.chars().collect();
    let mut ids = HashSet::new();
    let mut next = [0u32, 0u32];
    for c in chunks {
        let span: String = chars[c.char_start as usize..c.char_end as usize]
            .iter()
            .collect();
        assert_eq!(span, c.text, "span does not match the text");
        assert_eq!(c.text.trim(), c.text);
        assert!(!c.text.is_empty());
        assert_eq!(c.token_count as usize, t.count(&c.text));
        let max = match (c.kind, c.parent_id.is_some()) {
            (ChunkKind::Parent, _) => cfg.parent_max_tokens,
            (ChunkKind::Leaf, true) => cfg.child_max_tokens,
            (ChunkKind::Leaf, false) => cfg.max_tokens,
        };
        // A leaf's budget holds its whole embedded input (header, text, the model's additions),
        // unless its header alone takes more than three quarters of it.
        let (used, limit) = match c.kind {
            ChunkKind::Parent => (c.token_count as usize, max),
            ChunkKind::Leaf => {
                let header = t.count(&header::embed_header(&c.title, &c.section));
                if t.input_overhead() + header <= max - max / 4 {
                    (t.count(&embed_input(c)) + t.input_overhead(), max)
                } else {
                    (c.token_count as usize, (max / 4).max(1))
                }
            }
        };
        // A chunk text keeps at least one token (`header::text_budget`): a chunk of one token
        // (or one character) is as small as a chunk gets.
        assert!(
            used <= limit || c.token_count <= 1 || c.text.chars().count() == 1,
            "chunk over budget: {used} > {limit}: {:?}",
            c.text
        );
        assert!(ids.insert(c.chunk_id.clone()), "duplicate chunk id");
        let slot = (c.kind == ChunkKind::Parent) as usize;
        assert_eq!(c.index, next[slot]);
        next[slot] += 1;
        assert_eq!(c.doc_id, d.id);
        assert_eq!(c.title, d.title);
        assert_eq!(c.source, d.source);
        assert_eq!(c.acl, d.acl);
        assert_eq!(c.metadata_json, metadata_json(&d.metadata));
        assert_eq!(c.chunk_id.len(), 32);
    }
}

#[test]
fn fills_every_field() {
    let t = test_counter();
    let d = doc(
        "the quick brown fox.\n\nthe lazy dog.",
        ContentType::PlainText,
    );
    let cfg = ChunkerConfig::default();
    let chunks = chunk_document(&d, "hash-1", &cfg, &t);
    assert_eq!(chunks.len(), 1);
    let c = &chunks[0];
    assert_eq!(
        c,
        &Chunk {
            chunk_id: chunk_id("doc-1", ChunkKind::Leaf, &d.text, 0),
            doc_id: "doc-1".into(),
            kind: ChunkKind::Leaf,
            parent_id: None,
            index: 0,
            char_start: 0,
            char_end: char_len(&d.text) as u32,
            section: vec![],
            text: d.text.clone(),
            token_count: 9,
            title: "Title".into(),
            source: "src".into(),
            metadata_json: r#"{"lang":"en","n":3}"#.into(),
            acl: vec!["group:a".into()],
            doc_hash: "hash-1".into(),
        }
    );
}

#[test]
fn empty_text_has_no_chunks() {
    let t = test_counter();
    for s in ["", "   ", "\n\n\t"] {
        for ct in [ContentType::PlainText, ContentType::Markdown] {
            assert!(chunk_document(&doc(s, ct), "h", &ChunkerConfig::default(), &t).is_empty());
        }
    }
}

#[test]
fn unicode_spans_are_exact() {
    let t = test_counter();
    let text = "中文日本語的是一个测试。Ünïcödé wörds 🚀 here.\n\n".repeat(40);
    let d = doc(text.trim(), ContentType::PlainText);
    let cfg = ChunkerConfig {
        max_tokens: 24,
        overlap_tokens: 6,
        ..ChunkerConfig::default()
    };
    let chunks = chunk_document(&d, "h", &cfg, &t);
    assert!(chunks.len() > 10);
    check_chunks(&d, &chunks, &cfg, &t);
}

#[test]
fn identical_texts_get_distinct_ids() {
    let t = test_counter();
    let para = vec!["the"; 20].join(" ") + ".";
    let text = [para.as_str(); 4].join("\n\n");
    let cfg = ChunkerConfig {
        max_tokens: 30,
        overlap_tokens: 0,
        ..ChunkerConfig::default()
    };
    let d = doc(&text, ContentType::PlainText);
    let chunks = chunk_document(&d, "h", &cfg, &t);
    assert_eq!(chunks.len(), 4);
    for (i, c) in chunks.iter().enumerate() {
        assert_eq!(c.text, para);
        assert_eq!(
            c.chunk_id,
            chunk_id("doc-1", ChunkKind::Leaf, &para, i as u32)
        );
        assert_eq!(c.index, i as u32);
    }
    check_chunks(&d, &chunks, &cfg, &t);
}

#[test]
fn deterministic() {
    let t = test_counter();
    let mut rng = Rng(7);
    let text: Vec<String> = (0..30)
        .map(|_| {
            let n = rng.range(10, 200);
            paragraph(&mut rng, n)
        })
        .collect();
    let text = text.join("\n\n");
    for strategy in [
        ChunkStrategy::Recursive,
        ChunkStrategy::Markdown,
        ChunkStrategy::ParentChild,
    ] {
        let cfg = ChunkerConfig {
            strategy,
            ..ChunkerConfig::default()
        };
        let d = doc(&text, ContentType::PlainText);
        let a = chunk_document(&d, "h", &cfg, &t);
        let b = chunk_document(&d.clone(), "h", &cfg, &test_counter());
        assert_eq!(a, b);
        check_chunks(&d, &a, &cfg, &t);
    }
}

#[test]
fn parent_child_document() {
    let t = test_counter();
    let mut rng = Rng(3);
    let text: Vec<String> = (0..12).map(|_| paragraph(&mut rng, 120)).collect();
    let d = doc(&text.join("\n\n"), ContentType::PlainText);
    let cfg = ChunkerConfig {
        strategy: ChunkStrategy::ParentChild,
        parent_max_tokens: 300,
        child_max_tokens: 60,
        child_overlap_tokens: 10,
        ..ChunkerConfig::default()
    };
    let chunks = chunk_document(&d, "h", &cfg, &t);
    check_chunks(&d, &chunks, &cfg, &t);
    let parents: Vec<&Chunk> = chunks
        .iter()
        .filter(|c| c.kind == ChunkKind::Parent)
        .collect();
    assert!(parents.len() >= 4);
    let mut current: Option<&Chunk> = None;
    for c in &chunks {
        match c.kind {
            ChunkKind::Parent => {
                assert!(c.parent_id.is_none());
                current = Some(c);
            }
            ChunkKind::Leaf => {
                let p = current.expect("a child before any parent");
                assert_eq!(c.parent_id.as_deref(), Some(p.chunk_id.as_str()));
                assert!(c.char_start >= p.char_start && c.char_end <= p.char_end);
            }
        }
    }
}

#[test]
fn config_defaults_and_deserialize() {
    let d = ChunkerConfig::default();
    assert_eq!(d.strategy, ChunkStrategy::Recursive);
    assert_eq!((d.max_tokens, d.overlap_tokens), (256, 32));
    assert_eq!(
        (
            d.parent_max_tokens,
            d.child_max_tokens,
            d.child_overlap_tokens
        ),
        (1024, 128, 16)
    );
    assert_eq!(
        d.per_content_type[&ContentType::Markdown],
        ChunkStrategy::Markdown
    );
    assert_eq!(
        d.per_content_type[&ContentType::Html],
        ChunkStrategy::Markdown
    );
    assert!(!d.error_on_empty);
    assert!(d.validate().is_ok());

    let c: ChunkerConfig = serde_json::from_str("{}").unwrap();
    assert_eq!(c, d);
    let c: ChunkerConfig = serde_json::from_str(
        r#"{"strategy":"parent_child","max_tokens":100,
            "per_content_type":{"text/plain":"markdown","Html":"Recursive"}}"#,
    )
    .unwrap();
    assert_eq!(c.strategy, ChunkStrategy::ParentChild);
    assert_eq!(c.max_tokens, 100);
    assert_eq!(c.overlap_tokens, 32);
    assert_eq!(
        c.per_content_type,
        BTreeMap::from([
            (ContentType::PlainText, ChunkStrategy::Markdown),
            (ContentType::Html, ChunkStrategy::Recursive),
        ])
    );
    let e = serde_json::from_str::<ChunkerConfig>(r#"{"per_content_type":{"xlsx":"markdown"}}"#)
        .unwrap_err();
    assert!(e.to_string().contains("\"xlsx\""), "{e}");
    assert!(serde_json::from_str::<ChunkerConfig>(r#"{"max_token":1}"#).is_err());
    assert!(serde_json::from_str::<ChunkerConfig>(r#"{"strategy":"semantic"}"#).is_err());
}

#[test]
fn config_validation() {
    let ok = ChunkerConfig::default();
    let cases: Vec<(ChunkerConfig, &str)> = vec![
        (
            ChunkerConfig {
                drop_matter: vec!["cover".into(), "copyright".into()],
                ..ok.clone()
            },
            "drop_matter: unknown kind \"copyright\"",
        ),
        (
            ChunkerConfig {
                max_tokens: 0,
                ..ok.clone()
            },
            "max_tokens must be at least 1",
        ),
        (
            ChunkerConfig {
                overlap_tokens: 129,
                ..ok.clone()
            },
            "overlap_tokens (129) must be at most half of max_tokens (256)",
        ),
        (
            ChunkerConfig {
                child_overlap_tokens: 65,
                ..ok.clone()
            },
            "child_overlap_tokens (65) must be at most half of child_max_tokens (128)",
        ),
        (
            ChunkerConfig {
                child_max_tokens: 2000,
                child_overlap_tokens: 0,
                ..ok.clone()
            },
            "child_max_tokens (2000) must not exceed parent_max_tokens (1024)",
        ),
        (
            ChunkerConfig {
                parent_max_tokens: 0,
                ..ok.clone()
            },
            "parent_max_tokens must be at least 1",
        ),
    ];
    for (cfg, msg) in cases {
        let e = cfg.validate().unwrap_err();
        assert!(e.to_string().contains(msg), "{e} does not contain {msg}");
    }
    // chunk_document clamps instead of failing
    let t = test_counter();
    let bad = ChunkerConfig {
        max_tokens: 0,
        overlap_tokens: 50,
        ..ok
    };
    let d = doc("the cat sat on the dog", ContentType::PlainText);
    let chunks = chunk_document(&d, "h", &bad, &t);
    assert_eq!(chunks.len(), 6);
}

#[test]
fn strategy_resolution() {
    use ChunkStrategy::*;
    let mut cfg = ChunkerConfig::default();
    assert_eq!(cfg.resolve(ContentType::PlainText), (false, false));
    assert_eq!(cfg.resolve(ContentType::Markdown), (false, true));
    assert_eq!(cfg.resolve(ContentType::Html), (false, true));
    cfg.strategy = ParentChild;
    assert_eq!(cfg.resolve(ContentType::PlainText), (true, false));
    assert_eq!(cfg.resolve(ContentType::Markdown), (true, true));
    cfg.per_content_type.clear();
    assert_eq!(cfg.resolve(ContentType::Html), (true, true));
    assert_eq!(cfg.resolve(ContentType::PlainText), (true, false));
    cfg.strategy = Markdown;
    cfg.per_content_type
        .insert(ContentType::PlainText, ParentChild);
    assert_eq!(cfg.resolve(ContentType::PlainText), (true, true));
    cfg.strategy = Recursive;
    assert_eq!(cfg.resolve(ContentType::PlainText), (true, false));
    assert_eq!(cfg.resolve(ContentType::Markdown), (false, false));
}

#[test]
fn metadata_json_is_canonical() {
    let m = BTreeMap::from([
        ("b".to_string(), r#"{"z":1,"a":[1,"x"]}"#.to_string()),
        ("a\"q".to_string(), "\"v\"".to_string()),
        ("c".to_string(), "not json".to_string()),
    ]);
    assert_eq!(
        metadata_json(&m),
        r#"{"a\"q":"v","b":{"a":[1,"x"],"z":1},"c":"not json"}"#
    );
    assert_eq!(metadata_json(&BTreeMap::new()), "{}");
}

/// 5,183 abstracts of 120-320 words (SciFact-sized), default config.
fn scifact_like() -> Vec<Document> {
    let mut rng = Rng(5183);
    (0..5183)
        .map(|i| {
            let n = rng.range(120, 320);
            let mut d = doc(&paragraph(&mut rng, n), ContentType::PlainText);
            d.id = format!("doc-{i}");
            d
        })
        .collect()
}

#[test]
fn scifact_sized_corpus_is_fast() {
    // The chunker's own work: linear tokenizer use, and fast in a debug build with a cheap
    // counter. (The Hugging Face tokenizer itself is slow in an unoptimised build.)
    let t = FastCounter::default();
    let cfg = ChunkerConfig::default();
    let docs = scifact_like();
    let corpus_bytes: usize = docs.iter().map(|d| d.text.len()).sum();
    let start = std::time::Instant::now();
    let mut n = 0;
    for d in &docs {
        n += chunk_document(d, "h", &cfg, &t).len();
    }
    let elapsed = start.elapsed();
    eprintln!(
        "chunked {} docs into {n} chunks in {elapsed:?}: {} tokenizer calls over {} bytes \
         ({:.2}x the corpus)",
        docs.len(),
        t.calls.get(),
        t.bytes.get(),
        t.bytes.get() as f64 / corpus_bytes as f64
    );
    assert!(n >= docs.len());
    assert!(
        t.bytes.get() < corpus_bytes * 4,
        "tokenizer work is not linear"
    );
    assert!(t.calls.get() < docs.len() * 8);
    assert!(elapsed.as_secs_f64() < 10.0, "too slow: {elapsed:?}");
}

#[test]
#[ignore = "slow unless the tokenizers crate is optimised in the dev profile"]
fn scifact_sized_corpus_with_hf_tokenizer() {
    let t = test_counter();
    let cfg = ChunkerConfig::default();
    let docs = scifact_like();
    let start = std::time::Instant::now();
    let tokens: usize = docs.iter().map(|d| t.count(&d.text)).sum();
    eprintln!(
        "HF tokenizer: one pass over the corpus ({tokens} tokens) in {:?}",
        start.elapsed()
    );
    let start = std::time::Instant::now();
    let n: usize = docs
        .iter()
        .map(|d| chunk_document(d, "h", &cfg, &t).len())
        .sum();
    eprintln!("HF tokenizer: {n} chunks in {:?}", start.elapsed());
}

/// A counter that adds a fixed overhead to every embedded input, as a model with special tokens
/// and a passage prefix does.
struct WithOverhead<'a>(&'a dyn TokenCounter, usize);

impl TokenCounter for WithOverhead<'_> {
    fn count(&self, text: &str) -> usize {
        self.0.count(text)
    }
    fn token_spans(&self, text: &str) -> Option<Vec<(usize, usize)>> {
        self.0.token_spans(text)
    }
    fn input_overhead(&self) -> usize {
        self.1
    }
}

/// Every leaf's embedded input (title, section path, text, the model's additions) fits the
/// budget, for every strategy, over random titles, heading depths and overheads; the chunks
/// otherwise hold every invariant.
#[test]
fn leaves_budget_their_whole_embedded_input() {
    let base = test_counter();
    let mut rng = Rng(0x5eed_b0d9);
    for round in 0..120 {
        let overhead = [0, 2, 5][round % 3];
        let t = WithOverhead(&base, overhead);
        let mut text = String::new();
        for _ in 0..rng.range(1, 6) {
            if rng.below(3) > 0 {
                let level = rng.range(1, 4);
                let n = rng.range(1, 12);
                let heading = paragraph(&mut rng, n).replace('.', "");
                text.push_str(&format!("{} {heading}\n\n", "#".repeat(level)));
            }
            let n = rng.range(5, 120);
            text.push_str(&paragraph(&mut rng, n));
            text.push_str("\n\n");
        }
        let mut d = doc(&text, ContentType::Markdown);
        let n = rng.range(0, 40);
        d.title = paragraph(&mut rng, n).replace('.', "");
        let strategy = [
            ChunkStrategy::Markdown,
            ChunkStrategy::Recursive,
            ChunkStrategy::ParentChild,
        ][rng.below(3)];
        let cfg = ChunkerConfig {
            strategy,
            max_tokens: rng.range(24, 80),
            overlap_tokens: 4,
            child_max_tokens: rng.range(16, 40),
            child_overlap_tokens: 2,
            per_content_type: BTreeMap::new(),
            ..ChunkerConfig::default()
        };
        let chunks = chunk_document(&d, "h", &cfg, &t);
        assert!(!chunks.is_empty());
        check_chunks(&d, &chunks, &cfg, &t);
    }
}

/// The header is what makes a chunk short: the same text under a longer title and a deeper
/// section path is cut into more chunks, and without a header the text alone gets the budget.
#[test]
fn a_longer_header_leaves_less_room_for_text() {
    let t = test_counter();
    let mut rng = Rng(7);
    let body = (0..6)
        .map(|_| paragraph(&mut rng, 52))
        .collect::<Vec<_>>()
        .join("\n\n");
    let cfg = ChunkerConfig {
        max_tokens: 64,
        overlap_tokens: 0,
        ..ChunkerConfig::default()
    };
    let count = |title: &str, overhead: usize| {
        let mut d = doc(&body, ContentType::PlainText);
        d.title = title.into();
        chunk_document(&d, "h", &cfg, &WithOverhead(&t, overhead)).len()
    };
    let bare = count("", 0);
    let titled = count("the quick brown fox of the river and the lazy dog", 2);
    assert!(
        titled > bare,
        "{titled} chunks with a header, {bare} without"
    );
    // the bare budget is the configured one: every chunk within 64 tokens, some near it
    let mut d = doc(&body, ContentType::PlainText);
    d.title = String::new();
    let chunks = chunk_document(&d, "h", &cfg, &t);
    assert!(chunks.iter().all(|c| c.token_count <= 64));
    assert!(chunks.iter().any(|c| c.token_count > 48));
}

mod cjk;
mod locality;
mod tables;
