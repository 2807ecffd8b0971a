use super::*;
use crate::chunk::tokens::tests::test_counter;
use crate::chunk::tokens::CharCounter;
use crate::chunk::{test_words, Piece};

fn texts<'t>(text: &'t str, pieces: &[Piece]) -> Vec<&'t str> {
    pieces.iter().map(|p| &text[p.start..p.end]).collect()
}

fn check(text: &str, pieces: &[Piece], max: usize, tok: &dyn TokenCounter) {
    for p in pieces {
        let s = &text[p.start..p.end];
        assert!(!s.is_empty() && s.trim() == s, "untrimmed chunk {s:?}");
        assert_eq!(tok.count(s), p.tokens, "token count of {s:?}");
        assert!(
            p.tokens <= max,
            "chunk over budget ({} > {max}): {s:?}",
            p.tokens
        );
    }
    // chunks advance and cover every non-whitespace character
    let mut covered = 0usize;
    for w in pieces.windows(2) {
        assert!(
            w[1].start > w[0].start && w[1].end > w[0].end,
            "no progress"
        );
    }
    for p in pieces {
        let gap = &text[covered.min(p.start)..p.start];
        assert!(gap.trim().is_empty(), "uncovered text {gap:?}");
        covered = covered.max(p.end);
    }
    assert!(text[covered..].trim().is_empty(), "uncovered tail");
}

#[test]
fn empty_and_whitespace() {
    let t = test_counter();
    assert!(split_recursive("", 10, 2, &t).is_empty());
    assert!(split_recursive(" \n\n\t ", 10, 2, &t).is_empty());
}

#[test]
fn small_text_is_one_trimmed_chunk() {
    let t = test_counter();
    let text = "\n  the quick brown fox.  \n";
    let p = split_recursive(text, 50, 5, &t);
    assert_eq!(texts(text, &p), vec!["the quick brown fox."]);
    assert_eq!(p[0].tokens, 5);
}

#[test]
fn paragraphs_are_preferred_boundaries() {
    let t = test_counter();
    let para = |w: &str| [w; 12].join(" ") + ".";
    let text = format!("{}\n\n{}\n\n{}", para("the"), para("and"), para("of"));
    // each paragraph is 13 tokens; budget fits one paragraph plus overlap, not two
    let p = split_recursive(&text, 20, 0, &t);
    check(&text, &p, 20, &t);
    assert_eq!(texts(&text, &p), vec![para("the"), para("and"), para("of")]);
}

#[test]
fn sentences_then_words() {
    let t = test_counter();
    let text = "the cat sat. the dog ran! a bird flew? the end";
    let p = split_recursive(text, 4, 0, &t);
    check(text, &p, 4, &t);
    assert_eq!(
        texts(text, &p),
        vec!["the cat sat.", "the dog ran!", "a bird flew?", "the end"]
    );
    let p = split_recursive(text, 2, 0, &t);
    check(text, &p, 2, &t);
}

#[test]
fn overlap_starts_at_word_boundary() {
    let t = test_counter();
    let words: Vec<&str> = test_words::WORDS
        .iter()
        .cycle()
        .take(300)
        .copied()
        .collect();
    let text = words.join(" ");
    let p = split_recursive(&text, 40, 8, &t);
    check(&text, &p, 40, &t);
    assert!(p.len() > 5);
    for w in p.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        assert!(b.start < a.end, "chunks overlap");
        assert!(b.start > a.start);
        let ov = &text[b.start..a.end];
        assert!(t.count(ov) <= 8 && t.count(ov) >= 4, "overlap {ov:?}");
        // starts at a word start
        assert!(text[..b.start].ends_with(' '), "mid-word overlap start");
    }
}

#[test]
fn cjk_without_spaces() {
    let t = test_counter();
    let text = "中文日本語的是一个测试".repeat(30);
    let p = split_recursive(&text, 16, 4, &t);
    check(&text, &p, 16, &t);
    assert!(
        p[..p.len() - 1].iter().all(|p| p.tokens >= 12),
        "chunks are filled"
    );
    for w in p.windows(2) {
        let ov = &text[w[1].start..w[0].end];
        assert_eq!(t.count(ov), 4, "CJK overlap is exact: {ov:?}");
    }
    // CJK sentences
    let text = "这是一个测试。这是一个测试！这是一个测试？".repeat(5);
    let p = split_recursive(&text, 7, 0, &t);
    check(&text, &p, 7, &t);
    assert!(texts(&text, &p)
        .iter()
        .all(|s| *s == "这是一个测试。" || *s == "这是一个测试！" || *s == "这是一个测试？"));
}

#[test]
fn single_long_word() {
    let t = test_counter();
    // a 5000-letter word: WordPiece gives up after 100 chars (one [UNK]), so use a digit run
    // broken by punctuation that the pre-tokenizer splits: many tokens, no whitespace
    let text = "x".to_string() + &"1-".repeat(2000);
    let p = split_recursive(&text, 30, 5, &t);
    check(&text, &p, 30, &t);
    assert!(p.len() > 100);
    // pieces of one word carry no overlap (that would start mid-word)
    for w in p.windows(2) {
        assert!(w[1].start >= w[0].end);
    }
    let p = split_recursive(&"é".repeat(1000), 7, 3, &CharCounter);
    check(&"é".repeat(1000), &p, 7, &CharCounter);
}

#[test]
fn grapheme_clusters_are_kept_when_possible() {
    let text = "e\u{301}".repeat(10); // not NFC: base + combining mark
    let p = split_recursive(&text, 4, 0, &CharCounter);
    check(&text, &p, 4, &CharCounter);
    assert!(texts(&text, &p).iter().all(|s| s.chars().count() == 4));
    // a single cluster over budget is split into characters
    let zalgo = format!("a{}", "\u{301}".repeat(20));
    let p = split_recursive(&zalgo, 5, 0, &CharCounter);
    check(&zalgo, &p, 5, &CharCounter);
}

#[test]
fn counter_without_spans_gives_same_result() {
    struct NoSpans<'a>(&'a dyn TokenCounter);
    impl TokenCounter for NoSpans<'_> {
        fn count(&self, text: &str) -> usize {
            self.0.count(text)
        }
    }
    let t = test_counter();
    let words: Vec<&str> = test_words::WORDS
        .iter()
        .cycle()
        .take(500)
        .copied()
        .collect();
    let text = words
        .chunks(37)
        .map(|c| c.join(" "))
        .collect::<Vec<_>>()
        .join(".\n\n");
    let a = split_recursive(&text, 64, 8, &t);
    let b = split_recursive(&text, 64, 8, &NoSpans(&t));
    check(&text, &a, 64, &t);
    assert_eq!(a, b);
}

#[test]
fn largest_fitting_search() {
    assert_eq!(largest_fitting(10, 5, |m| m), Some((5, 5)));
    assert_eq!(largest_fitting(3, 5, |m| m), Some((3, 3)));
    assert_eq!(largest_fitting(3, 0, |m| m), None);
    assert_eq!(largest_fitting(0, 5, |m| m), None);
}
