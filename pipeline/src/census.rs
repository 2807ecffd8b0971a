//! The indexed corpus by language, against the languages the embedding model covers.
//!
//! An English model embeds Chinese text as noise, and nothing fails: the vector route just
//! stops finding anything. So the pipeline counts the leaf chunks the index holds by detected
//! language (`freshet_embedding::language::detect`: script for Chinese, Japanese and Korean,
//! whatlang's reliable guess for the rest, `und` when it cannot tell), starting from the index
//! it opens and following every committed batch, and warns (a log line, the
//! `corpus_uncovered_share` gauge, a note in `/readyz`) while more than
//! `[pipeline] uncovered_language_warn_share` of them are in languages the model does not
//! declare. Counts are per document, so an edited or deleted document replaces its old counts;
//! a chunk id names its text, so a chunk kept by an edit keeps its language without being
//! detected again.

use std::collections::{BTreeMap, HashMap};

use freshet_embedding::language::{detect, Languages};
use freshet_operators::chunk::{Chunk, ChunkKind};

use crate::endpoint::Readiness;
use crate::metrics::Metrics;

/// What `detect` cannot tell.
const UNDETERMINED: &str = "und";

/// The census; owned by the sink's writer.
pub struct LanguageCensus {
    model: Option<Languages>,
    warn_share: f64,
    /// Document (8 bytes of blake3 of its id) → its leaf chunks (the same of their ids) and
    /// their languages.
    docs: HashMap<u64, Vec<(u64, &'static str)>>,
    totals: BTreeMap<&'static str, u64>,
    warned: bool,
    metrics: Metrics,
    ready: Readiness,
}

fn key(id: &str) -> u64 {
    let h = blake3::hash(id.as_bytes());
    u64::from_le_bytes(h.as_bytes()[..8].try_into().unwrap_or([0; 8]))
}

fn language_of(text: &str) -> &'static str {
    detect(text)
        .and_then(|d| d.language)
        .unwrap_or(UNDETERMINED)
}

impl LanguageCensus {
    /// A census for a model covering `model` (`None`: undeclared; chunks are still counted).
    pub fn new(
        model: Option<Languages>,
        warn_share: f64,
        metrics: Metrics,
        ready: Readiness,
    ) -> LanguageCensus {
        LanguageCensus {
            model,
            warn_share,
            docs: HashMap::new(),
            totals: BTreeMap::new(),
            warned: false,
            metrics,
            ready,
        }
    }

