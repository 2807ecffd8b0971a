//! The binary parsers fuzzed (PDF, DOCX, EPUB, and the ZIP and XML readers inside them):
//! arbitrary bytes, the parse tests' fixtures damaged (bits flipped, cut short, bytes inserted,
//! spans zeroed, false sizes in the ZIP headers), and generated archives (missing and corrupted
//! entries, deep XML and HTML nesting, spines that repeat or name nothing, zip bombs, books
//! whose note links and landmarks point anywhere or nowhere). Every
//! input yields Markdown with text or a classified [`ParseError`], within the deadline, and
//! unpacking never passes [`ParseLimits`].

use std::io::{Cursor, Write};

use proptest::prelude::*;
use proptest::sample::{select, Index};

use super::{config, text, within_deadline};
use crate::document::ContentType;
use crate::parse::{parse, ParseError, ParseLimits};

const FIXTURES: &[&[u8]] = &[
    include_bytes!("../../tests/fixtures/parse/report.docx"),
    include_bytes!("../../tests/fixtures/parse/empty.docx"),
    include_bytes!("../../tests/fixtures/parse/book.epub"),
    include_bytes!("../../tests/fixtures/parse/headers.pdf"),
    include_bytes!("../../tests/fixtures/parse/two-column.pdf"),
    include_bytes!("../../tests/fixtures/parse/report-libreoffice.pdf"),
];

const BINARY: [ContentType; 3] = [ContentType::Docx, ContentType::Epub, ContentType::Pdf];

/// Parses `bytes` as `ct` within the deadline and checks the outcome's shape.
fn parse_checked(ct: ContentType, bytes: Vec<u8>, limits: ParseLimits) -> Result<String, String> {
    within_deadline("parse", move || {
        match parse(ct, &bytes, &limits).expect("a binary content type") {
            Ok(p) => {
                assert!(!p.markdown.trim().is_empty(), "parsed without text");
                if !p.pages.is_empty() {
                    assert_eq!(
                        p.markdown,
                        p.pages.join("\n\n"),
                        "pages do not make the text"
                    );
                }
                Ok(p.markdown)
            }
            Err(e) => {
                assert!(ParseError::CLASSES.contains(&e.class()));
                Err(e.to_string())
            }
        }
    })
}

/// One change to a file's bytes.
#[derive(Clone, Debug)]
enum Mutation {
    Flip(Index, u8),
    Truncate(Index),
    Insert(Index, Vec<u8>),
    Zero(Index, usize),
    /// A ZIP header's size field (compressed or not, local or central) set to this.
    ZipSize(Index, bool, u32),
    /// A central directory's entry count set to this.
    ZipCount(u16),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<Index>(), 0u8..8).prop_map(|(i, b)| Mutation::Flip(i, b)),
        1 => any::<Index>().prop_map(Mutation::Truncate),
        2 => (any::<Index>(), proptest::collection::vec(any::<u8>(), 1..64))
            .prop_map(|(i, b)| Mutation::Insert(i, b)),
        2 => (any::<Index>(), 1usize..512).prop_map(|(i, n)| Mutation::Zero(i, n)),
        3 => (any::<Index>(), any::<bool>(), prop_oneof![Just(u32::MAX), Just(0), any::<u32>()])
            .prop_map(|(i, c, n)| Mutation::ZipSize(i, c, n)),
        1 => any::<u16>().prop_map(Mutation::ZipCount),
    ]
}

fn positions(bytes: &[u8], signature: &[u8]) -> Vec<usize> {
    bytes
        .windows(signature.len())
        .enumerate()
        .filter(|(_, w)| *w == signature)
        .map(|(i, _)| i)
        .collect()
}

fn put(bytes: &mut [u8], at: usize, value: &[u8]) {
    if at + value.len() <= bytes.len() {
        bytes[at..at + value.len()].copy_from_slice(value);
    }
}

