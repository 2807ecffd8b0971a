//! Passages: one or more chunks of a document returned as one result. Context expansion picks
//! a hit's neighbours (±window, same section, never across a section boundary) and merges
//! contiguous chunks of the same document into one passage; parent-child retrieval replaces
//! children by their parents. Pure functions over chunk records (anything that borrows as a
//! [`Chunk`]: the node passes checked [`crate::visible::Visible`] chunks).

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use freshet_core::chunk::{Chunk, ChunkKind};

/// The text of consecutive chunks of one document (sorted by `char_start`), using their
/// character spans: overlapping parts appear once; chunks separated by a gap (whitespace that
/// chunking trimmed) are joined by a blank line.
pub fn merge_text(chunks: &[&Chunk]) -> String {
    let mut out = String::new();
    let mut end: u32 = 0;
    for (i, c) in chunks.iter().enumerate() {
        if i == 0 {
            out.push_str(&c.text);
        } else if c.char_start >= end {
            out.push_str("\n\n");
            out.push_str(&c.text);
        } else if c.char_end > end {
            let skip = (end - c.char_start) as usize;
            out.extend(c.text.chars().skip(skip));
        }
        end = end.max(c.char_end);
    }
    out
}

/// The chunks of `doc_chunks` (one document's chunks, or a window of them) within `window`
/// positions of `hit` that are of the same kind and parent and lie in the same section, sorted
/// by index (`hit` included).
pub fn neighbours<'a, C: Borrow<Chunk>>(
    doc_chunks: &'a [C],
    hit: &Chunk,
    window: usize,
) -> Vec<&'a C> {
    let lo = hit.index.saturating_sub(window as u32);
    let hi = hit.index.saturating_add(window as u32);
    let mut out: Vec<&C> = doc_chunks
        .iter()
        .filter(|c| {
            let c: &Chunk = (*c).borrow();
            c.doc_id == hit.doc_id
                && c.kind == hit.kind
                && c.parent_id == hit.parent_id
                && c.section == hit.section
                && (lo..=hi).contains(&c.index)
        })
        .collect();
    out.sort_by_key(|c| (*c).borrow().index);
    // Keep only the run of consecutive indexes that contains the hit: a chunk of another
    // section in between is a boundary.
    let index = |c: &C| c.borrow().index;
    let Some(pos) = out.iter().position(|c| index(c) == hit.index) else {
        return out;
    };
    let mut start = pos;
    while start > 0 && index(out[start - 1]) + 1 == index(out[start]) {
        start -= 1;
    }
    let mut end = pos;
    while end + 1 < out.len() && index(out[end]) + 1 == index(out[end + 1]) {
        end += 1;
    }
    out[start..=end].to_vec()
}

/// Groups a set of one document's chunks (same kind and parent) into runs of consecutive
/// indexes, each sorted by index.
pub fn runs<'a, C: Borrow<Chunk>>(chunks: &[&'a C]) -> Vec<Vec<&'a C>> {
    let mut by_key: BTreeMap<(ChunkKind, Option<&str>, &str), BTreeMap<u32, &'a C>> =
        BTreeMap::new();
    for c in chunks {
        let k: &'a Chunk = (*c).borrow();
        by_key
            .entry((k.kind, k.parent_id.as_deref(), k.doc_id.as_str()))
            .or_default()
            .insert(k.index, c);
    }
    let mut out = Vec::new();
    for (_, by_index) in by_key {
        let mut run: Vec<&C> = Vec::new();
        for (index, c) in by_index {
            if let Some(last) = run.last() {
                let last: &Chunk = (*last).borrow();
                if last.index + 1 != index || last.section != c.borrow().section {
                    out.push(std::mem::take(&mut run));
                }
            }
            run.push(c);
        }
        if !run.is_empty() {
            out.push(run);
        }
    }
    out
}

/// Where a hit ends up after expansion: `passages[i]` lists the chunks of passage `i`, and
/// `owner[hit]` is the passage holding hit number `hit`.
#[derive(Debug, PartialEq)]
pub struct Expansion<'a, C = Chunk> {
    pub passages: Vec<Vec<&'a C>>,
    pub owner: Vec<usize>,
}

