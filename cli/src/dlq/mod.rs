//! `freshet dlq list|show|replay`: the dead letters on the dead-letter topic (`[kafka]
//! dlq_topic`) listed by class, key and time, one shown whole, and replayed to their source
//! topics, each once (`docs/faults.md`, "Dead letters: list, show, replay"). The reading and
//! the replay rules are [`freshet_pipeline::dlq`]'s; this module is the command line and its
//! output ([`format`]).

use std::io::Write;
use std::path::PathBuf;
use std::time::SystemTime;

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use freshet_kafka::DocumentProducer;
use freshet_pipeline::dlq::letters::{self, At, Filter, KeyMatch, Letter, Selection};
use freshet_pipeline::dlq::replay::{self, ReplayScan, Verdict};

use crate::config::Config;

mod format;
#[cfg(test)]
mod tests;

/// `freshet dlq`.
#[derive(clap::Args)]
pub struct DlqArgs {
    #[command(subcommand)]
    command: DlqCommand,
}

#[derive(Subcommand)]
enum DlqCommand {
    /// List dead letters by class, key and time, with the count per class.
    ///
    /// One row per dead letter, oldest first: place, time, key, class, stage, replayed?,
    /// message. Exits 1 when none match.
    List {
        #[command(flatten)]
        filter: FilterArgs,
        /// One JSON object a line instead of the table (the counts go to stderr).
        #[arg(long)]
        json: bool,
    },
    /// Show one dead letter whole.
    ///
    /// Why it was refused, where it came from, whether it was replayed, the original record's
    /// headers and its value (a safe preview; --raw for its bytes).
    Show {
        /// Its place on the dead-letter topic: PARTITION:OFFSET (`0:17`), or OFFSET for
        /// partition 0, as `list` shows it.
        #[arg(required_unless_present = "key", conflicts_with = "key")]
        at: Option<At>,
        /// The newest dead letter of this key instead.
        #[arg(long)]
        key: Option<String>,
        /// Write the original value's bytes, unchanged, to stdout and nothing else.
        #[arg(long)]
        raw: bool,
    },
    /// Write dead letters back to their source topics, each once (a dry run without --yes).
    ///
    /// Each goes to the partition it was read from, with its key and headers and a
    /// `freshet.replay.of` header naming the dead letter. A dead letter replayed before is not
    /// written again. Without --yes, only says what it would do.
    Replay {
        /// Only these dead letters (PARTITION:OFFSET), among those the filters take.
        at: Vec<At>,
        #[command(flatten)]
        filter: FilterArgs,
        /// Replay one dead letter with this file's bytes (a corrected JSON document) as its
        /// value; it must decode under its topic's format and limits.
        #[arg(long, value_name = "FILE")]
        fix: Option<PathBuf>,
        /// Replay a dead letter even when its key has a newer record on the source topic (an
        /// edit or a delete after it), which the replay would undo.
        #[arg(long)]
        even_if_superseded: bool,
        /// Write the replays (without it, a dry run).
        #[arg(long, conflicts_with = "dry_run")]
        yes: bool,
        /// Only say what would be replayed (the default).
        #[arg(long)]
        dry_run: bool,
    },
}

/// Which dead letters `list` and `replay` take.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct FilterArgs {
    /// Only this class (`invalid_field`, `malformed_json`, …; an unknown class is an error).
    #[arg(long)]
    class: Option<String>,
    /// Only this key.
    #[arg(long, conflicts_with = "key_prefix")]
    key: Option<String>,
    /// Only keys starting with this.
    #[arg(long)]
    key_prefix: Option<String>,
    /// Refused at or after: RFC 3339 (2026-11-26T13:00:00+08:00), a date (2026-11-26, UTC)
    /// or how long ago (90m, 2h, 7d).
    #[arg(long, value_name = "TIME")]
    since: Option<String>,
    /// Refused before (as --since).
    #[arg(long, value_name = "TIME")]
    until: Option<String>,
    /// Only the newest N of those that match.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
}

