//! The document versions of a batch that an index refuses: a text the model could not embed
//! (known from the plan) or a row Milvus refused (known once it is written). Nothing of a
//! refused document stays in either index, and its record is dead-lettered with the class and
//! stage of its refusal; see [`super::plan`] for what the next version of such a document
//! writes.

use std::collections::BTreeMap;

use freshet_operators::intake::Stage;

use super::plan::Batch;

/// DLQ class of a version whose text the model could not embed.
pub const EMBED_FAILED: &str = "embedding_failed";
/// DLQ class of a version whose row Milvus refused.
pub const MILVUS_REFUSED: &str = "milvus_refused";

/// Why a document's version was refused.
pub struct Refusal {
    pub stage: Stage,
    pub class: &'static str,
    pub message: String,
}

/// A row Milvus refused: the document whose version it refuses, and Milvus's reason.
pub struct RowRefusal {
    pub doc_id: String,
    pub reason: String,
}

/// The refused versions of a batch, by document id.
#[derive(Default)]
pub struct Refusals(BTreeMap<String, Refusal>);

impl Refusals {
    /// The documents whose final version has a text the model could not embed.
    pub fn of_embedder(batch: &Batch) -> Refusals {
        Refusals(
            batch
                .docs
                .iter()
                .filter_map(|(doc, d)| {
                    let e = d.embed_error.as_ref()?;
                    let refusal = Refusal {
                        stage: Stage::Embed,
                        class: EMBED_FAILED,
                        message: e.clone(),
                    };
                    Some((doc.clone(), refusal))
                })
                .collect(),
        )
    }

    /// Adds the documents of the rows Milvus refused (a document already refused keeps its
    /// first refusal).
    pub fn add_milvus(&mut self, rows: Vec<RowRefusal>) {
        for r in rows {
            self.0.entry(r.doc_id).or_insert(Refusal {
                stage: Stage::Sink,
                class: MILVUS_REFUSED,
                message: r.reason,
            });
        }
    }

    pub fn contains(&self, doc_id: &str) -> bool {
        self.0.contains_key(doc_id)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The refused documents with their refusals, in id order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Refusal)> {
        self.0.iter().map(|(doc, r)| (doc.as_str(), r))
    }

    /// The refused documents, in id order.
    pub fn docs(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// The documents refused at the sink itself (by Milvus), in id order: the embedder's
    /// refusals are dead-lettered from the plan's [`super::plan::EmbedRefusal`]s.
    pub fn at_sink(&self) -> impl Iterator<Item = (&str, &Refusal)> {
        self.0
            .iter()
            .filter(|(_, r)| r.stage == Stage::Sink)
            .map(|(doc, r)| (doc.as_str(), r))
    }
}
