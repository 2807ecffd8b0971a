"""A typed client of freshet's own API: retrieve, answer (whole and streamed), index wait, and
document writes through the ingest service. LangChain and LlamaIndex retrievers built on it are
in :mod:`freshet_client.langchain` and :mod:`freshet_client.llama_index` (optional extras)."""

from .client import FreshetClient
from .errors import FreshetError
from .types import (
    Answer,
    AnswerDelta,
    AnswerEvent,
    AnswerRetrieval,
    Citation,
    Hit,
    IndexWait,
    Passage,
    RetrieveResult,
    WriteResult,
)

__all__ = [
    "Answer",
    "AnswerDelta",
    "AnswerEvent",
    "AnswerRetrieval",
    "Citation",
    "FreshetClient",
    "FreshetError",
    "Hit",
    "IndexWait",
    "Passage",
    "RetrieveResult",
    "WriteResult",
]
