//! `freshet reindex`: the index generation the query nodes serve (docs/reindex.md).
//!
//! A generation is a tantivy index and the Milvus collection bound to it, built by its own
//! `freshet run` with its own configuration. `switch` points the serving pointer (and the Milvus
//! alias) at the generation the `--config` file builds, once that generation has caught up
//! with the topics and is bound to its collection (and a retrieval gate passed); `rollback`
//! returns to the generation served before; `status` lists them with their lag; `retire` drops
//! a generation nothing can serve any more. Each switch is appended to the history beside
//! the pointer (`<pointer>.history.jsonl`).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use freshet_config::serving::{Generation, ServingPointer};
use freshet_milvus::{MilvusConfig, MilvusSink};
use serde_json::json;

use crate::config::Config;

mod gate;
mod lag;
mod retire;
pub mod settings;

pub use settings::ReindexConfig;

#[derive(Args)]
pub struct ReindexArgs {
    #[command(subcommand)]
    command: ReindexCommand,
}

#[derive(Subcommand)]
enum ReindexCommand {
    /// Serve the generation this configuration builds ([tantivy] path, [milvus] collection),
    /// once it has caught up with the topics.
    Switch {
        /// The generation's name (what responses and metrics report).
        #[arg(long)]
        to: String,
        /// The verdict of `freshet-tools gate` for this generation (required unless
        /// [reindex] require_gate = false).
        #[arg(long)]
        gate: Option<PathBuf>,
    },
    /// Serve the generation served before the last switch again (no checks but that it exists).
    Rollback,
    /// The generation served, the one before it and the one this configuration builds: their
    /// lag behind the topics and size.
    Status,
    /// Drop the generation this configuration builds (its collection and tantivy index), once
    /// it is neither served nor the rollback target and its pipeline has stopped.
    Retire,
}

/// A generation as the checks of a switch see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub generation: Generation,
    /// Records its last commit is behind the topics' ends.
    pub lag: u64,
    /// The index id its collection is bound to (`None`: no collection; `Some(None)`: unbound).
    pub collection_index: Option<Option<String>>,
}

/// Why a switch is refused, each with what to do.
pub fn check_switch(
    current: Option<&ServingPointer>,
    to: &Candidate,
    max_lag: u64,
) -> std::result::Result<(), String> {
    let g = &to.generation;
    if current.is_some_and(|p| p.serving == *g) {
        return Err(format!("generation {} is already served", g.name));
    }
    if let Some(p) = current {
        if p.serving.name == g.name {
            return Err(format!(
                "generation {} is served with another index or collection ({} / {}): give the \
                 new generation another name",
                g.name,
                p.serving.tantivy_path.display(),
                p.serving.milvus_collection
            ));
        }
    }
    match &to.collection_index {
        None => {
            return Err(format!(
                "collection {} does not exist: start the generation's pipeline (`freshet run \
                 --new-index` with this configuration) and wait for it to catch up",
                g.milvus_collection
            ))
        }
        Some(bound) if bound.as_deref() != Some(g.index_id.as_str()) => {
            return Err(format!(
                "collection {} belongs to index {}, the tantivy index {} is index {}: check \
                 [tantivy] path and [milvus] collection of this configuration",
                g.milvus_collection,
                bound.as_deref().unwrap_or("none"),
                g.tantivy_path.display(),
                g.index_id
            ))
        }
        Some(_) => {}
    }
    if to.lag > max_lag {
        return Err(format!(
            "generation {} lags the topics by {} record(s) (at most {max_lag}, [reindex] \
             max_lag): wait for its pipeline to catch up (`freshet reindex status`) and switch \
             again",
            g.name, to.lag
        ));
    }
    Ok(())
}

/// The `[embedding]` settings a query node embeds queries with for the generation this
/// configuration builds, as the pointer records them: its relative paths made absolute (the
/// node runs elsewhere), key files and variables named, never a key itself.
pub(crate) fn query_model(e: &freshet_embedding::EmbeddingConfig) -> Result<serde_json::Value> {
    let mut e = e.clone();
    let absolute = |p: &mut std::path::PathBuf, what: &str| -> Result<()> {
        if !p.as_os_str().is_empty() && p.is_relative() {
            *p = std::path::absolute(&*p)
                .with_context(|| format!("[embedding] {what} {}", p.display()))?;
        }
        Ok(())
    };
    absolute(&mut e.model_dir, "model_dir")?;
    absolute(&mut e.api_key_file, "api_key_file")?;
    if let Some(p) = e.ort_dylib_path.as_mut() {
        absolute(p, "ort_dylib_path")?;
    }
    // The node sets its own threads per query model ([query] embedder_threads).
    e.threads = None;
    serde_json::to_value(&e).context("recording the generation's [embedding] settings")
}

