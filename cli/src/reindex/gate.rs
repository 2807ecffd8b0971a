//! The retrieval gate a switch requires: the verdict `freshet-tools gate` wrote for the
//! generation switched to (docs/reindex.md).

use std::path::Path;

use anyhow::{Context, Result};
use serde_json::Value;

/// Reads the verdict at `path`.
pub fn read(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the gate verdict {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("the gate verdict {} is not JSON", path.display()))
}

/// Whether `verdict` lets the generation of index `index_id` be served, and what to do when it
/// does not.
pub fn check(verdict: &Value, index_id: &str) -> std::result::Result<(), String> {
    let scored = verdict["index_id"].as_str().unwrap_or_default();
    if scored != index_id {
        return Err(format!(
            "the gate verdict scored index {}, the generation to serve is index {index_id}: run \
             `freshet-tools gate` against a node serving this generation",
            if scored.is_empty() { "none" } else { scored }
        ));
    }
    if verdict["passed"].as_bool() != Some(true) {
        let reasons: Vec<&str> = verdict["reasons"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        return Err(format!(
            "the retrieval gate failed ({}): fix the generation's configuration and build it \
             again, or roll back",
            if reasons.is_empty() {
                "no reason given".to_string()
            } else {
                reasons.join("; ")
            }
        ));
    }
    Ok(())
}