    /// Sets what document `doc_id` holds now (its chunks after a commit; none once deleted).
    pub fn set<'a>(&mut self, doc_id: &str, chunks: impl IntoIterator<Item = &'a Chunk>) {
        let doc = key(doc_id);
        let before = self.docs.remove(&doc).unwrap_or_default();
        let known: HashMap<u64, &'static str> = before.iter().copied().collect();
        let now: Vec<(u64, &'static str)> = chunks
            .into_iter()
            .filter(|c| c.kind == ChunkKind::Leaf)
            .map(|c| {
                let id = key(&c.chunk_id);
                let lang = known
                    .get(&id)
                    .copied()
                    .unwrap_or_else(|| language_of(&c.text));
                (id, lang)
            })
            .collect();
        for (_, lang) in &before {
            if let Some(t) = self.totals.get_mut(lang) {
                *t = t.saturating_sub(1);
            }
        }
        for (_, lang) in &now {
            *self.totals.entry(lang).or_default() += 1;
        }
        if !now.is_empty() {
            self.docs.insert(doc, now);
        }
    }

    /// Leaf chunks counted, and those in a language the model does not declare.
    pub fn shares(&self) -> (u64, u64) {
        let total = self.totals.values().sum();
        let uncovered = match &self.model {
            None => 0,
            Some(m) => self
                .totals
                .iter()
                .filter(|(l, _)| **l != UNDETERMINED && !m.covers(l))
                .map(|(_, n)| n)
                .sum(),
        };
        (total, uncovered)
    }

    /// Publishes the counts (metrics) and warns or clears the warning.
    pub fn publish(&mut self) {
        for (lang, n) in &self.totals {
            self.metrics
                .corpus_chunks
                .get_or_create(&crate::metrics::LanguageLabel { language: lang })
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
        let (total, uncovered) = self.shares();
        let share = if total == 0 {
            0.0
        } else {
            uncovered as f64 / total as f64
        };
        self.metrics.corpus_uncovered_share.set(share);
        let over = self.warn_share > 0.0 && share > self.warn_share;
        match (over, self.warned) {
            (true, _) => {
                let note = self.note(total, uncovered, share);
                if !self.warned {
                    tracing::warn!("{note}");
                }
                self.ready.note("languages", Some(note));
            }
            (false, true) => {
                tracing::info!(
                    share,
                    "the corpus is back within the embedding model's languages"
                );
                self.ready.note("languages", None);
            }
            (false, false) => {}
        }
        self.warned = over;
    }

    fn note(&self, total: u64, uncovered: u64, share: f64) -> String {
        let model = self
            .model
            .as_ref()
            .map(|m| m.describe())
            .unwrap_or_default();
        let mut outside: Vec<(&str, u64)> = self
            .totals
            .iter()
            .filter(|(l, _)| {
                **l != UNDETERMINED && self.model.as_ref().is_some_and(|m| !m.covers(l))
            })
            .map(|(l, n)| (*l, *n))
            .collect();
        outside.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
        let top: Vec<String> = outside
            .iter()
            .take(3)
            .map(|(l, n)| format!("{l}: {n}"))
            .collect();
        format!(
            "{:.0}% of the indexed chunks ({uncovered} of {total}; {}) are in languages the \
             embedding model does not cover ({model}): their vectors are noise, and queries in \
             those languages are answered by BM25 alone. A multilingual model covers them: \
             deploy/run-local.sh --multilingual, or deploy/install.sh --e5 and [embedding] \
             model_dir = \"~/.freshet/models/multilingual-e5-small-int8\" with a new \
             collection and index (docs/models.md)",
            share * 100.0,
            top.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use freshet_operators::testing::chunk;

    fn leaf(doc: &str, _i: u32, text: &str) -> Chunk {
        chunk(doc, text)
    }

    fn census(warn: f64) -> (LanguageCensus, Readiness) {
        let ready = Readiness::new();
        let c = LanguageCensus::new(
            Some(Languages::new(&["en"]).unwrap()),
            warn,
            Metrics::new(),
            ready.clone(),
        );
        (c, ready)
    }

    const EN: &str =
        "The cat sat on the mat and looked out of the window at the birds in the garden.";
    const ZH: &str = "床前明月光，疑是地上霜。举头望明月，低头思故乡。";

    #[test]
    fn documents_replace_their_counts() {
        let (mut c, _) = census(0.1);
        let (a, b) = (leaf("a", 0, EN), leaf("b", 0, ZH));
        c.set("a", [&a]);
        c.set("b", [&b, &b]);
        assert_eq!(c.shares(), (3, 2));
        // b edited: one Chinese chunk now; a deleted.
        c.set("b", [&b]);
        c.set("a", []);
        assert_eq!(c.shares(), (1, 1));
        assert_eq!(c.totals.get("en"), Some(&0));
    }

    #[test]
    fn warns_over_the_share_and_clears_below_it() {
        let (mut c, ready) = census(0.25);
        let (en, zh) = (leaf("e", 0, EN), leaf("z", 0, ZH));
        c.set("e", [&en, &en, &en]);
        c.set("z", [&zh]);
        c.publish();
        assert!(ready.notes().is_empty(), "exactly 25% is not over 25%");
        c.set("z", [&zh, &zh]);
        c.publish();
        let notes = ready.notes();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].starts_with("40% of the indexed chunks (2 of 5; zh: 2)"),
            "{notes:?}"
        );
        c.set("z", []);
        c.publish();
        assert!(ready.notes().is_empty());
    }

    #[test]
    fn an_undeclared_model_counts_without_warning() {
        let ready = Readiness::new();
        let mut c = LanguageCensus::new(None, 0.01, Metrics::new(), ready.clone());
        c.set("z", [&leaf("z", 0, ZH)]);
        c.publish();
        assert_eq!(c.shares(), (1, 0));
        assert!(ready.notes().is_empty());
    }
}
