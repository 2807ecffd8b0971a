//! A PDF's compressed streams, decoded within [`ParseLimits`] before the PDF reader sees them.
//!
//! `lopdf` (under `pdf-extract`) decodes a stream whole, with no bound, every time something
//! reads it: a page whose few megabytes of FlateDecode content inflate to gigabytes would take
//! the process's memory. So:
//!
//! - [`check_raw`], before the file is loaded, measures every stream in its bytes that the
//!   loader may decode on its own (object streams and cross-reference streams): each
//!   `stream` keyword's data is inflated into nothing (a FlateDecode stream, one FlateDecode
//!   inside another, an ASCII85 text around one, an LZW stream), and a file whose streams
//!   inflate past the limits is refused before it is loaded;
//! - [`decode_all`], once it is loaded, decodes every stream the reader reads (page contents,
//!   forms, fonts, character maps) exactly as `lopdf` would, each within
//!   [`ParseLimits::max_stream_bytes`] and all within [`ParseLimits::max_unpacked_bytes`], and
//!   stores it decoded, so that the reader never decodes anything itself. Images and colour
//!   profiles carry no text: they are emptied, not decoded.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::time::Instant;

use pdf_extract::{Dictionary, Document, Object, ObjectId, Stream};

use crate::parse::{Fault, ParseLimits};

/// The decoders `lopdf` applies; a stream naming any other filter is left as it is (the reader
/// reads such data undecoded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Codec {
    Flate,
    Lzw,
    Ascii85,
}

/// A decoded stream over its cap.
struct Over;

/// How a stream's decoding ended.
enum Decoded {
    Data(Vec<u8>),
    /// A stage failed the way `lopdf` gives up on (a bad predictor, bad ASCII85): the reader
    /// reads the stream's data undecoded.
    Undecodable,
}

/// Fails once `deadline` has passed.
pub(super) fn in_time(deadline: Instant, max_read: std::time::Duration) -> Result<(), Fault> {
    if Instant::now() > deadline {
        return Err(Fault::OverLimit(format!(
            "reading it took over {} s",
            max_read.as_secs()
        )));
    }
    Ok(())
}

/// Measures, in the file's bytes, every stream the loader may decode: each over
/// `max_unpacked_bytes`, or all of them together over four times that, refuse the file. What
/// is decoded is counted, never kept.
pub(super) fn check_raw(
    bytes: &[u8],
    limits: &ParseLimits,
    deadline: Instant,
) -> Result<(), Fault> {
    let per_stream = limits.max_unpacked_bytes;
    let mut left = limits.max_unpacked_bytes.saturating_mul(4);
    let mut from = 0;
    while let Some(at) = find(&bytes[from..], b"stream").map(|i| i + from) {
        from = at + 6;
        if at >= 3 && &bytes[at - 3..at] == b"end" {
            continue;
        }
        let data = match bytes.get(from..) {
            Some([b'\r', b'\n', rest @ ..]) | Some([b'\n' | b'\r', rest @ ..]) => rest,
            _ => continue,
        };
        in_time(deadline, limits.max_read)?;
        let cap = per_stream.min(left);
        let n = measure(data, cap, 2).map_err(|Over| {
            Fault::OverLimit(format!(
                "the stream at byte {at} inflates to more than {cap} bytes"
            ))
        })?;
        left -= n;
    }
    Ok(())
}

/// Bytes `data` decodes to as a FlateDecode, LZW or ASCII85 stream, whichever it may be (zero
/// when it is none), following a FlateDecode stream inside it `depth` levels down.
fn measure(data: &[u8], cap: u64, depth: u8) -> Result<u64, Over> {
    let mut most = 0;
    if looks_like_zlib(data) || looks_like_deflate(data) {
        let (n, head) = inflate_count(data, cap)?;
        most = n;
        if depth > 0 && looks_like_zlib(&head) {
            let inner = inflate(data, cap)?;
            most = most.max(measure(&inner, cap, depth - 1)?);
        }
    }
    if data.first() == Some(&0x80) {
        // LZW data opens with the clear-table code.
        let mut sink = Capped::counting(cap);
        let _ = lzw_decoder(true).into_stream(&mut sink).decode_all(data);
        if sink.over {
            return Err(Over);
        }
        most = most.max(sink.len);
    }
    let ascii85_text = data.len() >= 8
        && data
            .iter()
            .take(64)
            .all(|b| (b'!'..=b'u').contains(b) || *b == b'z' || b.is_ascii_whitespace());
    if ascii85_text {
        let end = find(data, b"~>").map_or(data.len(), |e| e + 2);
        if let Decoded::Data(inner) = ascii85(&data[..end], cap)? {
            most = most.max(inner.len() as u64);
            if depth > 0 {
                most = most.max(measure(&inner, cap, depth - 1)?);
            }
        }
    }
    Ok(most)
}

