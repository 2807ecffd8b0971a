"""A LangChain retriever over freshet's ``/v1/retrieve`` (the ``langchain`` extra:
``pip install './clients/python[langchain]'``)."""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field

from .client import FreshetClient


class FreshetRetriever(BaseRetriever):
    """Retrieves freshet's hits as LangChain documents (text in ``page_content``).

    ``k``, ``mode`` and ``filter`` (a native filter object, e.g. ``{"lang": "en"}``) are sent
    with every query; ``options`` are the other ``/v1/retrieve`` fields."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    client: FreshetClient
    k: int = 4
    mode: str | None = None
    filter: dict[str, Any] | None = None
    options: dict[str, Any] = Field(default_factory=dict)

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        r = self.client.retrieve(query, k=self.k, mode=self.mode, filter=self.filter, **self.options)
        return [Document(page_content=h.text, metadata=h.retriever_metadata(), id=h.chunk_id) for h in r.results]
