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

/// A histogram's observations over the run, in milliseconds: the mean exactly, the quantiles
/// interpolated linearly within their bucket as Prometheus' `histogram_quantile` does (so
/// only as fine as the buckets: the project's latency buckets double from 0.25 ms).
#[derive(Clone, Debug, Serialize)]
pub struct HistogramDelta {
    pub count: f64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
}

/// The histogram `name` (without `_bucket`) over the run; `None` when it is not exported.
pub fn histogram(before: &Scrape, after: &Scrape, name: &str) -> Option<HistogramDelta> {
    let prefix = format!("{name}_bucket{{le=\"");
    let mut buckets: Vec<(f64, f64)> = after
        .iter()
        .filter_map(|(k, v)| {
            let le = k.strip_prefix(&prefix)?.strip_suffix("\"}")?;
            let bound = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((bound, v - before.get(k).copied().unwrap_or(0.0)))
        })
        .collect();
    if buckets.is_empty() {
        return None;
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let count = buckets.last().map(|b| b.1).unwrap_or(0.0);
    let quantile = |q: f64| {
        let rank = q * count;
        let mut lower = (0.0, 0.0);
        for &(bound, cumulative) in &buckets {
            if cumulative >= rank {
                if bound.is_infinite() {
                    // Above the last finite bound: that bound, as Prometheus answers.
                    return lower.0 * 1000.0;
                }
                let within = cumulative - lower.1;
                let frac = if within > 0.0 {
                    (rank - lower.1) / within
                } else {
                    1.0
                };
                return (lower.0 + (bound - lower.0) * frac) * 1000.0;
            }
            lower = (bound, cumulative);
        }
        lower.0 * 1000.0
    };
    Some(HistogramDelta {
        count,
        mean: mean_ms(before, after, name, "").unwrap_or(0.0),
        p50: quantile(0.5),
        p90: quantile(0.9),
        p99: quantile(0.99),
    })
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

    #[test]
    fn histogram_quantiles_interpolate_within_the_run_s_buckets() {
        let before = parse(
            "lag_seconds_bucket{le=\"0.01\"} 5\n\
             lag_seconds_bucket{le=\"0.02\"} 5\n\
             lag_seconds_bucket{le=\"0.04\"} 5\n\
             lag_seconds_bucket{le=\"+Inf\"} 5\n\
             lag_seconds_sum 0.025\n\
             lag_seconds_count 5\n",
        );
        // The run: 10 observations, 4 in (0.01, 0.02], 6 in (0.02, 0.04].
        let after = parse(
            "lag_seconds_bucket{le=\"0.01\"} 5\n\
             lag_seconds_bucket{le=\"0.02\"} 9\n\
             lag_seconds_bucket{le=\"0.04\"} 15\n\
             lag_seconds_bucket{le=\"+Inf\"} 15\n\
             lag_seconds_sum 0.285\n\
             lag_seconds_count 15\n",
        );
        let h = histogram(&before, &after, "lag_seconds").expect("exported");
        let close = |x: f64, want: f64| (x - want).abs() < 1e-9;
        assert!(close(h.count, 10.0) && close(h.mean, 26.0), "{h:?}");
        // Rank 5 of 10: one past the 4 below 20 ms, a sixth into the (20, 40] bucket.
        assert!(close(h.p50, 20.0 + 20.0 / 6.0), "{h:?}");
        assert!(close(h.p99, 20.0 + 20.0 * 5.9 / 6.0), "{h:?}");
        assert!(histogram(&before, &after, "other_seconds").is_none());
    }
}
