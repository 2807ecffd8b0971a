"""deploy/k8s-stack: the whole stack (the base deploy/k8s with Kafka, Milvus, Prometheus and
Grafana) rendered (kustomize.py; where kubectl is installed, its rendering must be the same) and
checked: the Kubernetes schemas (kubernetes-validate, strict) and what they cannot see: every
namespace, ConfigMap, Secret (deployed or an example), claim, Service and container port a
resource names exists; probes, memory, non-root pods; freshet's [kafka] brokers and [milvus] url
are Services of the stack with those ports; the topics Job makes freshet's topics; the images
are compose's; Prometheus' targets are headless Services with those ports and its rule files are
mounted; Grafana's data source and dashboards are mounted; the copies under monitoring/files
equal their sources; and the NetworkPolicies let each client reach what it needs."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import tomllib
from urllib.parse import urlsplit

import yaml

from . import Layout, Report, kustomize

WHERE = "deploy/k8s-stack"
WORKLOADS = ("Deployment", "StatefulSet", "Job")
# monitoring/files/<copy> and the file of deploy/ it copies
COPIES = {
    "monitoring/files/alerts.yml": "prometheus/alerts.yml",
    "monitoring/files/freshet.json": "grafana/dashboards/freshet.json",
    "monitoring/files/dashboards.yml": "grafana/provisioning/dashboards/freshet.yml",
    "monitoring/files/datasources.yml": "grafana/provisioning/datasources/freshet-prometheus.yml",
}
# workload name in the stack -> compose service whose image it runs
COMPOSE_IMAGES = {
    "kafka": "kafka",
    "kafka-topics": "kafka-topics",
    "etcd": "etcd",
    "minio": "minio",
    "milvus": "milvus",
    "prometheus": "prometheus",
    "grafana": "grafana",
}
# (client workload, its namespace, server workload, its namespace, port): what must be allowed
REACH = [
    ("freshet-pipeline", "freshet", "kafka", "kafka", 9092),
    ("freshet-ingest", "freshet", "kafka", "kafka", 9092),
    ("kafka-topics", "kafka", "kafka", "kafka", 9092),
    ("freshet-pipeline", "freshet", "milvus", "milvus", 19530),
    ("freshet-query", "freshet", "milvus", "milvus", 19530),
    ("milvus", "milvus", "etcd", "milvus", 2379),
    ("milvus", "milvus", "minio", "milvus", 9000),
    ("grafana", "monitoring", "prometheus", "monitoring", 9090),
]


def render(layout: Layout, report: Report) -> list[dict] | None:
    stack = layout.deploy / "k8s-stack"
    try:
        docs = kustomize.render(stack)
    except (OSError, yaml.YAMLError, kustomize.Unsupported) as e:
        report.error(f"{WHERE}: cannot be rendered: {e}")
        return None
    kubectl = shutil.which("kubectl")
    if not kubectl:
        report.warn(f"kubectl not installed: {WHERE} rendered by deploycheck/kustomize.py only")
        return docs
    proc = subprocess.run([kubectl, "kustomize", str(stack)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        report.error(f"kubectl kustomize {WHERE}:\n" + proc.stderr.strip())
        return docs
    theirs = sorted(kustomize.without_hashes([d for d in yaml.safe_load_all(proc.stdout) if d]), key=kustomize.key)
    mine = sorted(docs, key=kustomize.key)
    diff = [kustomize.key(a) for a, b in zip(mine, theirs, strict=False) if a != b]
    if len(mine) != len(theirs) or diff:
        report.error(f"{WHERE}: kubectl kustomize renders it otherwise than deploycheck/kustomize.py: {diff[:3]}")
    else:
        report.ok(f"{WHERE}: kubectl kustomize renders it as deploycheck/kustomize.py does ({len(docs)} resources)")
    return docs


def schema(layout: Layout, tools: dict[str, str], report: Report) -> None:
    docs = render(layout, report)
    if docs is None:
        return
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        yaml.safe_dump_all(docs, f)
        f.flush()
        val = subprocess.run(
            [tools["kubernetes-validate"], "--strict", "--quiet", f.name], capture_output=True, text=True, check=False
        )
    if val.returncode == 0:
        report.ok(f"{WHERE}: the rendering, {len(docs)} resources, valid against the Kubernetes schemas (strict)")
    else:
        report.error(f"{WHERE} against the Kubernetes schemas:\n" + (val.stdout + val.stderr).strip())


def selects(selector: dict, labels: dict) -> bool:
    if not (selector.get("matchLabels") or {}).items() <= labels.items():
        return False
    for e in selector.get("matchExpressions") or []:
        has, val = e["key"] in labels, labels.get(e["key"])
        op = e["operator"]
        if (
            (op == "In" and val not in e["values"])
            or (op == "NotIn" and val in e.get("values", []))
            or (op == "Exists" and not has)
            or (op == "DoesNotExist" and has)
        ):
            return False
    return True


class Stack:
    def __init__(self, docs: list[dict], examples: list[dict]):
        self.docs = docs
        self.by = {kustomize.key(d): d for d in docs}
        self.secrets = {kustomize.key(d): d for d in docs + examples if d["kind"] == "Secret"}
        self.workloads = {
            (d["metadata"]["namespace"], d["metadata"]["name"]): d for d in docs if d["kind"] in WORKLOADS
        }
        self.ns_labels = {
            d["metadata"]["name"]: {
                **d["metadata"].get("labels", {}),
                "kubernetes.io/metadata.name": d["metadata"]["name"],
            }
            for d in docs
            if d["kind"] == "Namespace"
        }

    def get(self, kind: str, ns: str, name: str) -> dict | None:
        return self.by.get((kind, ns, name))

    def of(self, kind: str) -> list[dict]:
        return [d for d in self.docs if d["kind"] == kind]

    def pod_labels(self, w: dict) -> dict:
        return w["spec"]["template"]["metadata"].get("labels", {})

    def service_ports(self, svc: dict) -> set[int]:
        return {p["port"] for p in svc["spec"].get("ports", [])}

    def allowed(self, client: dict, server: dict, port: int) -> bool:
        """Does some NetworkPolicy (or none selecting the server's pods) admit client -> server:port?"""
        sns, cns = server["metadata"]["namespace"], client["metadata"]["namespace"]
        slabels, clabels = self.pod_labels(server), self.pod_labels(client)
        policies = [
            p
            for p in self.of("NetworkPolicy")
            if p["metadata"]["namespace"] == sns
            and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
            and selects(p["spec"]["podSelector"], slabels)
        ]
        if not policies:
            return True
        for p in policies:
            for rule in p["spec"].get("ingress", []):
                ports = [q.get("port") for q in rule.get("ports", [])]
                if ports and port not in ports:
                    continue
                peers = rule.get("from")
                if not peers:
                    return True
                for peer in peers:
                    nsel, psel = peer.get("namespaceSelector"), peer.get("podSelector")
                    ns_ok = selects(nsel, self.ns_labels.get(cns, {})) if nsel is not None else cns == sns
                    if ns_ok and (psel is None or selects(psel, clabels)):
                        return True
        return False


def check(layout: Layout, report: Report) -> None:
    try:
        docs = kustomize.render(layout.deploy / "k8s-stack")
    except (OSError, yaml.YAMLError, kustomize.Unsupported):
        return  # schema() reported it
    examples = [
        d
        for p in sorted([*layout.k8s.glob("*.example.yaml"), *(layout.deploy / "k8s-stack").rglob("*.example.yaml")])
        for d in yaml.safe_load_all(p.read_text())
        if d
    ]
    stack = Stack(docs, examples)
    check_copies(layout, report)
    check_resources(stack, report)
    check_freshet_addresses(stack, report)
    check_images(layout, stack, report)
    check_prometheus(layout, stack, report)
    check_grafana(stack, report)
    for cname, cns, sname, sns, port in REACH:
        client, server = stack.workloads.get((cns, cname)), stack.workloads.get((sns, sname))
        if report.check(client is not None and server is not None, f"{WHERE}: no {cns}/{cname} or {sns}/{sname}"):
            report.check(
                stack.allowed(client, server, port),
                f"{WHERE}: {cns}/{cname} cannot reach {sns}/{sname}:{port} (NetworkPolicy)",
            )
    report.ok(f"{WHERE}: references, addresses, images, scrape targets, NetworkPolicies, copies of deploy/ files")


def check_copies(layout: Layout, report: Report) -> None:
    for copy, source in COPIES.items():
        src, dst = layout.deploy / source, layout.deploy / "k8s-stack" / copy
        if not src.exists():
            report.warn(f"deploy/{source} is not in this checkout: {WHERE}/{copy} not compared")
            continue
        report.check(
            dst.exists() and dst.read_bytes() == src.read_bytes(),
            f"{WHERE}/{copy} differs from deploy/{source}: cp deploy/{source} deploy/k8s-stack/{copy}",
        )


def check_resources(stack: Stack, report: Report) -> None:
    namespaces = set(stack.ns_labels)
    for d in stack.docs:
        ns = d["metadata"].get("namespace")
        if d["kind"] != "Namespace":
            report.check(ns in namespaces, f"{WHERE}: {d['kind']} {d['metadata']['name']}: namespace {ns} is not made")
    for (ns, name), w in stack.workloads.items():
        what = f"{WHERE}: {w['kind']} {ns}/{name}"
        spec = w["spec"]["template"]["spec"]
        if w["kind"] != "Job":
            report.check(
                selects(w["spec"]["selector"], stack.pod_labels(w)), f"{what}: its selector does not match its pods"
            )
        if w["kind"] == "StatefulSet":
            svc = stack.get("Service", ns, w["spec"].get("serviceName", ""))
            report.check(svc is not None, f"{what}: no Service {w['spec'].get('serviceName')} for its pods' names")
        report.check(spec.get("securityContext", {}).get("runAsNonRoot") is True, f"{what}: pods may run as root")
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        claims = {t["metadata"]["name"] for t in w["spec"].get("volumeClaimTemplates", [])}
        for v in volumes.values():
            if "configMap" in v:
                cm = v["configMap"]["name"]
                report.check(stack.get("ConfigMap", ns, cm) is not None, f"{what}: no ConfigMap {ns}/{cm}")
            if "secret" in v:
                report.check(
                    stack.secrets.get(("Secret", ns, v["secret"]["secretName"])) is not None,
                    f"{what}: no Secret {ns}/{v['secret']['secretName']} (nor its example)",
                )
            if "persistentVolumeClaim" in v:
                claim = v["persistentVolumeClaim"]["claimName"]
                made = {
                    f"{t['metadata']['name']}-{s['metadata']['name']}-{i}"
                    for s in stack.of("StatefulSet")
                    if s["metadata"]["namespace"] == ns
                    for t in s["spec"].get("volumeClaimTemplates", [])
                    for i in range(s["spec"].get("replicas", 1))
                }
                report.check(claim in made, f"{what}: claim {claim} is no StatefulSet's claim in {ns}")
        for c in spec["containers"]:
            cw = f"{what} container {c['name']}"
            ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
            for m in c.get("volumeMounts", []):
                report.check(m["name"] in volumes or m["name"] in claims, f"{cw}: no volume {m['name']}")
            for env in c.get("env", []):
                ref = (env.get("valueFrom") or {}).get("secretKeyRef")
                if ref:
                    s = stack.secrets.get(("Secret", ns, ref["name"]))
                    keys = set((s or {}).get("stringData", {})) | set((s or {}).get("data", {}))
                    report.check(ref["key"] in keys, f"{cw}: no Secret {ns}/{ref['name']} with key {ref['key']}")
            csc = c.get("securityContext", {})
            report.check(
                csc.get("allowPrivilegeEscalation") is False and csc.get("capabilities", {}).get("drop") == ["ALL"],
                f"{cw}: may escalate privileges or keeps capabilities",
            )
            res = c.get("resources", {})
            report.check(
                "memory" in res.get("requests", {}) and "memory" in res.get("limits", {}),
                f"{cw}: no memory request and limit",
            )
            if w["kind"] == "Job":
                continue
            for probe in ("readinessProbe", "livenessProbe"):
                p = c.get(probe)
                if not report.check(p is not None, f"{cw}: no {probe}"):
                    continue
                port = (p.get("httpGet") or p.get("tcpSocket") or {}).get("port")
                report.check(
                    port is None or port in ports or port in ports.values(),
                    f"{cw}: {probe} port {port} is not declared",
                )
    for svc in stack.of("Service"):
        ns, name = svc["metadata"]["namespace"], svc["metadata"]["name"]
        sel = svc["spec"].get("selector", {})
        matched = [
            w for (wns, _), w in stack.workloads.items() if wns == ns and sel.items() <= stack.pod_labels(w).items()
        ]
        if not report.check(bool(matched), f"{WHERE}: Service {ns}/{name} selects no workload's pods"):
            continue
        for port in svc["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            have = [
                p
                for w in matched
                for c in w["spec"]["template"]["spec"]["containers"]
                for p in c.get("ports", [])
                if p.get("name") == target or p["containerPort"] == target
            ]
            report.check(bool(have), f"{WHERE}: Service {ns}/{name}: target port {target} is no container's port")


def service_at(stack: Stack, host: str, port: int) -> dict | None:
    """The Service a cluster DNS name <svc>.<ns>[.svc[.cluster.local]] names, if it serves port."""
    parts = host.split(".")
    if len(parts) < 2 or parts[2:] not in ([], ["svc"], ["svc", "cluster", "local"]):
        return None
    svc = stack.get("Service", parts[1], parts[0])
    return svc if svc is not None and port in stack.service_ports(svc) else None


def freshet_config(stack: Stack) -> dict:
    cm = stack.get("ConfigMap", "freshet", "freshet-config") or {}
    return tomllib.loads(cm.get("data", {}).get("freshet.toml", ""))


def check_freshet_addresses(stack: Stack, report: Report) -> None:
    cfg = freshet_config(stack)
    for broker in str(cfg.get("kafka", {}).get("brokers", "")).split(","):
        host, _, port = broker.strip().rpartition(":")
        report.check(
            port.isdigit() and service_at(stack, host, int(port)) is not None,
            f"{WHERE}: freshet's [kafka] brokers {broker!r} is no Service of the stack with that port",
        )
    url = urlsplit(str(cfg.get("milvus", {}).get("url", "")))
    report.check(
        url.hostname is not None and url.port is not None and service_at(stack, url.hostname, url.port) is not None,
        f"{WHERE}: freshet's [milvus] url {url.geturl()!r} is no Service of the stack with that port",
    )
    job = stack.workloads.get(("kafka", "kafka-topics"))
    script = " ".join(
        " ".join(c.get("command", []) + c.get("args", []))
        for c in (job or {}).get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
    )
    kafka = cfg.get("kafka", {})
    for topic, parts in ((kafka.get("topic"), 4), (kafka.get("dlq_topic"), 1)):
        report.check(
            f" {topic}:{parts}" in f" {script}", f"{WHERE}: the kafka-topics Job does not make {topic}:{parts}"
        )


def check_images(layout: Layout, stack: Stack, report: Report) -> None:
    compose = (yaml.safe_load(layout.compose_file.read_text()) or {}).get("services", {})
    for (ns, name), w in stack.workloads.items():
        service = COMPOSE_IMAGES.get(name)
        if service is None:
            continue
        want = compose.get(service, {}).get("image")
        for c in w["spec"]["template"]["spec"]["containers"]:
            report.check(c["image"] == want, f"{WHERE}: {ns}/{name} runs {c['image']}, compose's {service} {want}")


def mounted_configmap_files(stack: Stack, w: dict) -> dict[str, str]:
    """path in the container -> content, for each ConfigMap volume of the workload's containers."""
    ns = w["metadata"]["namespace"]
    spec = w["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    files = {}
    for c in spec["containers"]:
        for m in c.get("volumeMounts", []):
            cm = volumes.get(m["name"], {}).get("configMap")
            data = (stack.get("ConfigMap", ns, cm["name"]) or {}).get("data", {}) if cm else {}
            for k, text in data.items():
                files[f"{m['mountPath'].rstrip('/')}/{k}"] = text
    return files


def check_prometheus(layout: Layout, stack: Stack, report: Report) -> None:
    prom = stack.workloads.get(("monitoring", "prometheus"))
    if not report.check(prom is not None, f"{WHERE}: no StatefulSet monitoring/prometheus"):
        return
    files = mounted_configmap_files(stack, prom)
    args = prom["spec"]["template"]["spec"]["containers"][0].get("args", [])
    conf_path = next((a.split("=", 1)[1] for a in args if a.startswith("--config.file=")), "")
    if not report.check(conf_path in files, f"{WHERE}: Prometheus' --config.file {conf_path} is not mounted"):
        return
    cfg = yaml.safe_load(files[conf_path]) or {}
    for rule in cfg.get("rule_files", []):
        report.check(rule in files, f"{WHERE}: Prometheus' rule file {rule} is not mounted")
    compose_jobs = {
        j["job_name"]
        for j in (yaml.safe_load((layout.compose_dir / "prometheus.yml").read_text()) or {}).get("scrape_configs", [])
    }
    jobs = {j["job_name"]: j for j in cfg.get("scrape_configs", [])}
    report.check(
        set(jobs) == compose_jobs, f"{WHERE}: Prometheus' jobs {sorted(jobs)}, compose's {sorted(compose_jobs)}"
    )
    for name, job in jobs.items():
        targets = [(n, sd["port"]) for sd in job.get("dns_sd_configs", []) for n in sd.get("names", [])] + [
            (t.rpartition(":")[0], int(t.rpartition(":")[2]))
            for sc in job.get("static_configs", [])
            for t in sc.get("targets", [])
        ]
        report.check(bool(targets), f"{WHERE}: Prometheus' job {name} has no target")
        for host, port in targets:
            svc = service_at(stack, host, port)
            if not report.check(svc is not None, f"{WHERE}: Prometheus' job {name}: {host}:{port} names no Service"):
                continue
            if job.get("dns_sd_configs"):
                report.check(
                    svc["spec"].get("clusterIP") == "None",
                    f"{WHERE}: Prometheus' job {name}: {host} is not headless (DNS gives one address, not the pods)",
                )
            ns = svc["metadata"]["namespace"]
            sel = svc["spec"].get("selector", {})
            for (wns, wname), w in stack.workloads.items():
                if wns == ns and sel.items() <= stack.pod_labels(w).items():
                    report.check(
                        stack.allowed(prom, w, port),
                        f"{WHERE}: Prometheus cannot reach {ns}/{wname}:{port} (NetworkPolicy)",
                    )


def check_grafana(stack: Stack, report: Report) -> None:
    graf = stack.workloads.get(("monitoring", "grafana"))
    if not report.check(graf is not None, f"{WHERE}: no StatefulSet monitoring/grafana"):
        return
    files = mounted_configmap_files(stack, graf)
    sources = [f for p, f in files.items() if p.startswith("/etc/grafana/provisioning/datasources/")]
    providers = [f for p, f in files.items() if p.startswith("/etc/grafana/provisioning/dashboards/")]
    report.check(bool(sources) and bool(providers), f"{WHERE}: Grafana's provisioning is not mounted")
    for text in sources:
        for ds in (yaml.safe_load(text) or {}).get("datasources", []):
            url = urlsplit(ds.get("url", ""))
            host = url.hostname or ""
            host = host if "." in host else f"{host}.monitoring"
            report.check(
                url.port is not None and service_at(stack, host, url.port) is not None,
                f"{WHERE}: Grafana's data source {ds.get('url')} is no Service of the stack",
            )
    for text in providers:
        for prov in (yaml.safe_load(text) or {}).get("providers", []):
            path = prov.get("options", {}).get("path", "").rstrip("/") + "/"
            report.check(
                any(p.startswith(path) and p.endswith(".json") for p in files),
                f"{WHERE}: Grafana's dashboard provider reads {path}, where no dashboard is mounted",
            )
