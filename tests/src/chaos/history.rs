//! Seeded random histories of document changes for the crash trials: upserts of new documents,
//! rewrites, edits of a single paragraph, ACL and metadata changes, deletes by tombstone and by
//! envelope, re-sends of a record as it was, and bad records of several classes. The same seed
//! always gives the same history.

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::RIVER_WORDS;

/// One record to produce: what kind of change it is, its key and its value (`None`: a
/// tombstone).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Op {
    pub kind: &'static str,
    pub key: String,
    pub value: Option<Vec<u8>>,
}

/// The kinds of [`Op`], bad records last.
pub const KINDS: &[&str] = &[
    "new_version",
    "edit_paragraph",
    "acl_change",
    "tombstone",
    "delete",
    "resend",
    "empty_document",
    "bad",
];

/// Words past [`RIVER_WORDS`] that the generated paragraphs also use.
const MORE_WORDS: &[&str] = &[
    "granite",
    "lichen",
    "aquifer",
    "monsoon",
    "glacier",
    "turbine",
    "sluice",
    "weir",
    "reservoir",
    "bedrock",
];

/// The `i`-th word of [`RIVER_WORDS`] followed by [`MORE_WORDS`].
fn word(i: usize) -> &'static str {
    RIVER_WORDS
        .get(i)
        .copied()
        .unwrap_or_else(|| MORE_WORDS[i - RIVER_WORDS.len()])
}

const GROUPS: &[&str] = &["group:eng", "group:ops", "group:legal", "user:ana"];

/// A document as the generator last upserted it.
#[derive(Clone, Debug)]
struct Doc {
    paragraphs: Vec<String>,
    acl: Vec<&'static str>,
    revision: u32,
}

/// What kinds of bad records a history holds (each is refused by the decoder).
pub const BAD_KINDS: &[&str] = &[
    "malformed_json",
    "not_utf8",
    "unknown_op",
    "empty_principal",
    "id_mismatch",
    "empty_value",
];

/// Generates `n` records over about `docs` document ids.
pub fn generate(seed: u64, n: usize, docs: usize) -> Vec<Op> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut live: BTreeMap<String, Doc> = BTreeMap::new();
    let mut last: BTreeMap<String, Option<Vec<u8>>> = BTreeMap::new();
    let mut out = Vec::with_capacity(n);
    let docs = docs.max(1);
    while out.len() < n {
        let roll = rng.gen_range(0..100);
        let op = if live.len() < docs / 3 || roll < 22 {
            // a new document, or a whole new version of any id
            let id = format!("d-{}", rng.gen_range(0..docs));
            let doc = Doc {
                paragraphs: (0..rng.gen_range(1..=6))
                    .map(|_| paragraph(&mut rng))
                    .collect(),
                acl: acl(&mut rng),
                revision: live.get(&id).map_or(0, |d| d.revision + 1),
            };
            upsert("new_version", &id, &doc, &mut live)
        } else if roll < 52 {
            // one paragraph of a live document edited (or one added)
            let Some(id) = pick(&mut rng, &live) else {
                continue;
            };
            let mut doc = live[&id].clone();
            let i = rng.gen_range(0..=doc.paragraphs.len());
            if i == doc.paragraphs.len() {
                doc.paragraphs.push(paragraph(&mut rng));
            } else {
                doc.paragraphs[i] = paragraph(&mut rng);
            }
            doc.revision += 1;
            upsert("edit_paragraph", &id, &doc, &mut live)
        } else if roll < 58 {
            // only the ACL (and the revision in the metadata) changes
            let Some(id) = pick(&mut rng, &live) else {
                continue;
            };
            let mut doc = live[&id].clone();
            doc.acl = acl(&mut rng);
            doc.revision += 1;
            upsert("acl_change", &id, &doc, &mut live)
        } else if roll < 65 {
            let Some(id) = pick(&mut rng, &live) else {
                continue;
            };
            live.remove(&id);
            Op {
                kind: "tombstone",
                key: id,
                value: None,
            }
        } else if roll < 70 {
            let Some(id) = pick(&mut rng, &live) else {
                continue;
            };
            live.remove(&id);
            let v = json!({"op": "delete", "id": id});
            Op {
                kind: "delete",
                key: id,
                value: Some(v.to_string().into_bytes()),
            }
        } else if roll < 85 {
            // a re-send of an id's last record, whatever it was (a tombstone included)
            let ids: Vec<&String> = last.keys().collect();
            let Some(id) = ids.choose(&mut rng).map(|s| s.to_string()) else {
                continue;
            };
            Op {
                kind: "resend",
                value: last[&id].clone(),
                key: id,
            }
        } else if roll < 93 {
            // a bad record; it names a document, which it removes (as the decoder's rejection does)
            let id = format!("d-{}", rng.gen_range(0..docs));
            live.remove(&id);
            let kind = BAD_KINDS[rng.gen_range(0..BAD_KINDS.len())];
            Op {
                kind: "bad",
                value: Some(bad(kind, &id)),
                key: id,
            }
        } else {
            // an empty document (holds no chunk)
            let id = format!("d-{}", rng.gen_range(0..docs));
            let doc = Doc {
                paragraphs: Vec::new(),
                acl: Vec::new(),
                revision: live.get(&id).map_or(0, |d| d.revision + 1),
            };
            upsert("empty_document", &id, &doc, &mut live)
        };
        last.insert(op.key.clone(), op.value.clone());
        out.push(op);
    }
    out
}

