//! Chinese text keeps its sentences whole in every strategy: a chunk starts and ends at a
//! sentence end (after its closing quotes and brackets) unless one sentence exceeds the budget,
//! then at a clause mark unless one clause does; a run of punctuation is never cut.

use proptest::prelude::{any, proptest, ProptestConfig};

use super::*;
use crate::chunk::markdown::split_markdown;
use crate::chunk::parent_child::split_parent_child;
use crate::chunk::recursive::split_recursive;

const ENDS: [&str; 11] = [
    "。",
    "！",
    "？",
    "!",
    "?",
    "！？",
    "？！",
    "……",
    "?!",
    "。。。",
    "！！",
];
const CLAUSE_MARKS: [char; 8] = ['；', ';', '：', ':', '，', ',', '、', '､'];
const OPENERS: [char; 6] = ['「', '『', '“', '‘', '（', '《'];
const CLOSERS: [char; 6] = ['」', '』', '”', '’', '）', '》'];

/// A sentence of the generated text: its byte range (opening quote to closing quotes) and the
/// byte offsets right after each of its clause marks.
#[derive(Clone, Debug)]
struct Sentence {
    range: Range<usize>,
    clause_ends: Vec<usize>,
}

/// Generated Chinese text and where its sentences lie.
struct Text {
    text: String,
    sentences: Vec<Sentence>,
}

impl Text {
    fn new() -> Self {
        Text {
            text: String::new(),
            sentences: Vec::new(),
        }
    }

    fn push(&mut self, s: &str) {
        self.text.push_str(s);
    }

    /// One sentence of random Han characters: clauses split by clause marks, a run of sentence
    /// ends, maybe inside quotes or brackets.
    fn sentence(&mut self, rng: &mut Rng, long: bool) {
        let start = self.text.len();
        let mut clause_ends = Vec::new();
        if rng.below(4) == 0 {
            self.text.push(OPENERS[rng.below(OPENERS.len())]);
        }
        let clauses = rng.range(1, 5);
        for k in 0..clauses {
            if k > 0 {
                self.text.push(CLAUSE_MARKS[rng.below(CLAUSE_MARKS.len())]);
                clause_ends.push(self.text.len());
            }
            let n = if long && rng.below(3) == 0 {
                rng.range(20, 90)
            } else {
                rng.range(1, 12)
            };
            for _ in 0..n {
                let c = char::from_u32(0x4E00 + rng.below(0x5000) as u32).unwrap_or('字');
                self.text.push(c);
            }
        }
        self.text.push_str(ENDS[rng.below(ENDS.len())]);
        for _ in 0..rng.below(3) {
            self.text.push(CLOSERS[rng.below(CLOSERS.len())]);
        }
        self.sentences.push(Sentence {
            range: start..self.text.len(),
            clause_ends,
        });
    }

    fn paragraph(&mut self, rng: &mut Rng, long: bool) {
        for _ in 0..rng.range(1, 6) {
            self.sentence(rng, long);
        }
    }
}

/// Plain paragraphs, or Markdown with headings, a table and a FAQ (`layout` 0..4).
fn generate(seed: u64, layout: usize) -> Text {
    let mut rng = Rng(seed | 1);
    let long = rng.below(2) == 0;
    let mut t = Text::new();
    for p in 0..rng.range(1, 5) {
        if p > 0 {
            t.push("\n\n");
        }
        match layout {
            1 if rng.below(2) == 0 => t.push(&format!("## 第{p}章 标题\n\n")),
            2 if p == 1 => {
                t.push("| 名称 | 说明 |\n|---|---|\n");
                for _ in 0..rng.range(2, 6) {
                    t.push("| ");
                    t.sentence(&mut rng, false);
                    t.push(" | ");
                    t.paragraph(&mut rng, long);
                    t.push(" |\n");
                }
                t.push("\n");
            }
            3 if p == 1 => {
                for _ in 0..rng.range(2, 4) {
                    t.push("Q: ");
                    t.sentence(&mut rng, false);
                    t.push("\nA: ");
                    t.paragraph(&mut rng, long);
                    t.push("\n\n");
                }
            }
            _ => {}
        }
        t.paragraph(&mut rng, long);
    }
    t
}

fn is_closing(c: char) -> bool {
    CLOSERS.contains(&c) || CLAUSE_MARKS.contains(&c) || "。！？!?…".contains(c)
}

