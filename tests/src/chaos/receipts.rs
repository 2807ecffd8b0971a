//! The delete receipts of a trial against its record log: a receipt exists if and only if its
//! removal is durable, whatever the kills did (docs/faults.md, "Deletes you can prove").

use std::collections::BTreeMap;

use anyhow::{anyhow, ensure, Result};
use freshet_operators::chunk::{ChunkerConfig, HfTokenCounter};
use freshet_operators::intake::{intake, Intake};
use freshet_operators::limits::RecordLimits;
use freshet_tantivy::receipts::{self, ReceiptQuery};
use freshet_tantivy::ChunkIndexReader;

use crate::{env, Case};

/// Checks the receipts the index holds against `log` (every record sent, in order) once the
/// pipeline caught up: each document whose last record removes it (a delete, a refused record
/// naming it) has a receipt and holds no chunk; no document has more receipts than records
/// that asked for its removal (a batch replayed after a kill between its receipts and its
/// commit records them once); and every receipt is of a commit the index holds. Returns the
/// number of receipts.
pub fn check(case: &Case, log: &[(String, Option<Vec<u8>>)]) -> Result<usize> {
    let tokens = HfTokenCounter::from_file(
        std::path::Path::new(&env("FRESHET_MODEL_DIR")).join("tokenizer.json"),
    )
    .map_err(|e| anyhow!("{e}"))?;
    let (cfg, limits) = (ChunkerConfig::default(), RecordLimits::default());
    // Per document: removals asked, and whether its last record removes it.
    let mut asked: BTreeMap<&str, (usize, bool)> = BTreeMap::new();
    for (key, value) in log {
        let removes = match intake(
            Some(key.as_bytes()),
            value.as_deref(),
            &limits,
            &cfg,
            &tokens,
        ) {
            Intake::Delete { .. } => true,
            Intake::Rejected(r) => r.doc_id.as_deref() == Some(key.as_str()),
            _ => false,
        };
        let e = asked.entry(key.as_str()).or_default();
        e.0 += usize::from(removes);
        e.1 = removes;
    }
    let reader = ChunkIndexReader::open_manual(case.tantivy_path())?;
    let snapshot = reader.reload()?;
    let all = ReceiptQuery {
        limit: usize::MAX,
        ..ReceiptQuery::default()
    };
    let served = reader.delete_receipts(&snapshot, &all)?;
    let on_disk = receipts::read(&case.tantivy_path(), u64::MAX, &all)?;
    ensure!(
        served.len() == on_disk.len(),
        "{} receipts on disk, {} of commits the index holds: a receipt without its commit",
        on_disk.len(),
        served.len()
    );
    let mut got: BTreeMap<&str, usize> = BTreeMap::new();
    for n in &served {
        *got.entry(n.receipt.doc_id.as_str()).or_default() += 1;
    }
    for (doc, (removals, last_removes)) in &asked {
        let have = got.remove(doc).unwrap_or(0);
        ensure!(
            have <= *removals,
            "{doc}: {have} receipts for {removals} records that removed it (recorded twice)"
        );
        if *last_removes {
            ensure!(have >= 1, "{doc} was removed last but has no receipt");
            ensure!(
                snapshot.chunks_of_doc(doc)?.is_empty(),
                "{doc} has a receipt and chunks"
            );
        }
    }
    ensure!(
        got.is_empty(),
        "receipts of documents never removed: {got:?}"
    );
    Ok(served.len())
}
