//! What the stand-in says, derived from the request alone: the numbered passages of the prompt
//! (`[n] text`, up to the next numbered line or a blank line), one sentence from each cited as
//! `[n]`, or [`REFUSAL`] when the prompt holds none; and what the model name asks of it
//! ([`Script`]: faults to inject, wrong citations to write).

use std::time::Duration;

use super::ground;

/// The stand-in's fixed refusal, answered when the prompt holds no numbered passage.
pub const REFUSAL: &str = "The passages do not contain the answer.";

/// Passages the answer quotes at most.
const CITED: usize = 3;

/// What a request's model name asks of the stand-in: `standin` alone answers normally;
/// `standin-<script>` injects a fault or writes a flawed answer (docs/testing.md lists them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Script {
    Answer,
    /// 429 with `Retry-After: 1` on every request.
    RateLimited,
    /// 429 once per model name (`Retry-After` in seconds, or as an HTTP date), then answers.
    RateLimitedOnce {
        http_date: bool,
    },
    /// 429 with `Retry-After: 3600` (longer than any deadline).
    RateLimitedLong,
    /// This status (5xx, 401, …) on every request.
    Status(u16),
    /// This 5xx once per model name, then answers.
    StatusOnce(u16),
    /// Waits this long before answering.
    Slow(Duration),
    /// Streams this many pieces, then goes silent with the connection open (a whole answer
    /// never comes).
    StallAfter(usize),
    /// Waits this long between streamed pieces.
    Drip(Duration),
    /// 200 with a body that is not JSON (a chunk that is not JSON when streaming).
    Malformed,
    /// The stream ends without a finish_reason or `[DONE]`.
    Truncated,
    /// The answer cites a passage number the prompt does not have.
    InvalidCitation,
    /// The answer has a sentence without a citation.
    Uncited,
}

impl Script {
    /// The script of `model`, `None` when it is not a stand-in model name.
    pub fn of(model: &str) -> Option<Script> {
        let rest = model.strip_prefix("standin")?;
        if rest.is_empty() {
            return Some(Script::Answer);
        }
        let spec = rest.strip_prefix('-')?;
        let script = match spec {
            "429" => Script::RateLimited,
            "429-then-ok" => Script::RateLimitedOnce { http_date: false },
            "429-date-then-ok" => Script::RateLimitedOnce { http_date: true },
            "429-long" => Script::RateLimitedLong,
            "malformed" => Script::Malformed,
            "truncated" => Script::Truncated,
            "invalid-citation" => Script::InvalidCitation,
            "uncited" => Script::Uncited,
            _ => {
                if let Some(status) = spec.strip_suffix("-then-ok") {
                    Script::StatusOnce(status_code(status).filter(|s| *s >= 500)?)
                } else if let Some(d) = spec.strip_prefix("slow-") {
                    Script::Slow(duration(d)?)
                } else if let Some(d) = spec.strip_prefix("drip-") {
                    Script::Drip(duration(d)?)
                } else if let Some(n) = spec.strip_prefix("stall-after-") {
                    Script::StallAfter(n.parse().ok()?)
                } else {
                    Script::Status(status_code(spec)?)
                }
            }
        };
        Some(script)
    }
}

fn status_code(s: &str) -> Option<u16> {
    s.parse().ok().filter(|c| (400..600).contains(c))
}

/// `5s`, `250ms`.
fn duration(s: &str) -> Option<Duration> {
    if let Some(ms) = s.strip_suffix("ms") {
        return ms.parse().ok().map(Duration::from_millis);
    }
    s.strip_suffix('s')?.parse().ok().map(Duration::from_secs)
}

/// The numbered passages of `text` in order: `(n, passage text)`.
pub fn passages(text: &str) -> Vec<(u32, String)> {
    let mut found: Vec<(u32, String)> = Vec::new();
    let mut open = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some((n, rest)) = numbered(trimmed) {
            found.push((n, rest.to_owned()));
            open = true;
        } else if trimmed.is_empty() {
            open = false;
        } else if open {
            if let Some((_, body)) = found.last_mut() {
                if !body.is_empty() {
                    body.push(' ');
                }
                body.push_str(trimmed);
            }
        }
    }
    found
}

/// `[n] rest` → `(n, rest)`.
fn numbered(line: &str) -> Option<(u32, &str)> {
    let inner = line.strip_prefix('[')?;
    let (n, rest) = inner.split_once(']')?;
    let n = n.parse().ok()?;
    Some((n, rest.trim()))
}

/// The first sentence of `text` (through `.`, `!`, `?`, `。`, `！`, `？`), at most 200
/// characters, without its closing punctuation.
fn first_sentence(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars().take(200) {
        if matches!(c, '.' | '!' | '?' | '。' | '！' | '？') {
            break;
        }
        out.push(c);
    }
    out.trim().to_owned()
}

