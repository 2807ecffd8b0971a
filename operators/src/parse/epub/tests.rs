//! Books as they are written: notes spliced in, front and back matter left out, block
//! quotations as units. The EPUBs are built here, small and readable.

use std::io::{Cursor, Write};

use crate::chunk::tokens::tests::test_counter;
use crate::chunk::{chunk_document, ChunkerConfig};
use crate::document::{ContentType, Document};
use crate::parse::{parse, parse_with, ParseLimits, ParseOptions, Parsed};

/// An EPUB of `files` (path, content) after its `mimetype` and `container.xml` (which names
/// `OEBPS/content.opf`).
pub(crate) fn epub(files: &[(&str, &str)]) -> Vec<u8> {
    let mut w = ::zip::ZipWriter::new(Cursor::new(Vec::new()));
    let stored = ::zip::write::SimpleFileOptions::default()
        .compression_method(::zip::CompressionMethod::Stored);
    let container = r#"<?xml version="1.0"?>
<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">
  <rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles>
</container>"#;
    let all = [
        ("mimetype", "application/epub+zip"),
        ("META-INF/container.xml", container),
    ];
    for (path, content) in all.iter().chain(files) {
        w.start_file(*path, stored).expect("zip entry");
        w.write_all(content.as_bytes()).expect("zip write");
    }
    w.finish().expect("zip").into_inner()
}

fn xhtml(title: &str, body: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="utf-8"?>
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops">
<head><title>{title}</title></head>
{body}
</html>"#
    )
}

/// An EPUB 3 Chinese book: a navigation document with landmarks (cover, copyright page), a
/// cover page, a copyright page, a chapter with a footnote (and one nothing refers to) and a
/// block quotation, a chapter with endnotes, broken and outside note links and an index
/// section, and an endnotes file.
pub(crate) fn chinese_book() -> Vec<u8> {
    let opf = r#"<?xml version="1.0" encoding="utf-8"?>
<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">
  <metadata xmlns:dc="http://purl.org/dc/elements/1.1/">
    <dc:identifier id="id">urn:uuid:1</dc:identifier>
    <dc:title>河流之书</dc:title>
    <dc:language>zh-CN</dc:language>
  </metadata>
  <manifest>
    <item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>
    <item id="cover" href="cover.xhtml" media-type="application/xhtml+xml"/>
    <item id="copy" href="copyright.xhtml" media-type="application/xhtml+xml"/>
    <item id="c1" href="text/ch1.xhtml" media-type="application/xhtml+xml"/>
    <item id="c2" href="text/ch2.xhtml" media-type="application/xhtml+xml"/>
    <item id="notes" href="text/notes.xhtml" media-type="application/xhtml+xml"/>
  </manifest>
  <spine><itemref idref="cover"/><itemref idref="nav"/><itemref idref="copy"/>
    <itemref idref="c1"/><itemref idref="c2"/><itemref idref="notes"/></spine>
</package>"#;
    let nav = xhtml(
        "目录",
        r#"<body><h1>目录</h1>
<nav epub:type="toc"><ol><li><a href="text/ch1.xhtml">第一章</a></li></ol></nav>
<p>本书目录页的说明文字。</p>
<nav epub:type="landmarks"><ol>
  <li><a epub:type="cover" href="cover.xhtml">封面</a></li>
  <li><a epub:type="copyright-page" href="copyright.xhtml">版权页</a></li>
  <li><a epub:type="bodymatter" href="text/ch1.xhtml">正文</a></li>
</ol></nav></body>"#,
    );
    let cover = xhtml("封面", "<body><p>封面插图说明。</p></body>");
    let copyright = xhtml("版权", "<body><p>版权所有，翻印必究。</p></body>");
    let ch1 = xhtml(
        "第一章",
        r##"<body epub:type="bodymatter"><h1>第一章 源头</h1>
<p>河水从冰川流下<a epub:type="noteref" href="#fn1" id="r1">1</a>，汇成小溪。</p>
<blockquote><p>山不在高，有仙则名。</p><p>水不在深，有龙则灵。</p></blockquote>
<p>溪流向东而去。</p>
<aside epub:type="footnote" id="fn1"><p>冰川是缓慢移动的冰体。</p></aside>
<aside epub:type="footnote" id="fn9"><p>一条无人引用的注释。</p></aside>
</body>"##,
    );
    let ch2 = xhtml(
        "第二章",
        r##"<body><section epub:type="chapter"><h1>第二章 河口</h1>
<p>三角洲在海边展开<a epub:type="noteref" role="doc-noteref" href="notes.xhtml#en1" id="r2">2</a>。</p>
<p>坏的引用<a epub:type="noteref" href="notes.xhtml#">3</a>，缺失的<a epub:type="noteref" href="notes.xhtml#nothing">4</a>，书外的<a epub:type="noteref" href="http://example.com/notes.xhtml#en1">5</a>，越界的<a epub:type="noteref" href="../../../../etc/passwd#en1">6</a>，乱码的<a epub:type="noteref" href="%zz#%%">7</a>。</p>
</section>
<section epub:type="index"><h2>索引</h2><p>冰川，一<a epub:type="noteref" href="ch1.xhtml#fn9">9</a></p></section></body>"##,
    );
    let notes = xhtml(
        "注释",
        r##"<body><section epub:type="endnotes" role="doc-endnotes"><h1>注释</h1>
<ol><li id="en1" role="doc-endnote"><p>三角洲由泥沙沉积而成。<a href="ch2.xhtml#r2" role="doc-backlink">↩</a></p></li></ol>
</section></body>"##,
    );
    epub(&[
        ("OEBPS/content.opf", opf),
        ("OEBPS/nav.xhtml", &nav),
        ("OEBPS/cover.xhtml", &cover),
        ("OEBPS/copyright.xhtml", &copyright),
        ("OEBPS/text/ch1.xhtml", &ch1),
        ("OEBPS/text/ch2.xhtml", &ch2),
        ("OEBPS/text/notes.xhtml", &notes),
    ])
}

