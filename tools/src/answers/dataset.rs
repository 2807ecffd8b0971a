//! An answer dataset: `questions.jsonl`, one question per line (docs/evaluation-answers.md):
//!
//! ```json
//! {"id": "q1", "question": "…", "expected_docs": ["d1"], "key_phrases": ["…"]}
//! {"id": "q2", "question": "…", "answerable": false, "removed_docs": ["d7"]}
//! {"id": "q3", "query_id": "13"}
//! ```
//!
//! `query_id` takes the question's text and expected documents from a BEIR dataset (its
//! `queries.jsonl` and `qrels/<split>.tsv`). `removed_docs` are deleted from the index before
//! the questions are asked: a question whose answer was in them is one the corpus can no
//! longer answer. `answerable` defaults to true; an unanswerable question expects a refusal.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use super::score::Expected;
use crate::eval::beir::Dataset as Beir;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    id: String,
    question: Option<String>,
    query_id: Option<String>,
    #[serde(default)]
    expected_docs: Vec<String>,
    answerable: Option<bool>,
    #[serde(default)]
    key_phrases: Vec<String>,
    #[serde(default)]
    removed_docs: Vec<String>,
    language: Option<String>,
}

/// One question, resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct Question {
    pub id: String,
    pub text: String,
    pub language: Option<String>,
    pub expected: Expected,
}

/// The questions and the documents to delete before asking them.
#[derive(Debug)]
pub struct Questions {
    pub questions: Vec<Question>,
    pub removed_docs: BTreeSet<String>,
}

/// Reads `path`, resolving `query_id`s in `beir` (required when a line has one).
pub fn load(path: &Path, beir: Option<&Beir>) -> Result<Questions> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse(&text, beir).with_context(|| format!("in {}", path.display()))
}

pub fn parse(text: &str, beir: Option<&Beir>) -> Result<Questions> {
    let mut questions = Vec::new();
    let mut removed_docs = BTreeSet::new();
    let mut ids = BTreeSet::new();
    for (n, raw) in text.lines().enumerate() {
        if raw.trim().is_empty() {
            continue;
        }
        let line: Line = serde_json::from_str(raw).with_context(|| format!("line {}", n + 1))?;
        if !ids.insert(line.id.clone()) {
            bail!("line {}: id {:?} is used twice", n + 1, line.id);
        }
        let (text, mut docs) = match (line.question, line.query_id) {
            (Some(q), None) => (q, line.expected_docs),
            (None, Some(qid)) => {
                let Some(b) = beir else {
                    bail!(
                        "line {}: query_id {qid:?} needs a BEIR dataset (--beir)",
                        n + 1
                    );
                };
                let Some((_, q)) = b.queries.iter().find(|(id, _)| *id == qid) else {
                    bail!("line {}: query {qid:?} is not in the BEIR queries", n + 1);
                };
                let docs = if line.expected_docs.is_empty() {
                    b.qrels
                        .get(&qid)
                        .map(|j| {
                            j.iter()
                                .filter(|(_, g)| **g > 0)
                                .map(|(d, _)| d.clone())
                                .collect()
                        })
                        .unwrap_or_default()
                } else {
                    line.expected_docs
                };
                (q.clone(), docs)
            }
            _ => bail!("line {}: give question or query_id (one of them)", n + 1),
        };
        if text.trim().is_empty() {
            bail!("line {}: the question is empty", n + 1);
        }
        let answerable = line.answerable.unwrap_or(true);
        if answerable && docs.is_empty() && line.key_phrases.is_empty() {
            bail!(
                "line {}: an answerable question needs expected_docs or key_phrases",
                n + 1
            );
        }
        if !answerable {
            docs.clear();
        }
        removed_docs.extend(line.removed_docs);
        questions.push(Question {
            id: line.id,
            text,
            language: line.language,
            expected: Expected {
                docs: docs.into_iter().collect(),
                answerable,
                key_phrases: line.key_phrases,
            },
        });
    }
    if questions.is_empty() {
        bail!("no questions");
    }
    for q in &questions {
        if let Some(d) = q.expected.docs.iter().find(|d| removed_docs.contains(*d)) {
            bail!(
                "question {}: its expected document {d:?} is among the removed documents",
                q.id
            );
        }
    }
    Ok(Questions {
        questions,
        removed_docs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_resolve_and_mistakes_are_named() {
        let q = parse(
            r#"{"id":"a","question":"Why?","expected_docs":["d1"]}
               {"id":"b","question":"Who?","answerable":false,"removed_docs":["d7","d8"]}"#,
            None,
        )
        .unwrap();
        assert_eq!(q.questions.len(), 2);
        assert!(q.questions[0].expected.answerable && !q.questions[1].expected.answerable);
        assert_eq!(q.removed_docs.len(), 2);
        for (text, needle) in [
            (r#"{"id":"a"}"#, "question or query_id"),
            (r#"{"id":"a","query_id":"1"}"#, "--beir"),
            (
                r#"{"id":"a","question":"x"}"#,
                "expected_docs or key_phrases",
            ),
            (
                r#"{"id":"a","question":"x","expected_docs":["d"]}
                {"id":"a","question":"y","expected_docs":["d"]}"#,
                "used twice",
            ),
            (
                r#"{"id":"a","question":"x","expected_docs":["d"],"removed_docs":["d"]}"#,
                "removed",
            ),
            (r#"{"id":"a","question":"x","colour":1}"#, "unknown field"),
            ("", "no questions"),
        ] {
            let e = format!("{:#}", parse(text, None).unwrap_err());
            assert!(e.contains(needle), "{text}: {e}");
        }
    }
}
