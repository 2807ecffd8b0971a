//! Test support for freshet's crates (feature `test-support`, and this crate's own tests): a
//! chunk with every field set to something plain, a small seeded generator, and random chunks
//! and filters for checking the index filter translations against [`ChunkFilter::matches`];
//! with the `tokenizer` feature, a small BERT-like tokenizer ([`test_counter`]) and the words
//! it knows whole ([`WORDS`]).

use crate::chunk::{chunk_id, Chunk, ChunkKind};
use crate::filter::ChunkFilter;

/// A leaf chunk of `doc_id` with `text`, every other field plain: index 0, no section, no
/// metadata (`{}`), public, source `test://<doc_id>`, no version stamp (as the indexes store it
/// and read it back). Change fields with struct update syntax.
pub fn chunk(doc_id: &str, text: &str) -> Chunk {
    Chunk {
        chunk_id: chunk_id(doc_id, ChunkKind::Leaf, text, 0),
        doc_id: doc_id.to_owned(),
        kind: ChunkKind::Leaf,
        parent_id: None,
        index: 0,
        char_start: 0,
        char_end: text.chars().count() as u32,
        section: Vec::new(),
        text: text.to_owned(),
        token_count: text.split_whitespace().count() as u32,
        title: format!("Title of {doc_id}"),
        source: format!("test://{doc_id}"),
        metadata_json: "{}".to_owned(),
        acl: Vec::new(),
        doc_hash: String::new(),
    }
}

/// A small deterministic generator (xorshift64*): the same seed, the same values.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// A value in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n as u64) as usize
    }

    pub fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// A random subset of `items`, in order.
    pub fn subset<T: Clone>(&mut self, items: &[T]) -> Vec<T> {
        items.iter().filter(|_| self.chance(2)).cloned().collect()
    }
}

/// A deterministic pseudo-random unit vector of `dim` components: the same seed, the same
/// vector; different seeds, vectors far apart.
pub fn unit_vector(seed: u64, dim: usize) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(1);
    let mut v: Vec<f32> = (0..dim)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 11) as f64 / (1u64 << 53) as f64 - 0.5) as f32
        })
        .collect();
    let n = v.iter().map(|a| a * a).sum::<f32>().sqrt();
    v.iter_mut().for_each(|a| *a /= n);
    v
}

const DOCS: [&str; 5] = ["d0", "d1", "d2", "d3", "d4"];
const SOURCES: [&str; 3] = ["s3://a", "s3://b", "file:///c d"];
const PRINCIPALS: [&str; 3] = ["group:a", "group:b", "user:ö"];
/// Keys with characters the translations escape (`.` for tantivy's JSON paths, `"` for Milvus).
const KEYS: [&str; 5] = ["lang", "year", "tags", "draft", "a.b\"c"];
/// Values a filter asks for, as JSON text: some stored, some not, numbers written two ways.
const VALUES: [&str; 11] = [
    "\"en\"", "\"fr\"", "\"x\"", "\"y\"", "2020", "2020.0", "2021", "1.5", "true", "false",
    "\"2020\"",
];

/// A random JSON value of the kinds metadata holds: strings, integers, floats, booleans, and
/// arrays of strings.
fn random_value(rng: &mut Rng) -> String {
    match rng.below(6) {
        0 => (*rng.pick(&["\"en\"", "\"fr\"", "\"2020\""])).to_owned(),
        1 => (*rng.pick(&["2020", "2021", "7"])).to_owned(),
        2 => (*rng.pick(&["1.5", "2020.5", "-3.25"])).to_owned(),
        3 => (*rng.pick(&["true", "false"])).to_owned(),
        _ => {
            let items = rng.subset(&["\"x\"", "\"y\"", "\"en\""]);
            format!("[{}]", items.join(","))
        }
    }
}

/// `n` random chunks over a few documents, sources, ACLs and metadata values, each with the word
/// `river` in its text (so that a BM25 search for it reaches every chunk) and a distinct id.
pub fn random_chunks(rng: &mut Rng, n: usize) -> Vec<Chunk> {
    (0..n)
        .map(|i| {
            let doc = *rng.pick(&DOCS);
            let text = format!("river chunk {i}");
            let kind = if rng.chance(4) {
                ChunkKind::Parent
            } else {
                ChunkKind::Leaf
            };
            let mut metadata = serde_json::Map::new();
            for key in KEYS {
                if rng.chance(2) {
                    let v = serde_json::from_str(&random_value(rng)).expect("valid JSON");
                    metadata.insert(key.to_owned(), v);
                }
            }
            let object = serde_json::Value::Object(metadata);
            Chunk {
                chunk_id: chunk_id(doc, kind, &text, i as u32),
                kind,
                index: i as u32,
                source: (*rng.pick(&SOURCES)).to_owned(),
                metadata_json: crate::json::canonical_json(&object),
                acl: {
                    let mut acl = rng.subset(&PRINCIPALS.map(String::from));
                    acl.sort();
                    acl
                },
                ..chunk(doc, &text)
            }
        })
        .collect()
}

