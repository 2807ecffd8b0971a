//! What the live model tests share: reading the exporter's `freshet-check.json`.
// Each test binary uses a part of this module.
#![allow(dead_code)]

use std::path::Path;

use serde_json::Value;

/// One reference sentence: its text, its token ids (with special tokens) and its embedding.
pub struct CheckSentence {
    pub text: String,
    pub token_ids: Vec<u32>,
    pub embedding: Vec<f32>,
    /// The rest of the record (exporter-specific fields).
    pub raw: Value,
}

/// `<dir>/freshet-check.json` and its sentences.
pub fn check_file(dir: &Path) -> (Value, Vec<CheckSentence>) {
    let v: Value =
        serde_json::from_slice(&std::fs::read(dir.join("freshet-check.json")).unwrap()).unwrap();
    let sentences = v["sentences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| CheckSentence {
            text: s["text"].as_str().unwrap().to_string(),
            token_ids: s["token_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect(),
            embedding: floats(&s["embedding"]),
            raw: s.clone(),
        })
        .collect();
    (v, sentences)
}

pub fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

pub fn index(v: &Value) -> usize {
    v.as_u64().unwrap() as usize
}

pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}
