"""The BERT encoder both models are: its ONNX graph, built node by node from a dict of weights
under Hugging Face ``BertModel`` names, and a numpy float64 forward pass of the same weights that
the exports are validated against; with the mean pooling and L2 normalisation that fastembed
applies to the graph's output, and onnxruntime helpers.

The graph (opset 17): inputs ``input_ids``, ``attention_mask``, ``token_type_ids`` (int64,
[batch, sequence]), output ``last_hidden_state`` (float32, [batch, sequence, hidden]). Pooling
and normalisation are left to the consumer, as sentence-transformers' Pooling + Normalize
modules do.
"""

from __future__ import annotations

import math
from pathlib import Path

OPSET = 17
MASK_NEG = -10000.0  # additive attention mask value, as in the transformers BERT of this model's era


def build_onnx(w: dict, cfg: dict, *, doc_string: str, producer_version: int):
    """The encoder graph of the weights `w` (BertModel names) with the hyper-parameters `cfg`
    (a Hugging Face BERT config.json); `doc_string` says what it is and where it came from."""
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
                              producer_name="freshet-export-model", producer_version=str(producer_version))
    model.ir_version = 8  # onnxruntime accepts IR 8 for opset 17 everywhere
    model.doc_string = doc_string
    onnx.checker.check_model(model)
    return model


def pad_batch(seqs):
    """Token id sequences -> (input_ids, attention_mask, token_type_ids), padded with id 0 to the
    longest."""
    import numpy as np

    n = max(len(s) for s in seqs)
    ids = np.zeros((len(seqs), n), dtype=np.int64)
    mask = np.zeros((len(seqs), n), dtype=np.int64)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = s
        mask[i, : len(s)] = 1
    return ids, mask, np.zeros_like(ids)


def reference_forward(w, cfg, ids, mask, types):
    """The encoder in numpy float64: last_hidden_state [batch, sequence, hidden]."""
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
    """Mean over the attention mask, then L2 normalisation: the sentence embedding."""
    import numpy as np

    m = mask[..., None].astype(hidden.dtype)
    v = (hidden * m).sum(1) / np.maximum(m.sum(1), 1)
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def ort_session(model_path: Path, threads: int = 0):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads:
        so.intra_op_num_threads = threads
    return ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])


def run_ort(sess, ids, mask, types):
    """last_hidden_state from an onnxruntime session (token_type_ids only if the graph takes it)."""
    names = {i.name for i in sess.get_inputs()}
    feed = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in names:
        feed["token_type_ids"] = types
    return sess.run(["last_hidden_state"], feed)[0]
