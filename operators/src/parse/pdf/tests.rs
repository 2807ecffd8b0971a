//! The PDF reader held to [`ParseLimits`]: inflate bombs, content that runs too long, forms
//! that draw themselves, text over the record's limit, the deadline; ordinary files still read.

use std::time::{Duration, Instant};

use super::*;
use crate::document::ContentType;
use crate::parse::{parse as parse_any, ParseError};
use crate::testing::pdf::{inflate_bomb, pdf, text_content, text_page, PageSpec};

fn run(bytes: &[u8], limits: &ParseLimits) -> Result<Parsed, ParseError> {
    parse_any(ContentType::Pdf, bytes, limits).expect("a binary type")
}

fn too_large(bytes: &[u8], limits: &ParseLimits) -> String {
    let e = run(bytes, limits).expect_err("over a limit");
    assert_eq!(e.class(), "too_large", "{e}");
    e.to_string()
}

#[test]
fn generated_pdfs_read() {
    let bytes = pdf(&[text_page("River survey\nthe delta"), text_page("page two")]);
    let p = run(&bytes, &ParseLimits::default()).unwrap();
    assert_eq!(p.pages.len(), 2);
    assert!(p.pages[0].contains("River survey"), "{:?}", p.pages);
    assert!(p.pages[1].contains("page two"));
}

/// A page whose compressed content inflates past the stream limit is refused before it is
/// decoded whole, quickly, and so is one whose streams together pass the document's limit.
#[test]
fn an_inflate_bomb_is_too_large() {
    let small = ParseLimits {
        max_stream_bytes: 1 << 20,
        max_unpacked_bytes: 4 << 20,
        ..ParseLimits::default()
    };
    let bomb = inflate_bomb("before the bomb", 8 << 20);
    assert!(bomb.len() < 64 << 10, "{} bytes", bomb.len());
    let started = Instant::now();
    let e = too_large(&bomb, &small);
    assert!(
        e.contains("inflates to more than") || e.contains("decodes to more than"),
        "{e}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    // with the default limits: a 1 GiB bomb in a file of about a megabyte
    let bomb = inflate_bomb("before the bomb", 1 << 30);
    assert!(bomb.len() < 3 << 20, "{} bytes", bomb.len());
    let e = too_large(&bomb, &ParseLimits::default());
    assert!(e.contains("more than"), "{e}");
    // many streams, each under the stream limit, over the document's
    let mut block = Vec::new();
    while block.len() < 300 << 10 {
        block.extend_from_slice(b"q Q\n");
    }
    let z = crate::testing::pdf::repeated_zlib(&block, 600 << 10);
    let page = PageSpec {
        contents: (0..8).map(|_| (z.clone(), true)).collect(),
        forms: Vec::new(),
    };
    let e = too_large(&pdf(&[page]), &small);
    assert!(e.contains("together"), "{e}");
}

/// Uncompressed content over the page's token limit, and forms drawn over and over past the
/// document's operator limit.
#[test]
fn content_operations_are_counted_before_they_run() {
    let mut drawing = text_content("a page of lines");
    for _ in 0..20_000 {
        drawing.extend_from_slice(b"1 1 m 2 2 l S\n");
    }
    let limits = ParseLimits {
        max_page_tokens: 50_000,
        ..ParseLimits::default()
    };
    let one = PageSpec {
        contents: vec![(drawing, false)],
        forms: Vec::new(),
    };
    let e = too_large(&pdf(&[one]), &limits);
    assert!(e.contains("page 1 holds more than 50000"), "{e}");
    // a form of 1,000 operators drawn 1,000 times: 1,000,000 operators from a small file
    let form = b"q Q\n".repeat(500);
    let mut page = text_content("forms");
    page.extend_from_slice(&b"/Fm0 Do\n".repeat(1000));
    let spec = PageSpec {
        contents: vec![(page, false)],
        forms: vec![form],
    };
    let bytes = pdf(&[spec]);
    let limits = ParseLimits {
        max_operations: 100_000,
        ..ParseLimits::default()
    };
    let e = too_large(&bytes, &limits);
    assert!(e.contains("more than 100000 content operators"), "{e}");
    // within the limits it reads
    assert!(run(&bytes, &ParseLimits::default()).is_ok());
}

/// A form that draws itself would make the reader recurse until the stack overflows.
#[test]
fn a_form_that_draws_itself_is_unparseable() {
    let mut page = text_content("loop");
    page.extend_from_slice(b"/Fm0 Do\n");
    let spec = PageSpec {
        contents: vec![(page, false)],
        forms: vec![b"/Fm0 Do".to_vec()],
    };
    // The form's resources are the page's, which name it: it draws itself.
    let e = run(&pdf(&[spec]), &ParseLimits::default()).unwrap_err();
    assert_eq!(e.class(), "unparseable", "{e}");
    assert!(e.to_string().contains("draws itself"), "{e}");
}

/// The text a PDF yields is held to the record's text limit while its glyphs arrive.
#[test]
fn text_over_the_record_limit_is_too_large() {
    let line = "the river carries its sediment to the delta ".repeat(2);
    let text: String = (0..60).map(|_| format!("{line}\n")).collect();
    let bytes = pdf(&[text_page(&text)]);
    assert!(run(&bytes, &ParseLimits::default()).is_ok());
    let limits = ParseLimits::with_text_limit(2_000);
    let e = too_large(&bytes, &limits);
    assert!(e.contains("longer than 2000 bytes"), "{e}");
}

/// The deadline is looked at before any page is read.
#[test]
fn the_deadline_holds() {
    let bytes = pdf(&[text_page("in time")]);
    let limits = ParseLimits {
        max_read: Duration::ZERO,
        ..ParseLimits::default()
    };
    let e = too_large(&bytes, &limits);
    assert!(e.contains("took over 0 s"), "{e}");
}
