"""A renderer of the kustomize features deploy/k8s and deploy/k8s-stack use, for machines
without kubectl: resources (files and kustomization directories), namespace, labels (metadata
only), images (newName/newTag) and configMapGenerator from files. Anything else in a
kustomization is refused, not ignored. Generated ConfigMaps keep their plain names (kustomize
adds a content hash and rewrites the references to it); where kubectl is installed, k8s_stack
checks that this rendering equals kubectl's with those hashes taken out."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import yaml

KNOWN = {"apiVersion", "kind", "namespace", "labels", "resources", "images", "configMapGenerator"}
CLUSTER_SCOPED = {"Namespace"}


class Unsupported(ValueError):
    """A kustomization uses what this renderer does not implement."""


def render(directory: Path) -> list[dict]:
    kust = yaml.safe_load((directory / "kustomization.yaml").read_text()) or {}
    extra = set(kust) - KNOWN
    if extra:
        raise Unsupported(f"{directory}/kustomization.yaml: {', '.join(sorted(extra))} not rendered here")
    docs: list[dict] = []
    for res in kust.get("resources", []):
        path = (directory / res).resolve()
        if path.is_dir():
            docs.extend(render(path))
        else:
            docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    for gen in kust.get("configMapGenerator", []):
        data = {}
        for spec in gen.get("files", []):
            key, _, rel = spec.rpartition("=")
            data[key or Path(rel).name] = (directory / rel).read_text()
        docs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": gen["name"]}, "data": data})
    for doc in docs:
        meta = doc.setdefault("metadata", {})
        if "namespace" in kust and doc["kind"] not in CLUSTER_SCOPED:
            meta["namespace"] = kust["namespace"]
        for group in kust.get("labels", []):
            meta.setdefault("labels", {}).update(group.get("pairs", {}))
        for c in containers(doc):
            name, _, tag = c["image"].partition(":")
            for img in kust.get("images", []):
                if img["name"] == name:
                    c["image"] = f"{img.get('newName', name)}:{img.get('newTag', tag)}".rstrip(":")
    return docs


def containers(doc: dict) -> list[dict]:
    spec = doc.get("spec", {})
    if doc.get("kind") == "CronJob":
        spec = spec.get("jobTemplate", {}).get("spec", {})
    pod = spec.get("template", {}).get("spec", {})
    return [*pod.get("initContainers", []), *pod.get("containers", [])]


HASH = re.compile(r"-[a-z0-9]{10}$")


def without_hashes(docs: list[dict]) -> list[dict]:
    """kubectl's rendering with the generated ConfigMaps' hash suffixes taken out of their
    names and of every reference to them."""
    generated = {
        d["metadata"]["name"]: HASH.sub("", d["metadata"]["name"])
        for d in docs
        if d["kind"] == "ConfigMap" and HASH.search(d["metadata"]["name"])
    }

    def strip(node):
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items()}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return generated.get(node, node) if isinstance(node, str) else node

    return [strip(copy.deepcopy(d)) for d in docs]


def key(doc: dict) -> tuple[str, str, str]:
    meta = doc.get("metadata", {})
    return (doc.get("kind", ""), meta.get("namespace", ""), meta.get("name", ""))
