//! The collection layout.

use std::collections::HashMap;

use milvus::v2::prelude::{
    CollectionSchema, DataType, FieldSchema, IndexParam, IndexType, MetricType,
};

use crate::config::MilvusConfig;

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

/// HNSW parameters of the vector index.
pub const HNSW_M: u32 = 16;
pub const HNSW_EF_CONSTRUCTION: u32 = 200;

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

pub fn vector_index() -> IndexParam {
    IndexParam::new()
        .field_name(F_VECTOR)
        .index_type(IndexType::Hnsw)
        .metric_type(MetricType::Cosine)
        .extra_params(HashMap::from([
            ("M".to_owned(), HNSW_M.to_string()),
            (
                "efConstruction".to_owned(),
                HNSW_EF_CONSTRUCTION.to_string(),
            ),
        ]))
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
}
