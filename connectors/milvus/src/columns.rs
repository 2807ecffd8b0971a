//! The small pieces between chunks and Milvus' columns: a row's size for batching, a chunk's
//! metadata as the JSON object Milvus stores, a VarChar column read back, and a call bounded as
//! a whole in time.

use freshet_core::chunk::Chunk;
use milvus::v2::prelude::{FieldData, QueryResults};

use crate::error::{Error, Result};

/// `f`, or [`Error::Timeout`] once `limit` has passed. The SDK's deadline is per attempt and its
/// retries reconnect with backoff, so on a dead connection one call can take far longer than
/// `timeout`; the calls a reader waits on (connect, search, health, collection check) are
/// bounded as a whole.
pub(crate) async fn bounded<T>(
    limit: std::time::Duration,
    f: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    tokio::time::timeout(limit, f)
        .await
        .unwrap_or(Err(Error::Timeout(limit)))
}

/// The values of the VarChar column `name` of a query answer (none in an answer without rows).
pub(crate) fn varchar_column(res: &QueryResults, name: &str) -> Result<Vec<String>> {
    match res.get_output_field(name) {
        Some(FieldData::VarChar { values, .. }) => Ok(values.clone()),
        None if res.get_output_fields().is_empty() => Ok(Vec::new()),
        None => Err(Error::Inconsistent(format!(
            "query result has no field {name:?}"
        ))),
        Some(other) => Err(Error::Inconsistent(format!(
            "query result field {name:?} is not VarChar: {other:?}"
        ))),
    }
}

/// The metadata JSON object of a chunk (Milvus 2.3 JSON fields must hold objects).
pub(crate) fn metadata_value(c: &Chunk) -> serde_json::Value {
    match serde_json::from_str::<serde_json::Value>(&c.metadata_json) {
        Ok(v @ serde_json::Value::Object(_)) => v,
        _ => {
            tracing::warn!(chunk_id = %c.chunk_id, "metadata_json is not a JSON object; storing {{}} in milvus");
            serde_json::Value::Object(Default::default())
        }
    }
}

/// About how many bytes the row of `c` takes in an insert request (for batching by size).
pub(crate) fn row_bytes(c: &Chunk, dim: usize) -> usize {
    dim * 4
        + c.chunk_id.len()
        + c.doc_id.len()
        + c.source.len()
        + c.metadata_json.len()
        + c.acl.iter().map(|a| a.len() + 8).sum::<usize>()
        + 64
}

#[cfg(test)]
mod tests {
    use freshet_core::testing::chunk;

    use super::*;

    #[test]
    fn a_row_counts_every_variable_field() {
        let c = chunk("d", "text");
        let base = row_bytes(&c, 4);
        let grown = |f: &dyn Fn(&mut Chunk)| {
            let mut c = c.clone();
            f(&mut c);
            row_bytes(&c, 4) - base
        };
        assert_eq!(grown(&|c| c.doc_id.push_str("12345")), 5);
        assert_eq!(grown(&|c| c.source.push_str("123")), 3);
        assert_eq!(grown(&|c| c.metadata_json = r#"{"k":"v"}"#.into()), 7);
        assert_eq!(grown(&|c| c.acl = vec!["ab".into()]), 2 + 8);
        assert_eq!(row_bytes(&c, 8) - base, 16, "four bytes a dimension");
        // the text is not stored in Milvus
        assert_eq!(grown(&|c| c.text.push_str("more words")), 0);
    }

    #[test]
    fn metadata_is_an_object_or_empty() {
        let mut c = chunk("d", "t");
        c.metadata_json = r#"{"lang":"en","n":[1,2]}"#.into();
        assert_eq!(
            metadata_value(&c),
            serde_json::json!({"lang": "en", "n": [1, 2]})
        );
        for not_an_object in ["[1]", "3", "\"s\"", "{broken", ""] {
            c.metadata_json = not_an_object.into();
            assert_eq!(metadata_value(&c), serde_json::json!({}), "{not_an_object}");
        }
    }

    #[test]
    fn varchar_columns_are_read_or_refused() {
        let res = QueryResults::new().output_fields(vec![
            FieldData::VarChar {
                name: "chunk_id".into(),
                values: vec!["a".into(), "b".into()],
            },
            FieldData::Bool {
                name: "acl_public".into(),
                values: vec![true, false],
            },
        ]);
        assert_eq!(varchar_column(&res, "chunk_id").unwrap(), ["a", "b"]);
        let e = varchar_column(&res, "acl_public").unwrap_err();
        assert!(e.to_string().contains("not VarChar"), "{e}");
        let e = varchar_column(&res, "doc_id").unwrap_err();
        assert!(e.to_string().contains("no field \"doc_id\""), "{e}");
        // an empty answer carries no columns at all
        assert!(varchar_column(&QueryResults::new(), "doc_id")
            .unwrap()
            .is_empty());
    }

    #[tokio::test]
    async fn a_bounded_call_times_out_as_a_whole() {
        let slow = async {
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
            Ok(1)
        };
        let limit = std::time::Duration::from_millis(20);
        assert!(matches!(bounded(limit, slow).await, Err(Error::Timeout(l)) if l == limit));
        assert_eq!(bounded(limit, async { Ok(2) }).await.unwrap(), 2);
    }
}
