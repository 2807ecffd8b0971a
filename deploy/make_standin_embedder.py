#!/usr/bin/env python3
"""Generate a tiny stand-in embedding model that cannot embed one word, for freshet's tests.

A real model embeds any text; the pipeline must still survive one that fails on a single text
(a NaN from an overflow, a tokenizer quirk). This model goes through exactly the path a real
export takes (fastembed 7.5, ``UserDefinedEmbeddingModel``) and returns a vector with NaN
components for every text that contains the poison word, and ordinary vectors for every other.

Usage:  python3 make_standin_embedder.py OUT_DIR --tokenizer-from MODEL_DIR --poison WORD [--dim N]

MODEL_DIR is an exported model (deploy/export-model.sh) whose tokenizer files are copied, so the
stand-in tokenizes (and freshet chunks) exactly as that model does. WORD must be one token of its
vocabulary. Writes into OUT_DIR (created if missing, files overwritten):

    model.onnx  tokenizer.json  config.json  special_tokens_map.json  tokenizer_config.json
    freshet-model.json

The graph (opset 17): last_hidden_state[b, s, :] = table[input_ids[b, s]] * attention_mask[b, s]
+ 0 * token_type_ids[b, s], with a fixed pseudo-random table whose row for WORD is NaN. With mean
pooling over the attention mask, a text holding WORD gets a NaN vector; any other text a finite
one. Checked against numpy with onnx.reference before it is written (exit 1 on a failed check,
2 on a usage error). Needs numpy and onnx (the freshet venv has both).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

TOKENIZER_FILES = [
    "tokenizer.json",
    "config.json",
    "special_tokens_map.json",
    "tokenizer_config.json",
]


def build(table: np.ndarray) -> onnx.ModelProto:
    dim = table.shape[1]
    ints = lambda name: helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
    out = helper.make_tensor_value_info(
        "last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", dim]
    )
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["rows"], axis=0),
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["token_type_ids"], ["type_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["type_f", "zero"], ["type_zero"]),
        helper.make_node("Add", ["mask_f", "type_zero"], ["weight"]),
        helper.make_node("Unsqueeze", ["weight", "last_axis"], ["weight3"]),
        helper.make_node("Mul", ["rows", "weight3"], ["last_hidden_state"]),
    ]
    graph = helper.make_graph(
        nodes,
        "freshet_standin_embedder",
        [ints("input_ids"), ints("attention_mask"), ints("token_type_ids")],
        [out],
        initializer=[
            numpy_helper.from_array(table, "table"),
            numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero"),
            numpy_helper.from_array(np.array([-1], dtype=np.int64), "last_axis"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out_dir", type=Path)
    p.add_argument("--tokenizer-from", type=Path, required=True)
    p.add_argument("--poison", required=True)
    p.add_argument("--dim", type=int, default=32)
    a = p.parse_args()
    src = a.tokenizer_from
    if not (src / "tokenizer.json").is_file():
        print(f"{src} has no tokenizer.json", file=sys.stderr)
        return 2
    vocab = json.loads((src / "tokenizer.json").read_text())["model"]["vocab"]
    if a.poison not in vocab:
        print(f"{a.poison!r} is not one token of {src}'s vocabulary", file=sys.stderr)
        return 2
    poison = vocab[a.poison]
    rng = np.random.default_rng(20261124)
    table = rng.standard_normal((len(vocab), a.dim)).astype(np.float32)
    table[poison, :] = np.nan
    model = build(table)

    # Check: the graph against numpy, on a batch with and without the poison token.
    ids = np.array([[101, poison, 2000, 102], [101, 2000, 102, 0]], dtype=np.int64)
    mask = (ids != 0).astype(np.int64)
    types = np.zeros_like(ids)
    got = ReferenceEvaluator(model).run(
        None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    )[0]
    want = table[ids] * mask[..., None]
    if not (np.isnan(got[0]).any() and np.isfinite(got[1]).all()):
        print("check failed: NaN only where the poison token is", file=sys.stderr)
        return 1
    if not np.allclose(np.nan_to_num(got), np.nan_to_num(want)):
        print("check failed: the graph differs from numpy", file=sys.stderr)
        return 1

    out = a.out_dir
    out.mkdir(parents=True, exist_ok=True)
    onnx.save(model, out / "model.onnx")
    for name in TOKENIZER_FILES:
        shutil.copyfile(src / name, out / name)
    meta = {
        "model_id": f"freshet/standin-nan-{a.poison}",
        "dim": a.dim,
        "pooling": "mean",
        "normalize": True,
        "max_length": 256,
        "passage_prefix": "",
        "query_prefix": "",
        "source": "deploy/make_standin_embedder.py",
        "inputs": ["input_ids", "attention_mask", "token_type_ids"],
        "output": "last_hidden_state",
    }
    (out / "freshet-model.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"wrote {out}: {len(vocab)} tokens x {a.dim}, NaN for {a.poison!r} (id {poison})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
