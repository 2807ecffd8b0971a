//! Whether the tantivy index and the Milvus collection belong together, decided before either
//! is written. Each holds the same index id (the index in its commit payload, the collection in
//! its properties). A new or empty index beside a collection that holds vectors, or behind a
//! consumer group that has already read past the beginning of the topics, is what a wrong path
//! (a typo, another shell's defaults, an unmounted volume) looks like: the pipeline refuses it
//! instead of reconciling the collection down to the empty index. Starting a new index on
//! purpose is `freshet run --new-index`, which reads every topic from the beginning.

use std::collections::BTreeMap;
use std::path::Path;

use freshet_milvus::Binding;

/// What the tantivy index holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexState {
    /// It has at least one commit.
    pub committed: bool,
    pub chunks: u64,
    pub index_id: Option<String>,
}

impl IndexState {
    /// Never committed and empty: what a wrong path opens.
    pub fn is_new(&self) -> bool {
        !self.committed && self.chunks == 0
    }
}

/// The explicit choices of `freshet run`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BindFlags {
    /// `--new-index`: the index is new on purpose; read every topic from the beginning and take
    /// the collection over.
    pub new_index: bool,
    /// `--adopt-collection`: bind a collection that belongs to another index (or to none) to
    /// this existing index, and reconcile it with the index whatever that deletes.
    pub adopt_collection: bool,
}

/// A partition of a topic the consumer group has read past the partition's beginning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupProgress {
    pub topic: String,
    pub partition: i32,
    pub committed: i64,
    pub low: i64,
}

/// What happens to the collection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CollectionStep {
    /// None exists: create it bound to the index.
    Create,
    /// Write the index id into it.
    Bind,
    /// It is bound to this index already.
    Keep,
}

/// How the pipeline starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub index_id: String,
    /// The id is not in the index yet: a commit writes it.
    pub write_id: bool,
    /// Read every partition from its beginning (a new index).
    pub from_beginning: bool,
    pub collection: CollectionStep,
    /// The reconcile may delete any share of the collection (the operator said so).
    pub reconcile_unbounded: bool,
}

/// Decides how the index and the collection start together, or why they must not.
/// `group` is the consumer group's progress past the beginning of the topics (only looked at
/// for a new index); `fresh_id` makes a new id.
pub fn decide(
    path: &Path,
    index: &IndexState,
    collection: Option<&Binding>,
    group: &[GroupProgress],
    flags: BindFlags,
    fresh_id: impl FnOnce() -> String,
) -> Result<Decision, String> {
    let at = path.display();
    if index.is_new() {
        if flags.adopt_collection {
            return Err(format!(
                "--adopt-collection binds a collection to an existing index, but the tantivy \
                 index at {at} is new (no commit, no chunk): to start a new index on purpose, \
                 use --new-index"
            ));
        }
        let collection_step = if collection.is_some() {
            CollectionStep::Bind
        } else {
            CollectionStep::Create
        };
        let decision = Decision {
            index_id: fresh_id(),
            write_id: true,
            from_beginning: true,
            collection: collection_step,
            reconcile_unbounded: flags.new_index,
        };
        if flags.new_index {
            return Ok(decision);
        }
        if let Some(b) = collection.filter(|b| b.rows > 0) {
            return Err(format!(
                "the tantivy index at {at} is new (no commit, no chunk), but the Milvus \
                 collection holds {} vectors{}. Starting here would delete them all. If the \
                 index path is wrong (a typo, another shell's defaults, an unmounted volume), \
                 set [tantivy] path (FRESHET_TANTIVY_PATH) to the index that goes with the \
                 collection{}. To build a new index on purpose, run `freshet run --new-index`: \
                 it reads every topic from the beginning and replaces the collection's vectors.",
                b.rows,
                owner(b),
                b.index_path
                    .as_deref()
                    .map(|p| format!(" ({p})"))
                    .unwrap_or_default()
            ));
        }
        if !group.is_empty() {
            return Err(format!(
                "the tantivy index at {at} is new (no commit, no chunk), but the consumer \
                 group has already read past the beginning of the topics ({}): this index \
                 would never see those records. If the index path is wrong (a typo, another \
                 shell's defaults, an unmounted volume), set [tantivy] path \
                 (FRESHET_TANTIVY_PATH) to the index that goes with the group. To build a new \
                 index on purpose, run `freshet run --new-index`: it reads every topic from \
                 the beginning.",
                progress(group)
            ));
        }
        return Ok(decision);
    }
    if flags.new_index {
        return Err(format!(
            "--new-index: the tantivy index at {at} is not new ({} chunks{}); to build a new \
             index, point [tantivy] path (FRESHET_TANTIVY_PATH) at an empty directory",
            index.chunks,
            if index.committed { ", committed" } else { "" }
        ));
    }
    // An index made before ids existed takes the id of a collection bound to its own path (a
    // start that bound the collection and stopped before writing the index), else a new one.
    let (index_id, write_id) = match (&index.index_id, collection) {
        (Some(id), _) => (id.clone(), false),
        (None, Some(b)) if b.index_id.is_some() && b.index_path.as_deref() == path.to_str() => {
            (b.index_id.clone().unwrap_or_default(), true)
        }
        (None, _) => (fresh_id(), true),
    };
    let legacy = index.index_id.is_none();
    let step = match collection {
        None => CollectionStep::Create,
        Some(b) if b.index_id.as_deref() == Some(index_id.as_str()) => CollectionStep::Keep,
        // Nothing to lose, or an index and a collection both from before ids existed.
        Some(b) if b.rows == 0 || (legacy && b.index_id.is_none()) => CollectionStep::Bind,
        Some(_) if flags.adopt_collection => CollectionStep::Bind,
        Some(b) => {
            return Err(format!(
                "the Milvus collection holds {} vectors{}, not of the tantivy index at {at} \
                 (index {index_id}). Set [milvus] collection (FRESHET_MILVUS_COLLECTION) or \
                 [tantivy] path (FRESHET_TANTIVY_PATH) so that the two belong together; or run \
                 `freshet run --adopt-collection` to make the collection this index's: its \
                 vectors are then reconciled with this index (those of chunks the index does \
                 not hold are deleted, missing ones inserted).",
                b.rows,
                owner(b)
            ))
        }
    };
    Ok(Decision {
        index_id,
        write_id,
        from_beginning: false,
        collection: step,
        reconcile_unbounded: flags.adopt_collection,
    })
}

/// " of index X (at P)", or " and belongs to no index".
fn owner(b: &Binding) -> String {
    match (&b.index_id, &b.index_path) {
        (Some(id), Some(p)) => format!(" of index {id} (bound at {p})"),
        (Some(id), None) => format!(" of index {id}"),
        _ => " and is bound to no index".to_string(),
    }
}

fn progress(group: &[GroupProgress]) -> String {
    let mut by_topic: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for g in group {
        by_topic.entry(&g.topic).or_default().push(format!(
            "partition {} at offset {} of {}..",
            g.partition, g.committed, g.low
        ));
    }
    by_topic
        .into_iter()
        .map(|(t, ps)| format!("{t}: {}", ps.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests;
