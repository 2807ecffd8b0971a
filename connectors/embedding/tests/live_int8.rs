//! Live tests of the int8 variant of all-MiniLM-L6-v2 (`deploy/export-model.sh --model
//! all-MiniLM-L6-v2-int8`) against its float export.
//!
//! Built with the `live` feature only; under that feature they need `FRESHET_INT8_MODEL_DIR` and
//! `FRESHET_MODEL_DIR` (the float export), which deploy/test.sh sets, and fail without them.

use std::path::PathBuf;

use freshet_core::embed::Embedder;
use freshet_embedding::{embed_with_cache, DiskCache, EmbeddingConfig, FastEmbedder};

mod support;
use support::{dot, index};

/// (int8, float) configurations.
fn configs() -> (EmbeddingConfig, EmbeddingConfig) {
    let dir = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(|d| EmbeddingConfig::for_model_dir(PathBuf::from(d)))
            .unwrap_or_else(|| {
                panic!("{name} is not set: the live int8 test needs both exported models (deploy/test.sh sets it)")
            })
    };
    (dir("FRESHET_INT8_MODEL_DIR"), dir("FRESHET_MODEL_DIR"))
}

/// The int8 model shares the float model's vector space (model id) but not its cache keys; its
/// vectors stay close to the float64 reference and to the float model's, and keep their meaning.
#[test]
fn live_int8_is_the_same_space_with_its_own_cache_keys() {
    let (int8_cfg, float_cfg) = configs();
    let mut int8 = FastEmbedder::load(&int8_cfg).unwrap();
    let mut float = FastEmbedder::load(&float_cfg).unwrap();
    assert_eq!(int8.meta().quantization.as_deref(), Some("int8"));
    assert_eq!(int8.model_id(), float.model_id());
    assert_eq!(
        int8.cache_id(),
        format!("{}|quantization:int8", float.model_id())
    );
    assert_eq!(float.cache_id(), float.model_id());
    assert_eq!(int8.dim(), 384);

    let (v, sentences) = support::check_file(&int8_cfg.model_dir);
    let texts: Vec<&str> = sentences.iter().map(|s| s.text.as_str()).collect();
    let q = int8.embed_passages(&texts).unwrap();
    let f = float.embed_passages(&texts).unwrap();
    for ((s, qv), fv) in sentences.iter().zip(&q).zip(&f) {
        assert!((dot(qv, qv).sqrt() - 1.0).abs() < 1e-5);
        let to_ref = dot(qv, &s.embedding);
        let to_float = dot(qv, fv);
        assert!(
            to_ref > 0.98,
            "cosine to the reference {to_ref} for {:?}",
            s.text
        );
        assert!(
            to_float > 0.98,
            "cosine to float {to_float} for {:?}",
            s.text
        );
        // quantization changes the vector measurably (this is not the float model)
        assert!(
            to_float < 0.99999,
            "int8 vector equals the float one for {:?}",
            s.text
        );
    }
    let (a, b) = (index(&v["similar_pair"][0]), index(&v["similar_pair"][1]));
    let sim = dot(&q[a], &q[b]);
    let worst = v["unrelated_pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| dot(&q[index(&p[0])], &q[index(&p[1])]))
        .fold(f32::MIN, f32::max);
    assert!((0.70..0.85).contains(&sim), "similar pair {sim}");
    assert!(worst < sim - 0.3, "unrelated {worst} vs similar {sim}");

    // Activation scales are computed per batch: a text's vector depends a little on its batch.
    let batch = int8.embed_passages(&texts).unwrap();
    for (t, bv) in texts.iter().zip(&batch) {
        let single = int8.embed_passages(&[*t]).unwrap().pop().unwrap();
        let cos = dot(&single, bv);
        assert!(cos > 0.98, "batch vs single cosine {cos} for {t:?}");
    }

    // One cache file, both models: neither answers from the other's vectors.
    let dir = tempfile::tempdir().unwrap();
    let mut cache = DiskCache::open(dir.path().join("vectors.cache")).unwrap();
    let some = ["one chunk", "another chunk"];
    let (fv, s) = embed_with_cache(&mut float, &mut cache, &some, 64).unwrap();
    assert_eq!(s.embedded, 2);
    let (qv, s) = embed_with_cache(&mut int8, &mut cache, &some, 64).unwrap();
    assert_eq!((s.cache_hits, s.embedded), (0, 2));
    assert_ne!(fv, qv);
    let (qv2, s) = embed_with_cache(&mut int8, &mut cache, &some, 64).unwrap();
    assert_eq!((s.cache_hits, s.embedded), (2, 0));
    assert_eq!(qv, qv2);
}
