//! Context packing: ranked passages into one prompt context within a token budget. Whole
//! passages only (one that does not fit is skipped, never cut), each labelled with its citation
//! number, title, pages (`(p. 4–5)`, for a paged document such as a PDF) and source. Deterministic: the same passages, budget and order give
//! byte-identical output.

use freshet_core::chunk::TokenCounter;
use serde::{Deserialize, Serialize};

/// Where the best passages go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PackOrder {
    /// Best first.
    RelevanceFirst,
    /// Best at both ends, weakest in the middle ("lost in the middle"): 1, 3, 5, …, 6, 4, 2.
    EdgesFirst,
}

/// One passage offered to the packer (in relevance order).
#[derive(Clone, Debug)]
pub struct PackInput<'a> {
    pub doc_id: &'a str,
    pub title: &'a str,
    pub source: &'a str,
    pub text: &'a str,
    /// Position of this passage in the results (0-based).
    pub result_index: usize,
    /// First and last page of the passage, for a paged document.
    pub pages: Option<(u32, u32)>,
}

/// A citation of the packed context.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Citation {
    /// The `[n]` label in the context (1 = most relevant packed passage).
    pub number: usize,
    pub doc_id: String,
    pub title: String,
    pub source: String,
    /// Position of the passage in the results (0-based).
    pub result_index: usize,
    pub tokens: usize,
    /// First and last page of the passage, for a paged document.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_start: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_end: Option<u32>,
}

/// The packed context.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Packed {
    pub context: String,
    /// In relevance order (by `number`).
    pub citations: Vec<Citation>,
    /// Tokens of `context` (model tokenizer).
    pub tokens: usize,
    /// Passages left out because they did not fit.
    pub skipped: usize,
}

/// Separator between passages in the context.
const SEPARATOR: &str = "\n\n";

/// The label line and text of one passage.
fn block(number: usize, p: &PackInput<'_>) -> String {
    let title = single_line(p.title);
    let source = single_line(p.source);
    let mut head = format!("[{number}]");
    if !title.is_empty() {
        head.push(' ');
        head.push_str(&title);
    }
    match p.pages {
        Some((a, b)) if a == b => head.push_str(&format!(" (p. {a})")),
        Some((a, b)) => head.push_str(&format!(" (p. {a}\u{2013}{b})")),
        None => {}
    }
    if !source.is_empty() {
        head.push_str(" (");
        head.push_str(&source);
        head.push(')');
    }
    format!("{head}\n{}", p.text)
}