impl FilterArgs {
    /// The filter, checked: an unknown class, a bad time or an empty window is an error.
    pub fn filter(&self, now: SystemTime) -> Result<Filter> {
        let time = |t: &Option<String>, flag: &str| -> Result<Option<i64>> {
            t.as_deref()
                .map(|t| letters::parse_time(t, now).with_context(|| format!("--{flag}")))
                .transpose()
        };
        let key = match (&self.key, &self.key_prefix) {
            (Some(k), _) => KeyMatch::Exact(k.as_bytes().to_vec()),
            (None, Some(p)) => KeyMatch::Prefix(p.as_bytes().to_vec()),
            (None, None) => KeyMatch::Any,
        };
        let filter = Filter {
            class: self.class.clone(),
            key,
            since_ms: time(&self.since, "since")?,
            until_ms: time(&self.until, "until")?,
            places: Vec::new(),
        };
        filter.check()?;
        if self.limit == Some(0) {
            bail!("--limit 0 takes nothing; give a positive number");
        }
        Ok(filter)
    }
}

pub fn run(config: &Config, args: DlqArgs) -> Result<()> {
    let kafka = &config.pipeline.kafka;
    match args.command {
        DlqCommand::List { filter, json } => {
            let sel = select(config, &filter, &[], false)?;
            let replays = replay::find_replays(kafka, &kafka.dlq_topic, &sel.letters)?;
            warn_unreadable(&replays);
            if json {
                out(&format::json_lines(&sel, &replays)?)?;
                eprint!("{}", format::counts(&sel));
            } else {
                out(&format::table(&sel, &replays))?;
                out(&format::counts(&sel))?;
            }
            Ok(())
        }
        DlqCommand::Show { at, key, raw } => {
            let letter = match (at, key) {
                (Some(at), _) => letters::read_one(kafka, at)?
                    .with_context(|| format!("no dead letter at {at} on {:?}", kafka.dlq_topic))?,
                (None, Some(key)) => newest_of_key(config, &key)?,
                (None, None) => bail!("give a dead letter's PARTITION:OFFSET or --key"),
            };
            if raw {
                let Some(value) = &letter.value else {
                    bail!("dead letter {}'s value is null", letter.at);
                };
                return out_bytes(value);
            }
            let replays =
                replay::find_replays(kafka, &kafka.dlq_topic, std::slice::from_ref(&letter))?;
            warn_unreadable(&replays);
            out(&format::show(
                &letter,
                &kafka.dlq_topic,
                replays.replayed(&letter),
                replays.newer.get(&letter.at),
            ))
        }
        DlqCommand::Replay {
            at,
            filter,
            fix,
            even_if_superseded,
            yes,
            dry_run: _,
        } => replay_cmd(config, &at, &filter, fix, even_if_superseded, yes),
    }
}

/// The dead letters `filter` (and `at`, when not empty) take, the newest `--limit`, their
/// values only `with_values`; an error when none match.
fn select(config: &Config, args: &FilterArgs, at: &[At], with_values: bool) -> Result<Selection> {
    let filter = Filter {
        places: at.to_vec(),
        ..args.filter(SystemTime::now())?
    };
    let kafka = &config.pipeline.kafka;
    let found = letters::read(kafka, &filter, with_values)?;
    if !at.is_empty() {
        if let Some(missing) = at.iter().find(|a| !found.iter().any(|l| l.at == **a)) {
            bail!(
                "no dead letter at {missing} on {:?} that the filters take",
                kafka.dlq_topic
            );
        }
    }
    let sel = Selection::newest(found, args.limit);
    if sel.matched == 0 {
        bail!(
            "no dead letters on {:?} match{}",
            kafka.dlq_topic,
            if filter == Filter::default() {
                " (the topic holds none)"
            } else {
                " the filters"
            }
        );
    }
    Ok(sel)
}

fn newest_of_key(config: &Config, key: &str) -> Result<Letter> {
    let args = FilterArgs {
        key: Some(key.to_string()),
        ..FilterArgs::default()
    };
    let sel = select(config, &args, &[], true)?;
    if sel.matched > 1 {
        eprintln!(
            "{} dead letters have this key; the newest is shown (`freshet dlq list --key` lists them)",
            sel.matched
        );
    }
    sel.letters
        .into_iter()
        .last()
        .context("no dead letter has this key")
}

