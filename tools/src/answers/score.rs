//! The scores of answers, from `/v1/answer` responses and what each question expects. Pure.
//!
//! Per answerable question (documents expected): context recall (expected documents among the
//! passages), citation precision (cited documents that are expected; questions whose answer
//! cites nothing are left out of it and counted in `no_citation`) and recall (expected
//! documents cited), a false refusal when it refuses, key-phrase containment when the question
//! names key phrases. Per unanswerable question: refused or not. For every answer: invalid
//! citations and uncited sentences; the lexical check of each cited sentence (at least half of
//! its content words are in the passages it cites); the grounding check's verdicts when it ran.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a question expects.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Expected {
    /// Documents that hold the answer; empty for a question the corpus cannot answer.
    pub docs: BTreeSet<String>,
    pub answerable: bool,
    /// Phrases a right answer contains (compared case-insensitively).
    pub key_phrases: Vec<String>,
}

/// The scores of one answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AnswerScore {
    pub answerable: bool,
    pub refused: bool,
    pub context_recall: Option<f64>,
    pub citation_precision: Option<f64>,
    pub citation_recall: Option<f64>,
    pub key_phrases: Option<f64>,
    pub citations: usize,
    pub invalid_citations: usize,
    pub sentences: usize,
    pub uncited_sentences: usize,
    /// Cited sentences, and those the lexical check supports.
    pub cited_sentences: usize,
    pub lexically_supported: usize,
    /// Statements the grounding check judged, and those it found supported.
    pub judged: usize,
    pub judged_supported: usize,
}

