//! Fenced code blocks of Markdown, line by line: what both the Markdown splitter (no heading
//! inside a fence) and the recursive splitter (a fence is one paragraph) need to know.

/// Where a line stands with respect to fenced code blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FenceLine {
    Outside,
    /// Opens a fence.
    Open,
    /// Inside a fence.
    Inside,
    /// Closes a fence.
    Close,
}

/// Tracks fenced code blocks (```` ``` ```` or `~~~`, three or more, up to three spaces of
/// indentation; closed by a line of the same character at least as long; an unclosed fence
/// runs to the end).
#[derive(Clone, Debug, Default)]
pub(crate) struct Fences {
    open: Option<(u8, usize)>,
}

impl Fences {
    /// Feeds the next line (without `\n`).
    pub(crate) fn line(&mut self, line: &str) -> FenceLine {
        match self.open {
            None => match fence_marker(line) {
                Some((c, _, info)) if c == b'`' && info.contains('`') => FenceLine::Outside,
                Some((c, n, _)) => {
                    self.open = Some((c, n));
                    FenceLine::Open
                }
                None => FenceLine::Outside,
            },
            Some((c, n)) => match fence_marker(line) {
                Some((c2, n2, rest)) if c2 == c && n2 >= n && rest.trim().is_empty() => {
                    self.open = None;
                    FenceLine::Close
                }
                _ => FenceLine::Inside,
            },
        }
    }
}

fn fence_marker(line: &str) -> Option<(u8, usize, &str)> {
    let rest = line.trim_start_matches(' ');
    if line.len() - rest.len() > 3 {
        return None;
    }
    let c = *rest.as_bytes().first()?;
    if c != b'`' && c != b'~' {
        return None;
    }
    let n = rest.bytes().take_while(|&b| b == c).count();
    (n >= 3).then(|| (c, n, &rest[n..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences() {
        let mut f = Fences::default();
        let roles: Vec<_> = [
            "a", "```rust", "# no", "~~~", "````", "b", "~~~~", "x", "~~~", "~~~~ ",
        ]
        .iter()
        .map(|l| f.line(l))
        .collect();
        use FenceLine::*;
        assert_eq!(
            roles,
            vec![Outside, Open, Inside, Inside, Close, Outside, Open, Inside, Inside, Close]
        );
        let mut f = Fences::default();
        assert_eq!(
            f.line("``` a`b"),
            Outside,
            "backtick info strings cannot hold backticks"
        );
    }
}
