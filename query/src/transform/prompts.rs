//! The fixed prompts of the query transformations and the reading of their answers. A prompt
//! is byte-for-byte the same for the same input (a system message that names the task on its
//! first line, [`freshet_llm::task`], then the user message); every prompt asks for an answer
//! in the question's language, so English and Chinese questions both work. An answer that
//! cannot be read (empty, or only lines that are not queries) is [`Garbage`].

use freshet_llm::{task, Message};

/// The conversation turns a condense prompt shows (roles `user`, `assistant`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Turn {
    pub role: freshet_llm::Role,
    pub content: String,
}

/// An answer the transformation cannot use, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Garbage(pub String);

/// The longest hypothetical passage kept (characters).
pub const MAX_PASSAGE_CHARS: usize = 2000;

pub fn multi_query(question: &str, n: usize) -> Vec<Message> {
    vec![
        Message::system(format!(
            "{}{}; count: {n}\n\
             You rewrite a search question into {n} different search queries that together find \
             the passages that answer it: use other words, synonyms and the more specific or \
             more general terms a document would use. Keep every name, number and code exactly \
             as written. Write every query in the language of the question.\n\
             Answer with exactly {n} lines, one query per line, without numbering, quotes or \
             any other text.",
            task::PREFIX,
            task::MULTI_QUERY
        )),
        Message::user(question.to_owned()),
    ]
}

pub fn hyde(question: &str) -> Vec<Message> {
    vec![
        Message::system(format!(
            "{}{}\n\
             Write one short passage, at most 120 words, that could appear in a document \
             answering the question. Write it in the language of the question. State plausible \
             facts plainly; do not say that you are unsure and do not ask anything back.\n\
             Answer with the passage only.",
            task::PREFIX,
            task::HYDE
        )),
        Message::user(question.to_owned()),
    ]
}

pub fn condense(history: &[Turn], question: &str) -> Vec<Message> {
    let mut conversation = String::from("Conversation:\n");
    for t in history {
        let who = match t.role {
            freshet_llm::Role::Assistant => "assistant",
            _ => "user",
        };
        conversation.push_str(who);
        conversation.push_str(": ");
        conversation.push_str(&t.content.replace('\n', " "));
        conversation.push('\n');
    }
    vec![
        Message::system(format!(
            "{}{}\n\
             Rewrite the last question of a conversation into one standalone search question \
             that can be understood without the conversation: replace pronouns and references \
             with the names and things they refer to, and keep every name, number and code \
             exactly. Write it in the language of the last question. If it already stands \
             alone, repeat it unchanged.\n\
             Answer with the question only.",
            task::PREFIX,
            task::CONDENSE
        )),
        Message::user(format!("{conversation}\nLast question: {question}")),
    ]
}

/// A line without the list marks, numbers, labels and quotes models add.
fn clean_line(line: &str) -> &str {
    let mut l = line.trim();
    l = l.trim_start_matches(['-', '*', '•']).trim_start();
    // "1." "2)" "3:"
    let digits = l.chars().take_while(char::is_ascii_digit).count();
    if digits > 0 {
        let rest = &l[digits..];
        if let Some(mark) = rest
            .chars()
            .next()
            .filter(|c| ['.', ')', ':', '、'].contains(c))
        {
            l = rest[mark.len_utf8()..].trim_start();
        }
    }
    for label in [
        "Query:",
        "Standalone question:",
        "Question:",
        "问题：",
        "问题:",
    ] {
        if let Some(rest) = l.strip_prefix(label) {
            l = rest.trim_start();
        }
    }
    l.trim_matches(['"', '\'', '“', '”', '「', '」']).trim()
}

/// The rewrites of an answer: at most `n` distinct lines, none equal to the question, each at
/// most `max_chars` characters.
pub fn read_variants(
    answer: &str,
    question: &str,
    n: usize,
    max_chars: usize,
) -> Result<Vec<String>, Garbage> {
    let mut out: Vec<String> = Vec::new();
    let mut lines = 0;
    for line in answer.lines() {
        let l = clean_line(line);
        if l.is_empty() {
            continue;
        }
        lines += 1;
        if l.chars().count() > max_chars
            || l.eq_ignore_ascii_case(question.trim())
            || out.iter().any(|o| o.eq_ignore_ascii_case(l))
        {
            continue;
        }
        out.push(l.to_owned());
    }
    if lines == 0 {
        return Err(Garbage("the answer holds no query".into()));
    }
    out.truncate(n);
    Ok(out)
}

