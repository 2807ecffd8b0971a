//! PDFs made for tests with the PDF reader's own writer (`lopdf`): pages of text in a standard
//! font, forms, and an inflate bomb (a page whose FlateDecode content inflates to gigabytes of
//! drawing operators from a file of a few megabytes).

use std::io::Write;

use pdf_extract::{Dictionary, Document, Object, ObjectId, Stream};

/// One page: its content streams (each `(bytes, flate-compressed already)`) and the forms its
/// resources name (`/Fm0`, `/Fm1`, …: their content).
#[derive(Clone, Debug, Default)]
pub struct PageSpec {
    pub contents: Vec<(Vec<u8>, bool)>,
    pub forms: Vec<Vec<u8>>,
}

/// A page showing `text` in 12 pt Helvetica, one line per `\n`.
pub fn text_page(text: &str) -> PageSpec {
    PageSpec {
        contents: vec![(text_content(text), false)],
        forms: Vec::new(),
    }
}

/// Content that shows `text` in 12 pt Helvetica (`/F1`), one line per `\n`, from the top left.
pub fn text_content(text: &str) -> Vec<u8> {
    let mut c = b"BT /F1 12 Tf 72 770 Td 14 TL\n".to_vec();
    for line in text.lines() {
        let escaped = line
            .replace('\\', "\\\\")
            .replace('(', "\\(")
            .replace(')', "\\)");
        c.extend_from_slice(format!("({escaped}) Tj T*\n").as_bytes());
    }
    c.extend_from_slice(b"ET\n");
    c
}

/// A PDF of `pages` (A4, Helvetica as `/F1`).
pub fn pdf(pages: &[PageSpec]) -> Vec<u8> {
    let mut doc = Document::with_version("1.5");
    let pages_id = doc.new_object_id();
    let mut font = Dictionary::new();
    font.set("Type", Object::Name(b"Font".to_vec()));
    font.set("Subtype", Object::Name(b"Type1".to_vec()));
    font.set("BaseFont", Object::Name(b"Helvetica".to_vec()));
    let font_id = doc.add_object(font);
    let mut kids = Vec::new();
    for spec in pages {
        let mut fonts = Dictionary::new();
        fonts.set("F1", Object::Reference(font_id));
        let mut resources = Dictionary::new();
        resources.set("Font", Object::Dictionary(fonts.clone()));
        let mut xobjects = Dictionary::new();
        for (i, form) in spec.forms.iter().enumerate() {
            let mut dict = Dictionary::new();
            dict.set("Type", Object::Name(b"XObject".to_vec()));
            dict.set("Subtype", Object::Name(b"Form".to_vec()));
            dict.set(
                "BBox",
                Object::Array(vec![0.into(), 0.into(), 595.into(), 842.into()]),
            );
            let id = doc.add_object(Stream::new(dict, form.clone()));
            xobjects.set(format!("Fm{i}"), Object::Reference(id));
        }
        if !spec.forms.is_empty() {
            resources.set("XObject", Object::Dictionary(xobjects));
        }
        let contents: Vec<Object> = spec
            .contents
            .iter()
            .map(|(bytes, compressed)| {
                let mut dict = Dictionary::new();
                if *compressed {
                    dict.set("Filter", Object::Name(b"FlateDecode".to_vec()));
                }
                Object::Reference(doc.add_object(Stream::new(dict, bytes.clone())))
            })
            .collect();
        let mut page = Dictionary::new();
        page.set("Type", Object::Name(b"Page".to_vec()));
        page.set("Parent", Object::Reference(pages_id));
        page.set("Contents", Object::Array(contents));
        page.set("Resources", Object::Dictionary(resources));
        kids.push(Object::Reference(doc.add_object(page)));
    }
    let mut tree = Dictionary::new();
    tree.set("Type", Object::Name(b"Pages".to_vec()));
    tree.set("Count", Object::Integer(kids.len() as i64));
    tree.set("Kids", Object::Array(kids));
    tree.set(
        "MediaBox",
        Object::Array(vec![0.into(), 0.into(), 595.into(), 842.into()]),
    );
    doc.objects.insert(pages_id, Object::Dictionary(tree));
    let mut catalog = Dictionary::new();
    catalog.set("Type", Object::Name(b"Catalog".to_vec()));
    catalog.set("Pages", Object::Reference(pages_id));
    let catalog_id: ObjectId = doc.add_object(catalog);
    doc.trailer.set("Root", Object::Reference(catalog_id));
    let mut out = Vec::new();
    doc.save_to(&mut out).expect("writing a PDF to memory");
    out
}

/// `block` repeated until about `total` bytes, as one zlib stream, built without compressing
/// the whole: each block is compressed on its own (a full flush between blocks), so the same
/// compressed bytes repeat. The stream's checksum covers two blocks only; a reader that keeps
/// what it inflated before the bad checksum (as `lopdf` does) inflates all of them.
pub fn repeated_zlib(block: &[u8], total: usize) -> Vec<u8> {
    use flate2::{Compress, Compression, FlushCompress};
    let mut c = Compress::new(Compression::best(), true);
    let mut step = |input: &[u8], flush: FlushCompress| {
        let mut out = Vec::with_capacity(block.len() + 1024);
        let mut pos = 0;
        loop {
            let before = c.total_in();
            c.compress_vec(&input[pos..], &mut out, flush)
                .expect("compressing in memory");
            pos += (c.total_in() - before) as usize;
            if pos >= input.len() && out.len() < out.capacity() {
                return out;
            }
            out.reserve(block.len());
        }
    };
    let first = step(block, FlushCompress::Full);
    let next = step(block, FlushCompress::Full);
    let end = step(&[], FlushCompress::Finish);
    let blocks = total.div_ceil(block.len().max(1)).max(2);
    let mut out = first;
    for _ in 1..blocks {
        out.extend_from_slice(&next);
    }
    out.extend_from_slice(&end);
    out
}

/// A one-page PDF whose content is a line of `text` and then a FlateDecode stream that
/// inflates to about `inflated` bytes of drawing operators (`1 1 m 2 2 l S`).
pub fn inflate_bomb(text: &str, inflated: usize) -> Vec<u8> {
    let mut block = Vec::with_capacity(1 << 20);
    while block.len() < (1 << 20) - 16 {
        block.write_all(b"1 1 m 2 2 l S\n").expect("in memory");
    }
    pdf(&[PageSpec {
        contents: vec![
            (text_content(text), false),
            (repeated_zlib(&block, inflated), true),
        ],
        forms: Vec::new(),
    }])
}
