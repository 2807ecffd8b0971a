//! PDF to Markdown, page by page: the glyphs `pdf-extract` places on each page are laid out
//! again ([`layout`]), so that
//!
//! - lines are rebuilt from glyph positions (not from drawing order), a wide horizontal gap
//!   splitting a line into segments;
//! - a page with a gutter (a vertical strip in its middle that no body line crosses) is read
//!   column by column, left before right, between the full-width lines (titles) that cut across;
//! - lines repeated at the top or bottom of most pages (running headers and footers, page
//!   numbers included: digits compare equal) are dropped;
//! - lines of a paragraph are joined, a word hyphenated across a line end joined again;
//! - lines set larger than the document's body text become headings, the largest size `#`, the
//!   next `##`, …, so they give the chunks' section paths; a line opening with a bullet glyph is
//!   a list item.
//!
//! Every page keeps its number: [`Parsed::pages`] holds each page's Markdown. A PDF without a
//! glyph is `no_text` (scans need OCR, which freshet does not do); one that is encrypted with a
//! password or damaged is `unparseable`. `pdf-extract` can panic on malformed files: the panic
//! is caught and the file is `unparseable`.
//!
//! **Bounded.** `pdf-extract` itself has no bounds, so the file is held to [`ParseLimits`]
//! before it reads a page: its compressed streams are measured before it is loaded and decoded
//! within the limits once it is ([`streams`]), its content is counted before it runs
//! ([`ops`]), and the glyphs it places are held to the record's text limit as they arrive. A
//! file over a limit, or still being read when [`ParseLimits::max_read`] has passed (the clock
//! is read as streams are decoded, every few thousand content tokens, every page and every few
//! hundred glyphs and drawing operations), is `too_large`.

mod layout;
mod ops;
mod streams;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use pdf_extract::{ColorSpace, MediaBox, OutputDev, OutputError, Path, Transform};

use self::layout::{Glyph, Page};
use self::streams::in_time;
use super::{text_over, Fault, ParseLimits, Parsed};

pub(super) fn parse(bytes: &[u8], limits: &ParseLimits) -> Result<Parsed, Fault> {
    let deadline = Instant::now() + limits.max_read;
    let result = catch_unwind(AssertUnwindSafe(|| extract(bytes, limits, deadline)));
    let (pages, title) = match result {
        Ok(r) => r?,
        Err(_) => return Err("the PDF reader failed on this file (malformed PDF)".into()),
    };
    let laid_out = layout::layout_document(&pages);
    Ok(Parsed {
        markdown: laid_out.join("\n\n"),
        title,
        pages: laid_out,
    })
}

/// Each page's glyphs, and the document's title (its info dictionary's `Title`).
fn extract(
    bytes: &[u8],
    limits: &ParseLimits,
    deadline: Instant,
) -> Result<(Vec<Page>, Option<String>), Fault> {
    streams::check_raw(bytes, limits, deadline)?;
    let mut doc =
        pdf_extract::Document::load_mem(bytes).map_err(|e| format!("not a readable PDF: {e}"))?;
    if doc.is_encrypted() {
        // Encrypted for permissions only (an empty user password) is still readable.
        doc.decrypt("")
            .map_err(|_| "encrypted with a password".to_string())?;
    }
    let n = doc.get_pages().len();
    if n > limits.max_pages {
        return Err(Fault::OverLimit(format!(
            "{n} pages, over the limit of {}",
            limits.max_pages
        )));
    }
    streams::decode_all(&mut doc, limits, deadline)?;
    ops::check(&doc, limits, deadline)?;
    let title = info_title(&doc);
    let mut collector = Collector::new(limits, deadline);
    let read = pdf_extract::output_doc(&doc, &mut collector);
    if let Some(fault) = collector.stopped.take() {
        return Err(fault);
    }
    read.map_err(|e| format!("cannot read the pages: {e:?}"))?;
    Ok((collector.pages, title))
}

fn info_title(doc: &pdf_extract::Document) -> Option<String> {
    let info = doc.trailer.get(b"Info").ok()?;
    let dict = match info {
        pdf_extract::Object::Reference(id) => doc.get_dictionary(*id).ok()?,
        pdf_extract::Object::Dictionary(d) => d,
        _ => return None,
    };
    let raw = dict.get(b"Title").ok()?.as_str().ok()?;
    let title = match raw {
        // UTF-16BE with its byte-order mark, else PDFDocEncoding (Latin-1 for text).
        [0xfe, 0xff, rest @ ..] => String::from_utf16_lossy(
            &rest
                .chunks(2)
                .map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]))
                .collect::<Vec<_>>(),
        ),
        _ => raw.iter().map(|&b| b as char).collect(),
    };
    let title = title.split_whitespace().collect::<Vec<_>>().join(" ");
    (!title.is_empty()).then_some(title)
}