/// The hypothetical passage of an answer (at most [`MAX_PASSAGE_CHARS`]).
pub fn read_passage(answer: &str) -> Result<String, Garbage> {
    let p = answer.trim();
    if p.chars().filter(|c| c.is_alphanumeric()).count() < 3 {
        return Err(Garbage("the answer holds no passage".into()));
    }
    Ok(p.chars().take(MAX_PASSAGE_CHARS).collect())
}

/// The standalone question of an answer: its first non-empty line.
pub fn read_standalone(answer: &str, max_chars: usize) -> Result<String, Garbage> {
    let line = answer
        .lines()
        .map(clean_line)
        .find(|l| !l.is_empty())
        .ok_or_else(|| Garbage("the answer holds no question".into()))?;
    if line.chars().count() > max_chars {
        return Err(Garbage(format!(
            "the standalone question is longer than {max_chars} characters"
        )));
    }
    Ok(line.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_are_deterministic_and_name_their_task() {
        assert_eq!(multi_query("why?", 3), multi_query("why?", 3));
        assert_eq!(hyde("为什么？"), hyde("为什么？"));
        let m = multi_query("why?", 3);
        assert_eq!(task::of(&m[0].content), Some((task::MULTI_QUERY, Some(3))));
        assert_eq!(m[1].content, "why?");
        assert_eq!(task::of(&hyde("q")[0].content), Some((task::HYDE, None)));
        let h = [
            Turn {
                role: freshet_llm::Role::User,
                content: "Who found it?".into(),
            },
            Turn {
                role: freshet_llm::Role::Assistant,
                content: "Marie\nKessler.".into(),
            },
        ];
        let c = condense(&h, "And later?");
        assert_eq!(c, condense(&h, "And later?"));
        assert_eq!(task::of(&c[0].content), Some((task::CONDENSE, None)));
        assert_eq!(
            c[1].content,
            "Conversation:\nuser: Who found it?\nassistant: Marie Kessler.\n\nLast question: And later?"
        );
        for p in [&m[0].content, &c[0].content] {
            assert!(p.contains("language of the"), "{p}");
        }
    }

    #[test]
    fn variants_are_read_from_lists_of_any_style() {
        let a = "1. glacier melt\n2) Glacier Melt\n- ice loss\n\n\"why glaciers retreat\"\nq";
        assert_eq!(
            read_variants(a, "q", 5, 100).unwrap(),
            ["glacier melt", "ice loss", "why glaciers retreat"]
        );
        assert_eq!(read_variants(a, "q", 1, 100).unwrap(), ["glacier melt"]);
        assert!(read_variants(" \n\n", "q", 3, 100).is_err());
        assert_eq!(
            read_variants("q", "q", 3, 100).unwrap(),
            Vec::<String>::new()
        );
        assert_eq!(read_variants(&"x".repeat(50), "q", 3, 10).unwrap().len(), 0);
        assert_eq!(
            read_variants("1、冰川融化\n2、冰川退缩", "q", 3, 100).unwrap(),
            ["冰川融化", "冰川退缩"]
        );
    }

    #[test]
    fn passages_and_standalone_questions_are_checked() {
        assert!(read_passage("  ").is_err());
        assert!(read_passage("...").is_err());
        assert_eq!(
            read_passage(&"a".repeat(5000)).unwrap().len(),
            MAX_PASSAGE_CHARS
        );
        assert_eq!(
            read_standalone("\nStandalone question: What did Kessler do?\n", 100).unwrap(),
            "What did Kessler do?"
        );
        assert!(read_standalone("", 100).is_err());
        assert!(read_standalone(&"x".repeat(20), 10).is_err());
    }
}
