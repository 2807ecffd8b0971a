//! The parsers against files made by the tools people make them with (python-docx, ebooklib;
//! `tests/fixtures/make_test_documents.py` writes them), and against damaged and random bytes.

use super::*;
use crate::chunk::{chunk_document, CharCounter, ChunkerConfig};
use crate::document::Document;

const REPORT: &[u8] = include_bytes!("../../tests/fixtures/parse/report.docx");
const EMPTY: &[u8] = include_bytes!("../../tests/fixtures/parse/empty.docx");
const TRUNCATED: &[u8] = include_bytes!("../../tests/fixtures/parse/truncated.docx");
const BOOK: &[u8] = include_bytes!("../../tests/fixtures/parse/book.epub");
const HEADERS_PDF: &[u8] = include_bytes!("../../tests/fixtures/parse/headers.pdf");
const TWO_COLUMN_PDF: &[u8] = include_bytes!("../../tests/fixtures/parse/two-column.pdf");
const SCANNED_PDF: &[u8] = include_bytes!("../../tests/fixtures/parse/scanned.pdf");
const ENCRYPTED_PDF: &[u8] = include_bytes!("../../tests/fixtures/parse/encrypted.pdf");
const TRUNCATED_PDF: &[u8] = include_bytes!("../../tests/fixtures/parse/truncated.pdf");
const OFFICE_PDF: &[u8] = include_bytes!("../../tests/fixtures/parse/report-libreoffice.pdf");

fn ok(ct: ContentType, bytes: &[u8]) -> Parsed {
    parse(ct, bytes, &ParseLimits::default())
        .expect("a binary type")
        .expect("parses")
}

fn err(ct: ContentType, bytes: &[u8]) -> ParseError {
    parse(ct, bytes, &ParseLimits::default())
        .expect("a binary type")
        .expect_err("does not parse")
}

/// The chunks of a parsed document: (section path, text).
fn sections(ct: ContentType, bytes: &[u8]) -> Vec<(Vec<String>, String)> {
    let p = ok(ct, bytes);
    let doc = Document {
        id: "d".into(),
        title: p.title.unwrap_or_default(),
        text: p.markdown,
        content_type: ct,
        source: String::new(),
        metadata: Default::default(),
        acl: Vec::new(),
    };
    let cfg = ChunkerConfig {
        max_tokens: 10_000,
        ..ChunkerConfig::default()
    };
    chunk_document(&doc, "h", &cfg, &CharCounter)
        .into_iter()
        .map(|c| (c.section, c.text))
        .collect()
}

#[test]
fn docx_headings_lists_and_tables() {
    let p = ok(ContentType::Docx, REPORT);
    assert_eq!(p.title.as_deref(), Some("Quarterly River Report"));
    let md = &p.markdown;
    for want in [
        "# Quarterly River Report",
        "# Introduction",
        "The river rose in spring & fell in autumn; gauges <read> daily.",
        "## Methods",
        "- Upstream gauge\n  - Calibrated weekly\n- Downstream gauge",
        "## Results",
        "| Site | Flow m3/s |\n| --- | --- |\n| Upstream | 12.5 |\n| Delta \\| mouth | 40.1 |",
        "### Seasonal detail",
        "# Conclusion",
    ] {
        assert!(md.contains(want), "{want:?} not in\n{md}");
    }
    let order =
        ["# Introduction", "## Methods", "## Results", "# Conclusion"].map(|h| md.find(h).unwrap());
    assert!(order.windows(2).all(|w| w[0] < w[1]), "body order");
}

#[test]
fn docx_headings_become_section_paths() {
    let chunks = sections(ContentType::Docx, REPORT);
    let path_of = |needle: &str| {
        chunks
            .iter()
            .find(|(_, t)| t.contains(needle))
            .map(|(s, _)| s.clone())
            .unwrap_or_else(|| panic!("{needle:?} in no chunk: {chunks:?}"))
    };
    assert_eq!(
        path_of("12.5"),
        ["Introduction", "Results"].map(String::from)
    );
    assert_eq!(
        path_of("snowmelt"),
        ["Introduction", "Results", "Seasonal detail"].map(String::from)
    );
    assert_eq!(path_of("Sediment load"), ["Conclusion"].map(String::from));
}

