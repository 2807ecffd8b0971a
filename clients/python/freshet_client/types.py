"""The typed results of the freshet API (each keeps the node's whole JSON in ``raw``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Hit:
    """One result of ``/v1/retrieve``: a chunk of a document, with its rank and score."""

    doc_id: str
    chunk_id: str
    text: str
    title: str
    source: str
    score: float
    rank: int
    metadata: dict[str, Any]
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, v: dict[str, Any]) -> Hit:
        return cls(
            doc_id=v.get("doc_id", ""),
            chunk_id=v.get("chunk_id", ""),
            text=v.get("text", ""),
            title=v.get("title", ""),
            source=v.get("source", ""),
            score=float(v.get("score", 0.0)),
            rank=int(v.get("rank", 0)),
            metadata=v.get("metadata") or {},
            raw=v,
        )

    def retriever_metadata(self) -> dict[str, Any]:
        """The metadata the LangChain and LlamaIndex retrievers give a hit: the document's own
        metadata with ``doc_id``, ``chunk_id``, ``title``, ``source``, ``score`` and ``rank``."""
        return {
            **self.metadata,
            "doc_id": self.doc_id,
            "chunk_id": self.chunk_id,
            "title": self.title,
            "source": self.source,
            "score": self.score,
            "rank": self.rank,
        }


@dataclass
class RetrieveResult:
    """The answer of ``/v1/retrieve``: its hits (best first) and how they were found."""

    results: list[Hit]
    mode: str
    degraded: list[Any]
    context: str | None
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, v: dict[str, Any]) -> RetrieveResult:
        return cls(
            results=[Hit.from_json(h) for h in v.get("results", [])],
            mode=v.get("mode", ""),
            degraded=v.get("degraded") or [],
            context=v.get("context"),
            raw=v,
        )


@dataclass
class Passage:
    """A numbered passage of an answer's prompt: what ``[n]`` cites."""

    number: int
    doc_id: str
    chunk_id: str
    title: str
    source: str
    text: str
    cited: bool
    page_start: int | None
    page_end: int | None
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, v: dict[str, Any]) -> Passage:
        return cls(
            number=int(v.get("number", 0)),
            doc_id=v.get("doc_id", ""),
            chunk_id=v.get("chunk_id", ""),
            title=v.get("title", ""),
            source=v.get("source", ""),
            text=v.get("text", ""),
            cited=bool(v.get("cited", False)),
            page_start=v.get("page_start"),
            page_end=v.get("page_end"),
            raw=v,
        )


@dataclass
class Citation:
    """A ``[n]`` marker of the answer: its passage number and its span (Unicode characters)."""

    number: int
    start: int
    end: int
    sentence: int

    @classmethod
    def from_json(cls, v: dict[str, Any]) -> Citation:
        return cls(
            number=int(v.get("number", 0)),
            start=int(v.get("start", 0)),
            end=int(v.get("end", 0)),
            sentence=int(v.get("sentence", 0)),
        )


@dataclass
class Answer:
    """The answer of ``/v1/answer`` (whole, or the ``done`` event of a stream)."""

    answer: str
    refused: bool
    question: str
    passages: list[Passage]
    citations: list[Citation]
    invalid_citations: list[Citation]
    model: str
    finish_reason: str | None
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, v: dict[str, Any]) -> Answer:
        return cls(
            answer=v.get("answer", ""),
            refused=bool(v.get("refused", False)),
            question=v.get("question", ""),
            passages=[Passage.from_json(p) for p in v.get("passages", [])],
            citations=[Citation.from_json(c) for c in v.get("citations", [])],
            invalid_citations=[Citation.from_json(c) for c in v.get("invalid_citations", [])],
            model=v.get("model", ""),
            finish_reason=v.get("finish_reason"),
            raw=v,
        )

    def cited_passages(self) -> list[Passage]:
        """The passages the answer cites, in number order."""
        numbers = {c.number for c in self.citations}
        return [p for p in self.passages if p.number in numbers]


@dataclass
class AnswerRetrieval:
    """The first event of a streamed answer: the passages, before any text."""

    question: str
    passages: list[Passage]
    raw: dict[str, Any] = field(repr=False)


@dataclass
class AnswerDelta:
    """A piece of the answer's text as the model writes it."""

    text: str


AnswerEvent = AnswerRetrieval | AnswerDelta | Answer
"""What :meth:`FreshetClient.stream_answer` yields: the retrieval, the deltas, then the answer."""


@dataclass
class WriteResult:
    """Where the ingest service wrote a document change (what :meth:`FreshetClient.wait` takes)."""

    id: str
    op: str
    topic: str
    partition: int
    offset: int

    @classmethod
    def from_json(cls, v: dict[str, Any]) -> WriteResult:
        return cls(
            id=v["id"],
            op=v["op"],
            topic=v["topic"],
            partition=int(v["partition"]),
            offset=int(v["offset"]),
        )


@dataclass
class IndexWait:
    """The answer of ``/v1/index/wait``: the offset is searchable."""

    topic: str
    partition: int
    offset: int
    committed_offset: int
    epoch: int
    waited_ms: int
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, v: dict[str, Any]) -> IndexWait:
        return cls(
            topic=v.get("topic", ""),
            partition=int(v.get("partition", 0)),
            offset=int(v.get("offset", 0)),
            committed_offset=int(v.get("committed_offset", 0)),
            epoch=int(v.get("epoch", 0)),
            waited_ms=int(v.get("waited_ms", 0)),
            raw=v,
        )
