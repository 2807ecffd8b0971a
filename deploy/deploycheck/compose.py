"""deploy/compose: the compose file against the Compose specification's JSON schema
(check-jsonschema's vendored copy) and the references a schema cannot see."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from . import Layout, Report

# The services built from this repository, the image each runs and the port of its HTTP endpoint.
FRESHET_SERVICES = {"pipeline": 9464, "query": 8080, "ingest": 8090}
# Directories the compose file mounts that other parts of deploy/ provide (the alert rules and
# the dashboard): checked when present; their absence is reported, not failed.
PROVIDED_ELSEWHERE = ("../prometheus", "../grafana", "../grafana/provisioning")


def schema(layout: Layout, tools: dict[str, str], report: Report) -> None:
    proc = subprocess.run(
        [tools["check-jsonschema"], "--builtin-schema", "vendor.compose-spec", str(layout.compose_file)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode == 0:
        report.ok("compose.yaml: valid against the Compose specification's schema")
    else:
        report.error("compose.yaml against the Compose specification's schema:\n" + (proc.stdout + proc.stderr).strip())


def load(layout: Layout) -> dict:
    return yaml.safe_load(layout.compose_file.read_text()) or {}


def check(layout: Layout, report: Report) -> None:
    doc = load(layout)
    where = "deploy/compose/compose.yaml"
    services: dict = doc.get("services") or {}
    volumes = set((doc.get("volumes") or {}).keys())
    text = layout.compose_file.read_text()
    for name, svc in services.items():
        image = svc.get("image", "")
        tag = image.rsplit(":", 1)[1] if ":" in image.split("/")[-1] else ""
        report.check(bool(tag) and tag != "latest", f"{where}: {name}: image {image!r} has no pinned tag")
        deps = svc.get("depends_on") or {}
        for dep, how in deps.items() if isinstance(deps, dict) else ((d, {}) for d in deps):
            report.check(dep in services, f"{where}: {name} depends on {dep}, which is not a service")
            cond = (how or {}).get("condition", "service_started")
            if cond == "service_healthy":
                report.check(
                    "healthcheck" in services.get(dep, {}),
                    f"{where}: {name} waits for {dep} to be healthy: no healthcheck",
                )
            if cond == "service_completed_successfully":
                report.check(
                    services.get(dep, {}).get("restart") == "no",
                    f"{where}: {name} waits for {dep} to exit: it restarts",
                )
        if svc.get("restart") != "no":
            report.check("healthcheck" in svc, f"{where}: {name} has no healthcheck")
        for port in svc.get("ports") or []:
            spec = str(port)
            report.check(spec.startswith("127.0.0.1:"), f"{where}: {name} publishes {spec} beyond the host's loopback")
        for vol in svc.get("volumes") or []:
            src = vol.split(":", 1)[0] if isinstance(vol, str) else vol.get("source", "")
            if src.startswith((".", "/")):
                path = (layout.compose_dir / src).resolve()
                if src in PROVIDED_ELSEWHERE and not path.exists():
                    report.warn(f"{where}: {name} mounts {src}, not in this checkout: not checked")
                else:
                    report.check(path.exists(), f"{where}: {name} mounts {src}, which does not exist")
            else:
                report.check(src in volumes, f"{where}: {name} mounts volume {src}, which is not declared")
        build = svc.get("build")
        if build:
            ctx = (layout.compose_dir / build.get("context", ".")).resolve()
            report.check(ctx == layout.root.resolve(), f"{where}: {name} builds from {ctx}, not the repository root")
            report.check((ctx / build.get("dockerfile", "Dockerfile")).exists(), f"{where}: {name}: no such Dockerfile")
    for name, port in FRESHET_SERVICES.items():
        svc = services.get(name)
        if not report.check(svc is not None, f"{where}: no {name} service"):
            continue
        mounts = [v for v in svc.get("volumes") or [] if isinstance(v, str)]
        report.check(
            any(v.startswith("./freshet.toml:/etc/freshet/freshet.toml") for v in mounts),
            f"{where}: {name} does not mount ./freshet.toml over /etc/freshet/freshet.toml",
        )
        report.check(
            str(port) in str(svc.get("healthcheck", {}).get("test", "")),
            f"{where}: {name}'s healthcheck does not ask {port}",
        )
    # The query node opens the pipeline's index, which takes tantivy's lock file: not read-only.
    query_mounts = [v for v in (services.get("query") or {}).get("volumes") or [] if isinstance(v, str)]
    for v in query_mounts:
        if v.startswith("freshet-state:"):
            report.check(
                not v.endswith(":ro"), f"{where}: query mounts freshet-state read-only: tantivy's reader cannot lock it"
            )
    report.check(
        any(v.startswith("freshet-state:") for v in query_mounts), f"{where}: query does not mount the pipeline's state"
    )
    # Variables the file requires (${VAR:?...}) are the ones env.example lists.
    required = set(re.findall(r"\$\{(\w+):\?", text))
    example = layout.compose_dir / "env.example"
    listed = set(re.findall(r"^#?\s*(\w+)=", example.read_text(), re.MULTILINE)) if example.exists() else set()
    for var in sorted(required - listed):
        report.error(f"{where}: requires ${var}, which deploy/compose/env.example does not list")
    check_prometheus(layout, services, report)
    check_grafana(layout, services.get("grafana") or {}, report)
    report.ok(f"{where}: {len(services)} services: references, tags, loopback ports, healthchecks, variables")


def check_prometheus(layout: Layout, services: dict, report: Report) -> None:
    """The scrape targets are compose services on their listen ports; the rule globs find rules."""
    path = layout.compose_dir / "prometheus.yml"
    if not report.check(path.exists(), "deploy/compose/prometheus.yml: missing"):
        return
    cfg = yaml.safe_load(path.read_text()) or {}
    targets = [
        t for job in cfg.get("scrape_configs", []) for sc in job.get("static_configs", []) for t in sc["targets"]
    ]
    for name, port in FRESHET_SERVICES.items():
        report.check(f"{name}:{port}" in targets, f"deploy/compose/prometheus.yml: does not scrape {name}:{port}")
    for t in targets:
        report.check(t.split(":")[0] in services, f"deploy/compose/prometheus.yml: target {t} is not a compose service")
    rules_dir = layout.deploy / "prometheus"
    if not rules_dir.exists():
        report.warn("deploy/prometheus is not in this checkout: the alert rules compose loads were not checked")
        return
    mount = "/etc/prometheus/freshet/"
    found = []
    for glob in cfg.get("rule_files", []):
        if glob.startswith(mount):
            found += list(rules_dir.glob(glob[len(mount) :]))
    report.check(
        bool(found),
        f"deploy/compose/prometheus.yml: rule_files {cfg.get('rule_files')} match no file of deploy/prometheus",
    )


def config_file(layout: Layout) -> Path:
    return layout.compose_dir / "freshet.toml"


def check_grafana(layout: Layout, grafana: dict, report: Report) -> None:
    """The provisioning that compose mounts works on the compose network: its data source is the
    compose Prometheus (or a variable compose sets), its dashboards are under a mounted path."""
    prov = layout.deploy / "grafana" / "provisioning"
    if not prov.exists():
        report.warn("deploy/grafana/provisioning is not in this checkout: Grafana's provisioning was not checked")
        return
    env = grafana.get("environment") or {}
    mounts = {"/etc/grafana/freshet/": layout.deploy / "grafana", "/etc/grafana/provisioning/": prov}
    dashboards = 0
    for path in sorted(prov.rglob("*.y*ml")):
        doc = yaml.safe_load(path.read_text()) or {}
        rel = path.relative_to(layout.root)
        for ds in doc.get("datasources") or []:
            url = str(ds.get("url", ""))
            if ds.get("type") == "prometheus" and "$" not in url:
                report.check(
                    url.rstrip("/") == "http://prometheus:9090", f"{rel}: data source {url}, not prometheus:9090"
                )
            for var in re.findall(r"\$\{?(\w+)", url):
                report.check(var in env, f"{rel}: data source URL uses ${var}, which compose does not set for grafana")
        for provider in doc.get("providers") or []:
            where = str((provider.get("options") or {}).get("path", ""))
            where = where.rstrip("/") + "/"
            base = next((m for m in mounts if where.startswith(m)), None)
            if report.check(base is not None, f"{rel}: dashboards at {where}, which compose does not mount"):
                local = mounts[base] / where[len(base) :]
                found = list(local.rglob("*.json")) if local.is_dir() else []
                dashboards += len(found)
                report.check(bool(found), f"{rel}: no dashboard JSON under {local.relative_to(layout.root)}")
    report.ok(f"deploy/grafana/provisioning: data sources and {dashboards} dashboards reachable in compose")
