//! The collection layout.

use std::collections::HashMap;

use milvus::v2::prelude::{
    CollectionSchema, DataType, FieldSchema, IndexParam, IndexType, MetricType,
};

use crate::config::{IndexType as Kind, MilvusConfig};

pub const F_CHUNK_ID: &str = "chunk_id";
pub const F_DOC_ID: &str = "doc_id";
pub const F_KIND: &str = "kind";
pub const F_SOURCE: &str = "source";
pub const F_VECTOR: &str = "vector";
pub const F_ACL: &str = "acl";
/// `acl` is empty: the chunk is visible to every caller. Written with `acl`, so that the filter
/// of a caller without principals is a boolean column test instead of `array_length(acl) == 0`
/// per row (Milvus 2.3.5, 107k chunks: p50 7.5 against 8.1 ms of a search).
pub const F_ACL_PUBLIC: &str = "acl_public";
pub const F_METADATA: &str = "metadata";

/// Max bytes of a chunk id (the primary key).
pub const CHUNK_ID_MAX_LEN: usize = 64;
/// Max bytes of `doc_id` and `source` (Milvus' VarChar maximum).
pub const VARCHAR_MAX_LEN: usize = 65_535;
/// Max bytes of `kind`.
pub const KIND_MAX_LEN: usize = 16;
/// Max entries of `acl` (Milvus' array capacity maximum).
pub const ACL_MAX_ENTRIES: usize = 4096;
/// Max bytes of one ACL entry.
pub const ACL_ENTRY_MAX_LEN: usize = 1024;

/// Max bytes of a JSON value (`metadata`), fixed by Milvus (2.3.5 refuses longer ones; its
/// `common.json.maxLength`-less builds too).
pub const JSON_MAX_BYTES: usize = 65_536;

/// The lengths and capacities of a collection's fields that bound what one row may hold.
/// [`FieldLimits::LAYOUT`] is what freshet creates; a collection created by other means may be
/// narrower, and Milvus refuses the rows over its limits at write time (see
/// `MilvusSink::replace_isolating`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldLimits {
    /// `doc_id` VarChar max length (bytes).
    pub doc_id_max_len: usize,
    /// `source` VarChar max length (bytes).
    pub source_max_len: usize,
    /// `acl` array capacity.
    pub acl_max_entries: usize,
    /// `acl` element max length (bytes).
    pub acl_entry_max_len: usize,
}

impl FieldLimits {
    /// The limits of freshet's own field layout.
    pub const LAYOUT: FieldLimits = FieldLimits {
        doc_id_max_len: VARCHAR_MAX_LEN,
        source_max_len: VARCHAR_MAX_LEN,
        acl_max_entries: ACL_MAX_ENTRIES,
        acl_entry_max_len: ACL_ENTRY_MAX_LEN,
    };
}

/// Collection properties that record what the vectors are.
pub const P_MODEL_ID: &str = "freshet.model_id";
pub const P_DIM: &str = "freshet.dim";
pub const P_LAYOUT: &str = "freshet.layout_version";
/// Version of the field layout below: 2 added [`F_ACL_PUBLIC`].
pub const LAYOUT_VERSION: u32 = 2;

/// `freshet model=<id> dim=<n>` (kept by Milvus 2.3.5; milvus-lite drops descriptions, so the
/// properties are authoritative).
pub fn description(cfg: &MilvusConfig) -> String {
    format!("freshet model={} dim={}", cfg.model_id, cfg.dim)
}

/// Parses [`description`] back: (model id, dim).
pub fn parse_description(d: &str) -> Option<(String, usize)> {
    let rest = d.strip_prefix("freshet model=")?;
    let (model, dim) = rest.rsplit_once(" dim=")?;
    Some((model.to_owned(), dim.trim().parse().ok()?))
}

pub fn properties(cfg: &MilvusConfig) -> HashMap<String, String> {
    HashMap::from([
        (P_MODEL_ID.to_owned(), cfg.model_id.clone()),
        (P_DIM.to_owned(), cfg.dim.to_string()),
        (P_LAYOUT.to_owned(), LAYOUT_VERSION.to_string()),
    ])
}

/// The collection of freshet's layout ([`FieldLimits::LAYOUT`]).
pub fn collection_schema(cfg: &MilvusConfig) -> CollectionSchema {
    collection_schema_with(cfg, &FieldLimits::LAYOUT)
}