/// The rule, for chunks `pieces` of `t` cut under `max` tokens (every chunk also holds the
/// usual invariants: trimmed, within budget, in order, covering the text).
fn check_sentences(t: &Text, pieces: &[Piece], max: usize, what: &str, cover: Range<usize>) {
    let text = t.text.as_str();
    let fc = FastCounter::default();
    let count = |r: Range<usize>| fc.count(&text[r]);
    let mut covered = cover.start;
    for (k, p) in pieces.iter().enumerate() {
        let s = &text[p.start..p.end];
        assert!(
            !s.is_empty() && s.trim() == s,
            "{what}: untrimmed chunk {s:?}"
        );
        assert!(p.tokens <= max, "{what}: over budget {s:?}");
        assert!(
            text[covered.min(p.start)..p.start].trim().is_empty(),
            "{what}: text lost before {s:?}"
        );
        covered = covered.max(p.end);
        if k > 0 {
            assert!(p.start > pieces[k - 1].start, "{what}: out of order");
        }
        assert!(
            !s.starts_with(is_closing),
            "{what}: chunk starts with closing punctuation: {s:?}"
        );
        assert!(
            !s.ends_with(OPENERS),
            "{what}: chunk ends with an opening quote: {s:?}"
        );
        assert!(
            !text[p.end..].starts_with(is_closing),
            "{what}: chunk ends inside a run of punctuation: {s:?}"
        );
        let overlap_start = k > 0 && p.start < pieces[k - 1].end;
        for (pos, is_start) in [(p.start, true), (p.end, false)] {
            let Some(sen) = t
                .sentences
                .iter()
                .find(|x| x.range.start < pos && pos < x.range.end)
            else {
                continue;
            };
            // The sentence with the markup before it on its line (`| `, `A: `): the splitter
            // cannot tell them apart.
            let line = text[..sen.range.start].rfind('\n').map_or(0, |i| i + 1);
            let prev = t
                .sentences
                .iter()
                .map(|x| x.range.end)
                .filter(|&e| e <= sen.range.start)
                .max()
                .unwrap_or(0);
            let r = line.max(prev)..sen.range.end;
            assert!(
                count(r.clone()) > max,
                "{what}: chunk {} mid-sentence in a sentence that fits ({} <= {max}): {s:?} \
                 in {:?}",
                if is_start { "starts" } else { "ends" },
                count(r.clone()),
                &text[r]
            );
            if is_start && overlap_start {
                continue;
            }
            // Inside a sentence over budget: at a clause mark, unless the clause is over too.
            if sen.clause_ends.contains(&pos) {
                continue;
            }
            let from = sen
                .clause_ends
                .iter()
                .rev()
                .find(|&&e| e < pos)
                .copied()
                .unwrap_or(r.start);
            let to = sen
                .clause_ends
                .iter()
                .find(|&&e| e > pos)
                .copied()
                .unwrap_or(r.end);
            assert!(
                count(from..to) > max,
                "{what}: chunk {} mid-clause in a clause that fits: {s:?} in {:?}",
                if is_start { "starts" } else { "ends" },
                &text[from..to]
            );
        }
    }
    assert!(
        text[covered..cover.end].trim().is_empty(),
        "{what}: tail lost"
    );
}

