//! A binary's `METRICS.md` against what it registers: the documented metrics (the table rows
//! whose first cell is a metric name in backticks, the second its type) and the registered ones
//! (read from the encoded registry) must be the same names with the same types, and every
//! registered name must follow the naming spec (`docs/metrics.md`). Each binary has a unit test
//! calling [`check`].

use std::collections::BTreeMap;

use prometheus_client::registry::Registry;

/// Metric name → type (`counter`, `gauge`, `histogram`), names in full (`freshet_query_…`,
/// a counter with its `_total`).
pub type Metrics = BTreeMap<String, String>;

/// The metrics documented in `markdown` (a `METRICS.md`), each name given without the binary's
/// `prefix` (`freshet_query_`) as the table rows write them.
pub fn documented(markdown: &str, prefix: &str) -> Result<Metrics, String> {
    let mut found = Metrics::new();
    for line in markdown.lines() {
        let cells: Vec<&str> = line.trim().split('|').map(str::trim).collect();
        // `| name | type | … |` splits into an empty first and last cell.
        let [_, name, kind, ..] = cells.as_slice() else {
            continue;
        };
        let Some(name) = name
            .strip_prefix('`')
            .and_then(|n| n.strip_suffix('`'))
            .filter(|n| n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        else {
            continue;
        };
        if !["counter", "gauge", "histogram"].contains(kind) {
            return Err(format!(
                "`{name}`: type {kind:?} is not counter, gauge or histogram"
            ));
        }
        if found
            .insert(format!("{prefix}{name}"), (*kind).to_owned())
            .is_some()
        {
            return Err(format!("`{name}` is documented twice"));
        }
    }
    Ok(found)
}

/// The metrics `registry` registers.
pub fn registered(registry: &Registry) -> Metrics {
    let text = super::encode(registry);
    let mut found = Metrics::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        if let (Some(name), Some(kind)) = (words.next(), words.next()) {
            let name = match kind {
                "counter" => format!("{name}_total"),
                _ => name.to_owned(),
            };
            found.insert(name, kind.to_owned());
        }
    }
    found
}

/// What is wrong with a registered metric's name under the spec, if anything.
pub fn naming_error(name: &str, kind: &str, prefix: &str) -> Option<String> {
    let Some(rest) = name.strip_prefix(prefix) else {
        return Some(format!("{name}: does not start with {prefix}"));
    };
    if rest.is_empty()
        || !rest
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        return Some(format!("{name}: not lower-case snake_case"));
    }
    match kind {
        "counter" if !name.ends_with("_total") => Some(format!("{name}: a counter ends in _total")),
        "gauge" | "histogram" if name.ends_with("_total") => {
            Some(format!("{name}: only a counter ends in _total"))
        }
        "histogram" if !(name.ends_with("_seconds") || name.ends_with("_bytes")) => Some(format!(
            "{name}: a histogram's name ends in its unit (_seconds, _bytes)"
        )),
        _ => None,
    }
}

/// The differences between `markdown` (a binary's `METRICS.md`, names without `prefix`) and
/// `registry`, and the registered names the spec refuses; empty when they agree.
pub fn check(markdown: &str, prefix: &str, registry: &Registry) -> Vec<String> {
    let documented = match documented(markdown, prefix) {
        Ok(d) => d,
        Err(e) => return vec![format!("METRICS.md: {e}")],
    };
    let registered = registered(registry);
    let mut problems = Vec::new();
    for (name, kind) in &registered {
        match documented.get(name) {
            None => problems.push(format!("{name} ({kind}) is registered but not documented")),
            Some(d) if d != kind => {
                problems.push(format!("{name} is a {kind} but documented as a {d}"))
            }
            Some(_) => {}
        }
        problems.extend(naming_error(name, kind, prefix));
    }
    for (name, kind) in &documented {
        if !registered.contains_key(name) {
            problems.push(format!("{name} ({kind}) is documented but not registered"));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Registrar, LATENCY};

    const DOC: &str = "\
# Demo metrics

| metric | type | labels | meaning |
|---|---|---|---|
| `things_total` | counter | `kind` | things |
| `wait_seconds` | histogram | | waits |
| `ready` | gauge | | 1 when ready |
";

    fn registry(extra: bool) -> std::sync::Arc<Registry> {
        let mut r = Registrar::new("demo");
        r.counter("things", "Things");
        r.histogram("wait_seconds", "Waits", LATENCY);
        r.gauge("ready", "Ready");
        if extra {
            r.counter("undocumented", "Not in the table");
        }
        r.finish()
    }

    #[test]
    fn a_registry_matching_its_table_passes() {
        assert_eq!(
            check(DOC, "freshet_demo_", &registry(false)),
            Vec::<String>::new()
        );
    }

    #[test]
    fn drift_either_way_and_wrong_types_are_found() {
        let p = check(DOC, "freshet_demo_", &registry(true));
        assert_eq!(
            p,
            vec!["freshet_demo_undocumented_total (counter) is registered but not documented"]
        );
        let doc = DOC.replace("| `ready` | gauge |", "| `ready` | counter |")
            + "| `gone_total` | counter | | removed |\n";
        let p = check(&doc, "freshet_demo_", &registry(false));
        assert_eq!(
            p,
            vec![
                "freshet_demo_ready is a gauge but documented as a counter",
                "freshet_demo_gone_total (counter) is documented but not registered",
            ]
        );
    }

    #[test]
    fn names_against_the_spec() {
        let p = "freshet_demo_";
        assert_eq!(naming_error("freshet_demo_a_total", "counter", p), None);
        assert_eq!(naming_error("freshet_demo_a_seconds", "histogram", p), None);
        assert!(naming_error("freshet_other_a_total", "counter", p).is_some());
        assert!(naming_error("freshet_demo_a", "counter", p).is_some());
        assert!(naming_error("freshet_demo_a_total", "gauge", p).is_some());
        assert!(naming_error("freshet_demo_latency", "histogram", p).is_some());
        assert!(naming_error("freshet_demo_Bad_seconds", "histogram", p).is_some());
    }
}
