#!/usr/bin/env python3
"""Generate a tiny, deterministic stand-in cross-encoder ("reranker") for freshet's tests.

No real reranker weights can be downloaded here, so tests load this generated model through
exactly the same path a real one (ms-marco-MiniLM-L-6-v2, bge-reranker-base, ... exported to
ONNX) takes: fastembed 7.5 ``TextRerank::try_new_from_user_defined(UserDefinedRerankingModel,
RerankInitOptionsUserDefined)``.

Usage:  python3 make_standin_reranker.py OUT_DIR [--no-check]
Needs only ``numpy`` and ``onnx`` (the freshet venv has both). Writes into OUT_DIR (created if
missing, files overwritten):

    model.onnx  tokenizer.json  config.json  special_tokens_map.json  tokenizer_config.json

and then checks the graph against a numpy reference with ``onnx.reference.ReferenceEvaluator``
(and onnxruntime too when it is importable) unless ``--no-check`` is given. Exit 0 on success,
1 on a failed check, 2 on a usage error.

What fastembed 7.5 does with it (src/reranking/impl.rs, src/common.rs):
  * tokenizes every (query, document) as a *pair* with the tokenizer.json below, padding to the
    longest in the batch with ``pad_id = config.json pad_token_id`` and truncating (LongestFirst)
    to ``min(max_length, tokenizer_config.json model_max_length)``;
  * feeds ``input_ids`` and ``attention_mask`` (int64, [batch, sequence]) always, and
    ``token_type_ids`` (int64, [batch, sequence]) only because this graph declares that input;
  * reads the output named ``logits`` (float32) and takes ``logits[:, 0]``, so it must be 2-D:
    here it is [batch, 1]. The score is returned as is (no sigmoid); results are sorted by score
    descending with a stable sort, so ties keep the documents' input order.

SCORE DEFINITION (what tests rely on)
-------------------------------------
Tokenization: the text is lowercased, split by the ``Whitespace`` pre-tokenizer (regex
``\\w+|[^\\w\\s]+``: runs of word characters, runs of punctuation), and each piece is looked up in
the fixed word list ``WORDS`` below (ids 5..34, in that order); anything else -- plurals,
punctuation, numbers, words not in the list -- becomes ``[UNK]`` (id 1). A pair is encoded as
``[CLS] query [SEP] document [SEP]`` with type ids 0 for ``[CLS] query [SEP]`` and 1 for
``document [SEP]``.

    score(query, document) = number of document tokens that are vocabulary words (not [UNK],
                             not a special token) and also occur at least once in the query.

Counted with multiplicity on the document side, presence on the query side. Examples:
    score("apple banana", "apple pie with apple and banana")        = 3.0  (apple, apple, banana)
    score("Apple, please!", "APPLE apple.")                         = 2.0  (case/punctuation ignored)
    score("apple", "apples")                                        = 0.0  (apples is not a word)
    score("quantum physics", "banana cherry")                       = 0.0
    score("kiwi", "kiwi")                                           = 0.0  (kiwi -> [UNK])
Scores are small non-negative integers, exactly representable as f32. Truncation happens before
scoring (only tokens inside max_length count), padding never counts.

Formally, on the graph inputs (ids, mask, type = input_ids, attention_mask, token_type_ids):
    word[i]  = mask[i] == 1 and ids[i] >= FIRST_WORD_ID (5)
    A        = { ids[j] : word[j] and type[j] == 0 }
    logits[b, 0] = sum_i  [word[i] and type[i] == 1 and ids[i] in A]
Implemented as a bag of words: onehot[b, s, v] = (ids[b, s] == v); query_bag = qsel @ onehot,
doc_bag = dsel @ onehot (qsel/dsel: the masks above as float rows), logits = sum_v
(query_bag > 0) * doc_bag. Ops: Greater, Equal, Cast, Mul, Sub, Unsqueeze, MatMul, ReduceSum
(opset 17, IR 8). Memory is O(batch * sequence * vocab), not quadratic in the sequence.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8  # the lowest IR that carries opset 17; loads in any ONNX Runtime >= 1.13
MODEL_MAX_LENGTH = 512

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # ids 0..4
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = range(5)
WORDS = [
    "apple", "banana", "cherry", "grape", "lemon", "mango", "orange", "peach", "pear", "plum",
    "quantum", "physics", "computer", "science", "river", "flood", "water", "rain", "storm", "snow",
    "data", "stream", "query", "search", "index", "vector", "rust", "kafka", "milvus", "freshet",
]  # ids 5..34
FIRST_WORD_ID = len(SPECIAL_TOKENS)
VOCAB = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + WORDS)}
VOCAB_SIZE = len(VOCAB)

SCORE_DOC = (
    "logits[b,0] = number of segment-B (token_type_ids==1) tokens with attention_mask==1 and "
    f"input_id>={FIRST_WORD_ID} whose id also occurs in segment A (token_type_ids==0, "
    f"attention_mask==1, input_id>={FIRST_WORD_ID}); i.e. count of document words (with "
    "multiplicity) that also occur in the query. freshet stand-in reranker, not a trained model."
)


# --------------------------------------------------------------------------------------------
# ONNX graph
# --------------------------------------------------------------------------------------------

def build_model() -> onnx.ModelProto:
    dims = ["batch_size", "sequence_length"]
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, dims),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, dims),
        helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, dims),
    ]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch_size", 1])]
    inits = [
        numpy_helper.from_array(np.array(FIRST_WORD_ID - 1, dtype=np.int64), "last_special_id"),
        numpy_helper.from_array(np.arange(VOCAB_SIZE, dtype=np.int64).reshape(1, 1, VOCAB_SIZE),
                                "vocab_ids"),
        numpy_helper.from_array(np.array(1.0, dtype=np.float32), "one"),
        numpy_helper.from_array(np.array(0.5, dtype=np.float32), "half"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"),
        numpy_helper.from_array(np.array([2], dtype=np.int64), "axis2"),
    ]
    f = TensorProto.FLOAT
    nodes = [
        # per-token selectors, float [B, S]
        helper.make_node("Greater", ["input_ids", "last_special_id"], ["is_word_b"]),
        helper.make_node("Cast", ["is_word_b"], ["is_word"], to=f),
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=f),
        helper.make_node("Cast", ["token_type_ids"], ["type_f"], to=f),
        helper.make_node("Mul", ["mask_f", "is_word"], ["word_sel"]),
        helper.make_node("Mul", ["word_sel", "type_f"], ["doc_sel"]),
        helper.make_node("Sub", ["one", "type_f"], ["not_type"]),
        helper.make_node("Mul", ["word_sel", "not_type"], ["query_sel"]),
        # one-hot of the ids over the vocabulary, float [B, S, V]
        helper.make_node("Unsqueeze", ["input_ids", "axis2"], ["ids_col"]),
        helper.make_node("Equal", ["ids_col", "vocab_ids"], ["onehot_b"]),
        helper.make_node("Cast", ["onehot_b"], ["onehot"], to=f),
        # bags of words, float [B, 1, V]
        helper.make_node("Unsqueeze", ["query_sel", "axis1"], ["query_row"]),
        helper.make_node("Unsqueeze", ["doc_sel", "axis1"], ["doc_row"]),
        helper.make_node("MatMul", ["query_row", "onehot"], ["query_bag"]),
        helper.make_node("MatMul", ["doc_row", "onehot"], ["doc_bag"]),
        helper.make_node("Greater", ["query_bag", "half"], ["in_query_b"]),
        helper.make_node("Cast", ["in_query_b"], ["in_query"], to=f),
        helper.make_node("Mul", ["in_query", "doc_bag"], ["overlap"]),  # [B, 1, V]
        # sum over the vocabulary axis, then drop the middle axis: [B, 1]
        helper.make_node("ReduceSum", ["overlap", "axis2"], ["overlap_sum"], keepdims=0),
        helper.make_node("Identity", ["overlap_sum"], ["logits"]),
    ]
    graph = helper.make_graph(nodes, "freshet_standin_reranker", inputs, outputs, inits)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="freshet deploy/make_standin_reranker.py",
        doc_string=SCORE_DOC,
    )
    model.ir_version = IR_VERSION
    helper.set_model_props(model, {"freshet.standin": "1", "score": SCORE_DOC})
    onnx.checker.check_model(model, full_check=True)
    return model


# --------------------------------------------------------------------------------------------
# tokenizer files
# --------------------------------------------------------------------------------------------

def tokenizer_json() -> dict:
    def special(tok: str) -> dict:
        return {"SpecialToken": {"id": tok, "type_id": 0}}

    def seq(name: str, type_id: int) -> dict:
        return {"Sequence": {"id": name, "type_id": type_id}}

    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": VOCAB[t], "content": t, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for t in SPECIAL_TOKENS
        ],
        "normalizer": {"type": "Lowercase"},
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [special("[CLS]"), seq("A", 0), special("[SEP]")],
            "pair": [
                special("[CLS]"), seq("A", 0), special("[SEP]"),
                seq("B", 1), {"SpecialToken": {"id": "[SEP]", "type_id": 1}},
            ],
            "special_tokens": {
                t: {"id": t, "ids": [VOCAB[t]], "tokens": [t]} for t in ("[CLS]", "[SEP]")
            },
        },
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": VOCAB, "unk_token": "[UNK]"},
    }


def special_tokens_map() -> dict:
    def tok(content: str) -> dict:
        return {"content": content, "lstrip": False, "normalized": False, "rstrip": False,
                "single_word": False}

    return {"cls_token": tok("[CLS]"), "mask_token": tok("[MASK]"), "pad_token": tok("[PAD]"),
            "sep_token": tok("[SEP]"), "unk_token": tok("[UNK]")}


def tokenizer_config() -> dict:
    return {
        "model_max_length": MODEL_MAX_LENGTH,  # fastembed: required, numeric
        "pad_token": "[PAD]",                  # fastembed: required, string (or {"content": ...})
        "cls_token": "[CLS]",
        "sep_token": "[SEP]",
        "unk_token": "[UNK]",
        "mask_token": "[MASK]",
        "do_lower_case": True,
        "clean_up_tokenization_spaces": True,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }


def model_config() -> dict:
    return {
        "_comment": "freshet stand-in reranker generated by deploy/make_standin_reranker.py; " + SCORE_DOC,
        "architectures": ["FreshetStandinCrossEncoder"],
        "model_type": "freshet-standin-reranker",
        "num_labels": 1,
        "id2label": {"0": "LABEL_0"},
        "label2id": {"LABEL_0": 0},
        "pad_token_id": PAD_ID,  # fastembed reads this as the padding id
        "vocab_size": VOCAB_SIZE,
        "max_position_embeddings": MODEL_MAX_LENGTH,
        "type_vocab_size": 2,
    }


# --------------------------------------------------------------------------------------------
# reference implementation (used by the self-check; mirrors the score definition above)
# --------------------------------------------------------------------------------------------

_PIECE = re.compile(r"\w+|[^\w\s]+")


def tokenize(text: str) -> list[int]:
    """Ids of one segment, as the tokenizer.json above produces them (without [CLS]/[SEP])."""
    return [VOCAB.get(p, UNK_ID) for p in _PIECE.findall(text.lower())]


def encode_pairs(query: str, docs: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What fastembed feeds for one batch (no truncation: keep test texts short)."""
    q = tokenize(query)
    rows = []
    for d in docs:
        b = tokenize(d)
        ids = [CLS_ID] + q + [SEP_ID] + b + [SEP_ID]
        types = [0] * (len(q) + 2) + [1] * (len(b) + 1)
        rows.append((ids, types))
    width = max(len(ids) for ids, _ in rows)
    ids_a = np.full((len(rows), width), PAD_ID, dtype=np.int64)
    mask_a = np.zeros((len(rows), width), dtype=np.int64)
    type_a = np.zeros((len(rows), width), dtype=np.int64)  # padding type id is 0
    for r, (ids, types) in enumerate(rows):
        ids_a[r, : len(ids)] = ids
        mask_a[r, : len(ids)] = 1
        type_a[r, : len(ids)] = types
    return ids_a, mask_a, type_a


