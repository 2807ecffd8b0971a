//! Rows of cells as a Markdown table: what DOCX tables and CSV documents become, so that the
//! chunker splits them by rows ([`crate::chunk`]).

/// Rows as a Markdown table, the first row the header; `|` in a cell escaped, line breaks
/// turned to spaces, short rows padded (unless padding would more than double the cells: one
/// wide row among many short ones does not make the table grow with their product). `None`
/// without a cell of text.
pub fn markdown_table(rows: &[Vec<String>]) -> Option<String> {
    let width = rows.iter().map(Vec::len).max().unwrap_or(0);
    if width == 0 || rows.iter().flatten().all(|c| c.trim().is_empty()) {
        return None;
    }
    let cells: usize = rows.iter().map(Vec::len).sum();
    let pad = rows.len().saturating_mul(width) <= cells.saturating_mul(2).saturating_add(4096);
    let line = |cells: &[String]| {
        let mut s = String::from("|");
        let n = if pad { width } else { cells.len() };
        for i in 0..n {
            let c = cells.get(i).map(String::as_str).unwrap_or("");
            let c = c.split_whitespace().collect::<Vec<_>>().join(" ");
            s.push(' ');
            s.push_str(&c.replace('|', "\\|"));
            s.push_str(" |");
        }
        s
    };
    let mut out = vec![line(&rows[0]), format!("|{}", " --- |".repeat(width))];
    out.extend(rows[1..].iter().map(|r| line(r)));
    Some(out.join("\n"))
}

/// A CSV text (comma-separated, RFC 4180 quoting, rows of any length) as a Markdown table;
/// `None` when it holds no cell of text.
pub fn csv_to_markdown(text: &str) -> Option<String> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(text.as_bytes());
    let rows: Vec<Vec<String>> = reader
        .records()
        .filter_map(|r| r.ok())
        .map(|r| r.iter().map(str::to_owned).collect())
        .filter(|r: &Vec<String>| r.iter().any(|c| !c.trim().is_empty()))
        .collect();
    markdown_table(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_becomes_a_markdown_table() {
        let csv =
            "site,flow,note\nUpstream,12.5,\"spring, high\"\n\nDelta,40.1,\"a|b\nc\"\nshort\n";
        assert_eq!(
            csv_to_markdown(csv).unwrap(),
            "| site | flow | note |\n| --- | --- | --- |\n| Upstream | 12.5 | spring, high |\n\
             | Delta | 40.1 | a\\|b c |\n| short |  |  |"
        );
        assert_eq!(csv_to_markdown(""), None);
        assert_eq!(csv_to_markdown(",,\n,"), None);
    }

    /// One wide row among many short ones: the table grows with the cells, not with rows
    /// times width.
    #[test]
    fn padding_never_multiplies_the_table() {
        let wide = ",".repeat(200_000);
        let short = "x\n".repeat(200_000);
        let csv = format!("{wide}h\n{short}");
        let t = csv_to_markdown(&csv).unwrap();
        assert!(t.len() < 8 * csv.len(), "{} bytes", t.len());
        assert!(t.contains("\n| x |\n"));
    }
}
