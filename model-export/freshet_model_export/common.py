"""What both exporters share apart from the model: the two kinds of failure and their exit
statuses, logging, where freshet keeps its models, and small file helpers."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

# the Hugging Face tokenizer files an export directory holds next to model.onnx
TOKENIZER_FILES = ("tokenizer.json", "config.json", "special_tokens_map.json", "tokenizer_config.json")


class UsageError(Exception):
    """Bad input (missing package, files, arguments): exit status 2."""


class CheckFailed(Exception):
    """A validation failed: exit status 1."""


def log(msg: str) -> None:
    print(f"[export-model] {msg}", file=sys.stderr, flush=True)


def freshet_home() -> Path:
    return Path(os.environ.get("FRESHET_HOME") or Path.home() / ".freshet")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")