fn single_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Packs `passages` (relevance order) into at most `budget` tokens.
pub fn pack(
    passages: &[PackInput<'_>],
    budget: usize,
    order: PackOrder,
    counter: &dyn TokenCounter,
) -> Packed {
    pack_until(passages, budget, order, counter, &|| false).unwrap_or_else(|| Packed {
        context: String::new(),
        citations: Vec::new(),
        tokens: 0,
        skipped: passages.len(),
    })
}

/// [`pack`], which gives up (`None`) once `stop()` holds before a passage is counted.
pub fn pack_until(
    passages: &[PackInput<'_>],
    budget: usize,
    order: PackOrder,
    counter: &dyn TokenCounter,
    stop: &dyn Fn() -> bool,
) -> Option<Packed> {
    let sep_tokens = counter.count(SEPARATOR);
    let mut chosen: Vec<(Citation, String)> = Vec::new();
    let mut used = 0usize;
    let mut skipped = 0usize;
    for p in passages {
        if stop() {
            return None;
        }
        let number = chosen.len() + 1;
        let text = block(number, p);
        let tokens = counter.count(&text);
        let extra = if chosen.is_empty() { 0 } else { sep_tokens };
        if used + extra + tokens > budget {
            skipped += 1;
            continue;
        }
        used += extra + tokens;
        chosen.push((
            Citation {
                number,
                doc_id: p.doc_id.to_owned(),
                title: p.title.to_owned(),
                source: p.source.to_owned(),
                result_index: p.result_index,
                tokens,
                page_start: p.pages.map(|p| p.0),
                page_end: p.pages.map(|p| p.1),
            },
            text,
        ));
    }
    let positions: Vec<usize> = match order {
        PackOrder::RelevanceFirst => (0..chosen.len()).collect(),
        PackOrder::EdgesFirst => edges_first(chosen.len()),
    };
    let context = positions
        .iter()
        .map(|&i| chosen[i].1.as_str())
        .collect::<Vec<_>>()
        .join(SEPARATOR);
    let tokens = counter.count(&context);
    Some(Packed {
        context,
        citations: chosen.into_iter().map(|(c, _)| c).collect(),
        tokens,
        skipped,
    })
}

/// Relevance ranks 0..n laid out best at both ends: 0, 2, 4, …, 5, 3, 1.
pub fn edges_first(n: usize) -> Vec<usize> {
    let front = (0..n).step_by(2);
    let back = (1..n).step_by(2).rev();
    front.chain(back).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use freshet_core::chunk::CharCounter;

    /// Counts whitespace-separated words (a stand-in tokenizer with exact additivity).
    struct Words;
    impl TokenCounter for Words {
        fn count(&self, text: &str) -> usize {
            text.split_whitespace().count()
        }
    }

    fn inputs<'a>(texts: &'a [&'a str]) -> Vec<PackInput<'a>> {
        texts
            .iter()
            .enumerate()
            .map(|(i, t)| PackInput {
                doc_id: "d",
                title: "Title",
                source: "src",
                text: t,
                result_index: i,
                pages: None,
            })
            .collect()
    }

    #[test]
    fn edges_first_layout() {
        assert_eq!(edges_first(0), Vec::<usize>::new());
        assert_eq!(edges_first(1), [0]);
        assert_eq!(edges_first(5), [0, 2, 4, 3, 1]);
        assert_eq!(edges_first(6), [0, 2, 4, 5, 3, 1]);
    }

    #[test]
    fn whole_passages_within_budget() {
        // Each block = "[n] Title (src)" (3 words) + text words.
        let texts = ["a b c", "d e f g h i j k", "l m", "n"];
        let p = pack(&inputs(&texts), 15, PackOrder::RelevanceFirst, &Words);
        // 6 + (11 skipped) + 5 = 11, + 4 = 15.
        assert_eq!(
            p.context,
            "[1] Title (src)\na b c\n\n[2] Title (src)\nl m\n\n[3] Title (src)\nn"
        );
        assert_eq!(p.tokens, 15);
        assert_eq!(p.skipped, 1);
        assert_eq!(
            p.citations
                .iter()
                .map(|c| c.result_index)
                .collect::<Vec<_>>(),
            [0, 2, 3]
        );
        assert!(p.tokens <= 15);
        // A budget smaller than every passage packs nothing.
        let p = pack(&inputs(&texts), 3, PackOrder::RelevanceFirst, &Words);
        assert_eq!(p.context, "");
        assert!(p.citations.is_empty());
        assert_eq!(p.skipped, 4);
    }

    #[test]
    fn edges_first_puts_the_best_at_both_ends_and_is_deterministic() {
        let texts = ["one", "two", "three", "four", "five"];
        let a = pack(&inputs(&texts), 1000, PackOrder::EdgesFirst, &Words);
        let labels: Vec<&str> = a
            .context
            .split(SEPARATOR)
            .map(|b| b.split(' ').next().unwrap())
            .collect();
        assert_eq!(labels, ["[1]", "[3]", "[5]", "[4]", "[2]"]);
        assert!(a.context.ends_with("[2] Title (src)\ntwo"));
        let b = pack(&inputs(&texts), 1000, PackOrder::EdgesFirst, &Words);
        assert_eq!(a, b);
    }

    #[test]
    fn labels_are_single_line_and_budget_holds_for_a_real_counter() {
        let mut i = inputs(&["x\ny", "z"]);
        i[0].title = "Multi\nline\ttitle";
        i[1].source = "";
        let p = pack(&i, 1000, PackOrder::RelevanceFirst, &CharCounter);
        assert_eq!(
            p.context,
            "[1] Multi line title (src)\nx\ny\n\n[2] Title\nz"
        );
        for budget in [0, 10, 26, 27, 30, 40, 100] {
            let p = pack(&i, budget, PackOrder::EdgesFirst, &CharCounter);
            assert!(p.tokens <= budget, "{} > {budget}", p.tokens);
        }
    }

    /// Chinese text has no spaces: the budget is what the counter counts (characters here, the
    /// model's tokens in the node), never whitespace words, and a passage is never cut.
    #[test]
    fn chinese_passages_count_by_the_counter_and_stay_whole() {
        let texts = [
            "床前明月光，疑是地上霜。举头望明月，低头思故乡。",
            "春眠不觉晓，处处闻啼鸟。",
            "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。",
        ];
        let mut i = inputs(&texts);
        i[0].title = "静夜思\u{3000}李白";
        i[0].source = "唐诗三百首";
        let all = pack(&i, 10_000, PackOrder::RelevanceFirst, &CharCounter);
        assert!(
            all.context
                .starts_with("[1] 静夜思 李白 (唐诗三百首)\n床前明月光，疑是地上霜。"),
            "{}",
            all.context
        );
        assert_eq!(all.citations.len(), 3);
        // A whitespace counter would see one "word" per passage; the character counter sees
        // every character, and every budget holds with whole passages only.
        assert!(all.tokens > texts.iter().map(|t| t.chars().count()).sum::<usize>());
        for budget in 0..=all.tokens {
            let p = pack(&i, budget, PackOrder::EdgesFirst, &CharCounter);
            assert!(p.tokens <= budget, "{} > {budget}", p.tokens);
            for c in &p.citations {
                assert!(p.context.contains(texts[c.result_index]), "{}", p.context);
            }
        }
    }

    /// A passage of a paged document cites its pages: `title (p. 4–5)`, or one page.
    #[test]
    fn pages_are_cited() {
        let mut passages = inputs(&["alpha beta", "gamma"]);
        passages[0].pages = Some((4, 5));
        passages[1].pages = Some((7, 7));
        let p = pack(&passages, 100, PackOrder::RelevanceFirst, &Words);
        assert_eq!(
            p.context,
            "[1] Title (p. 4\u{2013}5) (src)\nalpha beta\n\n[2] Title (p. 7) (src)\ngamma"
        );
        assert_eq!(
            (p.citations[0].page_start, p.citations[0].page_end),
            (Some(4), Some(5))
        );
        let json = serde_json::to_value(&p.citations[1]).unwrap();
        assert_eq!(
            (json["page_start"].as_u64(), json["page_end"].as_u64()),
            (Some(7), Some(7))
        );
        let plain = pack(&inputs(&["x"]), 100, PackOrder::RelevanceFirst, &Words);
        assert!(serde_json::to_value(&plain.citations[0])
            .unwrap()
            .get("page_start")
            .is_none());
    }
}
