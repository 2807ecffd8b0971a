//! Small helpers over `quick-xml`'s event reader shared by the parsers.

use quick_xml::events::{BytesRef, BytesStart, BytesText};

/// The local name of an element (`w:p` → `p`), as UTF-8 (lossy).
pub(crate) fn local(e: &BytesStart<'_>) -> String {
    e.local_name().as_ref().to_owned()
}

/// The value of the attribute whose local name is `name` (`w:val` → `val`), unescaped.
pub(crate) fn attr(e: &BytesStart<'_>, name: &str) -> Option<String> {
    e.attributes().flatten().find_map(|a| {
        (a.key.local_name().as_ref() == name)
            .then(|| {
                a.normalized_value(quick_xml::XmlVersion::Implicit1_0)
                    .ok()
                    .map(|v| v.into_owned())
            })
            .flatten()
    })
}

/// The text of a text event.
pub(crate) fn text(t: &BytesText<'_>) -> String {
    t.xml10_content().into_owned()
}

/// The character an entity or character reference stands for (`&amp;`, `&#233;`); unknown
/// entities are dropped.
pub(crate) fn reference(r: &BytesRef<'_>) -> Option<String> {
    if r.is_char_ref() {
        return r.resolve_char_ref().ok().flatten().map(String::from);
    }
    let name = r.xml10_content();
    let c = match name.as_ref() {
        "amp" => "&",
        "lt" => "<",
        "gt" => ">",
        "quot" => "\"",
        "apos" => "'",
        "nbsp" => "\u{a0}",
        _ => return None,
    };
    Some(c.to_owned())
}
