//! The cache-aware embedding batch.
//!
//! Pure logic over [`Embedder`] and [`VectorCache`] (nothing here depends on fastembed or the disk format),
//! so it can move into `freshet_core::embed` without change.

use std::collections::HashMap;

use freshet_core::embed::{cache_key, l2_normalize, EmbedError, Embedder, VectorCache};

/// What one [`embed_with_cache`] call did.
///
/// `requested = deduplicated + cache_hits + embedded`: `deduplicated` counts texts that repeated
/// an earlier text of the same batch; `cache_hits` and `embedded` count distinct texts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EmbedStats {
    /// Texts asked for.
    pub requested: usize,
    /// Distinct texts whose vector came from the cache.
    pub cache_hits: usize,
    /// Distinct texts the model embedded (and that were stored in the cache).
    pub embedded: usize,
    /// Texts that repeated another text of the same batch (served from that one).
    pub deduplicated: usize,
    /// Model calls made (each at most `batch_size` texts).
    pub model_calls: usize,
}

impl EmbedStats {
    /// Adds `other` to `self` (for running totals).
    pub fn add(&mut self, other: &EmbedStats) {
        self.requested += other.requested;
        self.cache_hits += other.cache_hits;
        self.embedded += other.embedded;
        self.deduplicated += other.deduplicated;
        self.model_calls += other.model_calls;
    }
}

/// Embeds `texts` asking the model only for what `cache` lacks.
///
/// Looks up every distinct text's [`cache_key`] (with the embedder's cache id) in one
/// `get_many`; embeds the misses in batches of `batch_size` (at least 1), grouped by text length
/// (less padding); L2-normalises; stores
/// each batch with one `put_many` right after it is embedded (so work survives a later failure);
/// returns unit vectors in input order. A cached vector of the wrong dimension is treated as a
/// miss and replaced.
pub fn embed_with_cache<E, C>(
    embedder: &mut E,
    cache: &mut C,
    texts: &[&str],
    batch_size: usize,
) -> Result<(Vec<Vec<f32>>, EmbedStats), EmbedError>
where
    E: Embedder + ?Sized,
    C: VectorCache + ?Sized,
{
    let mut stats = EmbedStats {
        requested: texts.len(),
        ..Default::default()
    };
    if texts.is_empty() {
        return Ok((Vec::new(), stats));
    }
    let dim = embedder.dim();
    let batch_size = batch_size.max(1);

    // Distinct texts, in first-seen order; slot[i] = index of texts[i] among them.
    let mut first: HashMap<&str, usize> = HashMap::with_capacity(texts.len());
    let mut distinct: Vec<&str> = Vec::with_capacity(texts.len());
    let slot: Vec<usize> = texts
        .iter()
        .map(|&t| {
            *first.entry(t).or_insert_with(|| {
                distinct.push(t);
                distinct.len() - 1
            })
        })
        .collect();
    stats.deduplicated = texts.len() - distinct.len();

    let cache_id = embedder.cache_id().to_string();
    let keys: Vec<[u8; 32]> = distinct.iter().map(|t| cache_key(&cache_id, t)).collect();
    let cached = cache.get_many(&keys)?;
    if cached.len() != keys.len() {
        return Err(EmbedError::new(format!(
            "vector cache answered {} of {} keys",
            cached.len(),
            keys.len()
        )));
    }
    let mut vectors: Vec<Option<Vec<f32>>> = cached
        .into_iter()
        .map(|v| v.filter(|v| v.len() == dim))
        .collect();
    stats.cache_hits = vectors.iter().filter(|v| v.is_some()).count();

    let mut misses: Vec<usize> = (0..distinct.len())
        .filter(|&i| vectors[i].is_none())
        .collect();
    // Similar lengths in one model batch: padded models (all transformers) waste less work.
    misses.sort_by_key(|&i| distinct[i].len());
    for batch in misses.chunks(batch_size) {
        let batch_texts: Vec<&str> = batch.iter().map(|&i| distinct[i]).collect();
        let embedded = embedder.embed_passages(&batch_texts)?;
        stats.model_calls += 1;
        if embedded.len() != batch.len() {
            return Err(EmbedError::new(format!(
                "model returned {} vectors for {} texts",
                embedded.len(),
                batch.len()
            )));
        }
        let mut entries = Vec::with_capacity(batch.len());
        for (&i, mut v) in batch.iter().zip(embedded) {
            if v.len() != dim {
                return Err(EmbedError::new(format!(
                    "model returned a {}-dimensional vector, expected {dim}",
                    v.len()
                )));
            }
            // Never cached: the caller isolates the text (see freshet_operators::dataflow).
            if !v.iter().all(|x| x.is_finite()) {
                return Err(EmbedError::new(
                    "model returned a vector with a NaN or infinite component",
                ));
            }
            l2_normalize(&mut v);
            entries.push((keys[i], v));
        }
        cache.put_many(&entries)?;
        for (&i, (_, v)) in batch.iter().zip(entries) {
            vectors[i] = Some(v);
        }
        stats.embedded += batch.len();
    }

    let out = slot
        .iter()
        .map(|&s| {
            vectors[s]
                .clone()
                .expect("every distinct text has a vector")
        })
        .collect();
    Ok((out, stats))
}

