//! `freshet-tools ja-dict`: builds the Japanese (IPADIC) dictionary the tantivy index's
//! Japanese analyzer loads (`[tantivy] ja_dictionary`) from MeCab's IPADIC sources, e.g. those
//! of Debian's `mecab-ipadic` package (`deploy/install.sh` downloads and unpacks it, then runs
//! this). Prints how long the build took and how big the dictionary is.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};

use crate::config::Config;

/// `freshet-tools ja-dict`.
#[derive(clap::Args)]
pub struct JaDictArgs {
    /// MeCab IPADIC sources (`*.csv`, `matrix.def`, `char.def`, `unk.def`, EUC-JP).
    #[arg(long, default_value = "/usr/share/mecab/dic/ipadic")]
    source: PathBuf,
    /// Where to write the dictionary (replaced if present). Default: `[tantivy] ja_dictionary`.
    #[arg(long)]
    out: Option<PathBuf>,
}

impl crate::Run for JaDictArgs {
    fn run(self, config: Option<&Path>) -> Result<i32> {
        let out = match self.out {
            Some(out) => out,
            None => Config::load(config)?.tantivy.ja_dictionary,
        };
        anyhow::ensure!(
            !out.as_os_str().is_empty(),
            "[tantivy] ja_dictionary is empty (bigrams, no dictionary): pass --out"
        );
        if let Some(parent) = out.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        let started = Instant::now();
        freshet_tantivy::build_ja_dictionary(&self.source, &out)?;
        let elapsed = started.elapsed();
        let bytes = dir_bytes(&out)?;
        println!(
            "built the Japanese dictionary {} from {} in {:.1} s ({:.1} MB)",
            out.display(),
            self.source.display(),
            elapsed.as_secs_f64(),
            bytes as f64 / 1e6
        );
        Ok(0)
    }
}

fn dir_bytes(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let meta = entry?.metadata()?;
        if meta.is_file() {
            total += meta.len();
        }
    }
    Ok(total)
}