def reference_logits(ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
    out = np.zeros((ids.shape[0], 1), dtype=np.float32)
    for b in range(ids.shape[0]):
        word = (mask[b] == 1) & (ids[b] >= FIRST_WORD_ID)
        in_query = set(ids[b][word & (types[b] == 0)].tolist())
        out[b, 0] = sum(1 for i in np.nonzero(word & (types[b] == 1))[0] if ids[b, i] in in_query)
    return out


def score(query: str, doc: str) -> float:
    q = {t for t in tokenize(query) if t >= FIRST_WORD_ID}
    return float(sum(1 for t in tokenize(doc) if t >= FIRST_WORD_ID and t in q))


CHECK_CASES = [
    ("apple banana", ["apple pie with apple and banana", "banana", "cherry", ""], [3, 1, 0, 0]),
    ("Apple, please!", ["APPLE apple.", "apples", "Apple!"], [2, 0, 1]),
    ("quantum physics", ["banana cherry", "Quantum physics and quantum computer science", "physics"],
     [0, 3, 1]),
    ("kiwi", ["kiwi", "kiwi kiwi"], [0, 0]),
    ("", ["apple"], [0]),
    ("rust kafka milvus freshet stream", ["freshet streams from kafka into milvus with rust",
                                         "python"], [4, 0]),
]


def check(out_dir: Path) -> bool:
    from onnx.reference import ReferenceEvaluator

    runners = [("onnx.reference", ReferenceEvaluator(str(out_dir / "model.onnx")).run)]
    try:
        import onnxruntime as ort

        sess = ort.InferenceSession(str(out_dir / "model.onnx"), providers=["CPUExecutionProvider"])
        runners.append((f"onnxruntime {ort.__version__}", sess.run))
    except ImportError:
        pass

    ok = True
    for query, docs, expected in CHECK_CASES:
        ids, mask, types = encode_pairs(query, docs)
        ref = reference_logits(ids, mask, types)
        want = np.array(expected, dtype=np.float32).reshape(-1, 1)
        by_text = np.array([score(query, d) for d in docs], dtype=np.float32).reshape(-1, 1)
        if not (np.array_equal(ref, want) and np.array_equal(by_text, want)):
            print(f"FAIL reference {query!r}: {ref.ravel()} / {by_text.ravel()} != {want.ravel()}")
            ok = False
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        for name, run in runners:
            (got,) = run(None, feeds)
            if got.shape != want.shape or got.dtype != np.float32 or not np.array_equal(got, want):
                print(f"FAIL {name} {query!r}: got {got.ravel()} {got.shape} {got.dtype}, "
                      f"want {want.ravel()}")
                ok = False
    print(f"check: {'ok' if ok else 'FAILED'} ({len(CHECK_CASES)} batches; "
          f"{', '.join(n for n, _ in runners)})")
    return ok


def main(argv: list[str]) -> int:
    args = [a for a in argv[1:] if a != "--no-check"]
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: make_standin_reranker.py OUT_DIR [--no-check]", file=sys.stderr)
        return 2
    out_dir = Path(args[0])
    out_dir.mkdir(parents=True, exist_ok=True)

    onnx.save(build_model(), str(out_dir / "model.onnx"))
    files = {
        "tokenizer.json": tokenizer_json(),
        "config.json": model_config(),
        "special_tokens_map.json": special_tokens_map(),
        "tokenizer_config.json": tokenizer_config(),
    }
    for name, content in files.items():
        (out_dir / name).write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {out_dir}: {', '.join(['model.onnx', *files])}")

    if "--no-check" in argv[1:]:
        return 0
    return 0 if check(out_dir) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
