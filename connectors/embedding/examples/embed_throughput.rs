//! Embedding throughput of the local model, to compare with the pipeline's throughput.
//!
//! ```sh
//! ORT_DYLIB_PATH=~/.freshet/venv/lib/python3.11/site-packages/onnxruntime/capi/libonnxruntime.so.1.31.1 \
//!   cargo run --release -p freshet-embedding --example embed_throughput -- [N] [--words W] \
//!   [--batch B] [--threads T] [--model-dir DIR]
//! ```
//!
//! Embeds N (default 256) distinct synthetic chunk-like texts of about W (default 120) words each,
//! prints texts/s and tokens/s, then runs the same texts through `CachedEmbedder` + `DiskCache`
//! twice (cold, then warm) to show the cache's cost and benefit. The model directory defaults to
//! `$FRESHET_MODEL_DIR`, else `$FRESHET_HOME/models/all-MiniLM-L6-v2`.
//!
//! `--cache-only K` skips the model and measures `DiskCache` alone: K 384-dimensional entries put
//! and read back in batches of 300 (one transaction each).

use std::time::Instant;

use freshet_core::embed::Embedder;
use freshet_embedding::{CachedEmbedder, DiskCache, EmbeddingConfig, FastEmbedder};

#[rustfmt::skip]
const WORDS: &[&str] = &[
    "stream", "index", "document", "vector", "search", "query", "partition", "offset", "kafka",
    "broker", "replica", "chunk", "token", "model", "embedding", "latency", "throughput", "batch",
    "cache", "update", "delete", "insert", "collection", "segment", "schema", "field", "record",
    "the", "a", "of", "and", "to", "in", "is", "that", "for", "with", "as", "on", "by", "this",
    "retrieval", "augmented", "generation", "freshness", "consistency", "dataflow", "operator",
    "timely", "differential", "milvus", "tantivy", "analysis", "performance", "measurement",
    "river", "mountain", "weather", "history", "science", "language", "music", "economy",
];

/// CPU seconds (user + system) this process has used.
fn cpu_seconds() -> f64 {
    // SAFETY: rusage is plain integers, for which all-zero bytes are a valid value.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage(2) only writes into the struct we pass, which lives across the call.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

fn texts(n: usize, words: usize) -> Vec<String> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..n)
        .map(|i| {
            let len = words / 2 + (next() as usize % (words + 1));
            let mut s = format!("Chunk {i}:");
            for _ in 0..len {
                s.push(' ');
                s.push_str(WORDS[next() as usize % WORDS.len()]);
            }
            s.push('.');
            s
        })
        .collect()
}

fn cache_bench(entries: usize) -> Result<(), Box<dyn std::error::Error>> {
    use freshet_core::embed::{cache_key, VectorCache};
    let dir = tempfile::tempdir()?;
    let mut cache = DiskCache::open(dir.path().join("vectors.cache"))?;
    let keys: Vec<[u8; 32]> = (0..entries)
        .map(|i| cache_key("bench", &i.to_string()))
        .collect();
    let vector: Vec<f32> = (0..384).map(|i| i as f32 / 384.0).collect();
    let t = std::time::Instant::now();
    let mut batches = 0;
    for chunk in keys.chunks(300) {
        let batch: Vec<_> = chunk.iter().map(|k| (*k, vector.clone())).collect();
        cache.put_many(&batch)?;
        batches += 1;
    }
    let put = t.elapsed().as_secs_f64();
    let t = std::time::Instant::now();
    let mut hits = 0;
    for chunk in keys.chunks(300) {
        hits += cache
            .get_many(chunk)?
            .iter()
            .filter(|v| v.is_some())
            .count();
    }
    let get = t.elapsed().as_secs_f64();
    let size = cache.file_len();
    let t = std::time::Instant::now();
    drop(cache);
    let cache = DiskCache::open(dir.path().join("vectors.cache"))?;
    let reopen = t.elapsed().as_secs_f64();
    println!(
        "DiskCache: {entries} entries in {batches} batches of 300: put {put:.2}s ({:.1} ms/batch), \
         get {get:.2}s ({:.2} ms/batch), {hits} hits, len {}, file {:.0} MiB, reopen {reopen:.2}s",
        put * 1e3 / batches as f64,
        get * 1e3 / batches as f64,
        cache.len(),
        size as f64 / (1 << 20) as f64
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut n = 256usize;
    let mut words = 120usize;
    let mut cfg = EmbeddingConfig::default();
    if let Some(d) = std::env::var_os("FRESHET_MODEL_DIR").filter(|d| !d.is_empty()) {
        cfg.model_dir = d.into();
    }
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--words" => words = val()?.parse()?,
            "--batch" => cfg.batch_size = val()?.parse()?,
            "--threads" => cfg.threads = Some(val()?.parse()?),
            "--model-dir" => cfg.model_dir = val()?.into(),
            "--cache-only" => return cache_bench(val()?.parse()?),
            "-h" | "--help" => {
                println!(
                    "embed_throughput [N] [--words W] [--batch B] [--threads T] [--model-dir DIR]"
                );
                return Ok(());
            }
            _ => n = a.parse().map_err(|_| format!("unknown argument {a}"))?,
        }
    }

    let t = Instant::now();
    let mut model = FastEmbedder::load(&cfg)?;
    println!(
        "loaded {} (dim {}) in {:.2}s; batch {}, max_length {}, threads {}",
        model.model_id(),
        model.dim(),
        t.elapsed().as_secs_f64(),
        model.batch_size(),
        model.max_length(),
        cfg.threads.map_or("all".to_string(), |t| t.to_string()),
    );

    let texts = texts(n, words);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let tokens: usize = refs
        .iter()
        .map(|t| {
            let enc = model.inner().tokenizer.encode(*t, true).expect("tokenize");
            enc.get_ids().len()
        })
        .sum();

    // warm-up (session initialisation, allocator)
    model.embed_passages(&refs[..refs.len().min(8)])?;

    let t = Instant::now();
    let cpu = cpu_seconds();
    let vectors = model.embed_passages(&refs)?;
    let secs = t.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu;
    assert_eq!(vectors.len(), n);
    println!(
        "model:        {n} texts, {:.0} tokens/text (after truncation) in {secs:.2}s: \
         {:.1} texts/s, {:.0} tokens/s (cpu {cpu:.1}s: {:.1} texts per cpu-second)",
        tokens as f64 / n as f64,
        n as f64 / secs,
        tokens as f64 / secs,
        n as f64 / cpu
    );

    let dir = tempfile::tempdir()?;
    let cache = DiskCache::open(dir.path().join("vectors.cache"))?;
    let batch = model.batch_size();
    let mut cached = CachedEmbedder::new(model, cache, batch);
    for pass in ["cold cache", "warm cache"] {
        let t = Instant::now();
        let (_, stats) = cached.embed(&refs)?;
        let secs = t.elapsed().as_secs_f64();
        println!(
            "{pass}:   {n} texts in {secs:.3}s: {:.1} texts/s ({} hits, {} embedded)",
            n as f64 / secs,
            stats.cache_hits,
            stats.embedded
        );
    }
    Ok(())
}