/// A zlib header: deflate, a window of at most 32 KiB, a valid check.
fn looks_like_zlib(d: &[u8]) -> bool {
    matches!(d, [cmf, flg, ..] if cmf & 0x0f == 8 && cmf >> 4 <= 7
        && (u16::from(*cmf) * 256 + u16::from(*flg)) % 31 == 0)
}

/// What `lopdf` inflates when the zlib header is bad: raw deflate from the third byte. Only a
/// first block that is stored, fixed or dynamic counts (every block type but the reserved one).
fn looks_like_deflate(d: &[u8]) -> bool {
    d.len() > 2 && !looks_like_zlib(d) && (d[2] >> 1) & 0b11 != 0b11
}

/// Inflated length of `data` as `lopdf` inflates it (zlib, else raw deflate from the third
/// byte), counted in a small buffer, with its first bytes.
fn inflate_count(data: &[u8], cap: u64) -> Result<(u64, Vec<u8>), Over> {
    let count = |r: &mut dyn Read| -> (u64, Vec<u8>) {
        let mut buf = vec![0u8; 64 << 10];
        let mut n = 0u64;
        let mut head = Vec::new();
        while n <= cap {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(k) => {
                    if head.len() < 2 {
                        head.extend_from_slice(&buf[..k.min(2 - head.len())]);
                    }
                    n += k as u64;
                }
            }
        }
        (n, head)
    };
    let (mut n, mut head) = count(&mut flate2::read::ZlibDecoder::new(data));
    if n == 0 && data.len() > 2 {
        (n, head) = count(&mut flate2::read::DeflateDecoder::new(&data[2..]));
    }
    if n > cap {
        return Err(Over);
    }
    Ok((n, head))
}

/// `data` inflated as `lopdf` inflates it (partial output kept on an error), within `cap`.
fn inflate(data: &[u8], cap: u64) -> Result<Vec<u8>, Over> {
    let mut out = Vec::new();
    if data.is_empty() {
        return Ok(out);
    }
    let _ = flate2::read::ZlibDecoder::new(data)
        .take(cap + 1)
        .read_to_end(&mut out);
    if out.is_empty() && data.len() > 2 {
        let _ = flate2::read::DeflateDecoder::new(&data[2..])
            .take(cap + 1)
            .read_to_end(&mut out);
    }
    if out.len() as u64 > cap {
        return Err(Over);
    }
    Ok(out)
}

fn lzw_decoder(early_change: bool) -> weezl::decode::Decoder {
    use weezl::{decode::Decoder, BitOrder};
    if early_change {
        Decoder::with_tiff_size_switch(BitOrder::Msb, 8)
    } else {
        Decoder::new(BitOrder::Msb, 8)
    }
}

/// A writer that keeps (or only counts) at most `cap` bytes and fails past them.
struct Capped {
    out: Option<Vec<u8>>,
    len: u64,
    cap: u64,
    over: bool,
}

impl Capped {
    fn keeping(cap: u64) -> Self {
        Capped {
            out: Some(Vec::new()),
            len: 0,
            cap,
            over: false,
        }
    }

    fn counting(cap: u64) -> Self {
        Capped {
            out: None,
            ..Capped::keeping(cap)
        }
    }
}