#[test]
fn epub_chapters_in_spine_order_with_their_headings() {
    let p = ok(ContentType::Epub, BOOK);
    assert_eq!(p.title.as_deref(), Some("The River Book"));
    let md = &p.markdown;
    let at = ["# Source", "## Glaciers", "# Course", "# Mouth"]
        .map(|h| md.find(h).unwrap_or_else(|| panic!("{h:?} not in\n{md}")));
    assert!(at.windows(2).all(|w| w[0] < w[1]), "spine order:\n{md}");
    let chunks = sections(ContentType::Epub, BOOK);
    let meltwater = chunks
        .iter()
        .find(|(_, t)| t.contains("Meltwater"))
        .unwrap();
    assert_eq!(meltwater.0, ["Source", "Glaciers"].map(String::from));
    let delta = chunks
        .iter()
        .find(|(_, t)| t.contains("delta spreads"))
        .unwrap();
    assert_eq!(delta.0, ["Mouth"].map(String::from));
}

#[test]
fn bad_files_have_their_class() {
    assert_eq!(err(ContentType::Docx, EMPTY).class(), "no_text");
    let e = err(ContentType::Docx, TRUNCATED);
    assert_eq!(e.class(), "unparseable", "{e}");
    assert_eq!(
        err(ContentType::Docx, b"plain text, not a zip").class(),
        "unparseable"
    );
    // an EPUB is no DOCX and the other way round
    let e = err(ContentType::Docx, BOOK);
    assert!(e.to_string().contains("word/document.xml"), "{e}");
    assert_eq!(err(ContentType::Epub, REPORT).class(), "unparseable");
    assert!(parse(ContentType::Markdown, b"# x", &ParseLimits::default()).is_none());
}

#[test]
fn unpacking_is_bounded() {
    let tight = ParseLimits {
        max_unpacked_bytes: 1_000,
        ..ParseLimits::default()
    };
    let e = parse(ContentType::Docx, REPORT, &tight)
        .unwrap()
        .unwrap_err();
    assert!(e.to_string().contains("limit"), "{e}");
    let few = ParseLimits {
        max_entries: 3,
        ..ParseLimits::default()
    };
    let e = parse(ContentType::Epub, BOOK, &few).unwrap().unwrap_err();
    assert!(e.to_string().contains("entries"), "{e}");
}

/// xorshift64*: deterministic randomness.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Damaged real files (cut short, bytes flipped, spans zeroed) and random bytes: every parser
/// returns text or an error, never panics.
#[test]
fn damaged_and_random_bytes_never_panic() {
    let mut rng = Rng(0xdead_beef);
    let originals = [REPORT, BOOK, EMPTY, HEADERS_PDF, TWO_COLUMN_PDF, OFFICE_PDF];
    for round in 0..600 {
        let mut bytes = originals[round % originals.len()].to_vec();
        match rng.below(4) {
            0 => bytes.truncate(rng.below(bytes.len())),
            1 => {
                for _ in 0..1 + rng.below(20) {
                    let i = rng.below(bytes.len());
                    bytes[i] ^= 1 << rng.below(8);
                }
            }
            2 => {
                let a = rng.below(bytes.len());
                let b = (a + rng.below(512)).min(bytes.len());
                bytes[a..b].fill(0);
            }
            _ => {
                bytes = (0..rng.below(4096)).map(|_| rng.next() as u8).collect();
                if rng.below(2) == 0 {
                    bytes.splice(0..0, *b"PK\x03\x04");
                }
            }
        }
        for ct in [ContentType::Docx, ContentType::Epub, ContentType::Pdf] {
            if let Some(Ok(p)) = parse(ct, &bytes, &ParseLimits::default()) {
                assert!(!p.markdown.trim().is_empty());
            }
        }
    }
}

