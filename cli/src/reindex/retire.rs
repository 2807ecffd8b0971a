//! `freshet reindex retire`: drops the generation a configuration builds (its Milvus collection
//! and tantivy index directory) once nothing can serve it: not the generation served, not the
//! rollback target, not the alias's, and its pipeline stopped.

use freshet_config::serving::{Generation, ServingPointer};

/// Why the generation `own` may not be retired, with what to do.
pub fn check(
    pointer: Option<&ServingPointer>,
    own: &Generation,
    alias_target: Option<&str>,
) -> Result<(), String> {
    let Some(p) = pointer else {
        return Err(
            "there is no serving pointer: nothing says which generation the query nodes serve, \
             so none is retired"
                .into(),
        );
    };
    let same = |g: &Generation| {
        g.tantivy_path == own.tantivy_path || g.milvus_collection == own.milvus_collection
    };
    if same(&p.serving) {
        return Err(format!(
            "this configuration builds generation {}, which is served: switch to another first",
            p.serving.name
        ));
    }
    if let Some(prev) = p.previous.as_ref().filter(|g| same(g)) {
        return Err(format!(
            "this configuration builds generation {}, the rollback target: it can be retired \
             after the next switch, when another generation is the previous one",
            prev.name
        ));
    }
    if alias_target == Some(own.milvus_collection.as_str()) {
        return Err(format!(
            "the Milvus alias names collection {}: switch the alias away first",
            own.milvus_collection
        ));
    }
    Ok(())
}
