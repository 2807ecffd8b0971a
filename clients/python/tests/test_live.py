"""freshet_client against a live query node and ingest service: write, wait, retrieve, answer
(whole and streamed), delete, the node's errors, and the LangChain and LlamaIndex retrievers."""

from __future__ import annotations

import pytest
from freshet_client import (
    Answer,
    AnswerDelta,
    AnswerRetrieval,
    FreshetClient,
    FreshetError,
    RetrieveResult,
    WriteResult,
)


def _put(client: FreshetClient, doc_id: str, text: str, **fields: object) -> WriteResult:
    w = client.put_document(doc_id, text, title=f"Title of {doc_id}", acl="public", **fields)
    assert isinstance(w, WriteResult) and w.id == doc_id and w.op == "upsert" and w.offset >= 0
    waited = client.wait(w, timeout_ms=60_000)
    assert waited.committed_offset > w.offset
    return w


def test_put_wait_retrieve_with_filter(client: FreshetClient, unique: str) -> None:
    doc_id = f"pyclient/{unique}.md"
    _put(client, doc_id, f"The {unique} heron waits at the estuary.", metadata={"lang": "en", "n": 1})
    r = client.retrieve(f"{unique} heron", k=3, mode="bm25", filter={"lang": "en"})
    assert isinstance(r, RetrieveResult) and r.mode == "bm25"
    top = r.results[0]
    assert (top.doc_id, top.title, top.rank) == (doc_id, f"Title of {doc_id}", 1)
    assert unique in top.text and top.metadata["n"] == 1 and top.score > 0
    # The filter applies inside the search: another language finds nothing of it.
    other = client.retrieve(f"{unique} heron", k=3, mode="bm25", filter={"lang": "fr"})
    assert doc_id not in [h.doc_id for h in other.results]


def test_answer_whole_and_streamed(client: FreshetClient, unique: str) -> None:
    doc_id = f"pyclient/{unique}-answer"
    _put(client, doc_id, f"Herons wait at the {unique} estuary when the tide turns.")
    question = f"Why do herons wait at the {unique} estuary?"
    whole = client.answer(question, k=3, mode="bm25")
    assert isinstance(whole, Answer) and not whole.refused
    assert whole.citations, whole.raw
    cited = whole.cited_passages()
    assert cited and cited[0].doc_id == doc_id and cited[0].cited
    assert "[1]" in whole.answer

    events = list(client.stream_answer(question, k=3, mode="bm25"))
    assert isinstance(events[0], AnswerRetrieval)
    assert events[0].passages[0].doc_id == doc_id
    deltas = [e for e in events if isinstance(e, AnswerDelta)]
    assert len(deltas) >= 2
    final = events[-1]
    assert isinstance(final, Answer)
    assert all(isinstance(e, AnswerDelta) for e in events[1:-1])
    assert "".join(d.text for d in deltas) == final.answer == whole.answer
    assert final.citations == whole.citations


def test_delete_is_waited_for_and_gone(client: FreshetClient, unique: str) -> None:
    doc_id = f"pyclient/{unique}-gone"
    _put(client, doc_id, f"The {unique} glacier carves a valley.")
    assert [h.doc_id for h in client.retrieve(unique, mode="bm25").results] == [doc_id]
    d = client.delete_document(doc_id)
    assert d.op == "delete"
    client.wait(d, timeout_ms=60_000)
    assert client.retrieve(unique, mode="bm25").results == []


def test_errors_carry_the_node_code(client: FreshetClient) -> None:
    with pytest.raises(FreshetError) as e:
        client.retrieve("x", mode="no-such-mode")
    assert (e.value.status, e.value.code) == (400, "bad_request")
    assert "mode" in e.value.message
    with pytest.raises(FreshetError) as e:
        client.wait(topic="no-such-topic", partition=0, offset=0, timeout_ms=100)
    assert e.value.status in (400, 504) and e.value.code in ("bad_request", "timeout")
    # A wrong ingest key is the ingest service's 401.
    bad = FreshetClient(client.url, ingest_url=client.ingest_url, ingest_key="wrong-key")
    with pytest.raises(FreshetError) as e:
        bad.put_document("pyclient/x", "x", acl="public")
    assert (e.value.status, e.value.code) == (401, "unauthorized")
    # No node at all: a connection error, code "connection".
    with pytest.raises(FreshetError) as e:
        FreshetClient("http://127.0.0.1:9", timeout=2).retrieve("x")
    assert (e.value.status, e.value.code) == (0, "connection")


def test_langchain_and_llamaindex_retrievers(client: FreshetClient, unique: str) -> None:
    from freshet_client.langchain import FreshetRetriever
    from freshet_client.llama_index import FreshetLlamaRetriever
    from langchain_core.documents import Document

    doc_id = f"pyclient/{unique}-frameworks"
    _put(client, doc_id, f"Salmon swim up the {unique} river to spawn.", metadata={"lang": "en"})
    docs = FreshetRetriever(client=client, k=2, mode="bm25", filter={"lang": "en"}).invoke(f"{unique} salmon")
    assert isinstance(docs[0], Document)
    assert docs[0].metadata["doc_id"] == doc_id and docs[0].metadata["lang"] == "en"
    assert unique in docs[0].page_content and docs[0].id == docs[0].metadata["chunk_id"]
    nodes = FreshetLlamaRetriever(client, k=2, mode="bm25").retrieve(f"{unique} salmon")
    assert nodes[0].node.metadata["doc_id"] == doc_id
    assert nodes[0].node.node_id == docs[0].metadata["chunk_id"]
    assert nodes[0].score == pytest.approx(docs[0].metadata["score"])
