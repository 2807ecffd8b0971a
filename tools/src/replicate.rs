//! `freshet-tools bench-replicate`: builds a large benchmark index from an indexed corpus without
//! re-embedding it, for query-latency benchmarks at a scale this 2-core machine cannot embed
//! (100k chunks would take ~2 h). Replica 0 of every chunk is the chunk itself; replica r > 0 is
//! a copy in document `<doc id>~r<r>` with a new chunk id and its vector perturbed by seeded
//! Gaussian noise of norm `noise` (re-normalised; cosine to the original ≈ 1/√(1+noise²)). The
//! replicas are written straight into a new tantivy index and Milvus collection (no Kafka).
//! Vectors come from the pipeline's embedding cache; texts missing from it are embedded.
//! `--tantivy-only` writes the tantivy index alone (no model, no Milvus), for BM25 benchmarks.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use freshet_embedding::{CachedEmbedder, DiskCache, EmbeddingModel};
use freshet_milvus::MilvusSink;
use freshet_operators::chunk::{Chunk, ChunkKind};
use freshet_operators::embed::{embed_input, Embedder};
use freshet_tantivy::{ChunkIndexReader, ChunkIndexWriter, CommitPayload};

use crate::config::Config;

/// `freshet-tools bench-replicate`.
#[derive(clap::Args)]
pub struct ReplicateArgs {
    /// The pipeline index to copy.
    #[arg(long)]
    from_index: PathBuf,
    #[arg(long)]
    to_index: PathBuf,
    /// The Milvus collection to write (not with `--tantivy-only`).
    #[arg(long, required_unless_present = "tantivy_only")]
    to_collection: Option<String>,
    /// Write the tantivy index only: no embedding model, no Milvus.
    #[arg(long, conflicts_with = "to_collection")]
    tantivy_only: bool,
    #[arg(long, default_value_t = 10)]
    replicas: u32,
    /// Norm of the Gaussian noise added to each copy's vector (before re-normalising).
    #[arg(long, default_value_t = 0.3)]
    noise: f32,
}

impl crate::Run for ReplicateArgs {
    fn run(self, config: Option<&Path>) -> Result<i32> {
        replicate(&Config::load(config)?, &self)?;
        Ok(0)
    }
}

