//! `freshet-tools bench-parse --dir DIR`: how fast the parsers read each format, and what share
//! of the work of indexing a document parsing is. For every file of a supported format under
//! `DIR` (as `freshet publish --dir` sends it), in one run on one thread: parsing alone
//! (`operators::parse`), preparing (parse, clean, chunk) and embedding the document's chunks
//! with the configured model. Reports, per format, MB/s and pages/s of parsing, and parsing's
//! share of prepare + embed (the sinks' writes, left out, would only lower it). Text formats
//! (CSV, code) have no separate parse: their table and syntax work is part of preparing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::config::Config;
use anyhow::{Context, Result};
use freshet_embedding::FastEmbedder;
use freshet_operators::document::Change;
use freshet_operators::embed::embed_input;
use freshet_operators::parse::{decode_base64, parse, ParseLimits};
use freshet_operators::prepare::prepare_full;
use serde_json::json;

#[derive(Default)]
struct Totals {
    files: usize,
    bytes: u64,
    pages: usize,
    parse: Duration,
    prepare: Duration,
    embed: Duration,
    chunks: usize,
}

/// `freshet-tools bench-parse`.
#[derive(clap::Args)]
pub struct ParseBenchArgs {
    /// A directory of files (every format `freshet publish --dir` sends).
    #[arg(long)]
    dir: PathBuf,
    /// Parses per file (the mean is reported).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Also write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

impl crate::Run for ParseBenchArgs {
    fn run(self, config: Option<&Path>) -> Result<i32> {
        let report = bench(&Config::load(config)?, &self.dir, self.rounds)?;
        if let Some(path) = self.json {
            std::fs::write(&path, serde_json::to_vec_pretty(&report)?)
                .with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(0)
    }
}

/// Runs the benchmark over `dir`, `rounds` parses per file.
pub fn bench(config: &Config, dir: &Path, rounds: usize) -> Result<serde_json::Value> {
    let mut model = FastEmbedder::load(&config.embedding).context("loading the embedding model")?;
    let tokens = model.token_counter()?;
    let mut by_format: BTreeMap<&'static str, Totals> = BTreeMap::new();
    for path in freshet_publishers::list_files(dir)? {
        let Some(out) = freshet_publishers::file_document(dir, &path, &Default::default()).ok()
        else {
            continue;
        };
        let Some(value) = out.value else { continue };
        let Ok(Change::Upsert(doc)) = freshet_operators::envelope::decode(
            Some(out.id.as_bytes()),
            Some(&value),
            &Default::default(),
        ) else {
            continue;
        };
        let t = by_format.entry(doc.content_type.as_str()).or_default();
        t.files += 1;
        t.bytes += std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        if doc.content_type.is_binary() {
            let bytes = decode_base64(&doc.text).map_err(anyhow::Error::msg)?;
            let rounds = rounds.max(1);
            let started = Instant::now();
            let mut pages = 0;
            for _ in 0..rounds {
                if let Some(Ok(p)) = parse(doc.content_type, &bytes, &ParseLimits::default()) {
                    pages = p.pages.len();
                }
            }
            t.parse += started.elapsed() / rounds as u32;
            t.pages += pages;
        }
        let started = Instant::now();
        let prepared = prepare_full(doc.clone(), &config.chunking, &tokens);
        t.prepare += started.elapsed();
        let Ok(prepared) = prepared else { continue };
        let texts: Vec<String> = prepared.chunks.iter().map(embed_input).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let started = Instant::now();
        for batch in refs.chunks(32) {
            model.embed_passage_texts(batch)?;
        }
        t.embed += started.elapsed();
        t.chunks += texts.len();
    }
    let mut report = serde_json::Map::new();
    println!("| format | files | MB | pages | parse MB/s | parse pages/s | chunks | parse share of prepare + embed |");
    println!("|---|---|---|---|---|---|---|---|");
    for (format, t) in &by_format {
        let mb = t.bytes as f64 / 1e6;
        let parse_s = t.parse.as_secs_f64();
        let share = parse_s / (t.prepare + t.embed).as_secs_f64().max(1e-9);
        let cell = |v: f64, unit: &str| {
            if parse_s > 0.0 {
                format!("{v:.1}{unit}")
            } else {
                "–".to_owned()
            }
        };
        println!(
            "| {format} | {} | {mb:.2} | {} | {} | {} | {} | {} |",
            t.files,
            t.pages,
            cell(mb / parse_s, ""),
            cell(t.pages as f64 / parse_s, ""),
            t.chunks,
            cell(share * 100.0, "%")
        );
        report.insert(
            (*format).to_owned(),
            json!({"files": t.files, "bytes": t.bytes, "pages": t.pages, "parse_s": parse_s,
                   "prepare_s": t.prepare.as_secs_f64(), "embed_s": t.embed.as_secs_f64(),
                   "chunks": t.chunks, "parse_share": share}),
        );
    }
    Ok(serde_json::Value::Object(report))
}
