//! Word overlap, the crude lexical measure of whether a text holds another's words: the content
//! words of a text (lower-cased words of four letters or more, less a few very common ones;
//! each pair of neighbouring CJK characters, or the character of a one-character CJK word),
//! and whether passages hold at least half of a statement's. The stand-in reads questions and
//! judges grounding with it; `freshet-tools eval-answers` checks cited sentences with it.
//! Deterministic, and no judge of meaning.

use std::collections::BTreeSet;

/// Words too common to tell texts apart.
const STOP: &[&str] = &[
    "about", "does", "from", "have", "into", "that", "their", "there", "these", "this", "what",
    "when", "where", "which", "with", "would",
];

/// The content words of `text` (citation markers such as `[1]` are numbers, never words).
pub fn content_words(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for w in text.to_lowercase().split(|c: char| !c.is_alphanumeric()) {
        let cjk: Vec<char> = w.chars().filter(|c| is_cjk(*c)).collect();
        match cjk.len() {
            0 if w.chars().count() >= 4 && !STOP.contains(&w) && !is_number(w) => {
                out.insert(w.to_owned());
            }
            0 => {}
            1 => {
                out.insert(cjk[0].to_string());
            }
            _ => out.extend(cjk.windows(2).map(|p| p.iter().collect::<String>())),
        }
    }
    out
}

/// Whether `passages` hold at least half of the content words of `statement` (a statement
/// without any is held).
pub fn holds(statement: &str, passages: &str) -> bool {
    let words = content_words(statement);
    if words.is_empty() {
        return true;
    }
    let held = content_words(passages);
    2 * words.iter().filter(|w| held.contains(*w)).count() >= words.len()
}

fn is_number(w: &str) -> bool {
    w.chars().all(|c| c.is_ascii_digit())
}

fn is_cjk(c: char) -> bool {
    matches!(c, '\u{3040}'..='\u{30ff}' | '\u{3400}'..='\u{4dbf}' | '\u{4e00}'..='\u{9fff}' | '\u{ac00}'..='\u{d7af}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_long_words_and_cjk_pairs() {
        let t = content_words("What does Vitamin-D do [12]? 维生素D有什么作用，猫");
        assert!(
            t.contains("vitamin") && t.contains("维生") && t.contains("生素"),
            "{t:?}"
        );
        assert!(t.contains("猫"), "{t:?}");
        assert!(
            !t.contains("what") && !t.contains("does") && !t.contains("12"),
            "{t:?}"
        );
    }

    #[test]
    fn statements_are_held_by_half_their_words() {
        assert!(holds(
            "Vitamin D strengthens bones [1].",
            "Vitamin D strengthens bones in children."
        ));
        assert!(holds("Comets are sweet [2].", "Comets are icy."));
        assert!(!holds(
            "Saturn rings shine brightly [1].",
            "Comets are icy."
        ));
        assert!(holds("李白写了静夜思【1】。", "静夜思是李白写的诗"));
        assert!(holds("[1]", "anything"));
    }
}