/// An [`Embedder`] with a [`VectorCache`] in front of it; see [`embed_with_cache`].
#[derive(Debug)]
pub struct CachedEmbedder<E: Embedder, C: VectorCache> {
    embedder: E,
    cache: C,
    batch_size: usize,
    totals: EmbedStats,
}

impl<E: Embedder, C: VectorCache> CachedEmbedder<E, C> {
    /// Model calls take at most `batch_size` texts (at least 1).
    pub fn new(embedder: E, cache: C, batch_size: usize) -> Self {
        CachedEmbedder {
            embedder,
            cache,
            batch_size: batch_size.max(1),
            totals: EmbedStats::default(),
        }
    }

    /// Unit vectors for `texts`, in order, and what it took.
    pub fn embed(&mut self, texts: &[&str]) -> Result<(Vec<Vec<f32>>, EmbedStats), EmbedError> {
        let (vectors, stats) =
            embed_with_cache(&mut self.embedder, &mut self.cache, texts, self.batch_size)?;
        self.totals.add(&stats);
        Ok((vectors, stats))
    }

    /// Sum of the stats of every [`CachedEmbedder::embed`] call so far.
    pub fn totals(&self) -> EmbedStats {
        self.totals
    }

    pub fn embedder(&self) -> &E {
        &self.embedder
    }

    pub fn embedder_mut(&mut self) -> &mut E {
        &mut self.embedder
    }

    pub fn cache(&self) -> &C {
        &self.cache
    }

    pub fn cache_mut(&mut self) -> &mut C {
        &mut self.cache
    }