/// Running headers and footers (page numbers included) leave, a word hyphenated across a line
/// end is whole again, larger lines are headings, and every page keeps its number.
#[test]
fn pdf_pages_without_running_headers() {
    let p = ok(ContentType::Pdf, HEADERS_PDF);
    assert_eq!(p.title.as_deref(), Some("River Survey"));
    assert_eq!(p.pages.len(), 4);
    for (page, heading) in
        p.pages
            .iter()
            .zip(["Introduction", "Upper river", "Lower river", "Conclusions"])
    {
        assert!(page.starts_with(&format!("# {heading}\n\n")), "{page}");
        assert!(!page.contains("Internal Draft"), "running header: {page}");
        assert!(!page.contains("Page "), "running footer: {page}");
    }
    assert!(p.pages[1].contains("The measurement of upper river went on all season."));
    assert!(p.pages[2].contains("The lower river peaked two weeks later"));
    assert_eq!(p.markdown, p.pages.join("\n\n"));
}

/// Two columns are read left then right, each paragraph whole, never line by line across.
#[test]
fn pdf_columns_are_not_interleaved() {
    let p = ok(ContentType::Pdf, TWO_COLUMN_PDF);
    assert_eq!(p.pages.len(), 2);
    let first = &p.pages[0];
    let paragraphs: Vec<&str> = first.split("\n\n").collect();
    assert_eq!(
        paragraphs,
        [
            "First page: The upper river gathers water from springs and melting snow on the high slopes.",
            "First page: Its channel is narrow and steep, and the current carries coarse gravel downstream.",
            "First page: Gauges on the upper reach report the level every fifteen minutes to the control room.",
            "First page: The lower river spreads across a wide floodplain before it reaches the delta.",
            "First page: There the current slows and fine silt settles, building new land each season.",
            "First page: Boats on the lower reach follow channels that the harbour office marks with buoys.",
        ]
    );
    assert!(p.pages[1].starts_with("Second page: The upper river"));
}

/// A scan has no text to read; an encrypted, a truncated or a garbage PDF is unparseable.
#[test]
fn bad_pdfs_have_their_class() {
    assert_eq!(err(ContentType::Pdf, SCANNED_PDF).class(), "no_text");
    let e = err(ContentType::Pdf, ENCRYPTED_PDF);
    assert_eq!(e.class(), "unparseable");
    assert!(e.to_string().contains("password"), "{e}");
    assert_eq!(err(ContentType::Pdf, TRUNCATED_PDF).class(), "unparseable");
    assert_eq!(
        err(ContentType::Pdf, b"%PDF-1.7 garbage").class(),
        "unparseable"
    );
}

/// A PDF as an office suite writes it (LibreOffice's export of `report.docx`): headings by size,
/// the bullet glyphs as a list, the table as a Markdown table, in reading order.
#[test]
fn pdf_from_an_office_suite() {
    let p = ok(ContentType::Pdf, OFFICE_PDF);
    assert_eq!(p.title.as_deref(), Some("Quarterly River Report"));
    let md = &p.markdown;
    for want in [
        "# Quarterly River Report",
        "## Introduction\n\nThe river rose in spring & fell in autumn; gauges <read> daily.",
        "### Methods\n\nFlow was measured at three sites.",
        "- Upstream gauge\n- Calibrated weekly\n- Downstream gauge",
        "### Results\n\n| Site | Flow m3/s |\n| --- | --- |\n| Upstream | 12.5 |\n| Delta \\| mouth | 40.1 |",
        "## Conclusion\n\nSediment load tracks discharge.",
    ] {
        assert!(md.contains(want), "{want:?} not in\n{md}");
    }
}