/// Scores `answer` (a `/v1/answer` response) against `expected`.
pub fn score(answer: &Value, expected: &Expected) -> AnswerScore {
    let passages = answer["passages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let doc = |p: &Value| p["doc_id"].as_str().unwrap_or_default().to_owned();
    let given: BTreeSet<String> = passages.iter().map(doc).collect();
    let cited: BTreeSet<String> = passages
        .iter()
        .filter(|p| p["cited"] == true)
        .map(doc)
        .collect();
    let refused = answer["refused"] == true;
    let len = |k: &str| answer[k].as_array().map_or(0, Vec::len);
    let mut s = AnswerScore {
        answerable: expected.answerable,
        refused,
        citations: len("citations"),
        invalid_citations: len("invalid_citations"),
        sentences: len("sentences"),
        uncited_sentences: len("uncited_sentences"),
        ..Default::default()
    };
    if expected.answerable && !expected.docs.is_empty() {
        let n = expected.docs.len() as f64;
        s.context_recall = Some(expected.docs.intersection(&given).count() as f64 / n);
        s.citation_recall = Some(expected.docs.intersection(&cited).count() as f64 / n);
        if !cited.is_empty() {
            s.citation_precision =
                Some(expected.docs.intersection(&cited).count() as f64 / cited.len() as f64);
        }
    }
    if !expected.key_phrases.is_empty() {
        let text = answer["answer"].as_str().unwrap_or_default().to_lowercase();
        let found = expected
            .key_phrases
            .iter()
            .filter(|k| text.contains(&k.to_lowercase()))
            .count();
        s.key_phrases = Some(found as f64 / expected.key_phrases.len() as f64);
    }
    let text_of = |n: u64| {
        passages
            .iter()
            .find(|p| p["number"].as_u64() == Some(n))
            .and_then(|p| p["text"].as_str())
            .unwrap_or_default()
    };
    for sentence in answer["sentences"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
    {
        let cites: Vec<u64> = sentence["cites"]
            .as_array()
            .map(|c| c.iter().filter_map(Value::as_u64).collect())
            .unwrap_or_default();
        if cites.is_empty() {
            continue;
        }
        s.cited_sentences += 1;
        let held: String = cites
            .iter()
            .map(|n| text_of(*n))
            .collect::<Vec<_>>()
            .join(" ");
        if lexically_supported(sentence["text"].as_str().unwrap_or_default(), &held) {
            s.lexically_supported += 1;
        }
    }
    for st in answer["grounding"]["statements"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
    {
        if let Some(v) = st["supported"].as_bool() {
            s.judged += 1;
            s.judged_supported += usize::from(v);
        }
    }
    s
}

/// Whether `passages` hold at least half of the content words of `sentence`
/// ([`freshet_llm::overlap`]).
pub fn lexically_supported(sentence: &str, passages: &str) -> bool {
    freshet_llm::overlap::holds(sentence, passages)
}

/// The mean of the `Some` values (`None` when there are none).
pub fn mean(values: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    let v: Vec<f64> = values.into_iter().flatten().collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn expected(docs: &[&str], answerable: bool) -> Expected {
        Expected {
            docs: docs.iter().map(|d| d.to_string()).collect(),
            answerable,
            key_phrases: Vec::new(),
        }
    }

    #[test]
    fn citations_are_scored_against_the_expected_documents() {
        let a = json!({
            "answer": "Vitamin D strengthens bones [1]. Comets are sweet [2].",
            "refused": false,
            "passages": [
                {"number": 1, "doc_id": "d1", "cited": true, "text": "Vitamin D strengthens bones in children."},
                {"number": 2, "doc_id": "d9", "cited": true, "text": "Comets are icy."},
                {"number": 3, "doc_id": "d2", "cited": false, "text": "x"}
            ],
            "citations": [{"number": 1}, {"number": 2}],
            "invalid_citations": [{"number": 7}],
            "sentences": [
                {"text": "Vitamin D strengthens bones [1].", "cites": [1]},
                {"text": "Comets are sweet [2].", "cites": [2]}
            ],
            "uncited_sentences": [],
            "grounding": {"statements": [{"supported": true}, {"supported": false}, {"supported": null}]}
        });
        let s = score(&a, &expected(&["d1", "d2", "d3"], true));
        assert_eq!(s.context_recall, Some(2.0 / 3.0));
        assert_eq!(s.citation_recall, Some(1.0 / 3.0));
        assert_eq!(s.citation_precision, Some(0.5));
        assert_eq!((s.citations, s.invalid_citations, s.sentences), (2, 1, 2));
        // "comets", "sweet": only "comets" is in passage 2: half, supported; a sentence of
        // words the passage lacks would not be.
        assert_eq!((s.cited_sentences, s.lexically_supported), (2, 2));
        assert!(!lexically_supported(
            "Saturn rings shine brightly [1].",
            "Comets are icy."
        ));
        assert_eq!((s.judged, s.judged_supported), (2, 1));
        assert!(!s.refused && s.answerable);
    }

    #[test]
    fn refusals_and_unanswerable_questions() {
        let a = json!({"answer": "The passages do not contain the answer.", "refused": true,
                       "passages": [], "sentences": [{"text": "The passages do not contain the answer.", "cites": []}]});
        let s = score(&a, &expected(&[], false));
        assert!(s.refused && !s.answerable);
        assert_eq!((s.context_recall, s.citation_precision), (None, None));
        let s = score(&a, &expected(&["d1"], true));
        assert_eq!(
            (s.context_recall, s.citation_recall, s.citation_precision),
            (Some(0.0), Some(0.0), None)
        );
    }

    #[test]
    fn key_phrases_and_chinese_words() {
        let a = json!({"answer": "李白写了《静夜思》[1]。", "passages": [], "sentences": []});
        let e = Expected {
            key_phrases: vec!["静夜思".into(), "杜甫".into()],
            ..expected(&[], true)
        };
        assert_eq!(score(&a, &e).key_phrases, Some(0.5));
        assert!(lexically_supported(
            "李白写了静夜思【1】。",
            "静夜思是李白写的诗"
        ));
        assert_eq!(mean([Some(1.0), None, Some(0.0)]), Some(0.5));
        assert_eq!(mean([None]), None);
    }
}
