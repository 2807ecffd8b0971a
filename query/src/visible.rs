//! The last check before a chunk leaves the node. Every chunk an answer carries (a result, a
//! chunk merged into its passage, a parent, the packed context and its citations, all made
//! from results) is a [`Visible`], and the only way to make one is [`Gate::hit`] or
//! [`Gate::context`]: the chunk as the request's index snapshot stores it, checked against the
//! request's filter and principals with [`ChunkFilter::matches`], the plain statement the
//! index translations are tested against. The searches apply the same filter inside the
//! index; this check holds whatever a search or a load returned, e.g. a vector hit from a
//! Milvus that has not applied an ACL change the snapshot already holds.

use std::borrow::Borrow;
use std::ops::Deref;

use freshet_core::chunk::Chunk;
use freshet_core::filter::ChunkFilter;

use crate::metrics::Metrics;

/// The filter of what these principals may see.
pub fn visible_to(principals: Vec<String>) -> ChunkFilter {
    ChunkFilter::none().principals(principals)
}

/// A chunk that passed the request's filter and principals.
#[derive(Clone, Debug)]
pub struct Visible(Chunk);

impl Deref for Visible {
    type Target = Chunk;
    fn deref(&self) -> &Chunk {
        &self.0
    }
}

impl Borrow<Chunk> for Visible {
    fn borrow(&self) -> &Chunk {
        &self.0
    }
}

impl Visible {
    pub fn into_inner(self) -> Chunk {
        self.0
    }
}

/// The check of one request.
pub struct Gate {
    /// The request's filter: for the chunks searches return.
    hits: ChunkFilter,
    /// The same without its `kinds` condition: for chunks returned as context of a hit
    /// (parents of matched children, neighbours of a hit of the same kind).
    context: ChunkFilter,
    metrics: Metrics,
}

impl Gate {
    pub fn new(filter: &ChunkFilter, metrics: Metrics) -> Gate {
        Gate {
            hits: filter.clone(),
            context: ChunkFilter {
                kinds: None,
                ..filter.clone()
            },
            metrics,
        }
    }

    /// A chunk a search found (or a vector hit loaded by id).
    pub fn hit(&self, chunk: Chunk) -> Option<Visible> {
        self.check(&self.hits, chunk)
    }

    /// A chunk loaded as context of a hit: its parent or a neighbour.
    pub fn context(&self, chunk: Chunk) -> Option<Visible> {
        self.check(&self.context, chunk)
    }

    /// Counts `n` vector hits the request's snapshot does not hold (or holds with a chunk the
    /// filter refuses), left out before they were loaded.
    pub fn missing(&self, n: usize) {
        for _ in 0..n {
            self.metrics.chunk_dropped("missing");
        }
    }

    fn check(&self, filter: &ChunkFilter, chunk: Chunk) -> Option<Visible> {
        if filter.matches(&chunk) {
            return Some(Visible(chunk));
        }
        let acl_only = ChunkFilter {
            principals: filter.principals.clone(),
            ..ChunkFilter::none()
        };
        let reason = if acl_only.matches(&chunk) {
            "filter"
        } else {
            "acl"
        };
        tracing::debug!(chunk_id = %chunk.chunk_id, doc_id = %chunk.doc_id, reason, "chunk dropped");
        self.metrics.chunk_dropped(reason);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use freshet_core::chunk::ChunkKind;

    fn chunk(kind: ChunkKind, acl: &[&str], lang: &str) -> Chunk {
        Chunk {
            kind,
            acl: acl.iter().map(|a| a.to_string()).collect(),
            metadata_json: format!(r#"{{"lang":"{lang}"}}"#),
            ..freshet_core::testing::chunk("d", "text")
        }
    }

    #[test]
    fn hits_pass_the_whole_filter_context_all_but_its_kinds() {
        let m = Metrics::new();
        let f = ChunkFilter::none()
            .principals(["group:a"])
            .kinds([ChunkKind::Leaf])
            .metadata_eq("lang", "\"en\"");
        let g = Gate::new(&f, m.clone());
        assert!(g.hit(chunk(ChunkKind::Leaf, &[], "en")).is_some());
        assert!(g.hit(chunk(ChunkKind::Leaf, &["group:a"], "en")).is_some());
        assert!(g.hit(chunk(ChunkKind::Parent, &[], "en")).is_none());
        assert!(g.context(chunk(ChunkKind::Parent, &[], "en")).is_some());
        assert!(g
            .context(chunk(ChunkKind::Parent, &["group:b"], "en"))
            .is_none());
        assert!(g.hit(chunk(ChunkKind::Leaf, &["group:b"], "en")).is_none());
        assert!(g.context(chunk(ChunkKind::Leaf, &[], "de")).is_none());
        g.missing(2);
        let text = m.encode();
        for (reason, n) in [("acl", 2), ("filter", 2), ("missing", 2)] {
            let line = format!("freshet_query_chunks_dropped_total{{reason=\"{reason}\"}} {n}");
            assert!(text.contains(&line), "{line} in\n{text}");
        }
    }
}