/// Calls between two looks at the clock.
const CLOCK_EVERY: usize = 256;

/// The reader's output: each page's glyphs, within the glyph and text budget and the deadline.
struct Collector {
    pages: Vec<Page>,
    current: Page,
    height: f64,
    /// Glyphs and bytes of glyph text a document may place: the record's text limit and a
    /// quarter more (white space, running headers and footers are dropped when laid out).
    max_glyph_bytes: usize,
    glyph_bytes: usize,
    glyphs: usize,
    calls: usize,
    limits: ParseLimits,
    deadline: Instant,
    /// Why reading stopped early.
    stopped: Option<Fault>,
}

impl Collector {
    fn new(limits: &ParseLimits, deadline: Instant) -> Self {
        Collector {
            pages: Vec::new(),
            current: Page::default(),
            height: 0.0,
            max_glyph_bytes: limits
                .max_text_bytes
                .saturating_add(limits.max_text_bytes / 4),
            glyph_bytes: 0,
            glyphs: 0,
            calls: 0,
            limits: *limits,
            deadline,
            stopped: None,
        }
    }

    /// Stops the reader with `fault`.
    fn stop(&mut self, fault: Fault) -> Result<(), OutputError> {
        self.stopped = Some(fault);
        Err(OutputError::IoError(std::io::Error::other("stopped")))
    }

    /// Looks at the clock every [`CLOCK_EVERY`] calls (`now`: at once).
    fn tick(&mut self, now: bool) -> Result<(), OutputError> {
        self.calls += 1;
        if now || self.calls.is_multiple_of(CLOCK_EVERY) {
            if let Err(fault) = in_time(self.deadline, self.limits.max_read) {
                return self.stop(fault);
            }
        }
        Ok(())
    }
}

impl OutputDev for Collector {
    fn begin_page(
        &mut self,
        _page_num: u32,
        media_box: &MediaBox,
        _art_box: Option<(f64, f64, f64, f64)>,
    ) -> Result<(), OutputError> {
        self.tick(true)?;
        self.height = media_box.ury - media_box.lly;
        self.current = Page {
            width: (media_box.urx - media_box.llx).abs(),
            height: self.height.abs(),
            ..Page::default()
        };
        Ok(())
    }

    fn end_page(&mut self) -> Result<(), OutputError> {
        self.pages.push(std::mem::take(&mut self.current));
        Ok(())
    }

    fn output_character(
        &mut self,
        trm: &Transform,
        width: f64,
        _spacing: f64,
        font_size: f64,
        text: &str,
    ) -> Result<(), OutputError> {
        self.tick(false)?;
        self.glyphs += 1;
        self.glyph_bytes += text.len();
        if self.glyphs.max(self.glyph_bytes) > self.max_glyph_bytes {
            return self.stop(text_over(self.limits.max_text_bytes));
        }
        // The size the glyph is drawn at: the font size through the text matrix.
        let vx = font_size * (trm.m11 + trm.m21);
        let vy = font_size * (trm.m12 + trm.m22);
        let size = (vx * vy).abs().sqrt();
        let (x, y) = (trm.m31, self.height - trm.m32);
        if !(x.is_finite() && y.is_finite() && size.is_finite()) || size <= 0.0 {
            return Ok(());
        }
        let page = &mut self.current;
        let start = page.text.len();
        page.text.push_str(text);
        // A page's text is within the record's text limit and a quarter, far below 4 GiB.
        let at = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        page.glyphs.push(Glyph {
            x: x as f32,
            y: y as f32,
            width: (width * size) as f32,
            size: size as f32,
            start: at(start),
            end: at(page.text.len()),
        });
        Ok(())
    }

    fn begin_word(&mut self) -> Result<(), OutputError> {
        Ok(())
    }
    fn end_word(&mut self) -> Result<(), OutputError> {
        Ok(())
    }
    fn end_line(&mut self) -> Result<(), OutputError> {
        self.tick(false)
    }
    fn stroke(
        &mut self,
        _ctm: &Transform,
        _colorspace: &ColorSpace,
        _color: &[f64],
        _path: &Path,
    ) -> Result<(), OutputError> {
        self.tick(false)
    }
    fn fill(
        &mut self,
        _ctm: &Transform,
        _colorspace: &ColorSpace,
        _color: &[f64],
        _path: &Path,
    ) -> Result<(), OutputError> {
        self.tick(false)
    }
}

#[cfg(test)]
mod tests;
