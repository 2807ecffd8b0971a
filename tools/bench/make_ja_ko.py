#!/usr/bin/env python3
"""Build the ja-ko retrieval set (BEIR files) from the passages and questions written for it.

The passages (60 Japanese, 60 Korean, encyclopedia style, each on its own topic) and the questions
(78 per language, each answered by one passage of its language) are written by the project:
``tools/bench/ja_ko_ja.json`` and ``ja_ko_ko.json`` hold them (``passages``: ``id``, ``title``,
``text``; ``queries``: ``id``, ``text``, ``answer`` = the id of the passage that answers it,
``kind``: ``paraphrase``, one per passage, or ``hard``, a second question for 18 passages that
names neither the topic nor the passage's distinctive words).
This script checks them (unique ids, every judged passage exists and is in the question's
language, each passage has one paraphrase question and at most one hard one, every question and
passage in its script) and
writes OUT/corpus.jsonl (``_id``, ``title``, ``text``), OUT/queries.jsonl and OUT/qrels/test.tsv,
then prints the lexical overlap of each
language's questions with their passages: the share of a question's CJK character bigrams that
occur in its passage (a paraphrase scores low; a quote scores 1). The output is a pure function of
the two lists, so rerunning it changes nothing.

Usage:
    python3 tools/bench/make_ja_ko.py [--out tests/eval/ja-ko]

Needs only the Python standard library.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def load(lang: str) -> tuple[list, list]:
    """(passages as (id, title, text), queries as (id, text, answer)) of one language."""
    with (HERE / f"ja_ko_{lang}.json").open(encoding="utf-8") as f:
        d = json.load(f)
    passages = [(p["id"], p["title"], p["text"]) for p in d["passages"]]
    queries = [(q["id"], q["text"], q["answer"], q["kind"]) for q in d["queries"]]
    return passages, queries


def is_kana(c: str) -> bool:
    return 0x3040 <= ord(c) <= 0x30FF


def is_hangul(c: str) -> bool:
    return 0xAC00 <= ord(c) <= 0xD7AF


def is_cjk(c: str) -> bool:
    return is_kana(c) or is_hangul(c) or 0x4E00 <= ord(c) <= 0x9FFF


def bigrams(text: str) -> set[str]:
    out: set[str] = set()
    for a, b in itertools.pairwise(text):
        if is_cjk(a) and is_cjk(b):
            out.add(a + b)
    return out


def check(lang: str, passages: list, queries: list, script) -> None:
    ids = [p[0] for p in passages]
    assert len(ids) == len(set(ids)), f"{lang}: duplicate passage ids"
    qids = [q[0] for q in queries]
    assert len(qids) == len(set(qids)), f"{lang}: duplicate query ids"
    for pid, title, text in passages:
        assert pid.startswith(lang + "-"), pid
        assert any(script(c) for c in text), f"{pid}: no {lang} script in its text"
        assert title and text.count("。") + text.count(". ") + text.count(".") >= 2, pid
    known = set(ids)
    for qid, text, pid, kind in queries:
        assert kind in ("paraphrase", "hard"), f"{qid}: kind {kind}"
        assert qid.startswith(lang + "-q"), qid
        assert pid in known, f"{qid}: judged passage {pid} is not in the {lang} corpus"
        assert any(script(c) for c in text), f"{qid}: no {lang} script in the question"
    for kind in ("paraphrase", "hard"):
        judged = [q[2] for q in queries if q[3] == kind]
        assert len(judged) == len(set(judged)), f"{lang}: a passage has two {kind} questions"
    assert len([q for q in queries if q[3] == "paraphrase"]) == len(passages), f"{lang}: unjudged passage"


def overlap(passages: list, queries: list) -> list[float]:
    by_id = {p[0]: p[1] + p[2] for p in passages}
    out = []
    for _, text, pid, _ in queries:
        q = bigrams(text)
        out.append(len(q & bigrams(by_id[pid])) / len(q) if q else 0.0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=HERE.parent.parent / "tests/eval/ja-ko")
    args = ap.parse_args()
    ja, ko = load("ja"), load("ko")
    check("ja", *ja, is_kana)
    check("ko", *ko, is_hangul)
    out: Path = args.out
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    with (out / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for pid, title, text in ja[0] + ko[0]:
            f.write(json.dumps({"_id": pid, "title": title, "text": text}, ensure_ascii=False) + "\n")
    with (out / "queries.jsonl").open("w", encoding="utf-8") as f:
        for qid, text, _, _ in ja[1] + ko[1]:
            f.write(json.dumps({"_id": qid, "text": text}, ensure_ascii=False) + "\n")
    with (out / "qrels/test.tsv").open("w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for qid, _, pid, _ in ja[1] + ko[1]:
            f.write(f"{qid}\t{pid}\t1\n")
    for lang, (passages, queries) in (("ja", ja), ("ko", ko)):
        for kind in ("paraphrase", "hard"):
            o = overlap(passages, [q for q in queries if q[3] == kind])
            print(
                f"{lang} {kind}: {len(o)} questions over {len(passages)} passages; "
                f"question bigrams found in the answer: median {statistics.median(o):.2f}, "
                f"mean {statistics.mean(o):.2f}, max {max(o):.2f}"
            )
    print(f"wrote {out}/corpus.jsonl, queries.jsonl, qrels/test.tsv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
