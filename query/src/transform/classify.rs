//! Whether `hyde = "auto"` writes a hypothetical passage for a question: a pure, rule-based
//! classifier (docs/query-api.md). In order:
//!
//! 1. An identifier-like query (at most four words, one of them a code such as `ISO 9001`,
//!    `RFC 7231`, `CVE-2021-44228`, `A380`) never: its exact words find it, a passage would blur
//!    them.
//! 2. An analytical question (English why, how (not how many, much, old, long, far, often),
//!    compare, comparison, versus, vs, impact, effect(s), affect, cause(s), explain, analyse,
//!    analyze, analysis, difference(s), implication(s), consequence(s), pros and cons; Chinese
//!    为什么, 为何, 如何, 怎么, 怎样, 分析, 比较, 对比, 影响, 原因, 区别, 差异) yes.
//! 3. Anything else never: short factual questions (who, when, where, which year, how many;
//!    是谁, 哪一年, 什么时候, 哪里, 多少) and plain keyword queries.

use std::sync::LazyLock;

use regex::Regex;

/// The decision and why, in words the response reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub analytical: bool,
    pub reason: String,
}

/// A code: capitals then a number (`ISO 9001`, `RFC-7231`), or letters and digits mixed in one
/// word (`CVE-2021-44228`, `A380`, `x86`).
static CODE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b[A-Z]{2,}[ \-]?\d+\b|\b[A-Za-z]+[\-_]?\d[\w\-]*\b").expect("a valid regex")
});

const EN_ANALYTICAL: &[&str] = &[
    "why",
    "compare",
    "compared",
    "comparison",
    "versus",
    "vs",
    "impact",
    "impacts",
    "effect",
    "effects",
    "affect",
    "affects",
    "cause",
    "causes",
    "explain",
    "analyse",
    "analyze",
    "analysis",
    "difference",
    "differences",
    "implication",
    "implications",
    "consequence",
    "consequences",
];
/// `how` followed by these asks for a number or a fact.
const HOW_FACTUAL: &[&str] = &["many", "much", "old", "long", "far", "often", "tall", "big"];
const ZH_ANALYTICAL: &[&str] = &[
    "为什么",
    "为何",
    "如何",
    "怎么",
    "怎样",
    "分析",
    "比较",
    "对比",
    "影响",
    "原因",
    "区别",
    "差异",
];
const EN_FACTUAL: &[&str] = &["who", "whom", "whose", "when", "where", "which", "what"];
const ZH_FACTUAL: &[&str] = &[
    "是谁",
    "哪一年",
    "哪年",
    "什么时候",
    "何时",
    "哪里",
    "多少",
    "几",
];

fn words(q: &str) -> Vec<String> {
    q.split(|c: char| !c.is_alphanumeric() && c != '-')
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

fn decision(analytical: bool, reason: String) -> Decision {
    Decision { analytical, reason }
}

/// Whether `query` is an analytical question, and why.
pub fn classify(query: &str) -> Decision {
    let q = query.trim();
    let ws = words(q);
    let latin_words = ws.iter().filter(|w| w.is_ascii()).count();
    if let Some(code) = CODE.find(q) {
        if ws.len() <= 4 {
            return decision(
                false,
                format!(
                    "identifier-like: a short query with the code {:?}",
                    code.as_str()
                ),
            );
        }
    }
    for (i, w) in ws.iter().enumerate() {
        if w == "how" {
            if ws
                .get(i + 1)
                .is_some_and(|n| HOW_FACTUAL.contains(&n.as_str()))
            {
                continue;
            }
            return decision(true, "analytical: \"how\"".to_owned());
        }
        if EN_ANALYTICAL.contains(&w.as_str()) {
            return decision(true, format!("analytical: {w:?}"));
        }
        if w == "pros" && ws.get(i + 1).is_some_and(|n| n == "and") {
            return decision(true, "analytical: \"pros and cons\"".to_owned());
        }
    }
    if let Some(cue) = ZH_ANALYTICAL.iter().find(|c| q.contains(*c)) {
        return decision(true, format!("analytical: {cue:?}"));
    }
    if let Some(cue) = ZH_FACTUAL.iter().find(|c| q.contains(*c)) {
        return decision(false, format!("factual: {cue:?}"));
    }
    if let Some(w) = ws
        .iter()
        .take(2)
        .find(|w| EN_FACTUAL.contains(&w.as_str()) || w.as_str() == "how")
    {
        return decision(false, format!("factual: {w:?}"));
    }
    if latin_words > 0 && latin_words <= 3 && latin_words == ws.len() {
        return decision(false, "short keyword query".to_owned());
    }
    decision(false, "no analytical cue".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yes(q: &str) -> bool {
        classify(q).analytical
    }

    #[test]
    fn analytical_english_questions_get_hyde() {
        for q in [
            "Why do glaciers retreat faster in summer?",
            "How does vaccination reduce transmission?",
            "Compare BM25 and dense retrieval on long documents",
            "What is the impact of interest rates on housing prices?",
            "effects of sleep deprivation on memory",
            "Explain the causes of the 2008 financial crisis",
            "pros and cons of microservices",
        ] {
            assert!(yes(q), "{q}: {:?}", classify(q));
        }
    }

    #[test]
    fn analytical_chinese_questions_get_hyde() {
        for q in [
            "为什么冰川在夏天退缩得更快？",
            "如何降低数据库的延迟",
            "分析利率对房价的影响",
            "比较两种检索方法的效果",
            "疫苗接种对传播有什么影响",
        ] {
            assert!(yes(q), "{q}: {:?}", classify(q));
        }
    }

    #[test]
    fn factual_and_identifier_queries_never_get_hyde() {
        for q in [
            "Who wrote Hamlet?",
            "When did the Berlin Wall fall?",
            "how many moons does Mars have",
            "ISO 9001",
            "RFC 7231",
            "RFC 7231 caching rules",
            "CVE-2021-44228",
            "A380 wingspan",
            "glacier retreat",
            "牛顿是谁",
            "长城是哪一年修建的",
            "珠穆朗玛峰有多高多少米",
        ] {
            let d = classify(q);
            assert!(!d.analytical, "{q}: {d:?}");
        }
        assert!(classify("RFC 7231").reason.contains("identifier-like"));
        assert!(classify("牛顿是谁").reason.contains("是谁"));
    }

    #[test]
    fn a_code_inside_a_long_analytical_question_does_not_stop_it() {
        assert!(yes(
            "Why does RFC 7231 forbid caching the responses to POST requests?"
        ));
    }

    #[test]
    fn it_is_deterministic_and_says_why() {
        let a = classify("Why do glaciers retreat?");
        assert_eq!(a, classify("Why do glaciers retreat?"));
        assert_eq!(a.reason, "analytical: \"why\"");
    }
}