fn budgets(max: usize, overlap_pct: usize) -> (usize, usize) {
    (max, max * overlap_pct / 100)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn recursive_keeps_sentences(seed in any::<u64>(), max in 8usize..80, ov in 0usize..50) {
        let (max, overlap) = budgets(max, ov);
        let t = generate(seed, 0);
        let p = split_recursive(&t.text, max, overlap, &FastCounter::default());
        check_sentences(&t, &p, max, "recursive", 0..t.text.len());
    }

    #[test]
    fn markdown_keeps_sentences(
        seed in any::<u64>(),
        layout in 1usize..4,
        max in 8usize..80,
        ov in 0usize..50,
    ) {
        let (max, overlap) = budgets(max, ov);
        let t = generate(seed, layout);
        let p = split_markdown(&t.text, max, overlap, &FastCounter::default());
        check_sentences(&t, &p, max, "markdown", 0..t.text.len());
    }

    #[test]
    fn parent_child_keeps_sentences(
        seed in any::<u64>(),
        layout in 0usize..4,
        child in 8usize..40,
        ov in 0usize..50,
    ) {
        let (child, overlap) = budgets(child, ov);
        let parent = child * 3;
        let t = generate(seed, layout);
        let md = layout > 0;
        let out = split_parent_child(&t.text, md, parent, child, overlap, &FastCounter::default());
        let parents: Vec<Piece> = out.iter().map(|pp| pp.parent.clone()).collect();
        check_sentences(&t, &parents, parent, "parents", 0..t.text.len());
        for pp in &out {
            let range = pp.parent.start..pp.parent.end;
            check_sentences(&t, &pp.children, child, "children", range);
        }
    }

    #[test]
    fn plain_faq_keeps_sentences(seed in any::<u64>(), max in 40usize..120) {
        let t = generate(seed, 3);
        let fc = FastCounter::default();
        let d = Document {
            id: "zh".into(),
            title: String::new(),
            text: t.text.clone(),
            content_type: ContentType::PlainText,
            source: String::new(),
            metadata: BTreeMap::new(),
            acl: vec![],
        };
        let cfg = ChunkerConfig { max_tokens: max, overlap_tokens: max / 8, ..ChunkerConfig::default() };
        let chunks = chunk_document(&d, "h", &cfg, &fc);
        let budget = header::text_budget(max, "", &[], &fc);
        let pieces: Vec<Piece> = chunks
            .iter()
            .map(|c| {
                let start = t.text.char_indices().nth(c.char_start as usize).map_or(t.text.len(), |x| x.0);
                Piece { start, end: start + c.text.len(), tokens: c.token_count as usize, ..Piece::default() }
            })
            .collect();
        check_sentences(&t, &pieces, budget, "plain FAQ", 0..t.text.len());
    }
}

#[test]
fn a_closing_quote_stays_with_its_sentence() {
    let fc = FastCounter::default();
    // Two sentences of 8 tokens each (the quote marks are tokens).
    let text = "「我们出发吧。」他说完就走了。";
    let p = split_recursive(text, 10, 0, &fc);
    let got: Vec<&str> = p.iter().map(|p| &text[p.start..p.end]).collect();
    assert_eq!(got, ["「我们出发吧。」", "他说完就走了。"]);
    // An ellipsis and a full-width run end sentences too.
    let text = "他沉默了很久……终于开口！？我们都愣住了。";
    let p = split_recursive(text, 9, 0, &fc);
    let got: Vec<&str> = p.iter().map(|p| &text[p.start..p.end]).collect();
    assert_eq!(got, ["他沉默了很久……", "终于开口！？", "我们都愣住了。"]);
}

#[test]
fn a_long_sentence_is_cut_at_clause_marks() {
    let fc = FastCounter::default();
    let text = "春天来了，河水涨了起来；孩子们跑到岸边、看着冰块漂走：这是一年中最热闹的日子。";
    let p = split_recursive(text, 16, 0, &fc);
    let got: Vec<&str> = p.iter().map(|p| &text[p.start..p.end]).collect();
    assert_eq!(
        got,
        [
            "春天来了，河水涨了起来；",
            "孩子们跑到岸边、看着冰块漂走：",
            "这是一年中最热闹的日子。"
        ]
    );
}

#[test]
fn cjk_overlap_starts_at_a_sentence() {
    let fc = FastCounter::default();
    let text = "第一句话很短。第二句。第三句话要长一些才行。第四句。第五句话也不短。";
    let p = split_recursive(text, 16, 6, &fc);
    let ends = ["。"];
    for w in p.windows(2) {
        let before = &text[..w[1].start];
        assert!(
            ends.iter().any(|e| before.ends_with(e)),
            "chunk starts mid-sentence: {:?}",
            &text[w[1].start..w[1].end]
        );
    }
    assert!(
        p.windows(2).any(|w| w[1].start < w[0].end),
        "some chunk overlaps: {:?}",
        p.iter().map(|p| &text[p.start..p.end]).collect::<Vec<_>>()
    );
}

#[test]
fn a_heading_does_not_split_the_first_sentence() {
    let fc = FastCounter::default();
    // The heading (4 tokens) and the first sentence (9) do not fit 12 together; the paragraph
    // is too big to go whole, the sentence fits alone.
    let text = "# 第一章\n\n河水在春天涨起来了。孩子们都跑到岸边看。";
    let p = split_markdown(text, 12, 0, &fc);
    let got: Vec<&str> = p.iter().map(|p| &text[p.start..p.end]).collect();
    assert!(
        got.iter()
            .all(|s| !s.starts_with("涨") && !s.ends_with("河水")),
        "{got:?}"
    );
    assert!(got.contains(&"河水在春天涨起来了。"), "{got:?}");
}
