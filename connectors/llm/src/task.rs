//! The markers on the first line of freshet's own prompts (the query node's transformations),
//! so that logs, a proxy and the stand-in ([`crate::standin`], feature `standin`) can tell
//! which task a request is: `freshet-task: <name>`, then `; count: <n>` where the task asks for
//! a number of answers.

/// Prefix of the first line of every freshet prompt's system message.
pub const PREFIX: &str = "freshet-task: ";
/// Rewrite a question into several search queries (`; count: <n>` follows).
pub const MULTI_QUERY: &str = "multi-query";
/// Write a hypothetical answer passage (HyDE).
pub const HYDE: &str = "hyde";
/// Rewrite the last question of a conversation into a standalone question.
pub const CONDENSE: &str = "condense";

/// The task a system message names on its first line, and its count, if it names one:
/// `("multi-query", Some(3))`.
pub fn of(system: &str) -> Option<(&str, Option<usize>)> {
    let first = system.lines().next()?.trim();
    let rest = first.strip_prefix(PREFIX)?;
    let (name, count) = match rest.split_once(';') {
        Some((name, tail)) => (
            name.trim(),
            tail.trim()
                .strip_prefix("count:")
                .and_then(|n| n.trim().parse().ok()),
        ),
        None => (rest.trim(), None),
    };
    Some((name, count))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_line_names_the_task() {
        assert_eq!(
            of("freshet-task: multi-query; count: 3\nYou rewrite..."),
            Some(("multi-query", Some(3)))
        );
        assert_eq!(of("freshet-task: hyde\nWrite"), Some(("hyde", None)));
        assert_eq!(of("Answer from the passages."), None);
        assert_eq!(of(""), None);
    }
}