/// An EPUB 2 English book: a `<guide>` naming its cover, table of contents and copyright
/// page, a chapter whose note references point to a notes file that links back, and a note
/// nothing refers to.
pub(crate) fn english_book() -> Vec<u8> {
    english_book_with(r#"<itemref idref="notes"/>"#)
}

/// [`english_book`] with `notes_ref` as the notes file's place in the spine (`""`: out of it).
fn english_book_with(notes_ref: &str) -> Vec<u8> {
    let opf = r#"<?xml version="1.0" encoding="utf-8"?>
<package xmlns="http://www.idpf.org/2007/opf" version="2.0" unique-identifier="id">
  <metadata xmlns:dc="http://purl.org/dc/elements/1.1/">
    <dc:identifier id="id">urn:uuid:2</dc:identifier>
    <dc:title>The River Notes</dc:title>
    <dc:language>en</dc:language>
  </metadata>
  <manifest>
    <item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/>
    <item id="cover" href="cover.xhtml" media-type="application/xhtml+xml"/>
    <item id="toc" href="toc.xhtml" media-type="application/xhtml+xml"/>
    <item id="copy" href="copyright.xhtml" media-type="application/xhtml+xml"/>
    <item id="ded" href="dedication.xhtml" media-type="application/xhtml+xml"/>
    <item id="c1" href="ch1.xhtml" media-type="application/xhtml+xml"/>
    <item id="notes" href="notes.xhtml" media-type="application/xhtml+xml"/>
  </manifest>
  <spine toc="ncx"><itemref idref="cover"/><itemref idref="toc"/><itemref idref="copy"/>
    <itemref idref="ded"/><itemref idref="c1"/>NOTES</spine>
  <guide>
    <reference type="cover" title="Cover" href="cover.xhtml"/>
    <reference type="toc" title="Contents" href="toc.xhtml"/>
    <reference type="copyright-page" title="Copyright" href="copyright.xhtml"/>
    <reference type="dedication" title="Dedication" href="dedication.xhtml"/>
    <reference type="text" title="Start" href="ch1.xhtml"/>
  </guide>
</package>"#
        .replace("NOTES", notes_ref);
    let cover = xhtml("Cover", "<body><p>Cover art by the river.</p></body>");
    let toc = xhtml(
        "Contents",
        r#"<body><h1>Contents</h1><p><a href="ch1.xhtml#start">Chapter One</a></p></body>"#,
    );
    let copyright = xhtml(
        "Copyright",
        "<body><p>Copyright 2024 River Press. All rights reserved.</p></body>",
    );
    let dedication = xhtml("Dedication", "<body><p>For the ferryman.</p></body>");
    let ch1 = xhtml(
        "Chapter One",
        r#"<body><h1 id="start">Chapter One</h1>
<p>The river rose in spring<a id="r1" href="notes.xhtml#n1"><sup>1</sup></a> and flooded the valley.</p>
<p>The mill stood on the bank<sup><a id="r2" href="notes.xhtml#n2">2</a></sup> for a century.</p>
<p>See <a href="ch1.xhtml#start">the start</a> again.</p>
</body>"#,
    );
    let notes = xhtml(
        "Notes",
        r#"<body><h1>Notes</h1>
<p id="n1"><a href="ch1.xhtml#r1">1</a>. Snowmelt raises the river every April.</p>
<p id="n2"><a href="ch1.xhtml#r2">2</a> The mill was built in 1820.</p>
<p id="n3"><a href="ch1.xhtml#r9">3</a> A note nothing refers to.</p>
</body>"#,
    );
    epub(&[
        ("OEBPS/content.opf", &opf),
        ("OEBPS/cover.xhtml", &cover),
        ("OEBPS/toc.xhtml", &toc),
        ("OEBPS/copyright.xhtml", &copyright),
        ("OEBPS/dedication.xhtml", &dedication),
        ("OEBPS/ch1.xhtml", &ch1),
        ("OEBPS/notes.xhtml", &notes),
    ])
}

fn parsed(bytes: &[u8]) -> Parsed {
    parse(ContentType::Epub, bytes, &ParseLimits::default())
        .expect("a binary type")
        .expect("parses")
}

fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

#[test]
fn chinese_notes_are_spliced_at_their_references_once() {
    let md = parsed(&chinese_book()).markdown;
    assert!(
        md.contains("河水从冰川流下[注：冰川是缓慢移动的冰体。]，汇成小溪。"),
        "{md}"
    );
    assert_eq!(count(&md, "冰川是缓慢移动的冰体"), 1, "{md}");
    // An endnote in another file, its back-link left out; the notes file goes once empty.
    assert!(
        md.contains("三角洲在海边展开[注：三角洲由泥沙沉积而成。]。"),
        "{md}"
    );
    assert_eq!(count(&md, "三角洲由泥沙沉积而成"), 1, "{md}");
    assert!(!md.contains("# 注释") && !md.contains('↩'), "{md}");
    // A note nothing refers to stays where it is (a reference in dropped matter is none).
    assert!(md.contains("一条无人引用的注释。"), "{md}");
    // Broken, missing, outside and malformed references are left as they are.
    assert!(
        md.contains("坏的引用3，缺失的4，书外的5，越界的6，乱码的7。"),
        "{md}"
    );
}

/// The English book's two notes spliced in at their references, once each.
fn assert_english_notes_spliced(md: &str) {
    assert!(
        md.contains(
            "The river rose in spring [Note: Snowmelt raises the river every April.] and flooded"
        ),
        "{md}"
    );
    assert!(
        md.contains(
            "The mill stood on the bank [Note: The mill was built in 1820.] for a century."
        ),
        "{md}"
    );
    assert_eq!(count(md, "Snowmelt"), 1, "{md}");
    assert_eq!(count(md, "built in 1820"), 1, "{md}");
}

#[test]
fn english_notes_from_a_notes_file_with_back_links() {
    let md = parsed(&english_book()).markdown;
    assert_english_notes_spliced(&md);
    // The notes file keeps the note nothing refers to (and its heading).
    assert!(
        md.contains("# Notes") && md.contains("A note nothing refers to."),
        "{md}"
    );
    // A link that is no note reference is text as before.
    assert!(md.contains("See the start again."), "{md}");
}

#[test]
fn notes_in_a_file_out_of_the_spine_are_spliced_in() {
    let md = parsed(&english_book_with("")).markdown;
    assert_english_notes_spliced(&md);
    // The file itself is not in the reading order: what is not spliced in is not read.
    assert!(
        !md.contains("# Notes") && !md.contains("A note nothing refers to."),
        "{md}"
    );
}

#[test]
fn front_and_back_matter_is_left_out_by_the_books_own_marks() {
    let zh = parsed(&chinese_book()).markdown;
    for gone in ["封面插图说明", "版权所有", "本书目录页", "索引", "冰川，一"]
    {
        assert!(!zh.contains(gone), "{gone:?} in\n{zh}");
    }
    assert!(zh.starts_with("# 第一章 源头"), "{zh}");
    let en = parsed(&english_book()).markdown;
    for gone in ["Cover art", "All rights reserved", "Contents"] {
        assert!(!en.contains(gone), "{gone:?} in\n{en}");
    }
    // A dedication is not dropped by default.
    assert!(en.contains("For the ferryman."), "{en}");
    // Configured: nothing dropped, or the dedication too.
    let keep_all = ParseOptions {
        drop_matter: vec![],
    };
    let all = |b: &[u8], o: &ParseOptions| {
        parse_with(ContentType::Epub, b, &ParseLimits::default(), o)
            .expect("binary")
            .expect("parses")
            .markdown
    };
    let zh_all = all(&chinese_book(), &keep_all);
    for kept in ["封面插图说明", "版权所有", "本书目录页", "索引"] {
        assert!(zh_all.contains(kept), "{kept:?} not in\n{zh_all}");
    }
    let en_all = all(&english_book(), &keep_all);
    assert!(en_all.contains("All rights reserved"), "{en_all}");
    let dedication = ParseOptions {
        drop_matter: vec!["dedication".into()],
    };
    let en_ded = all(&english_book(), &dedication);
    assert!(
        !en_ded.contains("ferryman") && en_ded.contains("Cover art"),
        "{en_ded}"
    );
}

#[test]
fn block_quotations_are_units_marked_quote() {
    let md = parsed(&chinese_book()).markdown;
    assert!(
        md.contains("\n\n> 山不在高，有仙则名。\n>\n> 水不在深，有龙则灵。\n\n"),
        "{md}"
    );
    let doc = Document {
        id: "book".into(),
        title: "河流之书".into(),
        text: crate::clean::clean_text(&md, ContentType::Markdown),
        content_type: ContentType::Epub,
        source: String::new(),
        metadata: Default::default(),
        acl: vec![],
    };
    let t = test_counter();
    let chunks = chunk_document(&doc, "h", &ChunkerConfig::default(), &t);
    let quote: Vec<_> = chunks
        .iter()
        .filter(|c| c.text.contains("山不在高"))
        .collect();
    assert_eq!(quote.len(), 1, "{chunks:#?}");
    assert!(
        quote[0].metadata_json.contains(r#""quote":true"#),
        "{quote:?}"
    );
    assert!(!quote[0].text.contains("溪流向东"), "{quote:?}");
    assert_eq!(quote[0].section, ["第一章 源头".to_string()]);
    for c in chunks.iter().filter(|c| !c.text.contains("山不在高")) {
        assert!(!c.metadata_json.contains("quote"), "{c:?}");
    }
    // Parent-child: the quotation is a child of its own, its parent the whole section.
    let cfg = ChunkerConfig {
        strategy: crate::chunk::ChunkStrategy::ParentChild,
        ..ChunkerConfig::default()
    };
    let chunks = chunk_document(&doc, "h", &cfg, &t);
    let parent = chunks
        .iter()
        .find(|c| c.kind == crate::chunk::ChunkKind::Parent && c.text.contains("山不在高"))
        .expect("a parent");
    assert!(parent.text.contains("河水从冰川") && parent.text.contains("溪流向东"));
    let child = chunks
        .iter()
        .find(|c| c.parent_id.is_some() && c.text.contains("山不在高"))
        .expect("a child");
    assert!(child.metadata_json.contains(r#""quote":true"#) && !child.text.contains("溪流"));
}

#[test]
fn a_book_without_a_language_is_marked_by_its_script() {
    // The Chinese book without dc:language.
    let mut zip = ::zip::ZipArchive::new(Cursor::new(chinese_book())).expect("zip");
    let mut files = Vec::new();
    for i in 0..zip.len() {
        let mut f = zip.by_index(i).expect("entry");
        let mut s = String::new();
        std::io::Read::read_to_string(&mut f, &mut s).expect("utf-8");
        files.push((
            f.name().expect("name").to_string(),
            s.replace("<dc:language>zh-CN</dc:language>", ""),
        ));
    }
    let files: Vec<(&str, &str)> = files
        .iter()
        .filter(|(n, _)| n != "mimetype" && n != "META-INF/container.xml")
        .map(|(n, s)| (n.as_str(), s.as_str()))
        .collect();
    let md = parsed(&epub(&files)).markdown;
    assert!(md.contains("[注：冰川是缓慢移动的冰体。]"), "{md}");
}

#[test]
fn notes_are_held_to_the_text_limit() {
    // A note referred to many times: the spliced text counts against the limit.
    let refs = r##"<a epub:type="noteref" href="#n">*</a>"##.repeat(400);
    let body = format!(
        r#"<body><p>{refs}</p><aside epub:type="footnote" id="n"><p>{}</p></aside></body>"#,
        "a long note. ".repeat(40)
    );
    let opf = r#"<package xmlns="http://www.idpf.org/2007/opf" version="3.0"><metadata/>
<manifest><item id="c" href="c.xhtml" media-type="application/xhtml+xml"/></manifest>
<spine><itemref idref="c"/></spine></package>"#;
    let page = xhtml("c", &body);
    let book = epub(&[("OEBPS/content.opf", opf), ("OEBPS/c.xhtml", &page)]);
    let tight = ParseLimits::with_text_limit(100_000);
    let e = parse(ContentType::Epub, &book, &tight)
        .expect("binary")
        .expect_err("over the limit");
    assert_eq!(e.class(), "too_large", "{e}");
    // Within the limit it parses.
    assert!(parse(ContentType::Epub, &book, &ParseLimits::default())
        .expect("binary")
        .is_ok());
}

/// A one-page EPUB 3 book (English) with `body` as its page's body.
fn one_page(body: &str) -> Vec<u8> {
    let opf = r#"<package xmlns="http://www.idpf.org/2007/opf" version="3.0"><metadata/>
<manifest><item id="c" href="c.xhtml" media-type="application/xhtml+xml"/></manifest>
<spine><itemref idref="c"/></spine></package>"#;
    let page = xhtml("c", body);
    epub(&[("OEBPS/content.opf", opf), ("OEBPS/c.xhtml", &page)])
}

#[test]
fn a_note_marked_around_its_id_and_a_landmark_section() {
    let md = parsed(&one_page(
        r##"<body><p>Ice moves<a href="#n1">*</a> slowly.</p>
<aside epub:type="footnote"><p id="n1">A glacier creeps a metre a day.</p></aside>
<section epub:type="colophon"><p>Set in Garamond.</p></section></body>"##,
    ))
    .markdown;
    assert!(
        md.contains("Ice moves [Note: A glacier creeps a metre a day.] slowly."),
        "{md}"
    );
    assert_eq!(count(&md, "glacier"), 1, "{md}");
    assert!(!md.contains("Garamond"), "{md}");
}