    pub fn into_parts(self) -> (E, C) {
        (self.embedder, self.cache)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic fake model: counts calls and texts; vectors not normalised.
    struct Fake {
        calls: usize,
        texts: usize,
        max_batch: usize,
    }

    impl Embedder for Fake {
        fn model_id(&self) -> &str {
            "fake-v1"
        }
        fn dim(&self) -> usize {
            8
        }
        fn embed_passages(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.calls += 1;
            self.texts += texts.len();
            self.max_batch = self.max_batch.max(texts.len());
            Ok(texts.iter().map(|t| raw(t)).collect())
        }
    }

    fn raw(t: &str) -> Vec<f32> {
        let h = blake3::hash(t.as_bytes());
        h.as_bytes()[..8].iter().map(|&b| b as f32 + 1.0).collect()
    }

    fn unit(t: &str) -> Vec<f32> {
        let mut v = raw(t);
        l2_normalize(&mut v);
        v
    }

    #[derive(Default)]
    struct MemCache {
        map: HashMap<[u8; 32], Vec<f32>>,
        puts: usize,
    }

    impl VectorCache for MemCache {
        fn get_many(&self, keys: &[[u8; 32]]) -> Result<Vec<Option<Vec<f32>>>, EmbedError> {
            Ok(keys.iter().map(|k| self.map.get(k).cloned()).collect())
        }
        fn put_many(&mut self, entries: &[([u8; 32], Vec<f32>)]) -> Result<(), EmbedError> {
            self.puts += 1;
            self.map.extend(entries.iter().cloned());
            Ok(())
        }
    }

    fn fake() -> Fake {
        Fake {
            calls: 0,
            texts: 0,
            max_batch: 0,
        }
    }

    /// The fake with a quantized cache id: same model id, other cache keys.
    struct Quantized(Fake);

    impl Embedder for Quantized {
        fn model_id(&self) -> &str {
            "fake-v1"
        }
        fn cache_id(&self) -> &str {
            "fake-v1|quantization:int8"
        }
        fn dim(&self) -> usize {
            8
        }
        fn embed_passages(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.0.embed_passages(texts)
        }
    }

    #[test]
    fn keys_follow_the_cache_id_not_the_model_id() {
        let mut cache = MemCache::default();
        let (mut f, mut q) = (fake(), Quantized(fake()));
        embed_with_cache(&mut f, &mut cache, &["a", "b"], 8).unwrap();
        let (_, s) = embed_with_cache(&mut q, &mut cache, &["a", "b"], 8).unwrap();
        assert_eq!((s.cache_hits, s.embedded), (0, 2));
        assert_eq!(q.0.texts, 2);
        let (_, s) = embed_with_cache(&mut f, &mut cache, &["a"], 8).unwrap();
        assert_eq!((s.cache_hits, f.calls), (1, 1));
        assert!(cache
            .map
            .contains_key(&cache_key("fake-v1|quantization:int8", "a")));
    }

    #[test]
    fn second_call_hits_the_cache_only() {
        let mut ce = CachedEmbedder::new(fake(), MemCache::default(), 3);
        let texts: Vec<String> = (0..10).map(|i| format!("text {i}")).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();

        let (v1, s1) = ce.embed(&refs).unwrap();
        assert_eq!(
            s1,
            EmbedStats {
                requested: 10,
                cache_hits: 0,
                embedded: 10,
                deduplicated: 0,
                model_calls: 4
            }
        );
        assert_eq!(ce.embedder().calls, 4);
        assert_eq!(ce.embedder().max_batch, 3);
        assert_eq!(ce.cache().puts, 4, "one put per model batch");
        for (v, t) in v1.iter().zip(&refs) {
            assert_eq!(v, &unit(t));
        }

        let (v2, s2) = ce.embed(&refs).unwrap();
        assert_eq!(ce.embedder().calls, 4, "no model call the second time");
        assert_eq!((s2.cache_hits, s2.embedded, s2.model_calls), (10, 0, 0));
        assert_eq!(v1, v2);
        assert_eq!(ce.totals().requested, 20);
    }

    #[test]
    fn duplicates_and_partial_hits() {
        let mut e = fake();
        let mut c = MemCache::default();
        embed_with_cache(&mut e, &mut c, &["a", "b"], 64).unwrap();
        let texts = ["c", "a", "c", "d", "a", "c"];
        let (v, s) = embed_with_cache(&mut e, &mut c, &texts, 64).unwrap();
        assert_eq!(
            (
                s.requested,
                s.deduplicated,
                s.cache_hits,
                s.embedded,
                s.model_calls
            ),
            (6, 3, 1, 2, 1)
        );
        assert_eq!(e.texts, 2 + 2, "only c and d were embedded");
        for (v, t) in v.iter().zip(texts) {
            assert_eq!(v, &unit(t));
        }
        let (v, s) = embed_with_cache(&mut e, &mut c, &[], 64).unwrap();
        assert!(v.is_empty());
        assert_eq!(s, EmbedStats::default());
    }

    #[test]
    fn wrong_dimension_in_cache_is_replaced() {
        let mut e = fake();
        let mut c = MemCache::default();
        c.map.insert(cache_key("fake-v1", "x"), vec![1.0; 3]);
        let (v, s) = embed_with_cache(&mut e, &mut c, &["x"], 4).unwrap();
        assert_eq!((s.cache_hits, s.embedded), (0, 1));
        assert_eq!(v[0], unit("x"));
        assert_eq!(c.map[&cache_key("fake-v1", "x")], unit("x"));
    }

    #[test]
    fn model_errors_propagate_and_finished_batches_stay_cached() {
        struct Failing(usize);
        impl Embedder for Failing {
            fn model_id(&self) -> &str {
                "f"
            }
            fn dim(&self) -> usize {
                8
            }
            fn embed_passages(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
                self.0 += 1;
                if self.0 > 1 {
                    return Err(EmbedError::new("boom"));
                }
                Ok(texts.iter().map(|t| raw(t)).collect())
            }
        }
        let mut c = MemCache::default();
        let e = embed_with_cache(&mut Failing(0), &mut c, &["a", "b", "c"], 2).unwrap_err();
        assert_eq!(e.message, "boom");
        assert_eq!(c.map.len(), 2, "the first batch was stored");
    }

    #[test]
    fn a_non_finite_vector_is_an_error_and_never_cached() {
        struct Nan;
        impl Embedder for Nan {
            fn model_id(&self) -> &str {
                "n"
            }
            fn dim(&self) -> usize {
                8
            }
            fn embed_passages(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
                Ok(texts
                    .iter()
                    .map(|t| {
                        if *t == "bad" {
                            vec![f32::NAN; 8]
                        } else {
                            raw(t)
                        }
                    })
                    .collect())
            }
        }
        let mut c = MemCache::default();
        let e = embed_with_cache(&mut Nan, &mut c, &["a", "bad"], 8).unwrap_err();
        assert!(e.message.contains("NaN"), "{e}");
        assert!(c.map.is_empty());
        assert!(embed_with_cache(&mut Nan, &mut c, &["a"], 8).is_ok());
    }

    #[test]
    fn works_with_the_disk_cache() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.vec");
        let texts = ["alpha", "beta", "alpha"];
        {
            let cache = crate::DiskCache::open(&path).unwrap();
            let mut ce = CachedEmbedder::new(fake(), cache, 64);
            let (_, s) = ce.embed(&texts).unwrap();
            assert_eq!((s.embedded, s.deduplicated), (2, 1));
        }
        let cache = crate::cache::tests::reopen(&path);
        let mut ce = CachedEmbedder::new(fake(), cache, 64);
        let (v, s) = ce.embed(&texts).unwrap();
        assert_eq!((s.cache_hits, s.embedded), (2, 0));
        assert_eq!(
            ce.embedder().calls,
            0,
            "nothing re-embedded after reopening"
        );
        assert_eq!(v[0], unit("alpha"));
        assert_eq!(v[2], unit("alpha"));
    }
}
