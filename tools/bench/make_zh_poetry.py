#!/usr/bin/env python3
"""Build the zh-poetry retrieval set (BEIR files) from the npm package ``chinese-poetry`` 2.0.1.

The corpus is a fixed selection of the package's collections, each kept in the script the package
ships it in (see COLLECTIONS). The queries and their judgements are hand-written in
``tools/bench/zh_poetry_queries.json``; each judged poem is named there by collection, author and
title (plus a line of the poem where the title alone is ambiguous) and resolved here to a corpus
id. A poem that is not found, or found more than once, stops the script.

Usage:
    npm pack chinese-poetry@2.0.1 && tar xzf chinese-poetry-2.0.1.tgz   # in a temp dir
    python3 tools/bench/make_zh_poetry.py --package /tmp/x/package [--out tests/eval/zh-poetry]
        [--queries tools/bench/zh_poetry_queries.json] [--per-query]

Writes OUT/corpus.jsonl (``_id``, ``title`` = 《title》author, ``text`` = the poem, one line per
line of the source), OUT/queries.jsonl and OUT/qrels/test.tsv, and prints the corpus make-up and
the lexical overlap of the queries: for each query, the share of its Han characters that occur in
its best-matching relevant document (title and text). The output is a pure function of the
package and the queries file (no randomness, no clock), so rerunning it changes nothing.

Needs only the Python standard library.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

PACKAGE_VERSION = "2.0.1"

# Annotations inside poem lines: "(顰 一作：蹙)", "（名成 一作：名高）", and some left unclosed.
NOTE = re.compile(r"\s*[(（][^)）]*(?:[)）]|$)")
DYNASTY = re.compile(r"^[(（][^)）]*[)）]")
CLAUSE_END = re.compile(r"[，。、？！；：,.?!;:]")
HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]")
PUNCT_SPACE = re.compile(r"[\W_]+")


@dataclass
class Poem:
    collection: str
    index: int  # position in the collection's own order (stable ids)
    title: str  # the title as the package gives it (for ci: the tune name)
    author: str
    lines: list[str]
    display_title: str = ""

    @property
    def id(self) -> str:
        return f"{self.collection}-{self.index:04d}"

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def clean_lines(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        line = NOTE.sub("", line).strip()
        if line:
            out.append(line)
    return out


def first_clause(lines: list[str]) -> str:
    return CLAUSE_END.split(lines[0], maxsplit=1)[0].strip() if lines else ""


def ci_title(tune: str, lines: list[str]) -> str:
    """A ci is named by its tune, which many share; the usual name adds its first phrase."""
    return f"{tune}·{first_clause(lines)}"


def load(path: Path):
    with path.open(encoding="utf-8") as f:
        return json.load(f)


def numbered(files: list[Path]) -> list[Path]:
    """ci.song.0.json, ci.song.1000.json, ... in numeric order; other names (2019y) after."""

    def key(p: Path):
        n = p.stem.rsplit(".", 1)[-1]
        return (0, int(n), "") if n.isdigit() else (1, 0, n)

    return sorted(files, key=key)


def tang300(dist: Path):
    data = load(dist / "mengxue/tangshisanbaishou.json")
    for group in data["content"]:
        for p in group["content"]:
            yield p["chapter"], p["author"], p["paragraphs"]


def qianjiashi(dist: Path):
    data = load(dist / "mengxue/qianjiashi.json")
    for group in data["content"]:
        for p in group["content"]:
            author = DYNASTY.sub("", p["author"]).strip()
            if all(isinstance(x, str) for x in p["paragraphs"]):
                yield p["chapter"], author, p["paragraphs"]
                continue
            # a set of poems under one title: each its own document, 曲江對酒·其一 ...
            for part in p["paragraphs"]:
                yield f"{p['chapter']}·{part['subchapter']}", author, part["paragraphs"]


def songci300(dist: Path):
    for p in load(dist / "songci/宋词三百首.json"):
        yield p["rhythmic"], p["author"], p["paragraphs"]


SONGCI_AUTHORS = ("苏轼", "李清照", "陆游", "岳飞")


def songci_authors(dist: Path):
    for f in numbered(list((dist / "songci").glob("ci.song.*.json"))):
        for p in load(f):
            if p["author"] in SONGCI_AUTHORS:
                yield p["rhythmic"], p["author"], p["paragraphs"]


def nantang(dist: Path):
    for p in load(dist / "wudaishici/nantang/poetrys.json"):
        yield p["rhythmic"], p["author"], p["paragraphs"]


def huajianji(dist: Path):
    files = sorted((dist / "wudaishici/huajianji").glob("huajianji-*-juan.json"))
    # juan 1..9 then x (the tenth)
    files.sort(key=lambda f: (f.stem.split("-")[1] == "x", f.stem))
    for f in files:
        for p in load(f):
            yield p["title"], p["author"], p["paragraphs"]


def nalan(dist: Path):
    for p in load(dist / "nalanxingde/纳兰性德诗集.json"):
        yield p["title"], p["author"], p["para"]


def shijing(dist: Path):
    for p in load(dist / "shijing/shijing.json"):
        yield p["title"], f"诗经·{p['chapter']}·{p['section']}", p["content"]


def chuci(dist: Path):
    for p in load(dist / "chuci/chuci.json"):
        title = p["title"] if p["section"] == p["title"] else f"{p['section']}·{p['title']}"
        yield title, p["author"], p["content"]


def caocao(dist: Path):
    for p in load(dist / "caocaoshiji/caocao.json"):
        yield p["title"], "曹操", p["paragraphs"]


@dataclass(frozen=True)
class Collection:
    key: str
    name: str
    source: str  # path in the package
    script: str  # traditional / simplified, as the package ships it
    loader: object
    is_ci: bool = False  # titled by tune + first phrase
    dedupe_against: tuple[str, ...] = ()  # drop poems that repeat one of these collections


COLLECTIONS = [
    Collection("tang300", "唐诗三百首", "dist/mengxue/tangshisanbaishou.json", "traditional", tang300),
    Collection(
        "qianjia", "千家诗", "dist/mengxue/qianjiashi.json", "traditional", qianjiashi, dedupe_against=("tang300",)
    ),
    Collection("songci300", "宋词三百首", "dist/songci/宋词三百首.json", "simplified", songci300, is_ci=True),
    Collection(
        "songci",
        "全宋词 (" + "、".join(SONGCI_AUTHORS) + ")",
        "dist/songci/ci.song.*.json",
        "simplified",
        songci_authors,
        is_ci=True,
        dedupe_against=("songci300",),
    ),
    Collection("nantang", "南唐二主词", "dist/wudaishici/nantang/poetrys.json", "simplified", nantang, is_ci=True),
    Collection("huajian", "花间集", "dist/wudaishici/huajianji/*.json", "simplified", huajianji),
    Collection("nalan", "纳兰性德诗集", "dist/nalanxingde/纳兰性德诗集.json", "simplified", nalan),
    Collection("shijing", "诗经", "dist/shijing/shijing.json", "simplified", shijing),
    Collection("chuci", "楚辞", "dist/chuci/chuci.json", "simplified", chuci),
    Collection("caocao", "曹操诗集", "dist/caocaoshiji/caocao.json", "simplified", caocao),
]


def bigrams(text: str) -> set[str]:
    s = PUNCT_SPACE.sub("", text)
    return {s[i : i + 2] for i in range(len(s) - 1)}


def near_duplicate(a: set[str], b: set[str]) -> bool:
    """The same poem twice (textual variants allowed): most bigrams of the longer one shared. A
    fragment that quotes a longer poem is not its duplicate."""
    if not a or not b:
        return False
    return len(a & b) / max(len(a), len(b)) >= 0.6


def build_corpus(dist: Path) -> tuple[list[Poem], dict[str, dict]]:
    poems: list[Poem] = []
    by_collection: dict[str, list[Poem]] = {}
    stats: dict[str, dict] = {}
    for c in COLLECTIONS:
        kept: list[Poem] = []
        seen: set[str] = set()
        dropped_dupes = dropped_empty = 0  # repeats within the collection or of dedupe_against
        against = [(p, bigrams(p.text)) for k in c.dedupe_against for p in by_collection[k]]
        for i, (title, author, lines) in enumerate(c.loader(dist)):
            lines = clean_lines(lines)
            if not lines:
                dropped_empty += 1
                continue
            p = Poem(c.key, i, title.strip(), author.strip(), lines)
            p.display_title = ci_title(p.title, lines) if c.is_ci else p.title
            plain = PUNCT_SPACE.sub("", p.text)
            grams = bigrams(p.text)
            if plain in seen or any(near_duplicate(grams, g) for _, g in against):
                dropped_dupes += 1
                continue
            seen.add(plain)
            kept.append(p)
        by_collection[c.key] = kept
        poems.extend(kept)
        stats[c.key] = {
            "name": c.name,
            "script": c.script,
            "kept": len(kept),
            "duplicates": dropped_dupes,
            "empty": dropped_empty,
        }
    return poems, stats


def resolve(ref: dict, poems: list[Poem], where: str) -> Poem:
    missing = {"collection", "author", "title"} - ref.keys()
    if missing:
        sys.exit(f"{where}: a judged poem needs {sorted(missing)}")
    hits = [
        p
        for p in poems
        if p.collection == ref["collection"]
        and p.author == ref["author"]
        and ref["title"] in (p.title, p.display_title)
        and ref.get("line", "") in p.text
    ]
    if len(hits) != 1:
        what = "not found" if not hits else f"ambiguous ({', '.join(f'{p.id} {p.display_title}' for p in hits)})"
        sys.exit(f"{where}: {ref} {what}; add or fix 'line' (a piece of the poem's text) or the title")
    return hits[0]


def han(text: str) -> list[str]:
    return HAN.findall(text)


def overlap(query: str, poem: Poem) -> float:
    chars = han(query)
    if not chars:
        return 0.0
    doc = set(han(poem.display_title + poem.author + poem.text))
    return sum(c in doc for c in chars) / len(chars)


def main() -> int:
    here = Path(__file__).resolve()
    root = here.parents[2]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--package", type=Path, required=True, help="the unpacked npm package (holds package.json, dist/)")
    ap.add_argument("--out", type=Path, default=root / "tests/eval/zh-poetry")
    ap.add_argument("--queries", type=Path, default=here.with_name("zh_poetry_queries.json"))
    ap.add_argument("--per-query", action="store_true", help="print every query's overlap and relevant ids")
    args = ap.parse_args()

    meta = load(args.package / "package.json")
    if meta.get("name") != "chinese-poetry" or meta.get("version") != PACKAGE_VERSION:
        sys.exit(
            f"{args.package}: expected chinese-poetry {PACKAGE_VERSION}, found {meta.get('name')} {meta.get('version')}"
        )
    poems, stats = build_corpus(args.package / "dist")

    spec = load(args.queries)
    queries = spec["queries"]
    ids = [q["id"] for q in queries]
    dup = [i for i, n in Counter(ids).items() if n > 1]
    if dup:
        sys.exit(f"{args.queries}: duplicate query ids {dup}")
    grams = {p.id: bigrams(p.text) for p in poems}
    qrels: list[tuple[str, str]] = []
    rows = []
    for q in queries:
        where = f"{args.queries}: query {q['id']}"
        if not q.get("relevant"):
            sys.exit(f"{where}: no judged poem")
        docs = [resolve(ref, poems, where) for ref in q["relevant"]]
        if len({d.id for d in docs}) != len(docs):
            sys.exit(f"{where}: the same poem judged twice")
        judged = {d.id for d in docs}
        for d in docs:
            # the same poem elsewhere in the corpus (a variant, another attribution) answers too
            twins = [p for p in poems if p.id not in judged and near_duplicate(grams[d.id], grams[p.id])]
            if twins:
                sys.exit(
                    f"{where}: {d.id} {d.display_title} has near-duplicates in the corpus that are not judged: "
                    + ", ".join(f"{p.id} {p.display_title} ({p.author})" for p in twins)
                )
        for d in docs:
            qrels.append((q["id"], d.id))
        rows.append((q, docs, max(overlap(q["text"], d) for d in docs)))

    out = args.out
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    with (out / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for p in poems:
            doc = {"_id": p.id, "title": f"《{p.display_title}》{p.author}", "text": p.text}
            f.write(json.dumps(doc, ensure_ascii=False) + "\n")
    with (out / "queries.jsonl").open("w", encoding="utf-8") as f:
        for q in queries:
            f.write(json.dumps({"_id": q["id"], "text": q["text"]}, ensure_ascii=False) + "\n")
    with (out / "qrels/test.tsv").open("w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for qid, did in qrels:
            f.write(f"{qid}\t{did}\t1\n")

    print(f"corpus: {len(poems)} documents -> {out / 'corpus.jsonl'}")
    for key, s in stats.items():
        print(
            f"  {key:10} {s['name']:24} {s['script']:11} {s['kept']:5} kept, "
            f"{s['duplicates']} repeats dropped, {s['empty']} empty"
        )
    print(
        f"queries: {len(queries)}, judgements: {len(qrels)} "
        f"({sum(len(d) > 1 for _, d, _ in rows)} queries with more than one relevant poem)"
    )
    kinds = Counter(q.get("kind", "?") for q in queries)
    print("kinds: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    if args.per_query:
        for q, docs, ov in rows:
            print(f"  {q['id']} {ov:.2f} {' '.join(d.id for d in docs)} {q['text']}")
    ovs = sorted(ov for _, _, ov in rows)
    quart = statistics.quantiles(ovs, n=4)
    print(
        "lexical overlap (share of a query's Han characters found in its relevant poem): "
        f"mean {statistics.mean(ovs):.3f}, "
        f"median {statistics.median(ovs):.3f}, quartiles {quart[0]:.3f} / {quart[2]:.3f}, "
        f"min {ovs[0]:.3f}, max {ovs[-1]:.3f}"
    )
    buckets = Counter(min(int(ov * 10), 9) for ov in ovs)
    print(
        "  distribution: "
        + ", ".join(f"[{b / 10:.1f},{(b + 1) / 10:.1f}{']' if b == 9 else ')'} {buckets[b]}" for b in range(10))
    )
    for kind in sorted(kinds):
        sub = [ov for q, _, ov in rows if q.get("kind", "?") == kind]
        print(f"  {kind}: mean {statistics.mean(sub):.3f} over {len(sub)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