/// Expands `hits` (ranked, best first): hits whose `expand[i]` is true get their neighbours
/// among `doc_chunks` (by document id: its chunks, or the windows around its hits); then all
/// chunks taken for one document (same kind, parent and section) are merged into runs of
/// consecutive indexes, one passage each. Passages are ordered by their best hit; `owner[i]`
/// is the passage holding hit `i`.
pub fn expand<'a, C: Borrow<Chunk>>(
    hits: &[&'a C],
    expand: &[bool],
    doc_chunks: &'a HashMap<String, Vec<C>>,
    window: usize,
) -> Expansion<'a, C> {
    let mut taken: Vec<&'a C> = Vec::new();
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    for (i, hit) in hits.iter().enumerate() {
        let h: &'a Chunk = (*hit).borrow();
        let mine: Vec<&'a C> = match (expand.get(i), doc_chunks.get(&h.doc_id)) {
            (Some(true), Some(all)) => neighbours(all, h, window),
            _ => Vec::new(),
        };
        for c in std::iter::once(*hit).chain(mine) {
            let k: &'a Chunk = c.borrow();
            if seen.insert(k.chunk_id.as_str()) {
                taken.push(c);
            }
        }
    }
    let all_runs = runs(&taken);
    let run_of: HashMap<&str, usize> = all_runs
        .iter()
        .enumerate()
        .flat_map(|(r, run)| {
            run.iter()
                .map(move |c| ((*c).borrow().chunk_id.as_str(), r))
        })
        .collect();
    // Number passages in order of their best hit.
    let mut number: HashMap<usize, usize> = HashMap::new();
    let mut order: Vec<usize> = Vec::new();
    let owner = hits
        .iter()
        .map(|h| {
            let r = run_of[(*h).borrow().chunk_id.as_str()];
            *number.entry(r).or_insert_with(|| {
                order.push(r);
                order.len() - 1
            })
        })
        .collect();
    let mut slots: Vec<Option<Vec<&'a C>>> = all_runs.into_iter().map(Some).collect();
    Expansion {
        passages: order
            .into_iter()
            .map(|r| slots[r].take().unwrap_or_default())
            .collect(),
        owner,
    }
}