/// The answer to a prompt made of `texts` (every message's content) under `script`. A
/// grounding check gets its verdicts ([`ground::verdicts`]). A prompt with a `Question:` line is
/// answered from the passages that share a content word with it, and refused (with the
/// sentence the prompt asks for, else [`REFUSAL`]) when none does.
pub fn answer(texts: &[&str], script: &Script) -> String {
    if ground::is_grounding(texts) {
        return ground::verdicts(texts);
    }
    let refusal = ground::refusal(texts).unwrap_or_else(|| REFUSAL.to_owned());
    let mut found: Vec<(u32, String)> = texts.iter().flat_map(|t| passages(t)).collect();
    if let Some(q) = ground::question(texts) {
        let asked = ground::terms(&q);
        found.retain(|(_, body)| !ground::terms(body).is_disjoint(&asked));
    }
    if found.is_empty() {
        return refusal;
    }
    let mut sentences: Vec<String> = found
        .iter()
        .filter(|(_, body)| !body.is_empty())
        .take(CITED)
        .map(|(n, body)| format!("{} [{n}].", first_sentence(body)))
        .collect();
    if sentences.is_empty() {
        return refusal;
    }
    match script {
        Script::InvalidCitation => {
            let beyond = found.iter().map(|(n, _)| *n).max().unwrap_or(0) + 1;
            sentences.push(format!(
                "This statement cites a passage that is absent [{beyond}]."
            ));
        }
        Script::Uncited => sentences.push("This statement cites nothing.".to_owned()),
        _ => {}
    }
    sentences.join(" ")
}

/// The stand-in's token count of `text`: its whitespace-separated words (deterministic, not a
/// real tokenizer's).
pub fn tokens(text: &str) -> u64 {
    text.split_whitespace().count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_answers_from_the_numbered_passages_and_cites_them() {
        let prompt = "Answer from the passages.\n\n[1] Cats sleep a lot. They purr.\n\
                      [2] Dogs bark\nat night. Loudly.\n\nQuestion: which animals sleep or bark?";
        assert_eq!(
            passages(prompt),
            vec![
                (1, "Cats sleep a lot. They purr.".into()),
                (2, "Dogs bark at night. Loudly.".into())
            ]
        );
        assert_eq!(
            answer(&["system", prompt], &Script::Answer),
            "Cats sleep a lot [1]. Dogs bark at night [2]."
        );
        assert_eq!(
            answer(&["[3] 猫很能睡。狗会叫。"], &Script::Answer),
            "猫很能睡 [3]."
        );
    }

    #[test]
    fn without_passages_it_refuses() {
        assert_eq!(answer(&["What is the capital?"], &Script::Answer), REFUSAL);
        // Passages that share no word with the question do not hold its answer; the prompt's
        // own refusal sentence is the one said.
        let prompt = "[1] Cats sleep a lot.\n\nQuestion: Where do comets come from?\n\nAnswer \
                      or reply exactly \"Nothing here.\" if not.";
        assert_eq!(answer(&[prompt], &Script::Answer), "Nothing here.");
        let prompt = prompt.replace("comets", "cats").replace("Where do", "Do");
        assert_eq!(answer(&[&prompt], &Script::Answer), "Cats sleep a lot [1].");
        assert_eq!(answer(&["[x] not a number"], &Script::Answer), REFUSAL);
    }

    #[test]
    fn scripts_write_flawed_answers() {
        let p = "[1] A is true.\n[4] B holds.";
        assert_eq!(
            answer(&[p], &Script::InvalidCitation),
            "A is true [1]. B holds [4]. This statement cites a passage that is absent [5]."
        );
        assert!(
            answer(&[p], &Script::Uncited).ends_with("B holds [4]. This statement cites nothing.")
        );
    }

    #[test]
    fn model_names_choose_the_script() {
        assert_eq!(Script::of("standin"), Some(Script::Answer));
        assert_eq!(
            Script::of("standin-429-then-ok"),
            Some(Script::RateLimitedOnce { http_date: false })
        );
        assert_eq!(
            Script::of("standin-503-then-ok"),
            Some(Script::StatusOnce(503))
        );
        assert_eq!(Script::of("standin-500"), Some(Script::Status(500)));
        assert_eq!(Script::of("standin-401"), Some(Script::Status(401)));
        assert_eq!(
            Script::of("standin-slow-5s"),
            Some(Script::Slow(Duration::from_secs(5)))
        );
        assert_eq!(
            Script::of("standin-drip-20ms"),
            Some(Script::Drip(Duration::from_millis(20)))
        );
        assert_eq!(
            Script::of("standin-stall-after-2"),
            Some(Script::StallAfter(2))
        );
        for unknown in [
            "gpt-4o",
            "standin-",
            "standin-200",
            "standin-slow-x",
            "standinx",
        ] {
            assert_eq!(Script::of(unknown), None, "{unknown}");
        }
    }
}