fn mutate(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        if bytes.is_empty() {
            break;
        }
        match m {
            Mutation::Flip(i, bit) => {
                let i = i.index(bytes.len());
                bytes[i] ^= 1 << bit;
            }
            Mutation::Truncate(i) => bytes.truncate(i.index(bytes.len())),
            Mutation::Insert(i, b) => {
                let i = i.index(bytes.len() + 1);
                bytes.splice(i..i, b.iter().copied());
            }
            Mutation::Zero(i, n) => {
                let a = i.index(bytes.len());
                let b = (a + n).min(bytes.len());
                bytes[a..b].fill(0);
            }
            Mutation::ZipSize(i, compressed, n) => {
                // local header: sizes at 18 (compressed) and 22; central: at 20 and 24
                let mut fields: Vec<usize> = positions(&bytes, b"PK\x03\x04")
                    .into_iter()
                    .map(|p| p + if *compressed { 18 } else { 22 })
                    .collect();
                fields.extend(
                    positions(&bytes, b"PK\x01\x02")
                        .into_iter()
                        .map(|p| p + if *compressed { 20 } else { 24 }),
                );
                if !fields.is_empty() {
                    let at = fields[i.index(fields.len())];
                    put(&mut bytes, at, &n.to_le_bytes());
                }
            }
            Mutation::ZipCount(n) => {
                for p in positions(&bytes, b"PK\x05\x06") {
                    put(&mut bytes, p + 8, &n.to_le_bytes());
                    put(&mut bytes, p + 10, &n.to_le_bytes());
                }
            }
        }
    }
    bytes
}