/// Parent-child: the position of each distinct parent in order of its best child. `hits` are
/// ranked children; a hit without a parent stands for itself. Returns, per output item, the
/// parent chunk id (or the hit's own id) and the indexes of the hits it covers.
pub fn group_by_parent(hits: &[&Chunk]) -> Vec<(String, Vec<usize>)> {
    let mut order: Vec<(String, Vec<usize>)> = Vec::new();
    let mut pos: HashMap<String, usize> = HashMap::new();
    for (i, h) in hits.iter().enumerate() {
        let key = h.parent_id.clone().unwrap_or_else(|| h.chunk_id.clone());
        match pos.get(&key) {
            Some(&p) => order[p].1.push(i),
            None => {
                pos.insert(key.clone(), order.len());
                order.push((key, vec![i]));
            }
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chunks of one document "d" from texts laid out in `doc` (each text must occur in it).
    fn chunks(doc: &str, parts: &[(&str, &[&str])]) -> Vec<Chunk> {
        let mut from = 0usize;
        parts
            .iter()
            .enumerate()
            .map(|(i, (text, section))| {
                let byte = doc[from..].find(text).expect("text in doc") + from;
                let start = doc[..byte].chars().count() as u32;
                from = byte + text.chars().next().map_or(1, char::len_utf8);
                Chunk {
                    chunk_id: format!("c{i}"),
                    index: i as u32,
                    char_start: start,
                    char_end: start + text.chars().count() as u32,
                    section: section.iter().map(|s| s.to_string()).collect(),
                    title: "T".into(),
                    ..freshet_core::testing::chunk("d", text)
                }
            })
            .collect()
    }

    #[test]
    fn merge_text_handles_overlap_and_gaps() {
        let doc = "alpha beta gamma delta\n\nepsilon zeta";
        let c = chunks(
            doc,
            &[
                ("alpha beta gamma", &[]),
                ("gamma delta", &[]),
                ("epsilon zeta", &[]),
            ],
        );
        assert_eq!(
            merge_text(&[&c[0], &c[1], &c[2]]),
            "alpha beta gamma delta\n\nepsilon zeta"
        );
        assert_eq!(merge_text(&[&c[1]]), "gamma delta");
        // A chunk fully inside the previous one adds nothing.
        let inner = chunks(doc, &[("alpha beta gamma delta", &[]), ("beta", &[])]);
        assert_eq!(
            merge_text(&[&inner[0], &inner[1]]),
            "alpha beta gamma delta"
        );
        // Multi-byte characters: spans are in characters.
        let doc = "é1 é2 é3";
        let c = chunks(doc, &[("é1 é2", &[]), ("é2 é3", &[])]);
        assert_eq!(merge_text(&[&c[0], &c[1]]), "é1 é2 é3");
    }

    #[test]
    fn neighbours_stay_in_the_section() {
        let doc = "a0 a1 a2 b3 b4 b5";
        let c = chunks(
            doc,
            &[
                ("a0", &["A"]),
                ("a1", &["A"]),
                ("a2", &["A"]),
                ("b3", &["B"]),
                ("b4", &["B"]),
                ("b5", &["B"]),
            ],
        );
        let ids = |v: Vec<&Chunk>| v.iter().map(|c| c.index).collect::<Vec<_>>();
        assert_eq!(ids(neighbours(&c, &c[1], 1)), [0, 1, 2]);
        assert_eq!(ids(neighbours(&c, &c[2], 1)), [1, 2]);
        assert_eq!(ids(neighbours(&c, &c[2], 2)), [0, 1, 2]);
        assert_eq!(ids(neighbours(&c, &c[3], 2)), [3, 4, 5]);
        assert_eq!(ids(neighbours(&c, &c[0], 0)), [0]);
    }

    #[test]
    fn expansion_merges_touching_hits_and_keeps_rank_order() {
        let doc = "p0 p1 p2 p3 p4 p5 p6 p7";
        let c = chunks(
            doc,
            &[
                ("p0", &[]),
                ("p1", &[]),
                ("p2", &[]),
                ("p3", &[]),
                ("p4", &[]),
                ("p5", &[]),
                ("p6", &[]),
                ("p7", &[]),
            ],
        );
        let all: HashMap<String, Vec<Chunk>> = HashMap::from([("d".to_string(), c.clone())]);
        let idx = |p: &Vec<&Chunk>| p.iter().map(|c| c.index).collect::<Vec<_>>();
        // Hits ranked: p6, p1, p3 (p3 not expanded). p6 → {5,6,7}; p1 → {0,1,2}; p3 → {3},
        // adjacent to p1's run.
        let hits = [&c[6], &c[1], &c[3]];
        let e = expand(&hits, &[true, true, false], &all, 1);
        assert_eq!(e.passages.len(), 2);
        assert_eq!(idx(&e.passages[0]), [5, 6, 7]);
        assert_eq!(idx(&e.passages[1]), [0, 1, 2, 3]);
        assert_eq!(e.owner, [0, 1, 1]);
        // A hit on p4 bridges everything into one passage.
        let hits = [&c[6], &c[1], &c[3], &c[4]];
        let e = expand(&hits, &[true, true, false, false], &all, 1);
        assert_eq!(e.passages.len(), 1);
        assert_eq!(idx(&e.passages[0]), [0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(e.owner, [0, 0, 0, 0]);
        // Without expansion only adjacent hits merge: p3 and p4.
        let e = expand(&hits, &[false; 4], &all, 1);
        assert_eq!(e.passages.len(), 3);
        assert_eq!(idx(&e.passages[2]), [3, 4]);
        assert_eq!(e.owner, [0, 1, 2, 2]);
    }

    #[test]
    fn runs_split_at_gaps_and_sections() {
        let doc = "x0 x1 x2 x3 x4";
        let c = chunks(
            doc,
            &[
                ("x0", &[]),
                ("x1", &[]),
                ("x2", &["S"]),
                ("x3", &["S"]),
                ("x4", &["S"]),
            ],
        );
        let r = runs(&[&c[4], &c[0], &c[1], &c[2]]);
        let idx: Vec<Vec<u32>> = r
            .iter()
            .map(|p| p.iter().map(|c| c.index).collect())
            .collect();
        assert_eq!(idx, vec![vec![0, 1], vec![2], vec![4]]);
    }

    #[test]
    fn parents_are_ranked_by_their_best_child() {
        let doc = "k0 k1 k2 k3";
        let mut c = chunks(doc, &[("k0", &[]), ("k1", &[]), ("k2", &[]), ("k3", &[])]);
        c[0].parent_id = Some("P1".into());
        c[1].parent_id = Some("P2".into());
        c[2].parent_id = Some("P1".into());
        let g = group_by_parent(&[&c[1], &c[0], &c[3], &c[2]]);
        assert_eq!(
            g,
            vec![
                ("P2".to_string(), vec![0]),
                ("P1".to_string(), vec![1, 3]),
                ("c3".to_string(), vec![2]),
            ]
        );
    }
}
