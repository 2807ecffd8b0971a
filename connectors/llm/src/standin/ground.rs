//! The stand-in's reading of a question and of a grounding check, by word overlap
//! ([`crate::overlap`]): a question's overlap with a passage, and the verdict on a statement
//! (its cited passages hold at least half of its words). Deterministic, and crude on purpose: the stand-in
//! tests the plumbing, not the judgement.

use std::collections::BTreeSet;

/// The content words of `text` ([`crate::overlap::content_words`]).
pub fn terms(text: &str) -> BTreeSet<String> {
    crate::overlap::content_words(text)
}

/// The question of an answer prompt: the text after `Question: ` on its line.
pub fn question(texts: &[&str]) -> Option<String> {
    texts.iter().rev().find_map(|t| {
        t.lines()
            .find_map(|l| l.trim().strip_prefix("Question:"))
            .map(|q| q.trim().to_owned())
    })
}

/// The refusal sentence the prompt asks for (`reply exactly "…"`), if it names one.
pub fn refusal(texts: &[&str]) -> Option<String> {
    texts.iter().rev().find_map(|t| {
        let at = t.find("reply exactly \"")? + "reply exactly \"".len();
        let end = t[at..].find('"')?;
        Some(t[at..at + end].to_owned())
    })
}

/// Whether a prompt is a grounding check (it lists `Statements:`).
pub fn is_grounding(texts: &[&str]) -> bool {
    texts.iter().any(|t| t.starts_with("Statements:\n"))
}

/// The verdict lines of a grounding check: `S<i>: SUPPORTED` when the passages under
/// statement `S<i>` hold at least half of its content words (none: unsupported).
pub fn verdicts(texts: &[&str]) -> String {
    let Some(prompt) = texts.iter().find(|t| t.starts_with("Statements:\n")) else {
        return String::new();
    };
    let mut out = Vec::new();
    let mut current: Option<(String, String)> = None;
    let flush = |cur: &mut Option<(String, String)>, out: &mut Vec<String>| {
        if let Some((label, statement_and_passages)) = cur.take() {
            let (statement, passages) = statement_and_passages
                .split_once('\n')
                .unwrap_or((statement_and_passages.as_str(), ""));
            let words = terms(statement);
            let verdict = if !words.is_empty() && crate::overlap::holds(statement, passages) {
                "SUPPORTED"
            } else {
                "UNSUPPORTED"
            };
            out.push(format!("{label}: {verdict}"));
        }
    };
    for line in prompt.lines() {
        let l = line.trim();
        if let Some((label, rest)) = l.split_once(": ").filter(|(s, _)| {
            s.starts_with('S') && s.len() > 1 && s[1..].chars().all(|c| c.is_ascii_digit())
        }) {
            flush(&mut current, &mut out);
            current = Some((label.to_owned(), format!("{rest}\n")));
        } else if l.starts_with('[') {
            if let Some((_, body)) = current.as_mut() {
                body.push_str(l);
                body.push(' ');
            }
        } else if l.starts_with("For each statement") {
            break;
        }
    }
    flush(&mut current, &mut out);
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_are_long_words_and_cjk_pairs() {
        let t = terms("What does Vitamin-D do? 维生素D有什么作用");
        assert!(
            t.contains("vitamin") && t.contains("维生") && t.contains("生素"),
            "{t:?}"
        );
        assert!(
            !t.contains("what") && !t.contains("does") && !t.contains("do"),
            "{t:?}"
        );
    }

    #[test]
    fn the_prompt_names_its_question_and_refusal() {
        let user = "Passages:\n\n[1] x\n\nQuestion: Why is the sky blue?\n\nAnswer … or reply \
                    exactly \"No answer here.\" if they do not contain the answer.";
        assert_eq!(
            question(&["sys", user]).as_deref(),
            Some("Why is the sky blue?")
        );
        assert_eq!(refusal(&["sys", user]).as_deref(), Some("No answer here."));
        assert_eq!(question(&["no question"]), None);
    }

    #[test]
    fn statements_held_by_their_passages_are_supported() {
        let prompt = "Statements:\n\nS1: Vitamin D strengthens bones [1].\n[1] Vitamin D \
                      strengthens bones in children.\n\nS2: Comets taste sweet [2].\n[2] Comets \
                      are icy bodies.\n\nFor each statement, reply …";
        assert_eq!(verdicts(&["sys", prompt]), "S1: SUPPORTED\nS2: UNSUPPORTED");
        assert!(is_grounding(&[prompt]));
    }
}
