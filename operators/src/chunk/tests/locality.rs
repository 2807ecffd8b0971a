//! Edits stay local: chunks away from an edit keep their ids.

use super::*;

/// Chunks of `new` that do not overlap `new_edit`, and chunks of `old` that do not overlap
/// `old_edit`, must be present (by id) in the other version.
fn assert_local(
    old: &Document,
    new: &Document,
    old_edit: Range<usize>,
    new_edit: Range<usize>,
    cfg: &ChunkerConfig,
    t: &dyn TokenCounter,
) -> usize {
    let a = chunk_document(old, "h1", cfg, t);
    let b = chunk_document(new, "h2", cfg, t);
    check_chunks(new, &b, cfg, t);
    let ids_a: HashSet<&str> = a.iter().map(|c| c.chunk_id.as_str()).collect();
    let ids_b: HashSet<&str> = b.iter().map(|c| c.chunk_id.as_str()).collect();
    let overlaps = |c: &Chunk, r: &Range<usize>| {
        (c.char_start as usize) < r.end && (c.char_end as usize) > r.start
    };
    let mut changed = 0;
    for c in &b {
        if overlaps(c, &new_edit) {
            changed += !ids_a.contains(c.chunk_id.as_str()) as usize;
        } else {
            assert!(
                ids_a.contains(c.chunk_id.as_str()),
                "chunk {} {:?} outside the edit {new_edit:?} changed",
                c.index,
                (c.char_start, c.char_end)
            );
        }
    }
    for c in &a {
        if !overlaps(c, &old_edit) {
            assert!(
                ids_b.contains(c.chunk_id.as_str()),
                "old chunk {} {:?} outside the edit {old_edit:?} is gone",
                c.index,
                (c.char_start, c.char_end)
            );
        }
    }
    changed
}

/// Builds a document from paragraphs, each optionally after a heading; returns it and each
/// paragraph's char range.
fn assemble(headings: &[Option<String>], parts: &[String]) -> (String, Vec<Range<usize>>) {
    let mut text = String::new();
    let mut ranges = Vec::new();
    for (h, p) in headings.iter().zip(parts) {
        if !text.is_empty() {
            text.push_str("\n\n");
        }
        if let Some(h) = h {
            text.push_str(h);
            text.push_str("\n\n");
        }
        let s = char_len(&text);
        text.push_str(p);
        ranges.push(s..char_len(&text));
    }
    (text, ranges)
}

/// Replaces one random word of `p` with a different one-token word.
fn swap_word(rng: &mut Rng, p: &str) -> String {
    let mut words: Vec<String> = p.split(' ').map(str::to_owned).collect();
    let i = rng.below(words.len());
    let w = &mut words[i];
    let dot = w.ends_with('.');
    let bare = w.trim_end_matches('.').to_owned();
    let mut new = bare.clone();
    while new == bare || new.starts_with('#') {
        new = WORDS[rng.below(WORDS.len())].to_owned();
    }
    *w = if dot { format!("{new}.") } else { new };
    words.join(" ")
}

fn locality_run(
    ct: ContentType,
    sizes: (usize, usize),
    seed: u64,
    edit: fn(&mut Rng, &str) -> String,
) {
    let t = FastCounter::default();
    let cfg = ChunkerConfig::default();
    let mut rng = Rng(seed);
    let parts: Vec<String> = (0..40)
        .map(|_| {
            let n = rng.range(sizes.0, sizes.1);
            paragraph(&mut rng, n)
        })
        .collect();
    let mut headings = vec![None; parts.len()];
    if ct == ContentType::Markdown {
        for i in (0..parts.len()).step_by(7) {
            headings[i] = Some(format!("## {}", WORDS[i % WORDS.len()]));
        }
        headings[0] = Some("# Top".into());
    }
    let (old_text, ranges) = assemble(&headings, &parts);
    let old = doc(&old_text, ct);
    let mut total_changed = 0;
    for k in 0..parts.len() {
        let mut edited = parts.clone();
        edited[k] = edit(&mut rng, &parts[k]);
        let (new_text, new_ranges) = assemble(&headings, &edited);
        let new = doc(&new_text, ct);
        let changed = assert_local(
            &old,
            &new,
            ranges[k].clone(),
            new_ranges[k].clone(),
            &cfg,
            &t,
        );
        assert!(changed >= 1, "an edit must change some chunk");
        total_changed += changed;
    }
    // each edit touches only a couple of chunks
    assert!(
        total_changed <= parts.len() * 4,
        "{total_changed} chunks changed"
    );
}

#[test]
fn locality_recursive_same_count_edits() {
    // small paragraphs: groups of several paragraphs, some over budget and packed greedily
    locality_run(ContentType::PlainText, (8, 60), 11, swap_word);
    // mixed sizes, some over the budget
    locality_run(ContentType::PlainText, (20, 260), 12, swap_word);
}

#[test]
fn locality_markdown_same_count_edits() {
    locality_run(ContentType::Markdown, (8, 60), 21, swap_word);
    locality_run(ContentType::Markdown, (20, 260), 22, swap_word);
}

fn rewrite_paragraph(rng: &mut Rng, p: &str) -> String {
    // a different paragraph of a similar, but not equal, size (always >= half the budget)
    let n = p.split(' ').count();
    let m = (n as isize + rng.range(0, 40) as isize - 20).max(150) as usize;
    paragraph(rng, m)
}

#[test]
fn locality_any_edit_of_large_paragraphs() {
    // paragraphs of at least half the budget are chunked on their own: any edit stays local
    locality_run(ContentType::PlainText, (150, 400), 31, rewrite_paragraph);
    locality_run(ContentType::Markdown, (150, 400), 32, rewrite_paragraph);
}