/// The collection of freshet's layout with other field limits.
pub fn collection_schema_with(cfg: &MilvusConfig, limits: &FieldLimits) -> CollectionSchema {
    CollectionSchema::new()
        .enable_dynamic_field(false)
        .description(description(cfg))
        .add_field(
            FieldSchema::new()
                .name(F_CHUNK_ID)
                .data_type(DataType::VarChar)
                .primary_key(true)
                .auto_id(false)
                .max_length(CHUNK_ID_MAX_LEN as u32),
        )
        .add_field(
            FieldSchema::new()
                .name(F_DOC_ID)
                .data_type(DataType::VarChar)
                .max_length(limits.doc_id_max_len as u32),
        )
        .add_field(
            FieldSchema::new()
                .name(F_KIND)
                .data_type(DataType::VarChar)
                .max_length(KIND_MAX_LEN as u32),
        )
        .add_field(
            FieldSchema::new()
                .name(F_SOURCE)
                .data_type(DataType::VarChar)
                .max_length(limits.source_max_len as u32),
        )
        .add_field(
            FieldSchema::new()
                .name(F_VECTOR)
                .data_type(DataType::FloatVector)
                .dimension(cfg.dim as u32),
        )
        .add_field(
            FieldSchema::new()
                .name(F_ACL)
                .data_type(DataType::Array)
                .element_type(DataType::VarChar)
                .max_capacity(limits.acl_max_entries as u32)
                .max_length(limits.acl_entry_max_len as u32),
        )
        .add_field(
            FieldSchema::new()
                .name(F_ACL_PUBLIC)
                .data_type(DataType::Bool),
        )
        .add_field(
            FieldSchema::new()
                .name(F_METADATA)
                .data_type(DataType::Json),
        )
}

/// The vector index of `cfg` ([`MilvusConfig::index_type`] with its build parameters), COSINE.
pub fn vector_index(cfg: &MilvusConfig) -> IndexParam {
    let (index_type, params) = match cfg.index_type {
        Kind::Hnsw => (
            IndexType::Hnsw,
            vec![
                ("M", cfg.hnsw_m.to_string()),
                ("efConstruction", cfg.hnsw_ef_construction.to_string()),
            ],
        ),
        Kind::IvfFlat => (
            IndexType::IvfFlat,
            vec![("nlist", cfg.ivf_nlist.to_string())],
        ),
        Kind::IvfSq8 => (
            IndexType::IvfSq8,
            vec![("nlist", cfg.ivf_nlist.to_string())],
        ),
        Kind::Flat => (IndexType::Flat, Vec::new()),
    };
    IndexParam::new()
        .field_name(F_VECTOR)
        .index_type(index_type)
        .metric_type(MetricType::Cosine)
        .extra_params(params.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

/// Freshet's index type of a Milvus one; `None` for the types freshet does not create.
pub fn index_kind(t: IndexType) -> Option<Kind> {
    match t {
        IndexType::Hnsw => Some(Kind::Hnsw),
        IndexType::IvfFlat => Some(Kind::IvfFlat),
        IndexType::IvfSq8 => Some(Kind::IvfSq8),
        IndexType::Flat => Some(Kind::Flat),
        _ => None,
    }
}

/// (name, type) of every field, for checking an existing collection.
pub const EXPECTED_FIELDS: &[(&str, DataType)] = &[
    (F_CHUNK_ID, DataType::VarChar),
    (F_DOC_ID, DataType::VarChar),
    (F_KIND, DataType::VarChar),
    (F_SOURCE, DataType::VarChar),
    (F_VECTOR, DataType::FloatVector),
    (F_ACL, DataType::Array),
    (F_ACL_PUBLIC, DataType::Bool),
    (F_METADATA, DataType::Json),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn description_round_trip() {
        let cfg = MilvusConfig {
            model_id: "org/model with dim= in it".into(),
            dim: 768,
            ..Default::default()
        };
        assert_eq!(
            parse_description(&description(&cfg)),
            Some((cfg.model_id.clone(), 768))
        );
        assert_eq!(parse_description("something else"), None);
    }

    fn params(p: &IndexParam) -> Vec<(String, String)> {
        let mut v: Vec<_> = p
            .get_extra_params()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        v.sort();
        v
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_default_index_is_hnsw_16_200_cosine() {
        let p = vector_index(&MilvusConfig::default());
        assert_eq!(p.get_index_type(), IndexType::Hnsw);
        assert_eq!(p.get_metric_type(), Some(MetricType::Cosine));
        assert_eq!(p.get_field_name(), F_VECTOR);
        assert_eq!(params(&p), pairs(&[("M", "16"), ("efConstruction", "200")]));
    }

    #[test]
    fn each_index_type_with_its_build_parameters() {
        let cfg = |index_type| MilvusConfig {
            index_type,
            hnsw_m: 32,
            hnsw_ef_construction: 400,
            ivf_nlist: 256,
            ..Default::default()
        };
        for (kind, milvus, expected) in [
            (
                Kind::Hnsw,
                IndexType::Hnsw,
                pairs(&[("M", "32"), ("efConstruction", "400")]),
            ),
            (
                Kind::IvfFlat,
                IndexType::IvfFlat,
                pairs(&[("nlist", "256")]),
            ),
            (Kind::IvfSq8, IndexType::IvfSq8, pairs(&[("nlist", "256")])),
            (Kind::Flat, IndexType::Flat, Vec::new()),
        ] {
            let p = vector_index(&cfg(kind));
            assert_eq!(p.get_index_type(), milvus, "{kind}");
            assert_eq!(p.get_metric_type(), Some(MetricType::Cosine), "{kind}");
            assert_eq!(params(&p), expected, "{kind}");
            assert_eq!(index_kind(milvus), Some(kind));
        }
        assert_eq!(index_kind(IndexType::IvfPq), None);
        assert_eq!(index_kind(IndexType::DiskAnn), None);
    }
}