/// A random filter over the values [`random_chunks`] uses (conditions absent more often than
/// present, so that filters keep some chunks).
pub fn random_filter(rng: &mut Rng) -> ChunkFilter {
    let mut f = ChunkFilter::none();
    if rng.chance(4) {
        f = f.doc_ids(rng.subset(&DOCS));
    }
    if rng.chance(4) {
        f = f.sources(rng.subset(&SOURCES));
    }
    if rng.chance(3) {
        f = f.principals(rng.subset(&PRINCIPALS));
    }
    if rng.chance(5) {
        f = f.kinds(rng.subset(&[ChunkKind::Leaf, ChunkKind::Parent]));
    }
    for _ in 0..rng.below(3) {
        f = f.metadata_eq(*rng.pick(&KEYS), *rng.pick(&VALUES));
    }
    if rng.chance(3) {
        let values: Vec<&str> = (0..1 + rng.below(3)).map(|_| *rng.pick(&VALUES)).collect();
        f = f.metadata_in(*rng.pick(&KEYS), values);
    }
    f
}

/// A small BERT-like tokenizer: special tokens, single letters and digits (also as `##`
/// continuations), punctuation, some whole words and suffixes, a few CJK characters.
#[cfg(feature = "tokenizer")]
pub fn test_counter() -> crate::chunk::HfTokenCounter {
    let mut vocab: Vec<String> = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for c in ('a'..='z').chain('0'..='9') {
        vocab.push(c.to_string());
        vocab.push(format!("##{c}"));
    }
    for p in ".,;:!?'\"()[]{}-_/#*|`~<>=+&%$@^\\".chars() {
        vocab.push(p.to_string());
    }
    for w in WORDS {
        vocab.push(w.to_string());
    }
    for s in ["##ing", "##ed", "##s", "##er", "##ly", "##tion"] {
        vocab.push(s.to_string());
    }
    for c in "中文日本語的是一个测试。".chars() {
        vocab.push(c.to_string());
    }
    crate::chunk::HfTokenCounter::bert_wordpiece(vocab.iter().map(String::as_str))
        .expect("the test vocabulary builds a tokenizer")
}

/// Words that the test tokenizer knows as whole tokens.
pub const WORDS: &[&str] = &[
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "he",
    "this",
    "are",
    "or",
    "his",
    "from",
    "at",
    "which",
    "but",
    "have",
    "an",
    "had",
    "they",
    "you",
    "were",
    "their",
    "one",
    "all",
    "we",
    "can",
    "her",
    "has",
    "there",
    "been",
    "if",
    "more",
    "when",
    "will",
    "would",
    "who",
    "so",
    "no",
    "cell",
    "cells",
    "protein",
    "gene",
    "expression",
    "patients",
    "study",
    "results",
    "data",
    "increased",
    "levels",
    "treatment",
    "analysis",
    "risk",
    "associated",
    "effect",
    "human",
    "disease",
    "clinical",
    "cancer",
    "role",
    "response",
    "function",
    "model",
    "mice",
    "activity",
    "high",
    "low",
    "higher",
    "lower",
    "between",
    "during",
    "after",
    "these",
    "both",
    "found",
    "show",
    "shows",
    "showed",
    "using",
    "used",
    "two",
    "three",
    "new",
    "first",
    "time",
    "years",
    "group",
    "groups",
    "type",
    "factor",
    "factors",
    "cat",
    "sat",
    "dog",
    "ran",
    "bird",
    "flew",
    "end",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "lazy",
    "title",
    "here",
    "install",
    "linux",
    "mac",
    "use",
    "run",
    "code",
    "intro",
    "text",
    "section",
    "paragraph",
    "edited",
    "changed",
    "word",
    "words",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generators_are_deterministic_and_filters_select_some_chunks() {
        let a = random_chunks(&mut Rng::new(7), 50);
        assert_eq!(a, random_chunks(&mut Rng::new(7), 50));
        let mut rng = Rng::new(8);
        let (mut some, mut all) = (0, 0);
        for _ in 0..200 {
            let f = random_filter(&mut rng);
            let n = a.iter().filter(|c| f.matches(c)).count();
            some += usize::from(n > 0 && n < a.len());
            all += usize::from(n == a.len());
        }
        assert!(some > 50, "{some} of 200 filters select part of the chunks");
        assert!(all > 5, "{all} of 200 filters keep every chunk");
    }
}
