//! The freshness budget of a `bench-freshness` run: the mean of each stage an update goes
//! through, from the histograms the pipeline and the query node export (their `_sum` and
//! `_count` read before and after the run, so only the run's own updates count):
//!
//! produce → read by a worker (`source_to_read`) → the start of the durable write
//! (`source_to_sink`: the dataflow, embedding and waiting for the write before) → Milvus written
//! (`sink_write{milvus}`) → tantivy committed (`sink_write{tantivy}` less
//! `tantivy_read_back`), read back (`tantivy_read_back`) → durable in both
//! (`source_to_durable`) → served by the node (`index_reload_delay`: the commit's `meta.json`
//! written → searchable there). Milvus' own visibility (its time tick) shows only end to end,
//! in the run's vector route.

use std::collections::HashMap;

use anyhow::{anyhow, Result};
use serde::Serialize;

/// One scrape of a Prometheus text endpoint: series (name with its labels, as written) →
/// value.
pub type Scrape = HashMap<String, f64>;

/// Reads `url` (a `/metrics` endpoint).
pub async fn scrape(client: &reqwest::Client, url: &str) -> Result<Scrape> {
    let resp = client.get(url).send().await?;
    if !resp.status().is_success() {
        return Err(anyhow!("{url}: HTTP {}", resp.status()));
    }
    Ok(parse(&resp.text().await?))
}

/// The samples of a Prometheus/OpenMetrics text body (comments and unparsable lines skipped).
pub fn parse(body: &str) -> Scrape {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.trim().to_owned(), value.trim().parse().ok()?))
        })
        .collect()
}

/// Mean of a histogram over the run, in milliseconds (`None` without observations).
fn mean_ms(before: &Scrape, after: &Scrape, name: &str, labels: &str) -> Option<f64> {
    let delta = |suffix: &str| {
        let key = format!("{name}_{suffix}{labels}");
        Some(after.get(&key)? - before.get(&key).copied().unwrap_or(0.0))
    };
    let (sum, count) = (delta("sum")?, delta("count")?);
    (count > 0.0).then(|| sum / count * 1000.0)
}

/// How much a counter grew over the run.
fn grew(before: &Scrape, after: &Scrape, series: &str) -> Option<f64> {
    Some(after.get(series)? - before.get(series).copied().unwrap_or(0.0))
}

/// The stages' means over one run (milliseconds; `None`: no observation, or the endpoint did
/// not answer).
#[derive(Debug, Default, Serialize)]
pub struct Budget {
    /// Kafka record timestamp → read by a worker (the broker's fetch wait included).
    pub produce_to_read_ms: Option<f64>,
    /// Kafka record timestamp → the start of the write that makes it durable.
    pub produce_to_sink_ms: Option<f64>,
    /// One embedding batch (cache lookups included).
    pub embed_batch_ms: Option<f64>,
    /// Milvus delete + insert of one batch.
    pub milvus_write_ms: Option<f64>,
    /// tantivy apply + commit + read-back of one batch.
    pub tantivy_commit_ms: Option<f64>,
    /// The read-back alone.
    pub tantivy_read_back_ms: Option<f64>,
    /// tantivy apply + commit, without the read-back.
    pub tantivy_commit_without_read_back_ms: Option<f64>,
    /// Kafka record timestamp → durable in both indexes.
    pub produce_to_durable_ms: Option<f64>,
    /// The commit's `meta.json` written → searchable in the node.
    pub node_reload_delay_ms: Option<f64>,
    /// The commit's payload timestamp (taken as the tantivy write starts) → searchable.
    pub node_visible_delay_ms: Option<f64>,
    /// Durable commits the pipeline made.
    pub commits: Option<f64>,
    /// Commits the node loaded on a file notification, and on its poll.
    pub node_reloads_notify: Option<f64>,
    pub node_reloads_poll: Option<f64>,
}

impl Budget {
    /// The budget from scrapes of the pipeline (`p0`, `p1`) and the node (`n0`, `n1`) before
    /// and after the run.
    pub fn of(p0: &Scrape, p1: &Scrape, n0: &Scrape, n1: &Scrape) -> Budget {
        let p =
            |name: &str, labels: &str| mean_ms(p0, p1, &format!("freshet_pipeline_{name}"), labels);
        let n = |name: &str| mean_ms(n0, n1, &format!("freshet_query_{name}"), "");
        let tantivy_commit_ms = p("sink_write_seconds", "{sink=\"tantivy\"}");
        let tantivy_read_back_ms = p("tantivy_read_back_seconds", "");
        Budget {
            produce_to_read_ms: p("source_to_read_seconds", ""),
            produce_to_sink_ms: p("source_to_sink_seconds", ""),
            embed_batch_ms: p("embed_batch_seconds", ""),
            milvus_write_ms: p("sink_write_seconds", "{sink=\"milvus\"}"),
            tantivy_commit_ms,
            tantivy_read_back_ms,
            tantivy_commit_without_read_back_ms: tantivy_commit_ms
                .zip(tantivy_read_back_ms)
                .map(|(c, r)| c - r),
            produce_to_durable_ms: p("source_to_durable_seconds", ""),
            node_reload_delay_ms: n("index_reload_delay_seconds"),
            node_visible_delay_ms: n("index_visible_delay_seconds"),
            commits: grew(p0, p1, "freshet_pipeline_commits_total"),
            node_reloads_notify: grew(
                n0,
                n1,
                "freshet_query_index_reloads_total{trigger=\"notify\"}",
            ),
            node_reloads_poll: grew(
                n0,
                n1,
                "freshet_query_index_reloads_total{trigger=\"poll\"}",
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_means_are_taken_over_the_run_only() {
        let before = parse(
            "# TYPE freshet_pipeline_sink_write_seconds histogram\n\
             freshet_pipeline_sink_write_seconds_sum{sink=\"tantivy\"} 1.0\n\
             freshet_pipeline_sink_write_seconds_count{sink=\"tantivy\"} 10\n\
             freshet_pipeline_tantivy_read_back_seconds_sum 0.2\n\
             freshet_pipeline_tantivy_read_back_seconds_count 10\n\
             freshet_pipeline_commits_total 10\n",
        );
        let after = parse(
            "freshet_pipeline_sink_write_seconds_sum{sink=\"tantivy\"} 1.5\n\
             freshet_pipeline_sink_write_seconds_count{sink=\"tantivy\"} 20\n\
             freshet_pipeline_tantivy_read_back_seconds_sum 0.3\n\
             freshet_pipeline_tantivy_read_back_seconds_count 20\n\
             freshet_pipeline_commits_total 20\n\
             freshet_query_index_reload_delay_seconds_sum 0.004\n\
             freshet_query_index_reload_delay_seconds_count 2\n",
        );
        let b = Budget::of(&before, &after, &Scrape::new(), &after);
        let close = |x: Option<f64>, want: f64| x.is_some_and(|x| (x - want).abs() < 1e-9);
        assert!(close(b.tantivy_commit_ms, 50.0), "{b:?}");
        assert!(close(b.tantivy_read_back_ms, 10.0), "{b:?}");
        assert!(close(b.tantivy_commit_without_read_back_ms, 40.0), "{b:?}");
        assert!(close(b.node_reload_delay_ms, 2.0), "{b:?}");
        assert_eq!(b.commits, Some(10.0));
        assert_eq!(b.produce_to_read_ms, None, "no observations: no mean");
    }
}
