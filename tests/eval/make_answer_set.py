#!/usr/bin/env python3
"""Writes the questions.jsonl of an answer set from a BEIR directory (its test split).

    python3 tests/eval/make_answer_set.py ../shared/datasets/scifact scifact 40 20 \
        > tests/eval/answers-scifact/questions.jsonl
    python3 tests/eval/make_answer_set.py tests/eval/zh-poetry zh-poetry 30 15 \
        > tests/eval/answers-zh-poetry/questions.jsonl

The judged queries in the order of their ids (numeric ids as numbers): the first ANSWERABLE are
answerable (their expected documents are their judged ones, which `freshet-tools eval-answers`
reads from the qrels); the next UNANSWERABLE whose judged documents are judged for none of those
are made unanswerable by removing their judged documents from the index. Only ids are written:
the text stays in the BEIR files. A pure function of the BEIR files.
"""

import csv
import json
import sys
from pathlib import Path

beir, prefix, answerable_n, unanswerable_n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
qrels = {}
with open(beir / "qrels" / "test.tsv") as f:
    for row in csv.reader(f, delimiter="\t"):
        if row[0] == "query-id" or int(row[2]) <= 0:
            continue
        qrels.setdefault(row[0], set()).add(row[1])


def order(q):
    return (0, int(q), q) if q.isdigit() else (1, 0, q)


ids = sorted(qrels, key=order)
answerable = ids[:answerable_n]
kept = set().union(*(qrels[q] for q in answerable))
unanswerable = [q for q in ids[answerable_n:] if not qrels[q] & kept][:unanswerable_n]
for q in answerable:
    print(json.dumps({"id": f"{prefix}-{q}", "query_id": q}))
for q in unanswerable:
    print(
        json.dumps(
            {"id": f"{prefix}-{q}-removed", "query_id": q, "answerable": False, "removed_docs": sorted(qrels[q])},
            ensure_ascii=False,
        )
    )