pub fn run(config: &Config, args: ReindexArgs) -> Result<()> {
    let r = &config.reindex;
    if r.pointer.as_os_str().is_empty() {
        bail!(
            "[reindex] pointer is not set: name the serving pointer file the query nodes follow \
             (their [query] serving_pointer)"
        );
    }
    let current = read_pointer(&r.pointer)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match args.command {
        ReindexCommand::Switch { to, gate } => {
            let path = config.pipeline.tantivy.path.clone();
            let built = lag::built(&path)?.with_context(|| {
                format!(
                    "the tantivy index {} has no commit: start the generation's pipeline \
                     (`freshet run --new-index` with this configuration) first",
                    path.display()
                )
            })?;
            let generation = Generation {
                name: to,
                tantivy_path: path,
                milvus_collection: config.pipeline.milvus.collection.clone(),
                index_id: built.payload.index_id.clone().unwrap_or_default(),
                embedding: Some(query_model(&config.pipeline.embedding)?),
            };
            generation.validate().map_err(anyhow::Error::msg)?;
            let ends = lag::ends(&config.pipeline.kafka, &topics(config)?)?;
            let milvus = rt.block_on(connect(config, &generation.milvus_collection))?;
            let candidate = Candidate {
                lag: lag::lag(&built.payload.offsets, &ends),
                collection_index: rt.block_on(milvus.bound_index())?,
                generation,
            };
            if let Err(why) = check_switch(current.as_ref(), &candidate, r.max_lag) {
                bail!("switch refused: {why}");
            }
            let verdict = match &gate {
                Some(path) => {
                    let v = gate::read(path)?;
                    if let Err(why) = gate::check(&v, &candidate.generation.index_id) {
                        bail!("switch refused: {why}");
                    }
                    v
                }
                None if r.require_gate => bail!(
                    "switch refused: no retrieval gate: run `freshet-tools gate --candidate \
                     <a node serving this generation> --serving <a node of the served one> \
                     --dataset <set> --canary <canaries> --out verdict.json` and pass --gate \
                     verdict.json (or set [reindex] require_gate = false)"
                ),
                None => serde_json::Value::Null,
            };
            let pointer = ServingPointer {
                serving: candidate.generation.clone(),
                switched_at_ms: now_ms(),
                previous: current.as_ref().map(|p| p.serving.clone()),
            };
            let extra = json!({"lag": candidate.lag, "chunks": built.chunks, "gate": verdict});
            rt.block_on(publish(
                config,
                &milvus,
                &pointer,
                current.as_ref(),
                "switch",
                extra,
            ))
        }
        ReindexCommand::Rollback => {
            let Some(current) = current else {
                bail!(
                    "there is no serving pointer at {}: nothing to roll back",
                    r.pointer.display()
                );
            };
            let Some(previous) = current.previous.clone() else {
                bail!(
                    "the serving pointer names no previous generation: switch with `freshet \
                     reindex switch --to <name>` instead"
                );
            };
            if lag::built(&previous.tantivy_path)?.is_none() {
                bail!(
                    "the previous generation's index {} is gone: it cannot be served again",
                    previous.tantivy_path.display()
                );
            }
            let milvus = rt.block_on(connect(config, &previous.milvus_collection))?;
            let pointer = ServingPointer {
                serving: previous,
                switched_at_ms: now_ms(),
                previous: Some(current.serving.clone()),
            };
            rt.block_on(publish(
                config,
                &milvus,
                &pointer,
                Some(&current),
                "rollback",
                json!({}),
            ))
        }
        ReindexCommand::Retire => {
            let own = own_generation(config);
            let milvus = rt.block_on(connect(config, &own.milvus_collection))?;
            let alias_target = match r.alias.as_str() {
                "" => None,
                alias => rt.block_on(milvus.alias_target(alias))?,
            };
            if let Err(why) = retire::check(current.as_ref(), &own, alias_target.as_deref()) {
                bail!("retire refused: {why}");
            }
            let path = &own.tantivy_path;
            if path.exists() && freshet_tantivy::writer_running(path)? {
                bail!(
                    "retire refused: a pipeline writes the index {}: stop it first",
                    path.display()
                );
            }
            rt.block_on(milvus.drop_collection())
                .with_context(|| format!("dropping collection {}", own.milvus_collection))?;
            if path.exists() {
                std::fs::remove_dir_all(path)
                    .with_context(|| format!("removing the index {}", path.display()))?;
            }
            let record = json!({
                "at_ms": now_ms(),
                "what": "retire",
                "tantivy_path": path,
                "collection": own.milvus_collection,
            });
            append_history(&history_path(&r.pointer), &record)?;
            println!(
                "retired: dropped collection {} and removed {}",
                own.milvus_collection,
                path.display()
            );
            Ok(())
        }
        ReindexCommand::Status => {
            let Some(p) = current else {
                println!("no serving pointer at {}", r.pointer.display());
                return Ok(());
            };
            let ends = lag::ends(&config.pipeline.kafka, &topics(config)?)?;
            println!(
                "pointer {} (switched at {} ms)",
                r.pointer.display(),
                p.switched_at_ms
            );
            // The generation this configuration builds, when it is neither of the pointer's (a
            // shadow catching up).
            let own = own_generation(config);
            let known = |g: &Generation| {
                g.tantivy_path == own.tantivy_path && g.milvus_collection == own.milvus_collection
            };
            let shadow = (!known(&p.serving) && !p.previous.as_ref().is_some_and(known))
                .then_some(("candidate", &own));
            let gens = std::iter::once(("serving", &p.serving))
                .chain(p.previous.iter().map(|g| ("previous", g)))
                .chain(shadow);
            for (role, g) in gens {
                let (lag, chunks, index) = match lag::built(&g.tantivy_path)? {
                    Some(b) => (
                        lag::lag(&b.payload.offsets, &ends).to_string(),
                        b.chunks.to_string(),
                        b.payload.index_id.unwrap_or_default(),
                    ),
                    None => ("-".into(), "-".into(), "no index".into()),
                };
                println!(
                    "{role:<9} {:<16} lag {lag:>8}  chunks {chunks:>9}  index {index}  {} / {}",
                    g.name,
                    g.tantivy_path.display(),
                    g.milvus_collection
                );
            }
            if !r.alias.is_empty() {
                let m = rt.block_on(connect(config, &p.serving.milvus_collection))?;
                let target = rt.block_on(m.alias_target(&r.alias))?;
                println!(
                    "alias     {} → {}",
                    r.alias,
                    target.as_deref().unwrap_or("(none)")
                );
            }
            Ok(())
        }
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn read_pointer(path: &Path) -> Result<Option<ServingPointer>> {
    match ServingPointer::read(path) {
        Ok(p) => Ok(Some(p)),
        Err(freshet_config::serving::PointerError::Read { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

fn topics(config: &Config) -> Result<Vec<String>> {
    Ok(config
        .pipeline
        .topics()?
        .into_iter()
        .map(|t| t.name)
        .collect())
}

async fn connect(config: &Config, collection: &str) -> Result<MilvusSink> {
    let mut m: MilvusConfig = config.pipeline.milvus.clone();
    m.collection = collection.to_owned();
    MilvusSink::connect(m)
        .await
        .with_context(|| format!("connecting to Milvus at {}", config.pipeline.milvus.url))
}

/// Moves the alias (if any), writes the pointer, records the switch; the alias goes back if
/// the pointer cannot be written.
async fn publish(
    config: &Config,
    milvus: &MilvusSink,
    pointer: &ServingPointer,
    before: Option<&ServingPointer>,
    what: &str,
    extra: serde_json::Value,
) -> Result<()> {
    let r = &config.reindex;
    let alias_before = if r.alias.is_empty() {
        None
    } else {
        milvus
            .point_alias(&r.alias)
            .await
            .with_context(|| format!("pointing the Milvus alias {} (nothing switched)", r.alias))?
    };
    if let Err(e) = pointer.write_atomic(&r.pointer) {
        if let Some(old) = alias_before {
            if let Ok(m) = connect(config, &old).await {
                let _ = m.point_alias(&r.alias).await;
            }
        }
        return Err(e.into());
    }
    let record = json!({
        "at_ms": pointer.switched_at_ms,
        "what": what,
        "from": before.map(|p| p.serving.name.clone()),
        "to": pointer.serving.name,
        "index_id": pointer.serving.index_id,
        "collection": pointer.serving.milvus_collection,
        "alias": (!r.alias.is_empty()).then(|| r.alias.clone()),
        "checks": extra,
    });
    append_history(&history_path(&r.pointer), &record)?;
    println!(
        "{what}: serving generation {} ({} / {}){}",
        pointer.serving.name,
        pointer.serving.tantivy_path.display(),
        pointer.serving.milvus_collection,
        before
            .map(|p| format!(", previous {}", p.serving.name))
            .unwrap_or_default()
    );
    Ok(())
}

/// The switch history beside the pointer.
pub fn history_path(pointer: &Path) -> PathBuf {
    let mut name = pointer.file_name().unwrap_or_default().to_os_string();
    name.push(".history.jsonl");
    pointer.with_file_name(name)
}

fn append_history(path: &Path, record: &serde_json::Value) -> Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening the switch history {}", path.display()))?;
    writeln!(f, "{record}")?;
    f.sync_all()
        .with_context(|| format!("writing the switch history {}", path.display()))
}

#[cfg(test)]
mod tests;

/// The generation this configuration builds, named by its paths alone (no index id read).
fn own_generation(config: &Config) -> Generation {
    Generation {
        name: "(this config)".into(),
        tantivy_path: config.pipeline.tantivy.path.clone(),
        milvus_collection: config.pipeline.milvus.collection.clone(),
        index_id: String::new(),
        embedding: None,
    }
}
