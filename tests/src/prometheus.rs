//! Prometheus in integration tests: the binary `deploy/install-prometheus.sh` installs, a
//! server run by a test on a free port (stopped on drop), its HTTP API, and what a test reads
//! out of the monitoring files: a Grafana dashboard's expressions and the series selectors of
//! an expression (tests/tests/prometheus_e2e.rs, docs/monitoring.md).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;

use crate::free_port;

/// The Prometheus binary: `FRESHET_PROMETHEUS_BIN`, else the one `deploy/install.sh` puts under
/// `$FRESHET_HOME/tools/prometheus`.
pub fn prometheus_bin() -> Result<PathBuf> {
    let bin = match std::env::var("FRESHET_PROMETHEUS_BIN") {
        Ok(b) => PathBuf::from(b),
        Err(_) => {
            let home = std::env::var("FRESHET_HOME")
                .map(PathBuf::from)
                .or_else(|_| std::env::var("HOME").map(|h| Path::new(&h).join(".freshet")))
                .context("neither FRESHET_HOME nor HOME is set")?;
            home.join("tools/prometheus/bin/prometheus")
        }
    };
    ensure!(
        bin.is_file(),
        "Prometheus not found at {} (FRESHET_PROMETHEUS_BIN overrides): deploy/install.sh \
         installs it (deploy/install-prometheus.sh)",
        bin.display()
    );
    Ok(bin)
}

/// A Prometheus server run by the test (stopped on drop, also when the test fails).
pub struct Prometheus {
    child: Child,
    base: String,
    log: PathBuf,
    http: reqwest::blocking::Client,
}

impl Prometheus {
    pub fn start(config: &Path, dir: &Path) -> Result<Prometheus> {
        let port = free_port();
        let log = dir.join("prometheus.log");
        let file = std::fs::File::create(&log)?;
        let child = Command::new(prometheus_bin()?)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("prometheus-data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::from(file.try_clone()?))
            .stderr(Stdio::from(file))
            .spawn()
            .context("starting prometheus")?;
        let mut p = Prometheus {
            child,
            base: format!("http://127.0.0.1:{port}"),
            log,
            http: reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()?,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = p
                .http
                .get(format!("{}/-/ready", p.base))
                .send()
                .is_ok_and(|r| r.status().is_success());
            if ready {
                return Ok(p);
            }
            if let Some(status) = p.child.try_wait()? {
                bail!("prometheus exited ({status}): {}", p.log_tail());
            }
            if Instant::now() > deadline {
                bail!("prometheus not ready in 30 s: {}", p.log_tail());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    pub fn api(&self, path: &str, query: &[(&str, &str)]) -> Result<Value> {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .query(query)
            .send()
            .with_context(|| format!("GET {path}"))?;
        let status = r.status();
        let body: Value = r.json().with_context(|| format!("GET {path}: not JSON"))?;
        ensure!(
            status.is_success() && body["status"] == "success",
            "GET {path} {query:?} → {status}: {body}"
        );
        Ok(body["data"].clone())
    }

    /// The instant vector of `expr` now (an error for a query Prometheus refuses).
    pub fn query(&self, expr: &str) -> Result<Vec<Value>> {
        let data = self.api("/api/v1/query", &[("query", expr)])?;
        Ok(data["result"].as_array().cloned().unwrap_or_default())
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every (panel title, expression) of a dashboard, rows' nested panels included, and the
/// metrics its instance variables list (`label_values(metric, instance)`).
pub fn dashboard_exprs(dash: &Value) -> Vec<(String, String)> {
    fn walk(panels: &Value, out: &mut Vec<(String, String)>) {
        for p in panels.as_array().into_iter().flatten() {
            walk(&p["panels"], out);
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(e) = t["expr"].as_str() {
                    let title = p["title"].as_str().unwrap_or("?").to_owned();
                    out.push((title, e.to_owned()));
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(&dash["panels"], &mut out);
    for v in dash["templating"]["list"].as_array().into_iter().flatten() {
        let q = v["query"]["query"].as_str().or_else(|| v["query"].as_str());
        if let Some(metric) = q
            .and_then(|q| q.strip_prefix("label_values("))
            .and_then(|q| q.split(',').next())
        {
            let name = format!("variable ${}", v["name"].as_str().unwrap_or("?"));
            out.push((name, format!("count({})", metric.trim())));
        }
    }
    out
}

/// The series selectors of an expression: each freshet metric name (and `up`) with its `=`
/// label matchers, as a selector of its own (`name{l="v",…}`). Regular-expression and negative
/// matchers are left out: they name alternatives, not one series that must exist.
pub fn selectors(expr: &str) -> Vec<String> {
    let b = expr.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':';
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            continue;
        }
        if !ident(b[i]) || (i > 0 && ident(b[i - 1])) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && ident(b[i]) {
            i += 1;
        }
        let name = &expr[start..i];
        if !(name.starts_with("freshet_") || name == "up") {
            continue;
        }
        let mut matchers = Vec::new();
        if b.get(i) == Some(&b'{') {
            let end = expr[i..].find('}').map_or(b.len(), |e| i + e);
            for m in split_matchers(&expr[i + 1..end]) {
                if let Some((label, value)) = m.split_once('=') {
                    let label = label.trim();
                    let value = value.trim();
                    if !label.ends_with('!') && !value.starts_with('~') {
                        matchers.push(format!("{label}={value}"));
                    }
                }
            }
            i = end + 1;
        }
        let sel = format!("{name}{{{}}}", matchers.join(","));
        if !out.contains(&sel) {
            out.push(sel);
        }
    }
    out
}

/// The matchers inside `{…}`, split at the commas outside quotes.
fn split_matchers(inner: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in inner.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => {
                out.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&inner[start..]);
    out.into_iter().filter(|m| !m.trim().is_empty()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_keep_names_and_equality_matchers() {
        let expr = r#"sum by (job) (rate(freshet_pipeline_stall_retries_total{at="milvus", instance=~"a|b"}[5m])) / sum(freshet_query_ready{job!="x",le="30.0"}) and up{job=~"freshet-.*"} > 0 and on (job) label_replace(vector(1), "x", "freshet_not_a_series", "", "")"#;
        assert_eq!(
            selectors(expr),
            vec![
                r#"freshet_pipeline_stall_retries_total{at="milvus"}"#,
                r#"freshet_query_ready{le="30.0"}"#,
                "up{}",
            ]
        );
    }
}
