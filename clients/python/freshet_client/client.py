"""The client of freshet's own API: the query node (retrieve, answer, index wait) and the
ingest service (put and delete documents)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import requests
import sseclient

from .errors import FreshetError
from .types import (
    Answer,
    AnswerDelta,
    AnswerEvent,
    AnswerRetrieval,
    IndexWait,
    Passage,
    RetrieveResult,
    WriteResult,
)


class FreshetClient:
    """A client of a query node (``url``) and, for writes, an ingest service (``ingest_url``).

    ``api_key`` is sent as ``Authorization: Bearer`` to the query node (an API key or a JWT);
    ``ingest_key`` to the ingest service (default: ``api_key``). Every method raises
    :class:`FreshetError` with the node's error code when a request is refused.
    """

    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        ingest_url: str | None = None,
        ingest_key: str | None = None,
        timeout: float = 60.0,
        session: requests.Session | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.ingest_url = ingest_url.rstrip("/") if ingest_url else None
        self.ingest_key = ingest_key if ingest_key is not None else api_key
        self.timeout = timeout
        self.session = session or requests.Session()

    # --- the query node ---------------------------------------------------------------------

    def retrieve(
        self,
        query: str,
        k: int | None = None,
        mode: str | None = None,
        filter: dict[str, Any] | None = None,
        **options: Any,
    ) -> RetrieveResult:
        """Hybrid retrieval (``POST /v1/retrieve``); ``options`` are the route's other fields
        (``principals``, ``rerank``, ``expand``, ``pack``, ...)."""
        body = _body(query, k, mode, filter, options)
        return RetrieveResult.from_json(self._json("POST", self.url, "/v1/retrieve", self.api_key, body))

    def answer(
        self,
        query: str,
        k: int | None = None,
        mode: str | None = None,
        filter: dict[str, Any] | None = None,
        **options: Any,
    ) -> Answer:
        """An answer with citations (``POST /v1/answer``), whole."""
        body = _body(query, k, mode, filter, options)
        body["stream"] = False
        return Answer.from_json(self._json("POST", self.url, "/v1/answer", self.api_key, body))

    def stream_answer(
        self,
        query: str,
        k: int | None = None,
        mode: str | None = None,
        filter: dict[str, Any] | None = None,
        **options: Any,
    ) -> Iterator[AnswerEvent]:
        """An answer streamed: yields an :class:`AnswerRetrieval` (the passages), then each
        :class:`AnswerDelta` of text, then the whole :class:`Answer` with its citations. A
        model failure after the stream began raises :class:`FreshetError` (e.g. ``llm_timeout``).
        """
        body = _body(query, k, mode, filter, options)
        body["stream"] = True
        resp = self._send("POST", self.url, "/v1/answer", self.api_key, body, stream=True)
        with resp:
            done = False
            for ev in sseclient.SSEClient(resp.iter_content(chunk_size=None)).events():
                data = _decode(ev.data, resp.status_code)
                if ev.event == "retrieval":
                    yield AnswerRetrieval(
                        question=data.get("question", ""),
                        passages=[Passage.from_json(p) for p in data.get("passages", [])],
                        raw=data,
                    )
                elif ev.event == "delta":
                    yield AnswerDelta(text=data.get("text", ""))
                elif ev.event == "done":
                    done = True
                    yield Answer.from_json(data)
                elif ev.event == "error":
                    err = data.get("error") or {}
                    raise FreshetError(resp.status_code, err.get("code", "error"), err.get("message", ""), data)
            if not done:
                raise FreshetError(resp.status_code, "bad_response", "the stream ended without its answer")

    def index(self) -> dict[str, Any]:
        """The commit the node serves (``GET /v1/index``): offsets, epoch, chunk count."""
        return self._json("GET", self.url, "/v1/index", self.api_key, None)

    def wait(
        self,
        write: WriteResult | None = None,
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
        timeout_ms: int = 10_000,
    ) -> IndexWait:
        """Waits until a write is searchable (``GET /v1/index/wait``): give the
        :class:`WriteResult` of :meth:`put_document` / :meth:`delete_document`, or its topic,
        partition and offset. Not searchable within ``timeout_ms``: :class:`FreshetError`
        with code ``timeout``."""
        if write is not None:
            topic, partition, offset = write.topic, write.partition, write.offset
        if topic is None or partition is None or offset is None:
            raise ValueError("wait() takes a WriteResult, or topic, partition and offset")
        params = {"topic": topic, "partition": partition, "offset": offset, "timeout_ms": timeout_ms}
        timeout = max(self.timeout, timeout_ms / 1000 + 10)
        v = self._json("GET", self.url, "/v1/index/wait", self.api_key, None, params=params, timeout=timeout)
        return IndexWait.from_json(v)

    # --- the ingest service -----------------------------------------------------------------

    def put_document(
        self,
        id: str,
        text: str | None = None,
        *,
        title: str | None = None,
        source: str | None = None,
        metadata: dict[str, Any] | None = None,
        acl: list[str] | str | None = None,
        content_type: str | None = None,
        **fields: Any,
    ) -> WriteResult:
        """Writes a document (``PUT /v1/documents/{id}`` of the ingest service) as a JSON
        envelope; ``acl`` is a list of principals or ``"public"``. Returns where it was written
        (give it to :meth:`wait`)."""
        envelope: dict[str, Any] = {"text": text, "title": title, "source": source, "metadata": metadata}
        envelope.update({"acl": acl, "content_type": content_type, **fields})
        envelope = {k: v for k, v in envelope.items() if v is not None}
        path = "/v1/documents/" + quote(id, safe="")
        return WriteResult.from_json(self._json("PUT", self._ingest(), path, self.ingest_key, envelope))

    def delete_document(self, id: str) -> WriteResult:
        """Deletes a document (``DELETE /v1/documents/{id}`` of the ingest service)."""
        path = "/v1/documents/" + quote(id, safe="")
        return WriteResult.from_json(self._json("DELETE", self._ingest(), path, self.ingest_key, None))

    # --- plumbing ---------------------------------------------------------------------------

    def _ingest(self) -> str:
        if not self.ingest_url:
            raise ValueError("this client has no ingest_url: FreshetClient(url, ingest_url=...)")
        return self.ingest_url

    def _send(
        self,
        method: str,
        base: str,
        path: str,
        key: str | None,
        body: dict[str, Any] | None,
        params: dict[str, Any] | None = None,
        stream: bool = False,
        timeout: float | None = None,
    ) -> requests.Response:
        headers = {"Accept": "text/event-stream" if stream else "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        try:
            resp = self.session.request(
                method,
                base + path,
                json=body,
                params=params,
                headers=headers,
                stream=stream,
                timeout=timeout or self.timeout,
            )
        except requests.RequestException as e:
            raise FreshetError(0, "connection", f"{method} {base}{path}: {e}") from e
        if resp.status_code >= 400:
            raise _error(resp)
        return resp

    def _json(
        self,
        method: str,
        base: str,
        path: str,
        key: str | None,
        body: dict[str, Any] | None,
        params: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> Any:
        resp = self._send(method, base, path, key, body, params=params, timeout=timeout)
        return _decode(resp.text, resp.status_code)


def _body(
    query: str, k: int | None, mode: str | None, filter: dict[str, Any] | None, options: dict[str, Any]
) -> dict[str, Any]:
    body: dict[str, Any] = {"query": query, **options}
    for name, value in (("k", k), ("mode", mode), ("filter", filter)):
        if value is not None:
            body[name] = value
    return body


def _decode(text: str, status: int) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise FreshetError(status, "bad_response", f"not JSON: {text[:200]!r}") from e


def _error(resp: requests.Response) -> FreshetError:
    try:
        body = resp.json()
    except ValueError:
        body = {}
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        err = {"code": "http_error", "message": resp.text[:500]}
    retry_after = None
    if "Retry-After" in resp.headers:
        try:
            retry_after = float(resp.headers["Retry-After"])
        except ValueError:
            retry_after = None
    return FreshetError(
        resp.status_code,
        str(err.get("code", "http_error")),
        str(err.get("message", "")),
        body if isinstance(body, dict) else {},
        retry_after,
    )
