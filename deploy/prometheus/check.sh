#!/usr/bin/env bash
# The offline checks of the monitoring files (docs/monitoring.md), run by .ci/fast:
#   - `promtool check config` of deploy/prometheus/prometheus.yml and of deploy/k8s-stack's
#     (and the rule files they name),
#   - `promtool check rules` of deploy/prometheus/alerts.yml,
#   - `promtool test rules` of deploy/prometheus/tests/*.yml, and that each alert there has an
#     evaluation where it fires and one where it stays quiet,
#   - every expression of the Grafana dashboard (deploy/grafana/dashboards/*.json), with
#     Grafana's variables replaced, parsed by promtool as a recording rule.
# Whether the expressions return data from the live binaries is tests/tests/prometheus_e2e.rs.
# promtool: FRESHET_PROMTOOL_BIN, else $FRESHET_HOME/tools/prometheus/bin/promtool
# (deploy/install.sh installs it). Exit 0 ok, 1 a check failed, 2 promtool missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
FRESHET_HOME="${FRESHET_HOME:-$HOME/.freshet}"
promtool="${FRESHET_PROMTOOL_BIN:-$FRESHET_HOME/tools/prometheus/bin/promtool}"
[[ -x "$promtool" ]] || {
    echo "prometheus check: $promtool not found; deploy/install.sh (or deploy/install-prometheus.sh) installs it" >&2
    exit 2
}
"$promtool" --version 2>&1 | head -n 1

"$promtool" check config deploy/prometheus/prometheus.yml
# deploy/k8s-stack's Prometheus config, laid out as its ConfigMap is mounted (/etc/prometheus)
stack=$(mktemp -d)
sed "s|/etc/prometheus/|$stack/|" deploy/k8s-stack/monitoring/prometheus.yml >"$stack/prometheus.yml"
cp deploy/k8s-stack/monitoring/files/alerts.yml "$stack/alerts.yml"
"$promtool" check config "$stack/prometheus.yml"
rm -rf "$stack"
"$promtool" check rules deploy/prometheus/alerts.yml
"$promtool" test rules deploy/prometheus/tests/*.yml
# Every alert has its unit tests: at least one evaluation where it fires, one where it does not.
untested=()
while IFS= read -r alert; do
    tests=$(grep -h -A2 "alertname: $alert\$" deploy/prometheus/tests/*.yml || true)
    grep -q 'exp_alerts: \[\]' <<<"$tests" && grep -q 'exp_alerts:$' <<<"$tests" || untested+=("$alert")
done < <(sed -n 's/^ *- alert: *\([A-Za-z0-9_]*\).*/\1/p' deploy/prometheus/alerts.yml)
if ((${#untested[@]})); then
    echo "prometheus check: alerts without a firing and a quiet test in deploy/prometheus/tests: ${untested[*]}" >&2
    exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$work/dashboard-rules.yml" deploy/grafana/dashboards/*.json <<'PY'
import json
import sys

from_vars = {"$__rate_interval": "1m", "$pipeline": ".+", "$ingest": ".+", "$query": ".+"}


def exprs(panels):
    for p in panels:
        yield from exprs(p.get("panels", []))
        for t in p.get("targets", []):
            yield p["title"], t["expr"]


out, rules = sys.argv[1], []
for path in sys.argv[2:]:
    with open(path, encoding="utf-8") as f:
        dash = json.load(f)
    found = list(exprs(dash["panels"]))
    if not found:
        sys.exit(f"{path}: no expressions")
    for title, expr in found:
        for k, v in from_vars.items():
            expr = expr.replace(k, v)
        if "$" in expr:
            sys.exit(f"{path}: panel {title!r}: a variable this check does not know: {expr}")
        rules.append({"record": f"dashboard:panel_{len(rules)}", "expr": expr})
    print(f"{path}: {len(found)} expressions")
with open(out, "w", encoding="utf-8") as f:
    json.dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
PY
"$promtool" check rules "$work/dashboard-rules.yml"
echo "prometheus check: config, rules, rule tests and dashboard expressions fine"
