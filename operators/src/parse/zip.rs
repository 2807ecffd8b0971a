//! A ZIP archive (DOCX and EPUB are ZIP containers) read within [`ParseLimits`].

use std::io::{Cursor, Read};

use super::{Fault, ParseLimits};

/// An archive over borrowed bytes; every entry read counts against the unpacking budget (an
/// entry read again counts once).
pub(crate) struct Archive<'a> {
    zip: ::zip::ZipArchive<Cursor<&'a [u8]>>,
    unpacked_left: u64,
    /// Entries read so far, with what they unpacked to.
    read: std::collections::HashMap<usize, u64>,
}

impl<'a> Archive<'a> {
    pub(crate) fn open(bytes: &'a [u8], limits: &ParseLimits) -> Result<Self, Fault> {
        let zip = ::zip::ZipArchive::new(Cursor::new(bytes))
            .map_err(|e| format!("not a ZIP container: {e}"))?;
        if zip.len() > limits.max_entries {
            return Err(Fault::OverLimit(format!(
                "{} archive entries, over the limit of {}",
                zip.len(),
                limits.max_entries
            )));
        }
        Ok(Archive {
            zip,
            unpacked_left: limits.max_unpacked_bytes,
            read: std::collections::HashMap::new(),
        })
    }

    /// The entry `name` as UTF-8 text; `Ok(None)` when there is no such entry.
    pub(crate) fn text(&mut self, name: &str) -> Result<Option<String>, Fault> {
        let Some(index) = self.zip.index_for_name(name) else {
            return Ok(None);
        };
        let entry = self
            .zip
            .by_index(index)
            .map_err(|e| format!("entry {name}: {e}"))?;
        let mut out = Vec::new();
        // One byte over the budget tells an entry that would exceed it; an entry read before
        // unpacks to what it did then.
        let before = self.read.get(&index).copied();
        let budget = before.unwrap_or(self.unpacked_left);
        let read = entry
            .take(budget.saturating_add(1))
            .read_to_end(&mut out)
            .map_err(|e| format!("entry {name}: {e}"))? as u64;
        if read > budget {
            return Err(Fault::OverLimit(format!(
                "entry {name} unpacks past the limit of what a document may unpack"
            )));
        }
        if before.is_none() {
            self.unpacked_left -= read;
            self.read.insert(index, read);
        }
        let text = String::from_utf8(out)
            .map_err(|_| Fault::from(format!("entry {name} is not UTF-8")))?;
        Ok(Some(text))
    }
}
