//! Byte offsets into a string turned into character offsets, the unit the API reports spans
//! in (chunk bounds, citations, highlights). Checkpoints every [`CharOffsets::STEP`]
//! characters keep it small for large texts; each lookup scans at most one step.

/// The character offsets of one string.
pub struct CharOffsets<'a> {
    text: &'a str,
    /// (byte offset, character offset) of every `STEP`-th character.
    checkpoints: Vec<(usize, usize)>,
    /// Characters in the string.
    len: usize,
}

impl<'a> CharOffsets<'a> {
    /// Characters between two checkpoints.
    pub const STEP: usize = 64;

    pub fn new(text: &'a str) -> CharOffsets<'a> {
        let mut checkpoints = vec![(0, 0)];
        let mut len = 0;
        for (n, (i, _)) in text.char_indices().enumerate() {
            if n > 0 && n % Self::STEP == 0 {
                checkpoints.push((i, n));
            }
            len = n + 1;
        }
        CharOffsets {
            text,
            checkpoints,
            len,
        }
    }

    /// Characters in the string.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The index of the character that starts at or contains byte `b`; the length for a `b`
    /// at or past the end.
    pub fn floor(&self, b: usize) -> usize {
        if b >= self.text.len() {
            return self.len;
        }
        let mut b = b;
        while !self.text.is_char_boundary(b) {
            b -= 1;
        }
        self.count_to(b)
    }

    /// The index of the first character that starts at or after byte `b` (the characters
    /// that start before it); the length for a `b` at or past the end.
    pub fn ceil(&self, b: usize) -> usize {
        if b >= self.text.len() {
            return self.len;
        }
        let mut b = b;
        while !self.text.is_char_boundary(b) {
            b += 1;
        }
        self.count_to(b)
    }

    /// Characters before byte `b`, a character boundary.
    fn count_to(&self, b: usize) -> usize {
        let k = self.checkpoints.partition_point(|&(cb, _)| cb <= b);
        let (b0, c0) = self.checkpoints[k.saturating_sub(1)];
        c0 + self.text[b0..b].chars().count()
    }
}

#[cfg(test)]
mod tests {
    use super::CharOffsets;

    /// The plain definition: characters starting before `b` (ceil) or at/before it (floor).
    fn reference(text: &str, b: usize) -> (usize, usize) {
        let starts: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
        let ceil = starts.iter().filter(|&&s| s < b).count();
        let floor = if b >= text.len() {
            starts.len()
        } else {
            starts.iter().filter(|&&s| s <= b).count() - 1
        };
        (floor, ceil.min(starts.len()))
    }

    #[test]
    fn every_byte_of_mixed_scripts_matches_the_definition() {
        let mut text = String::new();
        for i in 0..300 {
            text.push_str(["a", "é", "史", "𝄞", " "][i % 5]);
        }
        for t in ["", "x", "中文", text.as_str()] {
            let c = CharOffsets::new(t);
            assert_eq!(c.len(), t.chars().count());
            for b in 0..=t.len() + 2 {
                let (floor, ceil) = reference(t, b);
                assert_eq!(c.floor(b), floor, "floor of {b} in {} bytes", t.len());
                assert_eq!(c.ceil(b), ceil, "ceil of {b} in {} bytes", t.len());
            }
        }
    }

    #[test]
    fn inside_a_character_floor_and_ceil_differ() {
        let c = CharOffsets::new("a史b");
        assert_eq!((c.floor(2), c.ceil(2)), (1, 2));
        assert_eq!((c.floor(1), c.ceil(1)), (1, 1));
    }
}
