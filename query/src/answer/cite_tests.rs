use super::*;

const REFUSAL: &str = "The passages do not contain the answer.";

fn numbers(marks: &[Mark]) -> Vec<usize> {
    marks.iter().map(|m| m.number).collect()
}

#[test]
fn markers_map_to_their_sentences_wherever_the_model_puts_them() {
    let a = "Cats sleep [1]. Dogs bark.[2] Birds sing [1, 3]. Fish swim [2][3].";
    let c = check(a, 3, REFUSAL);
    let texts: Vec<&str> = c.sentences.iter().map(|s| s.text.as_str()).collect();
    assert_eq!(
        texts,
        [
            "Cats sleep [1].",
            "Dogs bark.[2]",
            "Birds sing [1, 3].",
            "Fish swim [2][3]."
        ]
    );
    let cites: Vec<Vec<usize>> = c.sentences.iter().map(|s| s.cites.clone()).collect();
    assert_eq!(cites, [vec![1], vec![2], vec![1, 3], vec![2, 3]]);
    assert_eq!(numbers(&c.citations), [1, 2, 1, 3, 2, 3]);
    assert_eq!(c.cited, [1, 2, 3]);
    assert!(c.invalid.is_empty() && c.uncited.is_empty(), "{c:?}");
    // Character spans: "[1]" at 11..14.
    assert_eq!((c.citations[0].start, c.citations[0].end), (11, 14));
    assert_eq!(&a[11..14], "[1]");
}

#[test]
fn a_marker_after_the_full_stop_belongs_to_the_sentence_before() {
    let c = check("Cats sleep. [1] Dogs bark. [2]", 2, REFUSAL);
    assert_eq!(c.sentences.len(), 2);
    assert_eq!(c.sentences[0].cites, [1]);
    assert_eq!(c.sentences[1].cites, [2]);
    assert!(c.uncited.is_empty(), "{c:?}");
    assert_eq!(c.citations[0].sentence, 0);
}

#[test]
fn numbers_beyond_the_passages_are_invalid_and_their_sentence_uncited() {
    let c = check("Cats sleep [1]. Dogs fly [7]. Cows [0] moo.", 2, REFUSAL);
    assert_eq!(numbers(&c.invalid), [7, 0]);
    assert_eq!(numbers(&c.citations), [1]);
    assert_eq!(c.uncited, [1, 2]);
}

#[test]
fn sentences_without_citations_are_flagged_and_lines_are_sentences() {
    let a = "Summary:\n- cats sleep [1]\n- dogs bark\nThat is all.";
    let c = check(a, 1, REFUSAL);
    let uncited: Vec<&str> = c
        .uncited
        .iter()
        .map(|&i| c.sentences[i].text.as_str())
        .collect();
    assert_eq!(uncited, ["Summary:", "- dogs bark", "That is all."]);
}

#[test]
fn chinese_answers_and_full_width_markers() {
    let a = "猫很能睡【1】。狗会叫［2］。鸟会唱歌【1，2】。鱼会游泳。";
    let c = check(a, 2, "所提供的资料中没有答案。");
    let cites: Vec<Vec<usize>> = c.sentences.iter().map(|s| s.cites.clone()).collect();
    assert_eq!(cites, [vec![1], vec![2], vec![1, 2], vec![]]);
    assert_eq!(c.uncited, [3]);
    // Character offsets, not bytes: "【1】" starts at character 4.
    assert_eq!(c.citations[0].start, 4);
}

#[test]
fn the_refusal_needs_no_citation_and_is_recognised() {
    let c = check(REFUSAL, 3, REFUSAL);
    assert!(c.uncited.is_empty() && c.citations.is_empty());
    assert!(is_refusal(REFUSAL, REFUSAL));
    assert!(is_refusal(
        "the passages do not contain the answer",
        REFUSAL
    ));
    assert!(is_refusal(
        "\"The passages do not contain the answer.\"",
        REFUSAL
    ));
    assert!(is_refusal(
        "The passages do not contain the answer. They discuss cats [1].",
        REFUSAL
    ));
    assert!(!is_refusal("Cats sleep [1].", REFUSAL));
    assert!(is_refusal(
        "所提供的资料中没有答案。",
        "所提供的资料中没有答案。"
    ));
    assert!(!is_refusal("", ""));
}

#[test]
fn no_answer_and_odd_input_do_not_panic() {
    for a in [
        "",
        "[",
        "[]",
        "[1",
        "]]][[",
        "[99999999999999999999]",
        "\u{0}",
        "。。。",
    ] {
        let c = check(a, 2, REFUSAL);
        assert!(c.citations.is_empty(), "{a}: {c:?}");
    }
    let c = check("Text [123456789].", 2, REFUSAL);
    assert_eq!(numbers(&c.invalid), [123456789]);
}