fn limits() -> impl Strategy<Value = ParseLimits> {
    prop_oneof![
        3 => Just(ParseLimits::default()),
        1 => (1u64..200_000, 1usize..40, 1usize..100_000, 1u64..100_000).prop_map(
            |(b, e, t, ops)| ParseLimits {
                max_unpacked_bytes: b,
                max_entries: e,
                max_text_bytes: t,
                max_stream_bytes: b / 2 + 1,
                max_page_tokens: ops,
                max_operations: ops * 4,
                ..ParseLimits::default()
            }
        ),
    ]
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A block of a generated document body; `Junk` is unescaped text (markup likely broken).
#[derive(Clone, Debug)]
enum Block {
    Para(Option<String>, String),
    Table(usize, usize, String),
    Nest(&'static str, usize, bool, String),
    Junk(String),
}

fn block() -> impl Strategy<Value = Block> {
    let style = proptest::option::of(prop_oneof![
        select(vec![
            "Heading1",
            "Heading2",
            "Heading9",
            "Title",
            "ListBullet",
            "ListNumber2",
            "Heading0",
            "Heading99999999999999999999",
        ])
        .prop_map(str::to_owned),
        "[A-Za-z0-9]{0,12}",
    ]);
    prop_oneof![
        6 => (style, text(12)).prop_map(|(s, t)| Block::Para(s, t)),
        1 => (0usize..6, 0usize..6, text(4)).prop_map(|(r, c, t)| Block::Table(r, c, t)),
        1 => (select(vec!["p", "r", "tbl", "tc", "div", "x"]), 0usize..3000, any::<bool>(), text(3))
            .prop_map(|(tag, d, closed, t)| Block::Nest(tag, d, closed, t)),
        1 => text(6).prop_map(Block::Junk),
    ]
}

fn docx_body(blocks: &[Block]) -> String {
    let mut x = String::from(
        r#"<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>"#,
    );
    for b in blocks {
        match b {
            Block::Para(style, t) => {
                x.push_str("<w:p>");
                if let Some(s) = style {
                    x.push_str(&format!(
                        r#"<w:pPr><w:pStyle w:val="{}"/></w:pPr>"#,
                        escape(s)
                    ));
                }
                x.push_str(&format!("<w:r><w:t>{}</w:t></w:r></w:p>", escape(t)));
            }
            Block::Table(rows, cols, t) => {
                x.push_str("<w:tbl>");
                for _ in 0..*rows {
                    x.push_str("<w:tr>");
                    for _ in 0..*cols {
                        x.push_str(&format!(
                            "<w:tc><w:p><w:r><w:t>{}</w:t></w:r></w:p></w:tc>",
                            escape(t)
                        ));
                    }
                    x.push_str("</w:tr>");
                }
                x.push_str("</w:tbl>");
            }
            Block::Nest(tag, depth, closed, t) => {
                x.push_str(&format!("<w:{tag}>").repeat(*depth));
                x.push_str(&format!("<w:t>{}</w:t>", escape(t)));
                if *closed {
                    x.push_str(&format!("</w:{tag}>").repeat(*depth));
                }
            }
            Block::Junk(t) => x.push_str(t),
        }
    }
    x.push_str("</w:body></w:document>");
    x
}

fn xhtml(blocks: &[Block]) -> String {
    let mut x = String::from(
        r#"<?xml version="1.0"?><html xmlns="http://www.w3.org/1999/xhtml"><head><title>T</title></head><body>"#,
    );
    for b in blocks {
        match b {
            Block::Para(Some(s), t) if s.starts_with("Heading") => {
                x.push_str(&format!("<h2>{}</h2>", escape(t)))
            }
            Block::Para(_, t) => x.push_str(&format!("<p>{}</p>", escape(t))),
            Block::Table(rows, cols, t) => {
                x.push_str("<table>");
                for _ in 0..*rows {
                    x.push_str(&format!(
                        "<tr>{}</tr>",
                        format!("<td>{}</td>", escape(t)).repeat(*cols)
                    ));
                }
                x.push_str("</table>");
            }
            Block::Nest(tag, depth, closed, t) => {
                x.push_str(&format!("<{tag}>").repeat(*depth));
                x.push_str(&escape(t));
                if *closed {
                    x.push_str(&format!("</{tag}>").repeat(*depth));
                }
            }
            Block::Junk(t) => x.push_str(t),
        }
    }
    x.push_str("</body></html>");
    x
}

/// Writes a ZIP archive of `(name, body, deflated)` entries.
fn zip(entries: &[(String, Vec<u8>, bool)]) -> Vec<u8> {
    use ::zip::write::SimpleFileOptions;
    let mut w = ::zip::ZipWriter::new(Cursor::new(Vec::new()));
    for (name, body, deflated) in entries {
        let method = if *deflated {
            ::zip::CompressionMethod::Deflated
        } else {
            ::zip::CompressionMethod::Stored
        };
        // A repeated name is refused by the writer: the archive is then written without it.
        if w.start_file(
            name.as_str(),
            SimpleFileOptions::default().compression_method(method),
        )
        .is_ok()
        {
            w.write_all(body).expect("writing to memory");
        }
    }
    w.finish().expect("writing to memory").into_inner()
}

fn well_formed(blocks: &[Block]) -> bool {
    blocks.iter().all(|b| match b {
        Block::Junk(_) => false,
        Block::Nest(_, d, closed, _) => *closed || *d == 0,
        _ => true,
    })
}

fn has_word(blocks: &[Block]) -> bool {
    blocks.iter().any(|b| match b {
        Block::Para(_, t) => t.chars().any(char::is_alphanumeric),
        _ => false,
    })
}

/// Archive entries: name, body, deflated.
type Entries = Vec<(String, Vec<u8>, bool)>;

fn docx() -> impl Strategy<Value = (Vec<Block>, Entries)> {
    let extra = proptest::collection::vec(
        (
            prop_oneof![
                select(vec![
                    "word/styles.xml",
                    "docProps/core.xml",
                    "[Content_Types].xml",
                    "word/numbering.xml"
                ])
                .prop_map(str::to_owned),
                "[a-z/]{1,20}",
            ],
            prop_oneof![
                text(8).prop_map(String::into_bytes),
                proptest::collection::vec(any::<u8>(), 0..200)
            ],
            any::<bool>(),
        ),
        0..4,
    );
    (
        proptest::collection::vec(block(), 0..12),
        extra,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(blocks, extra, deflated, present)| {
            let mut entries = Vec::new();
            if present {
                entries.push((
                    "word/document.xml".to_owned(),
                    docx_body(&blocks).into_bytes(),
                    deflated,
                ));
            }
            entries.extend(extra);
            (blocks, entries)
        })
}

/// A generated EPUB: its chapter's blocks, its entries, and whether it is a valid book.
fn epub() -> impl Strategy<Value = (Vec<Block>, Entries, bool)> {
    let spine = proptest::collection::vec(
        prop_oneof![4 => Just("c1"), 1 => Just("c2"), 1 => Just("nav"), 1 => Just("missing")],
        0..6,
    );
    let rootfile = prop_oneof![4 => Just("OEBPS/content.opf"), 1 => Just(""), 1 => Just("../../etc/x.opf"), 1 => Just("OEBPS/none.opf")];
    (proptest::collection::vec(block(), 0..10), spine, rootfile, any::<bool>()).prop_map(
        |(blocks, spine, rootfile, deflated)| {
            let container = format!(
                r#"<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles><rootfile full-path="{rootfile}" media-type="application/oebps-package+xml"/></rootfiles></container>"#
            );
            let itemrefs: String = spine.iter().map(|i| format!(r#"<itemref idref="{i}"/>"#)).collect();
            let opf = format!(
                r#"<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>Book</dc:title></metadata><manifest><item id="c1" href="c1.xhtml" media-type="application/xhtml+xml"/><item id="c2" href="sub/../c1.xhtml" media-type="application/xhtml+xml"/><item id="nav" href="nav.xhtml" media-type="application/xhtml+xml"/></manifest><spine>{itemrefs}</spine></package>"#
            );
            let valid = rootfile == "OEBPS/content.opf"
                && spine.contains(&"c1")
                && spine.iter().all(|i| *i == "c1" || *i == "missing");
            let entries = vec![
                ("mimetype".to_owned(), b"application/epub+zip".to_vec(), false),
                ("META-INF/container.xml".to_owned(), container.into_bytes(), deflated),
                ("OEBPS/content.opf".to_owned(), opf.into_bytes(), deflated),
                ("OEBPS/c1.xhtml".to_owned(), xhtml(&blocks).into_bytes(), deflated),
            ];
            (blocks, entries, valid)
        },
    )
}

/// An href a note reference or landmark may carry: to a note, to nothing, out of the book,
/// malformed.
fn note_href() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => note_id().prop_map(|id| format!("#{id}")),
        3 => note_id().prop_map(|id| format!("notes.xhtml#{id}")),
        1 => Just("#".to_owned()),
        1 => Just("notes.xhtml#".to_owned()),
        1 => Just("../../../../../etc/passwd#n1".to_owned()),
        1 => Just("http://example.com/notes.xhtml#n1".to_owned()),
        1 => Just("%zz#%%".to_owned()),
        1 => Just("c.xhtml".to_owned()),
        1 => "[ -~]{0,16}",
    ]
}

/// A [`note_href`] that names no part of the chapter (a landmark there would drop it).
fn other_href() -> impl Strategy<Value = String> {
    note_href().prop_filter("names the chapter", |h| {
        !h.contains('%') && !h.contains("c.xhtml") && !h.starts_with('#')
    })
}

fn note_id() -> impl Strategy<Value = String> {
    prop_oneof![4 => select(vec!["n1", "n2", "r1", "body"]).prop_map(str::to_owned), 1 => "[a-z%]{1,4}"]
}

/// A book of a chapter with note references and notes of every kind, and a notes file.
fn noted_book(
    refs: &[(String, bool, String)],
    notes: &[(String, usize, String)],
    landmarks: &[(String, &str)],
) -> Vec<u8> {
    let mut chapter = String::from("<body><p id=\"r1\">Running text stays.");
    for (href, typed, label) in refs {
        let t = if *typed {
            r#" epub:type="noteref""#
        } else {
            ""
        };
        chapter.push_str(&format!(
            r#"<a{t} href="{}">{}</a> more."#,
            escape(href),
            escape(label)
        ));
    }
    chapter.push_str("</p>");
    let mut notes_page = String::from(r#"<body><section epub:type="endnotes"><h1>Notes</h1>"#);
    for (i, (id, kind, t)) in notes.iter().enumerate() {
        let (id, t) = (escape(id), escape(t));
        let note = match kind {
            0 => format!(r#"<aside epub:type="footnote" id="{id}"><p>{t}</p></aside>"#),
            1 => format!(r#"<p id="{id}"><a href="c.xhtml#r1">{i}</a> {t}</p>"#),
            2 => format!(r#"<aside epub:type="footnote"><p id="{id}">{t}</p></aside>"#),
            _ => format!(r#"<div id="{id}">{t}</div>"#),
        };
        if i % 2 == 0 {
            chapter.push_str(&note);
        } else {
            notes_page.push_str(&note);
        }
    }
    chapter.push_str("</body>");
    notes_page.push_str("</section></body>");
    let mut nav = String::from(r#"<body><nav epub:type="landmarks"><ol>"#);
    for (href, kind) in landmarks {
        nav.push_str(&format!(
            r#"<li><a epub:type="{kind}" href="{}">x</a></li>"#,
            escape(href)
        ));
    }
    nav.push_str("</ol></nav></body>");
    let page = |body: &str| {
        format!(
            r#"<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops"><head><title>t</title></head>{body}</html>"#
        )
    };
    let opf = r#"<package xmlns="http://www.idpf.org/2007/opf" version="3.0"><metadata/><manifest>
<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>
<item id="c" href="c.xhtml" media-type="application/xhtml+xml"/>
<item id="n" href="notes.xhtml" media-type="application/xhtml+xml"/></manifest>
<spine><itemref idref="c"/><itemref idref="n"/></spine></package>"#;
    crate::parse::epub::tests::epub(&[
        ("OEBPS/content.opf", opf),
        ("OEBPS/nav.xhtml", &page(&nav)),
        ("OEBPS/c.xhtml", &page(&chapter)),
        ("OEBPS/notes.xhtml", &page(&notes_page)),
    ])
}

proptest! {
    #![proptest_config(config(64))]

    #[test]
    fn arbitrary_bytes(prefix in select(vec![&b""[..], b"PK\x03\x04", b"%PDF-1.4\n", b"PK\x05\x06"]),
                       body in proptest::collection::vec(any::<u8>(), 0..4096),
                       limits in limits()) {
        let mut bytes = prefix.to_vec();
        bytes.extend(body);
        for ct in BINARY {
            let _ = parse_checked(ct, bytes.clone(), limits);
        }
    }

    #[test]
    fn damaged_fixtures(which in 0..FIXTURES.len(), mutations in proptest::collection::vec(mutation(), 1..6),
                        limits in limits()) {
        let bytes = mutate(FIXTURES[which].to_vec(), &mutations);
        for ct in BINARY {
            let _ = parse_checked(ct, bytes.clone(), limits);
        }
    }

    #[test]
    fn damaged_books(chinese in any::<bool>(), mutations in proptest::collection::vec(mutation(), 1..6),
                     limits in limits()) {
        let book = if chinese {
            crate::parse::epub::tests::chinese_book()
        } else {
            crate::parse::epub::tests::english_book()
        };
        let _ = parse_checked(ContentType::Epub, mutate(book, &mutations), limits);
    }

    #[test]
    fn books_with_notes_anywhere(refs in proptest::collection::vec((note_href(), any::<bool>(), text(3)), 0..12),
                                 notes in proptest::collection::vec((note_id(), 0usize..4, text(4)), 0..8),
                                 landmarks in proptest::collection::vec((other_href(), select(vec!["cover", "toc", "index", "bodymatter", "x"])), 0..4)) {
        let book = noted_book(&refs, &notes, &landmarks);
        let r = parse_checked(ContentType::Epub, book, ParseLimits::default());
        // The running text is there whatever the notes and landmarks say.
        let md = r.map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(md.contains("Running text stays."), "{md}");
    }

    #[test]
    fn generated_docx((blocks, entries) in docx(), mutations in proptest::collection::vec(mutation(), 0..3),
                      limits in limits()) {
        let intact = mutations.is_empty()
            && limits == ParseLimits::default()
            && entries.len() == 1
            && entries[0].0 == "word/document.xml";
        let bytes = mutate(zip(&entries), &mutations);
        let r = parse_checked(ContentType::Docx, bytes.clone(), limits);
        if intact && well_formed(&blocks) && has_word(&blocks) {
            prop_assert!(r.is_ok(), "a well-formed DOCX did not parse: {r:?}");
        }
        let _ = parse_checked(ContentType::Epub, bytes, limits);
    }

    #[test]
    fn generated_epub((blocks, entries, valid) in epub(), mutations in proptest::collection::vec(mutation(), 0..3),
                      limits in limits()) {
        let intact = valid && mutations.is_empty() && limits == ParseLimits::default();
        let bytes = mutate(zip(&entries), &mutations);
        let r = parse_checked(ContentType::Epub, bytes.clone(), limits);
        if intact && well_formed(&blocks) && has_word(&blocks) {
            prop_assert!(r.is_ok(), "a valid EPUB did not parse: {r:?}");
        }
        let _ = parse_checked(ContentType::Docx, bytes, limits);
    }
}

proptest! {
    #![proptest_config(config(12))]

    /// A small archive that unpacks to megabytes: refused at the limit, never unpacked past it.
    #[test]
    fn zip_bombs_stop_at_the_limit(size in 1usize..(4 << 20), limit in 1u64..(2 << 20), epub in any::<bool>()) {
        let mut body = String::from(r#"<w:document xmlns:w="w"><w:body><w:p><w:r><w:t>"#);
        body.push_str(&"a".repeat(size));
        body.push_str("</w:t></w:r></w:p></w:body></w:document>");
        let (ct, entries) = if epub {
            let e = vec![
                ("META-INF/container.xml".to_owned(), br#"<container><rootfiles><rootfile full-path="c.opf"/></rootfiles></container>"#.to_vec(), true),
                ("c.opf".to_owned(), br#"<package><manifest><item id="a" href="a.xhtml" media-type="application/xhtml+xml"/></manifest><spine><itemref idref="a"/><itemref idref="a"/></spine></package>"#.to_vec(), true),
                ("a.xhtml".to_owned(), format!("<html><body><p>{}</p></body></html>", "a".repeat(size)).into_bytes(), true),
            ];
            (ContentType::Epub, e)
        } else {
            (ContentType::Docx, vec![("word/document.xml".to_owned(), body.into_bytes(), true)])
        };
        let bytes = zip(&entries);
        let limits = ParseLimits { max_unpacked_bytes: limit, ..ParseLimits::default() };
        // every entry is read at least once
        let unpacked: u64 = entries.iter().map(|e| e.1.len() as u64).sum();
        let r = parse_checked(ct, bytes, limits);
        if unpacked > limit {
            let e = r.expect_err("unpacked past the limit");
            prop_assert!(e.contains("limit"), "{e}");
        }
    }
}
