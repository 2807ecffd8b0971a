"""Ask the query node one question and print the ranked results (used by run-local.sh).

usage: ask.py BASE_URL QUERY [K]
Waits up to 60 s for /readyz, then POSTs /v1/retrieve (mode hybrid) and prints each result with
its BM25 and vector ranks and the per-stage timings.
"""
import json
import sys
import time
import urllib.error
import urllib.request


def main() -> int:
    base, query = sys.argv[1], sys.argv[2]
    k = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    deadline = time.time() + 60
    reason = None
    while True:
        try:
            with urllib.request.urlopen(base + "/readyz", timeout=5) as r:
                if r.status == 200:
                    break
        except (urllib.error.URLError, OSError) as e:
            reason = e
        if time.time() > deadline:
            print(f"query node not ready: {reason}", file=sys.stderr)
            return 1
        time.sleep(1)
    body = json.dumps({"query": query, "k": k}).encode()
    req = urllib.request.Request(base + "/v1/retrieve", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            answer = json.load(r)
    except urllib.error.HTTPError as e:
        print(f"query failed: {e.code} {e.read().decode(errors='replace')}", file=sys.stderr)
        return 1
    for hit in answer["results"]:
        scores = hit["scores"]
        bm25 = (scores.get("bm25") or {}).get("rank")
        vector = (scores.get("vector") or {}).get("rank")
        pages = ""
        if "page_start" in hit:
            a, b = hit["page_start"], hit["page_end"]
            pages = f" (p. {a})" if a == b else f" (p. {a}-{b})"
        print(f"#{hit['rank']} {hit['doc_id']}{pages}  score {hit['score']:.4f}  "
              f"(bm25 rank {bm25}, vector rank {vector})")
        print("    " + hit["text"][:160].replace("\n", " "))
    timings = {name: round(ms, 1) for name, ms in answer["timings_ms"].items()}
    print(f"timings (ms): {timings}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
