"""deploy/k8s: every manifest against the Kubernetes schemas (kubernetes-validate, strict), the
kustomization (and its rendering, where kubectl is installed), and what the schemas cannot see:
selectors, named ports, volumes, the Secret's keys, the pipeline's claim the query pods share."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import tomllib
from pathlib import Path

import yaml

from . import Layout, Report

WORKLOADS = ("Deployment", "StatefulSet")
# The config section of each image's binary whose [[section.keys]] key_file the pod must mount.
KEY_SECTIONS = {"freshet-query": "query", "freshet-ingest": "ingest"}


def manifests(layout: Layout) -> list[Path]:
    return sorted(p for p in layout.k8s.glob("*.yaml") if p.name != "kustomization.yaml")


def documents(layout: Layout) -> list[tuple[Path, dict]]:
    docs = []
    for path in manifests(layout):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                docs.append((path, doc))
    return docs


def schema(layout: Layout, tools: dict[str, str], report: Report) -> None:
    files = [str(p) for p in manifests(layout)]
    proc = subprocess.run(
        [tools["kubernetes-validate"], "--strict", "--quiet", *files], capture_output=True, text=True, check=False
    )
    if proc.returncode == 0:
        report.ok(f"deploy/k8s: {len(files)} files valid against the Kubernetes schemas (strict)")
    else:
        report.error("deploy/k8s against the Kubernetes schemas:\n" + (proc.stdout + proc.stderr).strip())
    kubectl = shutil.which("kubectl")
    if not kubectl:
        report.warn("kubectl not installed: the kustomization was not rendered (its resources were checked)")
        return
    proc = subprocess.run([kubectl, "kustomize", str(layout.k8s)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        report.error("kubectl kustomize deploy/k8s:\n" + proc.stderr.strip())
        return
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        f.write(proc.stdout)
        f.flush()
        val = subprocess.run(
            [tools["kubernetes-validate"], "--strict", "--quiet", f.name], capture_output=True, text=True, check=False
        )
    if val.returncode == 0:
        report.ok("deploy/k8s: kubectl kustomize renders it, and the rendering is valid (strict)")
    else:
        report.error("the rendering of deploy/k8s:\n" + (val.stdout + val.stderr).strip())


def pod_spec(doc: dict) -> dict:
    return doc["spec"]["template"]["spec"]


def check(layout: Layout, report: Report) -> None:
    kust = yaml.safe_load((layout.k8s / "kustomization.yaml").read_text())
    listed = set(kust.get("resources", []))
    for res in sorted(listed):
        report.check((layout.k8s / res).exists(), f"deploy/k8s/kustomization.yaml: resource {res} does not exist")
    for path in manifests(layout):
        if not path.name.endswith(".example.yaml"):
            report.check(path.name in listed, f"deploy/k8s/{path.name}: not in kustomization.yaml")
        else:
            report.check(path.name not in listed, f"deploy/k8s/{path.name}: an example must not be deployed")
    docs = documents(layout)
    by_kind: dict[str, list[dict]] = {}
    for _, doc in docs:
        by_kind.setdefault(doc["kind"], []).append(doc)
    configmaps = {d["metadata"]["name"]: d for d in by_kind.get("ConfigMap", [])}
    secrets = {d["metadata"]["name"]: d for d in by_kind.get("Secret", [])}
    workloads = [d for k in WORKLOADS for d in by_kind.get(k, [])]
    claims = {
        f"{t['metadata']['name']}-{w['metadata']['name']}-0"
        for w in by_kind.get("StatefulSet", [])
        for t in w["spec"].get("volumeClaimTemplates", [])
    }
    for w in workloads:
        name = f"{w['kind']} {w['metadata']['name']}"
        spec = pod_spec(w)
        labels = w["spec"]["template"]["metadata"].get("labels", {})
        sel = w["spec"]["selector"].get("matchLabels", {})
        report.check(sel.items() <= labels.items(), f"deploy/k8s: {name}: its selector does not match its pods")
        sc = spec.get("securityContext", {})
        report.check(sc.get("runAsNonRoot") is True, f"deploy/k8s: {name}: pods may run as root")
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        templates = {t["metadata"]["name"] for t in w["spec"].get("volumeClaimTemplates", [])}
        for v in volumes.values():
            if "configMap" in v:
                report.check(
                    v["configMap"]["name"] in configmaps, f"deploy/k8s: {name}: no ConfigMap {v['configMap']['name']}"
                )
            if "secret" in v:
                s = secrets.get(v["secret"]["secretName"])
                if report.check(s is not None, f"deploy/k8s: {name}: no Secret {v['secret']['secretName']} (example)"):
                    keys = set(s.get("stringData", {})) | set(s.get("data", {}))
                    for item in v["secret"].get("items", []):
                        report.check(item["key"] in keys, f"deploy/k8s: {name}: the Secret has no key {item['key']}")
            if "persistentVolumeClaim" in v:
                claim = v["persistentVolumeClaim"]["claimName"]
                report.check(claim in claims, f"deploy/k8s: {name}: claim {claim} is no StatefulSet's claim")
                # tantivy's reader takes the index's lock file: the index's volume is not read-only
                ro = v["persistentVolumeClaim"].get("readOnly") or any(
                    m.get("readOnly")
                    for c in spec["containers"]
                    for m in c.get("volumeMounts", [])
                    if m["name"] == v["name"]
                )
                report.check(not ro, f"deploy/k8s: {name}: mounts {claim} read-only: tantivy's reader cannot lock it")
        for c in spec["containers"]:
            cname = f"{name} container {c['name']}"
            ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
            for m in c.get("volumeMounts", []):
                report.check(
                    m["name"] in volumes or m["name"] in templates, f"deploy/k8s: {cname}: no volume {m['name']}"
                )
            for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
                p = c.get(probe)
                if not report.check(p is not None, f"deploy/k8s: {cname}: no {probe}"):
                    continue
                get = p.get("httpGet", {})
                report.check(get.get("path") == path, f"deploy/k8s: {cname}: {probe} does not ask {path}")
                port = get.get("port")
                report.check(
                    port in ports or port in ports.values(), f"deploy/k8s: {cname}: {probe} port {port} is not declared"
                )
            res = c.get("resources", {})
            report.check(
                "memory" in res.get("requests", {}) and "memory" in res.get("limits", {}),
                f"deploy/k8s: {cname}: no memory request and limit",
            )
            annotations = w["spec"]["template"]["metadata"].get("annotations", {})
            scrape = annotations.get("prometheus.io/port")
            report.check(
                scrape is not None and int(scrape) in ports.values(),
                f"deploy/k8s: {name}: the scrape annotation's port {scrape} is not a container port",
            )
    check_key_files(workloads, configmaps, report)
    for svc in by_kind.get("Service", []):
        name = f"Service {svc['metadata']['name']}"
        sel = svc["spec"].get("selector", {})
        matched = [w for w in workloads if sel.items() <= w["spec"]["template"]["metadata"].get("labels", {}).items()]
        if not report.check(bool(matched), f"deploy/k8s: {name}: selects no workload's pods"):
            continue
        for port in svc["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            have = [
                p
                for w in matched
                for c in pod_spec(w)["containers"]
                for p in c.get("ports", [])
                if p.get("name") == target or p["containerPort"] == target
            ]
            report.check(bool(have), f"deploy/k8s: {name}: target port {target} is no container's port")
    report.ok(f"deploy/k8s: {len(docs)} resources: selectors, ports, probes, volumes, Secret keys, the shared claim")


def config_text(layout: Layout) -> str | None:
    for _, doc in documents(layout):
        if doc["kind"] == "ConfigMap" and "freshet.toml" in doc.get("data", {}):
            return doc["data"]["freshet.toml"]
    return None


def mounted_files(spec: dict, container: dict) -> set[str]:
    """The paths of the Secret files a container sees (the items of its secret volumes)."""
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    files = set()
    for m in container.get("volumeMounts", []):
        secret = volumes.get(m["name"], {}).get("secret")
        if secret:
            for item in secret.get("items", []):
                files.add(f"{m['mountPath'].rstrip('/')}/{item['path']}")
    return files


def check_key_files(workloads: list[dict], configmaps: dict, report: Report) -> None:
    """Each key file the ConfigMap names for a service is mounted into that service's pods."""
    text = (configmaps.get("freshet-config") or {}).get("data", {}).get("freshet.toml")
    if not report.check(text is not None, "deploy/k8s: no ConfigMap freshet-config with freshet.toml"):
        return
    try:
        cfg = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        report.error(f"deploy/k8s/configmap.yaml: freshet.toml is not TOML: {e}")
        return
    for w in workloads:
        spec = pod_spec(w)
        for c in spec["containers"]:
            section = KEY_SECTIONS.get(c["image"].split(":")[0].rsplit("/", 1)[-1])
            if section is None:
                continue
            files = mounted_files(spec, c)
            for key in cfg.get(section, {}).get("keys", []):
                path = key.get("key_file")
                if path:
                    report.check(
                        path in files,
                        f"deploy/k8s: {w['kind']} {w['metadata']['name']} does not mount {path} "
                        f"([[{section}.keys]] {key.get('name')})",
                    )
