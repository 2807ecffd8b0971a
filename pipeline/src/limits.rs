//! The record limits (`[limits]`) held against what the sinks can store, at start-up: a record
//! within the configured limits is never refused by an index for its size.

use anyhow::{bail, Result};
use freshet_milvus::schema::{FieldLimits, JSON_MAX_BYTES};
use freshet_operators::limits::RecordLimits;
use freshet_tantivy::MAX_TERM_BYTES;

/// Bytes tantivy's `acl_index` term adds to a principal (`p:`).
const PRINCIPAL_PREFIX_BYTES: usize = 2;

/// One setting and the most the sinks take, with why.
fn maxima(l: &RecordLimits) -> [(&'static str, usize, usize, &'static str); 5] {
    let milvus = FieldLimits::LAYOUT;
    [
        (
            "max_id_bytes",
            l.max_id_bytes,
            milvus.doc_id_max_len.min(MAX_TERM_BYTES),
            "Milvus' doc_id VarChar and tantivy's longest term",
        ),
        (
            "max_source_bytes",
            l.max_source_bytes,
            milvus.source_max_len.min(MAX_TERM_BYTES),
            "Milvus' source VarChar and tantivy's longest term",
        ),
        (
            "max_metadata_bytes",
            l.max_metadata_bytes,
            JSON_MAX_BYTES.min(MAX_TERM_BYTES),
            "Milvus' JSON field and tantivy's longest term (a metadata value with its path)",
        ),
        (
            "max_acl_entries",
            l.max_acl_entries,
            milvus.acl_max_entries,
            "the capacity of Milvus' acl array",
        ),
        (
            "max_principal_bytes",
            l.max_principal_bytes,
            milvus
                .acl_entry_max_len
                .min(MAX_TERM_BYTES - PRINCIPAL_PREFIX_BYTES),
            "the element length of Milvus' acl array",
        ),
    ]
}

/// `Err` naming the first limit that is zero or above what the sinks take.
pub fn check(l: &RecordLimits) -> Result<()> {
    for (name, value) in [
        ("max_value_bytes", l.max_value_bytes),
        ("max_id_bytes", l.max_id_bytes),
        ("max_chunks_per_document", l.max_chunks_per_document),
    ] {
        if value == 0 {
            bail!("limits.{name} must be at least 1");
        }
    }
    for (name, value, max, why) in maxima(l) {
        if value > max {
            bail!(
                "limits.{name} = {value} is more than the sinks can store: at most {max} ({why})"
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_within_the_sinks_and_each_maximum_is_enforced() {
        check(&RecordLimits::default()).unwrap();
        let d = RecordLimits::default();
        for (name, _, max, _) in maxima(&d) {
            let mut l = d.clone();
            let field = match name {
                "max_id_bytes" => &mut l.max_id_bytes,
                "max_source_bytes" => &mut l.max_source_bytes,
                "max_metadata_bytes" => &mut l.max_metadata_bytes,
                "max_acl_entries" => &mut l.max_acl_entries,
                "max_principal_bytes" => &mut l.max_principal_bytes,
                other => panic!("{other}"),
            };
            *field = max;
            check(&l).unwrap_or_else(|e| panic!("{name} at {max}: {e}"));
            let field = match name {
                "max_id_bytes" => &mut l.max_id_bytes,
                "max_source_bytes" => &mut l.max_source_bytes,
                "max_metadata_bytes" => &mut l.max_metadata_bytes,
                "max_acl_entries" => &mut l.max_acl_entries,
                _ => &mut l.max_principal_bytes,
            };
            *field = max + 1;
            let e = check(&l).unwrap_err().to_string();
            assert!(e.contains(name) && e.contains(&max.to_string()), "{e}");
        }
        // the maxima are the sinks' own figures
        let m: Vec<usize> = maxima(&d).iter().map(|x| x.2).collect();
        assert_eq!(m, [65_530, 65_530, 65_530, 4096, 1024]);
        let zero = RecordLimits {
            max_chunks_per_document: 0,
            ..d
        };
        assert!(check(&zero).unwrap_err().to_string().contains("max_chunks"));
    }
}
