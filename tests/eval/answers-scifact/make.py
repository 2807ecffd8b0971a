#!/usr/bin/env python3
"""Writes questions.jsonl of the SciFact answer set from a BEIR SciFact directory.

    python3 tests/eval/answers-scifact/make.py ../shared/datasets/scifact > tests/eval/answers-scifact/questions.jsonl

The claims of the test split, in the order of their numeric ids: the first 40 are answerable
(their expected documents are their judged abstracts, read by `freshet-tools eval-answers`
from the qrels), the next 20 are made unanswerable by removing their judged abstracts from the
index (each such abstract judged for no answerable question). Only ids are written: the text
stays in the BEIR files.
"""
import csv
import json
import sys
from pathlib import Path

ANSWERABLE, UNANSWERABLE = 40, 20

beir = Path(sys.argv[1])
qrels = {}
with open(beir / "qrels" / "test.tsv") as f:
    for row in csv.reader(f, delimiter="\t"):
        if row[0] == "query-id" or int(row[2]) <= 0:
            continue
        qrels.setdefault(row[0], set()).add(row[1])
ids = sorted(qrels, key=int)
answerable = ids[:ANSWERABLE]
kept = set().union(*(qrels[q] for q in answerable))
unanswerable = [q for q in ids[ANSWERABLE:] if not qrels[q] & kept][:UNANSWERABLE]
for q in answerable:
    print(json.dumps({"id": f"scifact-{q}", "query_id": q}))
for q in unanswerable:
    print(json.dumps({"id": f"scifact-{q}-removed", "query_id": q, "answerable": False,
                      "removed_docs": sorted(qrels[q])}))
