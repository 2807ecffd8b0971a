//! Parent-child chunking: large parents (stored, returned as context) each split into small
//! children (embedded and searched).
//!
//! Parents are cut from the whole text by the base splitter (Markdown-aware or recursive) with
//! `parent_max_tokens` and no overlap. Each parent is then split on its own by the same base
//! splitter with `child_max_tokens` and `child_overlap_tokens` (overlap stays inside the parent).
//! Children inherit their parent's section path. All offsets are in document coordinates.

use super::markdown::split_markdown_range;
use super::recursive::Engine;
use super::tokens::TokenCounter;
use super::Piece;

/// One parent and its children.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParentPiece {
    pub parent: Piece,
    pub children: Vec<Piece>,
}

/// Splits `text` into parents and children. `markdown` selects the Markdown-aware base splitter.
pub fn split_parent_child(
    text: &str,
    markdown: bool,
    parent_max_tokens: usize,
    child_max_tokens: usize,
    child_overlap_tokens: usize,
    tokens: &dyn TokenCounter,
) -> Vec<ParentPiece> {
    let engine = Engine::new(text, tokens, markdown);
    split_parent_child_with(
        &engine,
        markdown,
        false,
        parent_max_tokens,
        &|_| child_max_tokens,
        child_overlap_tokens,
    )
}

/// [`split_parent_child`] with the children's token budget given per parent section path
/// (the chunker reserves each child's embedding header; children are what is embedded). With
/// `quotes`, a block quotation is a child of its own (its parent is still the whole section).
pub(crate) fn split_parent_child_with(
    engine: &Engine<'_>,
    markdown: bool,
    quotes: bool,
    parent_max_tokens: usize,
    child_budget: &dyn Fn(&[String]) -> usize,
    child_overlap_tokens: usize,
) -> Vec<ParentPiece> {
    let parents = if markdown {
        split_markdown_range(
            engine,
            0..engine.text.len(),
            &|_| parent_max_tokens,
            0,
            false,
        )
    } else {
        engine.split(0..engine.text.len(), parent_max_tokens, 0, None)
    };
    parents
        .into_iter()
        .map(|parent| {
            let range = parent.start..parent.end;
            let child_max = child_budget(&parent.section).max(1);
            let overlap = child_overlap_tokens.min(child_max / 2);
            let mut children = if markdown {
                split_markdown_range(engine, range, &|_| child_max, overlap, quotes)
            } else {
                engine.split(range, child_max, overlap, None)
            };
            for c in &mut children {
                c.section = parent.section.clone();
            }
            ParentPiece { parent, children }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::test_words;
    use crate::chunk::tokens::tests::test_counter;

    #[test]
    fn children_lie_inside_parents() {
        let t = test_counter();
        let words: Vec<&str> = test_words::WORDS
            .iter()
            .cycle()
            .take(2000)
            .copied()
            .collect();
        let text = words
            .chunks(45)
            .map(|c| c.join(" ") + ".")
            .collect::<Vec<_>>()
            .join("\n\n");
        let out = split_parent_child(&text, false, 200, 40, 8, &t);
        assert!(out.len() >= 10);
        for pp in &out {
            let p = &pp.parent;
            assert!(p.tokens <= 200);
            assert!(!pp.children.is_empty());
            for c in &pp.children {
                assert!(c.start >= p.start && c.end <= p.end);
                assert!(c.tokens <= 40);
                assert_eq!(c.tokens, t.count(&text[c.start..c.end]));
            }
            assert_eq!(pp.children[0].start, p.start);
            assert_eq!(pp.children.last().unwrap().end, p.end);
        }
        // parents do not overlap each other
        for w in out.windows(2) {
            assert!(w[1].parent.start >= w[0].parent.end);
        }
    }

    #[test]
    fn markdown_children_keep_the_parent_section() {
        let t = test_counter();
        let para = vec!["the"; 20].join(" ") + ".";
        let text = format!("# A\n\n{para}\n\n{para}\n\n## B\n\n{para}");
        let out = split_parent_child(&text, true, 100, 12, 2, &t);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].parent.section, vec!["A".to_string()]);
        assert_eq!(
            out[1].parent.section,
            vec!["A".to_string(), "B".to_string()]
        );
        for pp in &out {
            assert!(pp.children.len() > 1);
            assert!(pp.children.iter().all(|c| c.section == pp.parent.section));
            assert!(text[pp.children[0].start..].starts_with('#'));
        }
    }
}
