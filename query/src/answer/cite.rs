//! An answer's citations, checked. Every marker `[n]` (also `[1, 2]`, `[1][2]` and the
//! full-width `［1］` and `【1】` that models write in Chinese) is found and tied to the passage
//! numbered `n`; a marker naming no passage is flagged, and so is every sentence that carries
//! no valid citation. Sentences follow Unicode's sentence boundaries (UAX #29), line breaks
//! included; markers that open a sentence belong to the one before ("… it. [2] Next"), which is
//! where models put them. Offsets count characters (Unicode scalar values) of the answer. Pure.

use std::sync::LazyLock;

use freshet_core::chars::CharOffsets;
use regex::Regex;
use serde::Serialize;
use unicode_segmentation::UnicodeSegmentation;

/// `[1]`, `[1, 2]`, `［1］`, `【1，2】`: the numbers inside, separated by commas or semicolons.
static MARKER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"[\[［【]\s*(\d{1,9}(?:\s*[,，、;；]\s*\d{1,9})*)\s*[\]］】]")
        .expect("the marker pattern compiles")
});

/// One number of one marker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Mark {
    /// The passage number it names.
    pub number: usize,
    /// The marker's span in the answer (characters; `[1, 2]` gives both numbers one span).
    pub start: usize,
    pub end: usize,
    /// The sentence it belongs to (index into [`Checked::sentences`]).
    pub sentence: usize,
}

/// One sentence of the answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Sentence {
    pub text: String,
    pub start: usize,
    pub end: usize,
    /// The valid passage numbers it cites, in the order written, without repeats.
    pub cites: Vec<usize>,
}

/// What [`check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Checked {
    /// Markers naming a passage of the prompt, in the order written.
    pub citations: Vec<Mark>,
    /// Markers naming a number the prompt has no passage for.
    pub invalid: Vec<Mark>,
    /// Every sentence with words in it (markers and punctuation alone are not one).
    pub sentences: Vec<Sentence>,
    /// Indexes into `sentences` of those that carry no valid citation.
    pub uncited: Vec<usize>,
    /// The passage numbers cited, in the order first cited.
    pub cited: Vec<usize>,
}

/// Checks `answer` against a prompt of `passages` numbered passages (1..=passages). A sentence
/// equal to `refusal` (see [`is_refusal`]) needs no citation.
pub fn check(answer: &str, passages: usize, refusal: &str) -> Checked {
    let chars = CharOffsets::new(answer);
    // Sentence spans (bytes), with the markers that open one moved to the one before.
    // A boundary inside a marker ("bark.[" | "2] Birds") moves to the marker's end.
    let markers: Vec<(usize, usize)> = MARKER
        .find_iter(answer)
        .map(|m| (m.start(), m.end()))
        .collect();
    let mut starts: Vec<usize> = answer
        .split_sentence_bound_indices()
        .map(|(i, _)| i)
        .collect();
    for b in starts.iter_mut() {
        if let Some((_, end)) = markers.iter().find(|(s, e)| *s < *b && *b < *e) {
            *b = *end;
        }
    }
    starts.dedup();
    let mut spans: Vec<(usize, usize)> = starts
        .iter()
        .enumerate()
        .map(|(i, s)| (*s, starts.get(i + 1).copied().unwrap_or(answer.len())))
        .filter(|(s, e)| s < e)
        .collect();
    for i in 1..spans.len() {
        let (start, end) = spans[i];
        let lead = leading_markers(&answer[start..end]);
        if lead > 0 {
            spans[i - 1].1 = start + lead;
            spans[i].0 = start + lead;
        }
    }
    let sentence_of = |byte: usize| spans.iter().position(|(s, e)| byte >= *s && byte < *e);

    let mut out = Checked::default();
    let mut sentence_index = vec![None; spans.len()];
    for (i, (s, e)) in spans.iter().enumerate() {
        let text = &answer[*s..*e];
        if !has_words(&MARKER.replace_all(text, "")) {
            continue;
        }
        sentence_index[i] = Some(out.sentences.len());
        out.sentences.push(Sentence {
            text: text.trim().to_owned(),
            start: chars.ceil(*s),
            end: chars.ceil(*e),
            cites: Vec::new(),
        });
    }
    for m in MARKER.captures_iter(answer) {
        let (Some(whole), Some(list)) = (m.get(0), m.get(1)) else {
            continue;
        };
        // A marker in a sentence without words (a trailing "[3]" alone) counts for the last
        // sentence with words before it.
        let span = sentence_of(whole.start()).unwrap_or(0);
        let sentence = (0..=span)
            .rev()
            .find_map(|i| sentence_index.get(i).copied().flatten())
            .unwrap_or(0);
        for n in list.as_str().split([',', '，', '、', ';', '；']) {
            // Nine digits at most, so the parse cannot overflow.
            let number = n.trim().parse::<usize>().unwrap_or(0);
            let mark = Mark {
                number,
                start: chars.ceil(whole.start()),
                end: chars.ceil(whole.end()),
                sentence,
            };
            if (1..=passages).contains(&number) {
                if let Some(s) = out.sentences.get_mut(sentence) {
                    if !s.cites.contains(&number) {
                        s.cites.push(number);
                    }
                }
                if !out.cited.contains(&number) {
                    out.cited.push(number);
                }
                out.citations.push(mark);
            } else {
                out.invalid.push(mark);
            }
        }
    }
    out.uncited = out
        .sentences
        .iter()
        .enumerate()
        .filter(|(_, s)| s.cites.is_empty() && !is_refusal(&s.text, refusal))
        .map(|(i, _)| i)
        .collect();
    out
}

/// Whether `answer` is the refusal sentence, or begins with it: compared without citation
/// markers, case, surrounding space and final punctuation.
pub fn is_refusal(answer: &str, refusal: &str) -> bool {
    let a = normalise(answer);
    let r = normalise(refusal);
    !r.is_empty() && a.starts_with(&r)
}

fn normalise(s: &str) -> String {
    let s = MARKER.replace_all(s, "");
    s.trim()
        .trim_end_matches(|c: char| c.is_whitespace() || is_final_punctuation(c))
        .trim_start_matches(['"', '“', '「'])
        .trim_end_matches(['"', '”', '」'])
        .trim_end_matches(|c: char| c.is_whitespace() || is_final_punctuation(c))
        .to_lowercase()
}

fn is_final_punctuation(c: char) -> bool {
    matches!(c, '.' | '!' | '?' | '。' | '！' | '？' | '．')
}

/// Bytes at the start of `s` that are only citation markers and space.
fn leading_markers(s: &str) -> usize {
    let mut at = 0;
    loop {
        let rest = &s[at..];
        let trimmed = rest.trim_start();
        let skipped = rest.len() - trimmed.len();
        match MARKER.find(trimmed) {
            Some(m) if m.start() == 0 => at += skipped + m.end(),
            _ => return if at == 0 { 0 } else { at + skipped },
        }
    }
}

fn has_words(s: &str) -> bool {
    s.chars().any(char::is_alphanumeric)
}

#[cfg(test)]
#[path = "cite_tests.rs"]
mod tests;
