//! Content hash of a document version.
//!
//! [`doc_hash`] is blake3 (hex, 64 chars) over an unambiguous encoding: a version tag, then every
//! field as a little-endian u64 byte length followed by its bytes, in the order id, title, text,
//! content type (canonical MIME name), source, metadata (entry count, then key and value of each
//! entry in key order), acl (entry count, then each principal).
//!
//! The ACL is a set: it is sorted and de-duplicated before hashing, so reordering or repeating
//! principals does not make a new version (and does not re-embed anything). Every other field is
//! hashed exactly as given.

use crate::document::Document;

const TAG: &[u8] = b"freshet.doc_hash.v1";

/// blake3 hex digest of the canonical encoding of `doc` (see the module docs).
pub fn doc_hash(doc: &Document) -> String {
    let mut h = blake3::Hasher::new();
    field(&mut h, TAG);
    field(&mut h, doc.id.as_bytes());
    field(&mut h, doc.title.as_bytes());
    field(&mut h, doc.text.as_bytes());
    field(&mut h, doc.content_type.as_str().as_bytes());
    field(&mut h, doc.source.as_bytes());
    count(&mut h, doc.metadata.len());
    for (k, v) in &doc.metadata {
        field(&mut h, k.as_bytes());
        field(&mut h, v.as_bytes());
    }
    let mut acl: Vec<&str> = doc.acl.iter().map(String::as_str).collect();
    acl.sort_unstable();
    acl.dedup();
    count(&mut h, acl.len());
    for p in acl {
        field(&mut h, p.as_bytes());
    }
    h.finalize().to_hex().to_string()
}

fn count(h: &mut blake3::Hasher, n: usize) {
    h.update(&(n as u64).to_le_bytes());
}

fn field(h: &mut blake3::Hasher, bytes: &[u8]) {
    count(h, bytes.len());
    h.update(bytes);
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::document::ContentType;

    fn doc() -> Document {
        Document {
            id: "d".into(),
            title: "t".into(),
            text: "body".into(),
            content_type: ContentType::Markdown,
            source: "s".into(),
            metadata: BTreeMap::from([("k".to_string(), "\"v\"".to_string())]),
            acl: vec!["group:a".into(), "group:b".into()],
        }
    }

    #[test]
    fn identical_docs_hash_equal_and_hex() {
        let h = doc_hash(&doc());
        assert_eq!(h, doc_hash(&doc()));
        assert_eq!(h.len(), 64);
        assert!(h
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    }

    #[test]
    fn any_field_change_changes_hash() {
        let base = doc_hash(&doc());
        type Edit = Box<dyn Fn(&mut Document)>;
        let edits: Vec<Edit> = vec![
            Box::new(|d| d.id.push('x')),
            Box::new(|d| d.title.push('x')),
            Box::new(|d| d.text.push('x')),
            Box::new(|d| d.content_type = ContentType::Html),
            Box::new(|d| d.content_type = ContentType::PlainText),
            Box::new(|d| d.source.push('x')),
            Box::new(|d| {
                d.metadata.insert("k2".into(), "1".into());
            }),
            Box::new(|d| {
                d.metadata.insert("k".into(), "\"w\"".into());
            }),
            Box::new(|d| d.metadata.clear()),
            Box::new(|d| d.acl.push("group:c".into())),
            Box::new(|d| d.acl.clear()),
        ];
        let mut seen = std::collections::BTreeSet::from([base.clone()]);
        for (i, edit) in edits.iter().enumerate() {
            let mut d = doc();
            edit(&mut d);
            let h = doc_hash(&d);
            assert_ne!(h, base, "edit {i} did not change the hash");
            assert!(seen.insert(h), "edit {i} collided with another edit");
        }
    }

    #[test]
    fn field_boundaries_are_unambiguous() {
        let mut a = doc();
        a.title = "ab".into();
        a.text = "c".into();
        let mut b = doc();
        b.title = "a".into();
        b.text = "bc".into();
        assert_ne!(doc_hash(&a), doc_hash(&b));

        let mut a = doc();
        a.metadata = BTreeMap::from([("ab".into(), "c".into())]);
        let mut b = doc();
        b.metadata = BTreeMap::from([("a".into(), "bc".into())]);
        assert_ne!(doc_hash(&a), doc_hash(&b));

        // metadata entry vs acl entry
        let mut a = doc();
        a.metadata.clear();
        a.acl = vec!["x".into(), "y".into()];
        let mut b = doc();
        b.metadata = BTreeMap::from([("x".into(), "y".into())]);
        b.acl.clear();
        assert_ne!(doc_hash(&a), doc_hash(&b));
    }

    #[test]
    fn acl_is_a_set() {
        let mut a = doc();
        a.acl = vec!["group:b".into(), "group:a".into(), "group:b".into()];
        assert_eq!(doc_hash(&a), doc_hash(&doc()));
    }
}
