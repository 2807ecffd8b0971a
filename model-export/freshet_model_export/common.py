"""What both exporters share apart from the model: the two kinds of failure and their exit
statuses, logging, where freshet keeps its models, small file helpers, and the int8 quantization
of an encoder graph built by ``bert.build_onnx``."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

# the Hugging Face tokenizer files an export directory holds next to model.onnx
TOKENIZER_FILES = ("tokenizer.json", "config.json", "special_tokens_map.json", "tokenizer_config.json")
# --quantize: "none" (the float32 export) or "int8" (quantize_int8); freshet-model.json records
# the latter as "quantization": "int8"
QUANTIZATIONS = ("none", "int8")


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


def quantize_int8(fp32: Path, out: Path) -> None:
    """onnxruntime's dynamic int8 quantization of the dense layers of a ``bert.build_onnx`` graph
    (per output channel). The attention's score and context products (the nodes ``l<i>/scores``
    and ``l<i>/ctx``) multiply two activations and stay in float: quantizing them too cost cosine
    on all-MiniLM-L6-v2 (0.944 mean on SciFact with per-tensor weights, 0.995 per channel without
    them)."""
    import logging

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    logging.getLogger().setLevel(logging.ERROR)  # its advice to pre-process applies to static quantization

    graph = onnx.load(str(fp32)).graph
    attention = [n.name for n in graph.node
                 if n.op_type == "MatMul" and n.name.endswith(("/scores", "/ctx"))]
    if not attention:
        raise CheckFailed("no attention MatMul nodes found to keep in float (graph layout changed?)")
    quantize_dynamic(str(fp32), str(out), weight_type=QuantType.QInt8, per_channel=True,
                     op_types_to_quantize=["MatMul"], nodes_to_exclude=attention)


def save_model(model, path: Path, quantize: str) -> None:
    """Writes an onnx ModelProto to `path`, as it is (``quantize`` "none") or through
    ``quantize_int8`` ("int8"; the float32 model passes through a sibling file, removed after)."""
    import onnx

    if quantize == "none":
        onnx.save_model(model, str(path))
    elif quantize == "int8":
        fp32 = path.with_name(path.stem + "-fp32.onnx")
        onnx.save_model(model, str(fp32))
        log("quantizing the dense layers to int8 (dynamic, per channel)")
        try:
            quantize_int8(fp32, path)
        finally:
            fp32.unlink(missing_ok=True)
    else:
        raise UsageError(f"unknown quantization {quantize!r} (one of {', '.join(QUANTIZATIONS)})")
