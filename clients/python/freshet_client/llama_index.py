"""A LlamaIndex retriever over freshet's ``/v1/retrieve`` (the ``llamaindex`` extra:
``pip install './clients/python[llamaindex]'``)."""

from __future__ import annotations

from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from .client import FreshetClient


class FreshetLlamaRetriever(BaseRetriever):
    """Retrieves freshet's hits as LlamaIndex nodes (id: the chunk id; score: freshet's score).

    ``k``, ``mode`` and ``filter`` (a native filter object, e.g. ``{"lang": "en"}``) are sent
    with every query; ``options`` are the other ``/v1/retrieve`` fields."""

    def __init__(
        self,
        client: FreshetClient,
        k: int = 4,
        mode: str | None = None,
        filter: dict[str, Any] | None = None,
        **options: Any,
    ) -> None:
        self.client = client
        self.k = k
        self.mode = mode
        self.filter = filter
        self.options = options
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        r = self.client.retrieve(query_bundle.query_str, k=self.k, mode=self.mode, filter=self.filter, **self.options)
        return [
            NodeWithScore(node=TextNode(id_=h.chunk_id, text=h.text, metadata=h.retriever_metadata()), score=h.score)
            for h in r.results
        ]
