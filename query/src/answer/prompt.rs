//! The answer prompt, byte for byte the same for the same inputs: fixed instructions first
//! (the system message, identical for every question in one language, so a server's prefix
//! cache is reused), then the packed passages with their numbers (the packer's deterministic
//! context), then the question, and last a one-line restatement of the task. The refusal
//! sentence is quoted exactly, last in the instructions, so that only that line differs
//! between languages. Pure.

use freshet_llm::Message;

/// The instructions, before the refusal line.
const RULES: &str = "You answer questions using only the numbered passages the user gives you.
Rules:
- Every sentence of your answer states what a passage says and cites it by its number in square brackets, such as [1], or several, such as [1][3].
- Use no knowledge from outside the passages, and cite only numbers the passages have.
- Answer in the language of the question, briefly.
- If the passages do not contain the answer, reply with exactly this sentence and nothing else:";

/// The messages of an answer call.
pub fn messages(question: &str, context: &str, refusal: &str) -> Vec<Message> {
    let system = format!("{RULES}\n{}", quoted(refusal));
    let user = format!(
        "Passages:\n\n{context}\n\nQuestion: {}\n\nAnswer the question from the passages above, \
         citing them as [n], or reply exactly {} if they do not contain the answer.",
        single_line(question),
        quoted(refusal)
    );
    vec![Message::system(system), Message::user(user)]
}

/// The messages of a grounding check: each numbered statement with the passages it cites.
pub fn grounding_messages(statements: &[(String, Vec<(usize, &str)>)]) -> Vec<Message> {
    let mut user = String::from("Statements:\n");
    for (i, (statement, cited)) in statements.iter().enumerate() {
        user.push_str(&format!("\nS{}: {}\n", i + 1, single_line(statement)));
        for (n, text) in cited {
            user.push_str(&format!("[{n}] {}\n", single_line(text)));
        }
    }
    user.push_str(
        "\nFor each statement, reply with one line \"S<number>: SUPPORTED\" if its passages state \
         it, else \"S<number>: UNSUPPORTED\".",
    );
    vec![
        Message::system(
            "You check statements against the passages they cite. A statement is SUPPORTED only \
             if its passages state it; knowledge from outside the passages does not count.",
        ),
        Message::user(user),
    ]
}

fn quoted(s: &str) -> String {
    format!("\"{}\"", single_line(s))
}

/// Line breaks as spaces (a question or statement is one line of the prompt).
fn single_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_is_deterministic_and_ordered() {
        let ctx = "[1] Cats\ncats sleep\n\n[2] Dogs\ndogs bark";
        let a = messages("Who  sleeps?\nTell me.", ctx, "No answer.");
        let b = messages("Who  sleeps?\nTell me.", ctx, "No answer.");
        assert_eq!(a, b);
        assert_eq!(a.len(), 2);
        let sys = &a[0].content;
        assert!(sys.starts_with(RULES), "{sys}");
        assert!(sys.ends_with("\n\"No answer.\""), "{sys}");
        let user = &a[1].content;
        let p = user.find("[1] Cats").unwrap();
        let q = user.find("Question: Who sleeps? Tell me.").unwrap();
        let t = user.find("Answer the question").unwrap();
        assert!(p < q && q < t, "{user}");
        assert!(user.ends_with("reply exactly \"No answer.\" if they do not contain the answer."));
        // Only the refusal line differs between languages.
        let zh = messages("猫睡觉吗？", ctx, "所提供的资料中没有答案。");
        assert_eq!(
            zh[0].content.lines().take(5).collect::<Vec<_>>(),
            a[0].content.lines().take(5).collect::<Vec<_>>()
        );
    }

    #[test]
    fn grounding_lists_each_statement_with_its_passages() {
        let m = grounding_messages(&[
            ("Cats sleep.".into(), vec![(1, "cats\nsleep a lot")]),
            ("Dogs fly.".into(), vec![(2, "dogs bark"), (1, "cats")]),
        ]);
        assert_eq!(
            m[1].content,
            "Statements:\n\nS1: Cats sleep.\n[1] cats sleep a lot\n\nS2: Dogs fly.\n[2] dogs bark\n\
             [1] cats\n\nFor each statement, reply with one line \"S<number>: SUPPORTED\" if its \
             passages state it, else \"S<number>: UNSUPPORTED\"."
        );
    }
}