/// Replica `r` of an id (`r = 0` keeps it).
fn replica_id(id: &str, r: u32) -> String {
    if r == 0 {
        return id.to_owned();
    }
    let h = blake3::hash(format!("{id}\0replica\0{r}").as_bytes());
    h.as_bytes()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Deterministic standard normal samples (SplitMix64 + Box-Muller).
struct Normal(u64);

impl Normal {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    fn sample(&mut self) -> f32 {
        let (u, v) = (self.uniform(), self.uniform());
        ((-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()) as f32
    }
}

/// `v` plus Gaussian noise of norm ≈ `noise`, unit length.
pub fn perturb(v: &[f32], noise: f32, seed: u64) -> Vec<f32> {
    let mut rng = Normal(seed);
    let sigma = noise / (v.len() as f32).sqrt();
    let mut out: Vec<f32> = v.iter().map(|x| x + sigma * rng.sample()).collect();
    let norm = out
        .iter()
        .map(|x| x * x)
        .sum::<f32>()
        .sqrt()
        .max(f32::MIN_POSITIVE);
    out.iter_mut().for_each(|x| *x /= norm);
    out
}

fn replicate(config: &Config, args: &ReplicateArgs) -> Result<()> {
    if args.replicas == 0 {
        bail!("--replicas must be at least 1");
    }
    config.tantivy.configure_japanese()?;
    let source = ChunkIndexReader::open(&args.from_index)
        .with_context(|| format!("opening {}", args.from_index.display()))?;
    let chunks = source.load_all()?;
    if chunks.is_empty() {
        bail!("{} holds no chunks", args.from_index.display());
    }
    let leaves: Vec<&Chunk> = chunks
        .iter()
        .filter(|c| c.kind == ChunkKind::Leaf)
        .collect();
    eprintln!(
        "{} chunks ({} leaves) × {} replicas",
        chunks.len(),
        leaves.len(),
        args.replicas
    );
    let mut writer = ChunkIndexWriter::open_or_create_with_threads(
        &args.to_index,
        config.tantivy.writer_heap_bytes,
        config.tantivy.writer_threads,
    )?;
    let Some(collection) = args.to_collection.as_deref().filter(|_| !args.tantivy_only) else {
        let started = std::time::Instant::now();
        for r in 0..args.replicas {
            let all: Vec<Chunk> = chunks.iter().map(|c| replica(c, r)).collect();
            writer.apply(&all, &[])?;
            writer.commit(&CommitPayload::new(Default::default(), u64::from(r) + 1))?;
            progress(r, args.replicas, started);
        }
        writer.close()?;
        println!(
            "{} chunks in {}",
            chunks.len() as u64 * u64::from(args.replicas),
            args.to_index.display()
        );
        return Ok(());
    };
    let embedder = EmbeddingModel::load(&config.embedding)?;
    let dim = embedder.dim();
    let model_id = embedder.model_id().to_owned();
    let cache = DiskCache::open(&config.pipeline.embedding_cache_path)?;
    let mut cached = CachedEmbedder::new(embedder, cache, config.embedding.batch_size);
    let inputs: Vec<String> = leaves.iter().map(|c| embed_input(c)).collect();
    let mut vectors = Vec::with_capacity(inputs.len());
    for batch in inputs.chunks(512) {
        let refs: Vec<&str> = batch.iter().map(String::as_str).collect();
        let (v, stats) = cached.embed(&refs)?;
        if stats.embedded > 0 {
            eprintln!("embedded {} texts the cache did not have", stats.embedded);
        }
        vectors.extend(v);
    }

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut mcfg = config.milvus.clone();
    mcfg.collection = collection.to_owned();
    mcfg.dim = dim;
    mcfg.model_id = model_id;
    let milvus = runtime.block_on(async {
        let m = MilvusSink::connect(mcfg).await?;
        m.ensure_collection().await?;
        Ok::<_, freshet_milvus::Error>(m)
    })?;
    let started = std::time::Instant::now();
    for r in 0..args.replicas {
        let copy = |c: &Chunk| replica(c, r);
        let all: Vec<Chunk> = chunks.iter().map(copy).collect();
        writer.apply(&all, &[])?;
        let rows: Vec<(Chunk, Vec<f32>)> = leaves
            .iter()
            .zip(&vectors)
            .enumerate()
            .map(|(i, (c, v))| {
                let v = if r == 0 {
                    v.clone()
                } else {
                    perturb(v, args.noise, (u64::from(r) << 32) ^ i as u64)
                };
                (copy(c), v)
            })
            .collect();
        for part in rows.chunks(2000) {
            runtime.block_on(milvus.upsert(part))?;
        }
        writer.commit(&CommitPayload::new(Default::default(), u64::from(r) + 1))?;
        progress(r, args.replicas, started);
    }
    writer.close()?;
    runtime.block_on(milvus.flush())?;
    let n = runtime.block_on(milvus.count())?;
    println!(
        "{} chunks in {} and {n} vectors in collection {}",
        chunks.len() as u64 * u64::from(args.replicas),
        args.to_index.display(),
        collection
    );
    Ok(())
}

/// Replica `r` of a chunk: itself for `r = 0`, else a copy in document `<doc id>~r<r>`.
fn replica(c: &Chunk, r: u32) -> Chunk {
    let mut c = c.clone();
    if r > 0 {
        c.doc_id = format!("{}~r{r}", c.doc_id);
        c.chunk_id = replica_id(&c.chunk_id, r);
        c.parent_id = c.parent_id.map(|p| replica_id(&p, r));
    }
    c
}

fn progress(r: u32, replicas: u32, started: std::time::Instant) {
    eprintln!(
        "replica {}/{replicas} written ({:.0} s)",
        r + 1,
        started.elapsed().as_secs_f64()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perturbation_is_seeded_unit_length_and_close() {
        let mut v = vec![0.0f32; 384];
        v[0] = 1.0;
        let a = perturb(&v, 0.3, 7);
        assert_eq!(a, perturb(&v, 0.3, 7));
        assert_ne!(a, perturb(&v, 0.3, 8));
        let norm: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4);
        // cos ≈ 1/sqrt(1 + 0.09) ≈ 0.958.
        assert!((a[0] - 0.958).abs() < 0.03, "{}", a[0]);
        assert_eq!(replica_id("abc", 0), "abc");
        assert_eq!(replica_id("abc", 1).len(), 32);
        assert_ne!(replica_id("abc", 1), replica_id("abc", 2));
    }
}
