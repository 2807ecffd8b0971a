#!/usr/bin/env python3
"""Embedding speed of freshet's ONNX models, and how closely a quantized model's vectors follow
its float model's, measured with Python onnxruntime (not through freshet or fastembed).

Speed: every model gets the same two inputs, cut from real text with its own tokenizer and
prefix (freshet-model.json's query/passage prefix): a 20-token query (batch of 1) and a batch of
8 passages of 128 tokens each (SciFact abstracts, no padding), both counting the special tokens.
Each model runs in its own session with ``intra_op_num_threads`` = each of ``--threads``,
sequential execution, onnxruntime's default graph optimisations. The measurements are
interleaved (one query and one batch per model, model after model, ``--repeat`` rounds, after
``--warmup`` rounds) so that the machine's load falls on all models alike; the table gives the
median and the interquartile range of the wall times of ``session.run``.

Agreement (``--compare QUANT=FLOAT``, repeatable): both models embed the same texts the way the
pipeline and the query node do (mean pooling over the attention mask, L2 normalisation, the
model's prefixes, truncation to its max_length): passages in batches of ``--batch-size`` padded
to their longest text (freshet's ``[embedding] batch_size`` default is 64), queries one at a
time; per corpus it reports the mean, 1st percentile and minimum cosine of QUANT's vector to
FLOAT's. Corpora: SciFact (``--scifact DIR``: the queries of its qrels/test.tsv and the first
``--scifact-docs`` abstracts, title and text) and a Chinese corpus in the same BEIR layout
(``--zh DIR``: its queries.jsonl and the first ``--zh-docs`` documents of corpus.jsonl).

Run it with the freshet venv (numpy, onnxruntime, tokenizers). The commands behind
docs/benchmarks.md, "Embedding models: speed and int8 agreement" (SciFact at
../shared/datasets/scifact from the main checkout; the zh-poetry set at tests/eval/zh-poetry):

    nice -n 19 ~/.freshet/venv/bin/python tools/bench/embed_speed.py \\
        --model e5=~/.freshet/models/multilingual-e5-small \\
        --model e5-int8=~/.freshet/models/multilingual-e5-small-int8 \\
        --model minilm-int8=~/.freshet/models/all-MiniLM-L6-v2-int8 \\
        --threads 1,2 --warmup 3 --repeat 30 --scifact ../shared/datasets/scifact

and the same with ``--compare e5-int8=e5 --scifact-docs 1000 --zh tests/eval/zh-poetry
--zh-docs 500 --json /tmp/embed_speed.json`` for the agreement figures (about 40 minutes on two
busy vCPUs: the float model embeds 1,000 abstracts of up to 512 tokens).

Prints markdown tables on stdout and progress on stderr; ``--json FILE`` also writes the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

QUERY_TOKENS = 20
BATCH = 8
BATCH_TOKENS = 128


def log(msg: str) -> None:
    print(f"[embed_speed] {msg}", file=sys.stderr, flush=True)


class Model:
    """An exported model directory: its session for `threads` threads, tokenizer and settings."""

    def __init__(self, name: str, d: Path, threads: int):
        self.name, self.dir = name, d
        self.meta = json.loads((d / "freshet-model.json").read_text())
        tc = json.loads((d / "tokenizer_config.json").read_text())
        self.max_length = min(int(self.meta.get("max_length", 512)), int(tc.get("model_max_length", 512)))
        self.tok = Tokenizer.from_file(str(d / "tokenizer.json"))
        self.tok.no_padding()
        self.tok.no_truncation()
        self.pad_id = self.tok.token_to_id("<pad>") if self.tok.token_to_id("<pad>") is not None else 0
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self.sess = ort.InferenceSession(str(d / "model.onnx"), so, providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.sess.get_inputs()}

    def ids(self, text: str, query: bool, length: int | None = None) -> list[int]:
        """Token ids of prefix + text with the special tokens, cut to `length` (default
        max_length) keeping the closing special token; exactly `length` or an error if asked."""
        prefix = self.meta.get("query_prefix" if query else "passage_prefix", "")
        ids = self.tok.encode(prefix + text).ids
        limit = length or self.max_length
        if len(ids) > limit:
            ids = ids[: limit - 1] + ids[-1:]
        if length is not None and len(ids) != length:
            raise ValueError(f"{self.name}: {text[:40]!r} has only {len(ids)} tokens, {length} needed")
        return ids

    def run(self, seqs: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        width = max(len(s) for s in seqs)
        ids = np.full((len(seqs), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(seqs), width), dtype=np.int64)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = s
            mask[i, : len(s)] = 1
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        return self.sess.run(None, feed)[0], mask

    def embed(self, seqs: list[list[int]]) -> np.ndarray:
        hidden, mask = self.run(seqs)
        m = mask[..., None].astype(np.float64)
        v = (hidden.astype(np.float64) * m).sum(1) / m.sum(1)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def doc_text(d: dict) -> str:
    return f"{d.get('title', '')}\n{d['text']}".strip()


def scifact(root: Path, n_docs: int) -> tuple[list[str], list[str]]:
    test = {line.split("\t")[0] for line in (root / "qrels" / "test.tsv").read_text().splitlines()[1:] if line}
    queries = [q["text"] for q in read_jsonl(root / "queries.jsonl") if q["_id"] in test]
    docs = [doc_text(d) for d in read_jsonl(root / "corpus.jsonl")[:n_docs]]
    return queries, docs


def zh(root: Path, n_docs: int) -> tuple[list[str], list[str]]:
    return ([q["text"] for q in read_jsonl(root / "queries.jsonl")],
            [doc_text(d) for d in read_jsonl(root / "corpus.jsonl")[:n_docs]])


def speed_inputs(m: Model, queries: list[str], docs: list[str]) -> tuple[list[list[int]], list[list[int]]]:
    """The first query with at least 20 tokens, and the first 8 passages with at least 128."""
    query = next(m.ids(q, True, QUERY_TOKENS) for q in queries if len(m.ids(q, True)) >= QUERY_TOKENS)
    batch = [m.ids(d, False, BATCH_TOKENS) for d in docs if len(m.ids(d, False)) >= BATCH_TOKENS][:BATCH]
    if len(batch) < BATCH:
        raise SystemExit(f"fewer than {BATCH} passages of {BATCH_TOKENS} tokens")
    return [query], batch


def quartiles(xs: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], statistics.median(xs), q[2]


def measure_speed(specs: list[tuple[str, Path]], threads: int, warmup: int, repeat: int,
                  queries: list[str], docs: list[str]) -> dict:
    models = [Model(name, d, threads) for name, d in specs]
    inputs = {m.name: speed_inputs(m, queries, docs) for m in models}
    times: dict = {(m.name, kind): [] for m in models for kind in ("query", "batch")}
    for r in range(warmup + repeat):
        for m in models:
            for kind, seqs in zip(("query", "batch"), inputs[m.name], strict=True):
                t0 = time.perf_counter()
                m.run(seqs)
                dt = (time.perf_counter() - t0) * 1000
                if r >= warmup:
                    times[(m.name, kind)].append(dt)
    return {f"{name}/{kind}": dict(zip(("p25_ms", "median_ms", "p75_ms"), quartiles(ts), strict=True),
                                   runs=len(ts))
            for (name, kind), ts in times.items()}


def embed_all(m: Model, texts: list[str], query: bool, batch_size: int) -> np.ndarray:
    seqs = [m.ids(t, query) for t in texts]
    step = 1 if query else batch_size
    return np.vstack([m.embed(seqs[i : i + step]) for i in range(0, len(seqs), step)])


def agreement(quant: Model, flt: Model, corpora: dict, batch_size: int) -> dict:
    out = {}
    for cname, (queries, docs) in corpora.items():
        for kind, texts in (("queries", queries), ("passages", docs)):
            t0 = time.time()
            a = embed_all(quant, texts, kind == "queries", batch_size)
            b = embed_all(flt, texts, kind == "queries", batch_size)
            cos = (a * b).sum(1)
            out[f"{cname}/{kind}"] = {"n": len(texts), "mean": float(cos.mean()),
                                      "p1": float(np.percentile(cos, 1)), "min": float(cos.min())}
            log(f"{quant.name} vs {flt.name}, {cname} {kind}: {len(texts)} texts, mean cosine "
                f"{cos.mean():.4f}, min {cos.min():.4f} ({time.time() - t0:.0f}s)")
    return out


def save(path: Path | None, result: dict) -> None:
    """Writes the figures so far (after each stage, so that a long run leaves what it measured)."""
    if path is not None:
        path.write_text(json.dumps(result, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", required=True, metavar="NAME=DIR",
                    help="an exported model directory (model.onnx, tokenizer.json, freshet-model.json)")
    ap.add_argument("--threads", default="1,2", help="intra-op thread counts to measure (default 1,2)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=40, help="timed rounds per thread count (default 40)")
    ap.add_argument("--compare", action="append", default=[], metavar="QUANT=FLOAT",
                    help="cosine of model QUANT's vectors to model FLOAT's (names from --model)")
    ap.add_argument("--scifact", type=Path, required=True, help="the BEIR SciFact directory")
    ap.add_argument("--scifact-docs", type=int, default=1000)
    ap.add_argument("--zh", type=Path, help="a Chinese corpus in BEIR layout (queries.jsonl, corpus.jsonl)")
    ap.add_argument("--zh-docs", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=64, help="passages per batch for --compare (default 64)")
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    args = ap.parse_args(argv)

    specs = []
    for spec in args.model:
        name, sep, d = spec.partition("=")
        if not sep or not name:
            ap.error(f"--model {spec!r}: expected NAME=DIR")
        specs.append((name, Path(os.path.expanduser(d))))
    names = {n for n, _ in specs}
    pairs = [tuple(c.split("=", 1)) for c in args.compare]
    for p in pairs:
        if len(p) != 2 or not set(p) <= names:
            ap.error(f"--compare {'='.join(p)}: both names must be given with --model")
    threads = [int(t) for t in args.threads.split(",")]

    sf_queries, sf_docs = scifact(args.scifact, args.scifact_docs)
    corpora = {"scifact": (sf_queries, sf_docs)}
    if args.zh:
        corpora["zh"] = zh(args.zh, args.zh_docs)
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "onnxruntime": ort.__version__,
              "cpus": os.cpu_count(), "load_before": os.getloadavg(), "speed": {}, "agreement": {}}
    for t in threads:
        log(f"speed, {t} thread(s): {args.warmup} + {args.repeat} rounds")
        result["speed"][t] = measure_speed(specs, t, args.warmup, args.repeat, sf_queries, sf_docs)
        save(args.json, result)
    result["load_after_speed"] = os.getloadavg()
    for q, f in pairs:
        dq, df = dict(specs)[q], dict(specs)[f]
        result["agreement"][f"{q}={f}"] = agreement(Model(q, dq, 2), Model(f, df, 2), corpora, args.batch_size)
        save(args.json, result)
    result["load_after"] = os.getloadavg()

    print(f"onnxruntime {ort.__version__}, {os.cpu_count()} CPUs, load average before "
          f"{result['load_before'][0]:.1f}, after {result['load_after'][0]:.1f}\n")
    print(f"| model | threads | {QUERY_TOKENS}-token query, median (IQR) | {BATCH} × {BATCH_TOKENS} tokens, "
          "median (IQR) |\n|---|---|---|---|")
    for t in threads:
        for name, _ in specs:
            q, b = result["speed"][t][f"{name}/query"], result["speed"][t][f"{name}/batch"]
            print(f"| {name} | {t} | {q['median_ms']:.1f} ms ({q['p25_ms']:.1f}–{q['p75_ms']:.1f}) | "
                  f"{b['median_ms']:.0f} ms ({b['p25_ms']:.0f}–{b['p75_ms']:.0f}) |")
    for pair, rows in result["agreement"].items():
        print(f"\n{pair.replace('=', ' vs ')}: cosine\n\n"
              "| texts | n | mean | 1st percentile | min |\n|---|---|---|---|---|")
        for k, r in rows.items():
            print(f"| {k} | {r['n']} | {r['mean']:.4f} | {r['p1']:.4f} | {r['min']:.4f} |")
    save(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