fn pick(rng: &mut StdRng, live: &BTreeMap<String, Doc>) -> Option<String> {
    let ids: Vec<&String> = live.keys().collect();
    ids.choose(rng).map(|s| s.to_string())
}

fn paragraph(rng: &mut StdRng) -> String {
    let words = rng.gen_range(12..90);
    let mut s: Vec<&str> = (0..words)
        .map(|_| word(rng.gen_range(0..RIVER_WORDS.len() + MORE_WORDS.len())))
        .collect();
    if let Some(w) = s.first_mut() {
        // a number keeps equal paragraphs rare
        *w = "Note";
    }
    format!("{} {}.", s.join(" "), rng.gen_range(0..1_000_000))
}

fn acl(rng: &mut StdRng) -> Vec<&'static str> {
    if rng.gen_bool(0.5) {
        return Vec::new();
    }
    let n = rng.gen_range(1..=2);
    let mut g: Vec<&'static str> = GROUPS.choose_multiple(rng, n).copied().collect();
    g.sort_unstable();
    g
}

fn upsert(kind: &'static str, id: &str, doc: &Doc, live: &mut BTreeMap<String, Doc>) -> Op {
    let mut text = String::new();
    for (i, p) in doc.paragraphs.iter().enumerate() {
        if i % 3 == 0 {
            text.push_str(&format!("## Part {}\n\n", i / 3 + 1));
        }
        text.push_str(p);
        text.push_str("\n\n");
    }
    let v = json!({
        "op": "upsert",
        "id": id,
        // a title of its own keeps every document's embedding inputs apart
        "title": format!("Document {id}"),
        "text": text,
        "content_type": "text/markdown",
        "source": format!("chaos://{id}"),
        "metadata": {"revision": doc.revision, "lang": "en"},
        "acl": doc.acl,
    });
    live.insert(id.to_string(), doc.clone());
    Op {
        kind,
        key: id.to_string(),
        value: Some(v.to_string().into_bytes()),
    }
}

/// A record of `kind` that the decoder refuses, keyed by `id`.
fn bad(kind: &str, id: &str) -> Vec<u8> {
    match kind {
        "malformed_json" => format!("{{\"op\":\"upsert\",\"id\":\"{id}\",\"text\":").into_bytes(),
        "not_utf8" => {
            let mut v = format!("{{\"id\":\"{id}\",\"text\":\"").into_bytes();
            v.extend_from_slice(&[0xff, 0xfe, 0x80]);
            v.extend_from_slice(b"\"}");
            v
        }
        "unknown_op" => json!({"op": "merge", "id": id}).to_string().into_bytes(),
        "empty_principal" => json!({"id": id, "text": "x", "acl": ["group:eng", ""]})
            .to_string()
            .into_bytes(),
        "id_mismatch" => json!({"id": format!("{id}-other"), "text": "x"})
            .to_string()
            .into_bytes(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_one_history_with_every_kind_of_change() {
        let a = generate(7, 600, 200);
        assert_eq!(a, generate(7, 600, 200));
        assert_ne!(a, generate(8, 600, 200));
        assert_eq!(a.len(), 600);
        for kind in KINDS {
            assert!(
                a.iter().any(|o| o.kind == *kind),
                "no {kind} in 600 changes"
            );
        }
        // a re-send repeats its key's previous record exactly
        let mut last: BTreeMap<&str, &Option<Vec<u8>>> = BTreeMap::new();
        for o in &a {
            if o.kind == "resend" {
                assert_eq!(last.get(o.key.as_str()), Some(&&o.value));
            }
            last.insert(&o.key, &o.value);
        }
        // a null value is a tombstone or the re-send of one
        for o in &a {
            if o.kind == "tombstone" {
                assert!(o.value.is_none());
            } else if o.kind != "resend" {
                assert!(o.value.is_some(), "{o:?}");
            }
        }
    }
}
