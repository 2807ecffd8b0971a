//! # The document contract
//!
//! Everything freshet indexes reaches it as one record of the document topic: the key is the
//! document id, the value a JSON envelope, or null to delete the document. The folder sync,
//! `freshet publish`, the ingest service and a Debezium mapping all write such records; the
//! pipeline decodes each with the function this example calls, `freshet_core::envelope::decode`.
//!
//! This example needs no service:
//!
//! ```sh
//! cargo run -p freshet-examples --example contract
//! ```
//!
//! It decodes an upsert, shows that `encode` is `decode`'s inverse, deletes, and shows what a
//! refused record looks like: every refusal has a class, which the pipeline writes as the
//! `freshet.error.class` header of the record's copy on the dead-letter topic.

use anyhow::{bail, Result};
use freshet_core::document::Change;
use freshet_core::envelope::{decode, encode};
use freshet_core::limits::RecordLimits;
use serde_json::json;

fn main() -> Result<()> {
    // The limits every record is held to (`[limits]` in freshet.toml): sizes of the value, the
    // id, each field, the number of ACL entries. The defaults are the pipeline's.
    let limits = RecordLimits::default();

    // ## An upsert
    //
    // `op` may be left out: a record is an upsert unless it says `"op": "delete"`. The id is
    // the key, the value's `id`, or both (then they must agree). `metadata` values may be any
    // JSON; they are kept as canonical JSON text, which filters match against. `acl` lists the
    // principals that may see the document; `"public"` says everyone may, on purpose.
    let id = "rivers/snowmelt";
    let value = json!({
        "id": id,
        "title": "Snowmelt",
        "text": "# Snowmelt\n\nIn spring the snow melts and the rivers rise: a freshet.",
        "content_type": "text/markdown",
        "source": "https://example.org/snowmelt",
        "metadata": {"lang": "en", "year": 2024, "tags": ["hydrology", "spring"]},
        "acl": ["group:hydrology", "user:ana"],
    });
    let bytes = serde_json::to_vec(&value)?;
    let change = decode(Some(id.as_bytes()), Some(&bytes), &limits)?;
    let Change::Upsert(doc) = &change else {
        bail!("an envelope without `op` is an upsert, got {change:?}");
    };
    println!("upsert {:?} ({})", doc.id, doc.content_type.as_str());
    println!("  title     {:?}", doc.title);
    for (key, json) in &doc.metadata {
        println!("  metadata  {key} = {json}");
    }
    println!("  acl       {:?}", doc.acl);

    // ## `encode` is the inverse of `decode`
    //
    // A producer written in Rust can build the `Change` and encode it; what the pipeline
    // decodes is the same change.
    let encoded = encode(&change);
    if decode(Some(id.as_bytes()), Some(&encoded), &limits)? != change {
        bail!("encode then decode changed the document");
    }
    println!("encode → decode: the same change ({} bytes)", encoded.len());

    // ## A delete
    //
    // A null value (a Kafka tombstone) deletes the key's document, and so does
    // `{"op": "delete", "id": …}`. An empty value is not a delete: it is refused.
    let delete = decode(Some(id.as_bytes()), None, &limits)?;
    println!("tombstone → {delete:?}");

    // ## Refused records
    //
    // A record the pipeline cannot take is never dropped silently and never half-indexed: it
    // goes to the dead-letter topic with its class, and the pipeline carries on. A refusal
    // that names a document also deletes that document's older version, so a bad update never
    // leaves stale text searchable.
    let refused = [
        (
            "a misspelt ACL key (kept as metadata it would make the document public)",
            Some(id),
            json!({"id": id, "text": "secret plans", "acls": ["group:board"]}),
        ),
        (
            "the key and the value's id disagree",
            Some("rivers/a"),
            json!({"id": "rivers/b", "text": "…"}),
        ),
        (
            "an operation that is neither upsert nor delete",
            Some(id),
            json!({"op": "merge", "id": id}),
        ),
        (
            "no id in the key or the value",
            None,
            json!({"text": "whose document is this?"}),
        ),
    ];
    for (what, key, value) in refused {
        let bytes = serde_json::to_vec(&value)?;
        match decode(key.map(str::as_bytes), Some(&bytes), &limits) {
            Err(e) => println!("refused, class {:<15} {what}: {e}", e.class()),
            Ok(change) => bail!("{what}: decoded as {change:?}, expected a refusal"),
        }
    }
    match decode(Some(id.as_bytes()), Some(b""), &limits) {
        Err(e) => println!("refused, class {:<15} an empty value: {e}", e.class()),
        Ok(change) => bail!("an empty value decoded as {change:?}, expected a refusal"),
    }
    Ok(())
}
