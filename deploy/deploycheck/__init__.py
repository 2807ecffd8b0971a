"""deploy/validate-deploy.sh: offline checks of freshet's container and cluster deployment.

What can be checked without a container engine or a cluster: the Dockerfiles (hadolint, the
files they copy, the toolchain and the pins they name, and a mirror of their runtime stage: the
shared libraries the real binaries and the ONNX Runtime need, each provided by a package the
runtime stage installs), the compose file (the Compose specification's JSON schema and its
references: services, volumes, files, ports, healthchecks, required variables), the Kubernetes
manifests (the Kubernetes schemas with kubernetes-validate, the kustomization, and what the
schemas cannot see: selectors, named ports, volumes, the Secret's keys, the shared claim), the
whole-stack kustomization (rendered, its references, freshet's addresses, the scrape targets,
the NetworkPolicies, the copies of the monitoring files) and
the config files (the real binaries started on each, until they have read and checked it).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path


@dataclasses.dataclass
class Report:
    """Errors fail the validation; warnings and skips are printed and do not."""

    errors: list[str] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)
    passed: list[str] = dataclasses.field(default_factory=list)

    def error(self, what: str) -> None:
        self.errors.append(what)

    def warn(self, what: str) -> None:
        self.warnings.append(what)

    def ok(self, what: str) -> None:
        self.passed.append(what)

    def check(self, cond: bool, what: str) -> bool:
        if not cond:
            self.error(what)
        return cond


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where the deployment files are, relative to a repository root."""

    root: Path

    @property
    def deploy(self) -> Path:
        return self.root / "deploy"

    @property
    def docker(self) -> Path:
        return self.deploy / "docker"

    @property
    def compose_dir(self) -> Path:
        return self.deploy / "compose"

    @property
    def compose_file(self) -> Path:
        return self.compose_dir / "compose.yaml"

    @property
    def k8s(self) -> Path:
        return self.deploy / "k8s"


# Each image: its Dockerfile, the binary it ships and the port its HEALTHCHECK asks.
IMAGES = {
    "pipeline": ("pipeline.Dockerfile", "freshet", 9464),
    "query": ("query.Dockerfile", "freshet-query", 8080),
    "ingest": ("ingest.Dockerfile", "freshet-ingest", 8090),
}
