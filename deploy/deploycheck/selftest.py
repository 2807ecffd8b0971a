"""--self-test: each deployment file broken on purpose, one way at a time, in a copy of the
repository's deploy files; the validation must fail on every break, naming it."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from . import Layout, Report

# the lines after the query node's state mount in compose.yaml (the pipeline's differ)
QUERY_NEXT = "      - ./freshet.toml:/etc/freshet/freshet.toml:ro\n    depends_on:\n      pipeline"

# (what, file, text, replacement, expected in an error, needs the binaries)
BREAKS = [
    (
        "compose: a key the schema lacks",
        "deploy/compose/compose.yaml",
        "start_period: 300s",
        "start_periodd: 300s",
        "Compose specification's schema",
        False,
    ),
    (
        "compose: depends on a service that is not there",
        "deploy/compose/compose.yaml",
        "depends_on:\n      kafka: {condition: service_healthy}",
        "depends_on:\n      kafak: {condition: service_healthy}",
        "which is not a service",
        False,
    ),
    (
        "compose: a port on every interface",
        "deploy/compose/compose.yaml",
        '"127.0.0.1:8080:8080"',
        '"8080:8080"',
        "beyond the host's loopback",
        False,
    ),
    (
        "compose: a required variable env.example lacks",
        "deploy/compose/env.example",
        "GRAFANA_ADMIN_PASSWORD=\n",
        "",
        "does not list",
        False,
    ),
    (
        "k8s: a field the schema lacks",
        "deploy/k8s/query.yaml",
        "containerPort: 8080",
        "containerPortt: 8080",
        "Kubernetes schemas",
        False,
    ),
    (
        "k8s: a probe on a port the container lacks",
        "deploy/k8s/ingest.yaml",
        "path: /readyz\n              port: http",
        "path: /readyz\n              port: htpp",
        "is not declared",
        False,
    ),
    (
        "k8s: the query pods mount a claim no StatefulSet makes",
        "deploy/k8s/query.yaml",
        "claimName: state-freshet-pipeline-0",
        "claimName: state-freshet-pipeline",
        "no StatefulSet's claim",
        False,
    ),
    (
        "k8s: the query pods mount the index read-only",
        "deploy/k8s/query.yaml",
        "mountPath: /var/lib/freshet\n",
        "mountPath: /var/lib/freshet\n              readOnly: true\n",
        "tantivy's reader cannot lock it",
        False,
    ),
    (
        "compose: the query node mounts the index read-only",
        "deploy/compose/compose.yaml",
        "freshet-state:/var/lib/freshet\n" + QUERY_NEXT,
        "freshet-state:/var/lib/freshet:ro\n" + QUERY_NEXT,
        "tantivy's reader cannot lock it",
        False,
    ),
    (
        "k8s: a Secret key the Secret lacks",
        "deploy/k8s/ingest.yaml",
        "- key: ingest-writer",
        "- key: ingest-writr",
        "the Secret has no key",
        False,
    ),
    (
        "k8s: a key file the config names that the pod does not mount",
        "deploy/k8s/query.yaml",
        "path: query-app",
        "path: app",
        "does not mount /run/secrets/freshet/query-app",
        False,
    ),
    (
        "k8s-stack: a field the schema lacks",
        "deploy/k8s-stack/kafka/kafka.yaml",
        "containerPort: 9093",
        "containerPortt: 9093",
        "deploy/k8s-stack against the Kubernetes schemas",
        False,
    ),
    (
        "k8s-stack: a kustomize feature the offline renderer lacks",
        "deploy/k8s-stack/kustomization.yaml",
        "resources:\n  - ../k8s",
        "commonAnnotations: {owner: me}\nresources:\n  - ../k8s",
        "not rendered here",
        False,
    ),
    (
        "k8s-stack: a Prometheus target that is no Service",
        "deploy/k8s-stack/monitoring/prometheus.yml",
        "freshet-query-scrape.freshet",
        "freshet-querry-scrape.freshet",
        "names no Service",
        False,
    ),
    (
        "k8s-stack: a Prometheus target behind one Service address",
        "deploy/k8s-stack/monitoring/prometheus.yml",
        "freshet-query-scrape.freshet",
        "freshet-query.freshet",
        "is not headless",
        False,
    ),
    (
        "k8s-stack: Prometheus' namespace not let in to scrape the pipeline",
        "deploy/k8s-stack/monitoring/namespace.yaml",
        '    freshet.io/scrape: "true"\n',
        "",
        "Prometheus cannot reach freshet/freshet-pipeline:9464",
        False,
    ),
    (
        "k8s-stack: Kafka's NetworkPolicy shuts freshet out",
        "deploy/k8s-stack/kafka/networkpolicy.yaml",
        "kubernetes.io/metadata.name: freshet",
        "kubernetes.io/metadata.name: freshet-apps",
        "freshet/freshet-pipeline cannot reach kafka/kafka:9092",
        False,
    ),
    (
        "k8s-stack: Milvus on a port freshet's config does not name",
        "deploy/k8s-stack/milvus/milvus.yaml",
        "port: 19530\n      targetPort: grpc",
        "port: 19531\n      targetPort: grpc",
        "freshet's [milvus] url",
        False,
    ),
    (
        "k8s-stack: the topics Job makes the DLQ otherwise",
        "deploy/k8s-stack/kafka/topics.yaml",
        "documents.dlq:1",
        "documents.dlq:2",
        "does not make documents.dlq:1",
        False,
    ),
    (
        "k8s-stack: a Kafka image other than compose's",
        "deploy/k8s-stack/kafka/kafka.yaml",
        "image: apache/kafka:4.1.1",
        "image: apache/kafka:4.1.0",
        "compose's kafka",
        False,
    ),
    (
        "k8s-stack: Grafana's password from a Secret nothing makes",
        "deploy/k8s-stack/monitoring/grafana.yaml",
        "name: grafana-admin",
        "name: grafana-admn",
        "no Secret monitoring/grafana-admn",
        False,
    ),
    (
        "k8s-stack: a dashboard copy that differs from deploy/grafana",
        "deploy/k8s-stack/monitoring/files/freshet.json",
        "{",
        "{ ",
        "differs from deploy/grafana/dashboards/freshet.json",
        False,
    ),
    (
        "Dockerfile: the runtime stage as root",
        "deploy/docker/pipeline.Dockerfile",
        "USER 10001:10001",
        "USER root",
        "runs as root",
        False,
    ),
    (
        "Dockerfile: cd in a RUN (hadolint DL3003)",
        "deploy/docker/ingest.Dockerfile",
        "WORKDIR /src\n",
        "WORKDIR /src\nRUN cd /src && ls\n",
        "hadolint",
        False,
    ),
    (
        "Dockerfile: a model pin that differs from install.sh",
        "deploy/docker/model-requirements.txt",
        "onnx==1.23.2",
        "onnx==1.23.1",
        "model-requirements.txt pins onnx",
        False,
    ),
    (
        "Dockerfile: a runtime stage without zlib1g",
        "deploy/docker/pipeline.Dockerfile",
        "libgcc-s1 libstdc++6 zlib1g \\",
        "libgcc-s1 libstdc++6 \\",
        "which the runtime stage does not install",
        True,
    ),
    (
        "config: a setting the query node refuses",
        "deploy/compose/freshet.toml",
        'listen = "0.0.0.0:8080"',
        'listen = "0.0.0.0:8080"\nmax_k = "many"',
        "did not take it",
        True,
    ),
]

COPIED = (
    "deploy/docker",
    "deploy/compose",
    "deploy/k8s",
    "deploy/k8s-stack",
    "deploy/prometheus",
    "deploy/grafana",
    "deploy/install.sh",
    "deploy/export-model.sh",
    "rust-toolchain.toml",
    ".dockerignore",
)
# what the Dockerfiles copy that no check reads: present as empty stand-ins
STAND_INS = ("model-export",)


def copy(root: Path, dest: Path) -> None:
    for rel in COPIED:
        src = root / rel
        if src.is_dir():
            shutil.copytree(src, dest / rel)
        else:
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    for rel in STAND_INS:
        (dest / rel).mkdir(parents=True, exist_ok=True)


def run(root: Path, tools: dict[str, str], bin_dirs: list[Path], static, with_binaries) -> int:
    baseline = Report()
    with tempfile.TemporaryDirectory(prefix="freshet-selftest-") as d:
        copy(root, Path(d))
        static(Layout(Path(d)), tools, baseline)
    if baseline.errors:
        print("self-test: the unbroken copy fails already:\n" + "\n".join(baseline.errors))
        return 1
    missed = 0
    caught = 0
    for what, rel, old, new, expect, needs_bins in BREAKS:
        with tempfile.TemporaryDirectory(prefix="freshet-selftest-") as d:
            dest = Path(d)
            copy(root, dest)
            path = dest / rel
            text = path.read_text()
            if old not in text:
                print(f"MISSED {what}: {rel} no longer holds {old!r}; update deploycheck/selftest.py")
                missed += 1
                continue
            path.write_text(text.replace(old, new, 1))
            report = Report()
            layout = Layout(dest)
            if needs_bins:
                with_binaries(layout, bin_dirs, True, report)
            else:
                static(layout, tools, report)
            hits = [e for e in report.errors if expect in e]
            if needs_bins and not hits and any("not read by the binaries" in e for e in report.errors):
                print(f"skip   {what}: no binaries here")
                continue
            if hits:
                caught += 1
                print(f"caught {what}: {hits[0].splitlines()[0]}")
            else:
                missed += 1
                print(f"MISSED {what}: errors {report.errors}")
    print(f"self-test: {caught} passed, {missed} failed")
    return 1 if missed else 0