impl Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.len + buf.len() as u64 > self.cap {
            self.over = true;
            return Err(std::io::Error::other("over the cap"));
        }
        self.len += buf.len() as u64;
        if let Some(out) = self.out.as_mut() {
            out.extend_from_slice(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// ASCII85 through `lopdf`'s own decoder; its output is at most four times its input.
fn ascii85(data: &[u8], cap: u64) -> Result<Decoded, Over> {
    let mut dict = Dictionary::new();
    dict.set("Filter", "ASCII85Decode");
    match Stream::new(dict, data.to_vec()).decompressed_content() {
        Ok(out) if out.len() as u64 > cap => Err(Over),
        Ok(out) => Ok(Decoded::Data(out)),
        Err(_) => Ok(Decoded::Undecodable),
    }
}

/// `data` through `codecs` in order, as `lopdf`'s `decompressed_content` would decode it, each
/// stage's output within `cap`.
fn decode(
    data: &[u8],
    codecs: &[Codec],
    params: Option<&Dictionary>,
    cap: u64,
) -> Result<Decoded, Over> {
    let mut cur: Option<Vec<u8>> = None;
    for codec in codecs {
        let input = cur.as_deref().unwrap_or(data);
        let out = match codec {
            Codec::Flate => inflate(input, cap)?,
            Codec::Lzw => {
                let early = params
                    .and_then(|p| p.get(b"EarlyChange").ok())
                    .and_then(|v| v.as_i64().ok())
                    .is_none_or(|v| v != 0);
                let mut sink = Capped::keeping(cap);
                let _ = lzw_decoder(early).into_stream(&mut sink).decode_all(input);
                if sink.over {
                    return Err(Over);
                }
                sink.out.unwrap_or_default()
            }
            Codec::Ascii85 => match ascii85(input, cap)? {
                Decoded::Data(d) => d,
                Decoded::Undecodable => return Ok(Decoded::Undecodable),
            },
        };
        let out = if matches!(codec, Codec::Flate | Codec::Lzw) {
            match predicted(out, params) {
                Some(d) => d,
                None => return Ok(Decoded::Undecodable),
            }
        } else {
            out
        };
        cur = Some(out);
    }
    Ok(Decoded::Data(cur.unwrap_or_else(|| data.to_vec())))
}

/// The PNG predictor `lopdf` applies after FlateDecode and LZW (its output is never longer
/// than its input); `None` where `lopdf` fails. A row longer than the data fails before its
/// buffer is allocated.
fn predicted(data: Vec<u8>, params: Option<&Dictionary>) -> Option<Vec<u8>> {
    let Some(params) = params else {
        return Some(data);
    };
    let int =
        |key: &[u8], default: i64| params.get(key).and_then(Object::as_i64).unwrap_or(default);
    if !(10..=15).contains(&int(b"Predictor", 1)) {
        return Some(data);
    }
    let columns = usize::try_from(int(b"Columns", 1).max(1)).ok()?;
    let colors = usize::try_from(int(b"Colors", 1).max(1)).ok()?;
    let bits = usize::try_from(int(b"BitsPerComponent", 8).max(8)).ok()?;
    let bytes_per_pixel = colors.checked_mul(bits)? / 8;
    let row = bytes_per_pixel.checked_mul(columns)?;
    if data.is_empty() {
        return Some(data);
    }
    if row > data.len() {
        return None;
    }
    pdf_extract::filters::png::decode_frame(&data, bytes_per_pixel, columns).ok()
}

/// The codecs a stream's `Filter` names, when `lopdf` would decode it (`None`: it would not).
fn codecs(stream: &Stream) -> Option<Vec<Codec>> {
    let names = stream.filters().ok()?;
    names
        .iter()
        .map(|n| match *n {
            b"FlateDecode" => Some(Codec::Flate),
            b"LZWDecode" => Some(Codec::Lzw),
            b"ASCII85Decode" => Some(Codec::Ascii85),
            _ => None,
        })
        .collect()
}

/// Decodes every stream of `doc` the reader reads (see the module docs) and stores it decoded;
/// empties images and colour profiles.
pub(super) fn decode_all(
    doc: &mut Document,
    limits: &ParseLimits,
    deadline: Instant,
) -> Result<(), Fault> {
    let profiles = colour_profiles(doc);
    let mut left = limits.max_unpacked_bytes;
    for (id, object) in doc.objects.iter_mut() {
        let Object::Stream(stream) = object else {
            continue;
        };
        let image = stream
            .dict
            .get(b"Subtype")
            .and_then(Object::as_name)
            .is_ok_and(|s| s == b"Image");
        if image || profiles.contains(id) {
            stream.set_plain_content(Vec::new());
            continue;
        }
        let Some(codecs) = codecs(stream).filter(|c| !c.is_empty()) else {
            continue;
        };
        in_time(deadline, limits.max_read)?;
        let params = stream
            .dict
            .get(b"DecodeParms")
            .and_then(Object::as_dict)
            .ok();
        let cap = limits.max_stream_bytes.min(left);
        let decoded = decode(&stream.content, &codecs, params, cap).map_err(|Over| {
            Fault::OverLimit(if cap < limits.max_stream_bytes {
                format!(
                    "its streams decode to more than {} bytes together",
                    limits.max_unpacked_bytes
                )
            } else {
                format!(
                    "object {} {} decodes to more than {} bytes",
                    id.0, id.1, limits.max_stream_bytes
                )
            })
        })?;
        match decoded {
            Decoded::Data(data) => {
                left -= data.len() as u64;
                stream.set_plain_content(data);
            }
            Decoded::Undecodable => {
                let raw = std::mem::take(&mut stream.content);
                stream.set_plain_content(raw);
            }
        }
    }
    Ok(())
}

/// The streams that `[/ICCBased …]` colour spaces name anywhere in `doc`.
fn colour_profiles(doc: &Document) -> BTreeSet<ObjectId> {
    fn walk(o: &Object, depth: usize, out: &mut BTreeSet<ObjectId>) {
        if depth == 0 {
            return;
        }
        match o {
            Object::Array(items) => {
                if let [Object::Name(n), Object::Reference(id), ..] = items.as_slice() {
                    if n == b"ICCBased" {
                        out.insert(*id);
                    }
                }
                for i in items {
                    walk(i, depth - 1, out);
                }
            }
            Object::Dictionary(d) => {
                for (_, v) in d.iter() {
                    walk(v, depth - 1, out);
                }
            }
            Object::Stream(s) => {
                for (_, v) in s.dict.iter() {
                    walk(v, depth - 1, out);
                }
            }
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    for o in doc.objects.values() {
        walk(o, 32, &mut out);
    }
    out
}

/// The first position of `needle` in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::write::ZlibEncoder;

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut e = ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn inflating_stops_at_the_cap() {
        let big = vec![b'q'; 1 << 20];
        let z = zlib(&big);
        assert_eq!(inflate(&z, 1 << 20).ok().map(|v| v.len()), Some(1 << 20));
        assert!(inflate(&z, (1 << 20) - 1).is_err());
        assert!(matches!(inflate_count(&z, 1 << 20), Ok((n, _)) if n == 1 << 20));
        assert!(inflate_count(&z, 1000).is_err());
        // one FlateDecode inside another is measured to the bottom
        let twice = zlib(&z);
        assert!(measure(&twice, 1 << 20, 2).is_ok());
        assert!(measure(&twice, 100_000, 2).is_err());
        // an LZW stream
        let lzw = weezl::encode::Encoder::with_tiff_size_switch(weezl::BitOrder::Msb, 8)
            .encode(&big)
            .unwrap();
        assert_eq!(lzw[0], 0x80);
        assert!(matches!(measure(&lzw, 1 << 20, 2), Ok(n) if n == 1 << 20));
        assert!(measure(&lzw, 1000, 2).is_err());
    }

    #[test]
    fn decoding_matches_lopdf() {
        let text = b"BT /F1 12 Tf 72 720 Td (hello) Tj ET".repeat(100);
        for (filters, data) in [
            (vec!["FlateDecode"], zlib(&text)),
            (vec!["FlateDecode", "FlateDecode"], zlib(&zlib(&text))),
        ] {
            let mut dict = Dictionary::new();
            let names: Vec<Object> = filters
                .iter()
                .map(|f| Object::Name(f.as_bytes().to_vec()))
                .collect();
            dict.set("Filter", Object::Array(names));
            let stream = Stream::new(dict, data.clone());
            let ours = match decode(&data, &codecs(&stream).unwrap(), None, 1 << 20) {
                Ok(Decoded::Data(d)) => d,
                _ => panic!("decodes"),
            };
            assert_eq!(ours, stream.decompressed_content().unwrap());
            assert_eq!(ours, text);
        }
        // a predictor row longer than the data is refused before it is allocated
        let mut params = Dictionary::new();
        params.set("Predictor", 12);
        params.set("Columns", 1_i64 << 40);
        assert!(predicted(vec![2, 0, 0], Some(&params)).is_none());
    }
}