fn replay_cmd(
    config: &Config,
    at: &[At],
    args: &FilterArgs,
    fix: Option<PathBuf>,
    superseded_too: bool,
    yes: bool,
) -> Result<()> {
    let kafka = &config.pipeline.kafka;
    let dlq = &kafka.dlq_topic;
    let sel = select(config, args, at, true)?;
    let fixed = match &fix {
        None => None,
        Some(path) => {
            let [letter] = sel.letters.as_slice() else {
                bail!(
                    "--fix replays one dead letter, and {} match: name it (`freshet dlq \
                     replay PARTITION:OFFSET --fix FILE`)",
                    sel.letters.len()
                );
            };
            let bytes = read_fix(path, config.pipeline.limits.max_value_bytes)?;
            let topics = freshet_pipeline::topics::topics(
                &config.pipeline.sources,
                &kafka.topic,
                dlq,
                config.pipeline.limits.require_acl,
            )?;
            replay::check_fix(letter, &bytes, &topics, &config.pipeline.limits)
                .with_context(|| format!("{}", path.display()))?;
            Some(bytes)
        }
    };
    let scan = replay::find_replays(kafka, dlq, &sel.letters)?.complete()?;
    let plan: Vec<(&Letter, Verdict)> = sel
        .letters
        .iter()
        .map(|l| {
            let v = Verdict::of(l, &scan, fixed.is_some(), superseded_too);
            (l, v)
        })
        .collect();
    out(&format::plan(&plan))?;
    let todo: Vec<&Letter> = plan
        .iter()
        .filter(|(_, v)| *v == Verdict::Replay)
        .map(|(l, _)| *l)
        .collect();
    let before = plan
        .iter()
        .filter(|(_, v)| matches!(v, Verdict::Replayed(_)))
        .count();
    let cannot = plan.len() - todo.len() - before;
    if todo.is_empty() {
        out(&format!(
            "nothing to replay: {before} replayed before, {cannot} left out (see REPLAY)\n"
        ))?;
        return Ok(());
    }
    if !yes {
        out(&format!(
            "dry run: would replay {} ({before} replayed before, {cannot} left out); run again \
             with --yes to write them\n",
            todo.len()
        ))?;
        return Ok(());
    }
    let producer = DocumentProducer::new(kafka).context("creating the producer")?;
    for (done, l) in todo.iter().enumerate() {
        let value = fixed.as_deref().or(l.value.as_deref());
        match replay::replay(&producer, dlq, l, value) {
            Ok(s) => out(&format!(
                "replayed {} to {} partition {} offset {}\n",
                l.at, s.topic, s.partition, s.offset
            ))?,
            Err(e) => bail!(
                "{e:#}\nreplayed {done} of {}; {} and those after it were not (a delivery that \
                 timed out may still have reached the broker): `freshet dlq replay` again \
                 skips the replayed ones",
                todo.len(),
                l.at
            ),
        }
    }
    out(&format!(
        "replayed {} ({before} replayed before, {cannot} left out)\n",
        todo.len()
    ))
}

/// Says on stderr which source topics could not be read (their dead letters' `replayed` is
/// `?`).
fn warn_unreadable(scan: &ReplayScan) {
    for (topic, why) in &scan.unreadable {
        eprintln!("whether the dead letters of {topic:?} were replayed is not known: {why}");
    }
}

/// The fixed value in `path`, at most `max` bytes.
fn read_fix(path: &std::path::Path, max: usize) -> Result<Vec<u8>> {
    use std::io::Read;
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(max as u64 + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {}", path.display()))?;
    if bytes.len() > max {
        bail!(
            "{} is over [limits] max_value_bytes ({max} bytes)",
            path.display()
        );
    }
    Ok(bytes)
}

/// Writes `text` to stdout; a closed pipe (`| head`) ends the output quietly.
fn out(text: &str) -> Result<()> {
    out_bytes(text.as_bytes())
}

fn out_bytes(bytes: &[u8]) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.context("writing to stdout"),
    }
}
