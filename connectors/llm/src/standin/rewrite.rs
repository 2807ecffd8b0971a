//! The stand-in's answers to freshet's query transformations, recognised by the task marker on
//! the first line of the system message ([`crate::task`]), derived from the last message alone
//! and the same for the same input:
//!
//! - `multi-query; count: n`: the question's distinct words of three or more letters (or, for a
//!   question without spaces, its halves), one per line, at most `n`.
//! - `hyde`: a passage that restates the question and adds the words "causes", "mechanisms"
//!   and "consequences".
//! - `condense`: the last question with its pronouns (he, him, his, she, her, it, its, they,
//!   them, their; 他, 她, 它) replaced by the last name in the conversation (the last run of
//!   two or more capitalised words, or the last text in 「」 or “”); unchanged without one.

use crate::task;

/// Pronouns the condensing replaces.
const PRONOUNS: &[&str] = &[
    "he", "him", "his", "she", "her", "it", "its", "they", "them", "their",
];
const ZH_PRONOUNS: &[char] = &['他', '她', '它'];

/// The stand-in's answer when the request is one of freshet's transformations, else `None`.
/// `texts` are the messages' contents, the system message first.
pub fn answer(texts: &[&str]) -> Option<String> {
    let (name, count) = task::of(texts.first()?)?;
    let input = texts.last()?;
    match name {
        task::MULTI_QUERY => Some(variants(input, count.unwrap_or(3)).join("\n")),
        task::HYDE => Some(hypothetical(input)),
        task::CONDENSE => Some(condense(input)),
        _ => None,
    }
}

fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric() && c != '-')
        .filter(|w| w.chars().count() >= 3)
        .map(str::to_owned)
        .collect()
}

fn variants(question: &str, n: usize) -> Vec<String> {
    let q = question.trim();
    let mut out: Vec<String> = Vec::new();
    if q.contains(char::is_whitespace) {
        for w in words(q) {
            if !out.iter().any(|o| o.eq_ignore_ascii_case(&w)) {
                out.push(w);
            }
        }
    } else {
        let chars: Vec<char> = q.chars().collect();
        let mid = chars.len() / 2;
        if mid > 0 {
            out.push(chars[..mid].iter().collect());
            out.push(chars[mid..].iter().collect());
        }
    }
    out.truncate(n);
    out
}

fn hypothetical(question: &str) -> String {
    let q = question
        .trim()
        .trim_end_matches(['?', '？', '.', '。'])
        .trim();
    format!(
        "This passage answers the question: {q}. It describes the causes, the mechanisms and \
         the consequences."
    )
}

/// The last question of a condense prompt: the text after its last `Last question:` line.
fn last_question(prompt: &str) -> &str {
    match prompt.rfind("Last question:") {
        Some(i) => prompt[i + "Last question:".len()..].trim(),
        None => prompt.trim(),
    }
}

/// The last name of the conversation part of a condense prompt.
fn last_name(conversation: &str) -> Option<String> {
    let mut best: Option<String> = None;
    // Text quoted in 「」 or “”.
    for (open, close) in [('「', '」'), ('“', '”')] {
        let mut rest = conversation;
        while let Some(i) = rest.find(open) {
            let after = &rest[i + open.len_utf8()..];
            let Some(j) = after.find(close) else { break };
            best = Some(after[..j].to_owned());
            rest = &after[j..];
        }
    }
    if best.is_some() {
        return best;
    }
    let mut run: Vec<&str> = Vec::new();
    for w in conversation.split(|c: char| c.is_whitespace() || ",.;:!?()".contains(c)) {
        if w.chars().next().is_some_and(char::is_uppercase) && w.chars().count() > 1 {
            run.push(w);
        } else {
            if run.len() >= 2 {
                best = Some(run.join(" "));
            }
            run.clear();
        }
    }
    if run.len() >= 2 {
        best = Some(run.join(" "));
    }
    best
}

fn condense(prompt: &str) -> String {
    let question = last_question(prompt);
    let conversation = prompt.rfind("Last question:").map_or("", |i| &prompt[..i]);
    let Some(name) = last_name(conversation) else {
        return question.to_owned();
    };
    let mut out = String::new();
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if PRONOUNS.contains(&word.to_lowercase().as_str()) {
            out.push_str(&name);
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    for c in question.chars() {
        if c.is_alphanumeric() && c.is_ascii() {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            if ZH_PRONOUNS.contains(&c) {
                out.push_str(&name);
            } else {
                out.push(c);
            }
        }
    }
    flush(&mut word, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_query_gives_the_words_of_the_question() {
        let sys = "freshet-task: multi-query; count: 2\nRewrite.";
        assert_eq!(
            answer(&[sys, "glacier retreat in the Alps"]).unwrap(),
            "glacier\nretreat"
        );
        let sys = "freshet-task: multi-query; count: 5\nRewrite.";
        assert_eq!(
            answer(&[sys, "冰川退缩的原因"]).unwrap(),
            "冰川退\n缩的原因"
        );
    }

    #[test]
    fn hyde_restates_the_question() {
        let a = answer(&["freshet-task: hyde\nWrite.", "Why do glaciers retreat?"]).unwrap();
        assert!(
            a.contains("Why do glaciers retreat.") && a.contains("consequences"),
            "{a}"
        );
    }

    #[test]
    fn condense_resolves_pronouns_from_the_conversation() {
        let sys = "freshet-task: condense\nRewrite.";
        let prompt = "Conversation:\nuser: Who found the Zorblax glacier?\nassistant: Marie \
                      Kessler found it in 1921.\n\nLast question: What happened to him later?";
        assert_eq!(
            answer(&[sys, prompt]).unwrap(),
            "What happened to Marie Kessler later?"
        );
        let zh = "Conversation:\nuser: 谁发现了冰川？\nassistant: 「王小明」发现了它。\n\n\
                  Last question: 他后来怎么样了？";
        assert_eq!(answer(&[sys, zh]).unwrap(), "王小明后来怎么样了？");
        let none = "Conversation:\nuser: hello\n\nLast question: what is it?";
        assert_eq!(answer(&[sys, none]).unwrap(), "what is it?");
    }

    #[test]
    fn other_prompts_are_not_transformations() {
        assert_eq!(answer(&["Answer from the passages.", "[1] x"]), None);
        assert_eq!(answer(&["freshet-task: unknown", "x"]), None);
    }
}
