"""The one exception of the client: the node's error, with its code."""

from __future__ import annotations

from typing import Any


class FreshetError(Exception):
    """A request the node or the ingest service refused, or could not be made.

    ``status`` is the HTTP status (0 when no answer came: a connection error, a timeout),
    ``code`` the node's error code (``bad_request``, ``unauthorized``, ``forbidden``,
    ``too_many_requests``, ``unavailable``, ``timeout``, ``llm_timeout``, ...; ``connection``
    when no answer came, ``bad_response`` for an answer that is not the API's), ``message``
    its message and ``retry_after`` the seconds of a ``Retry-After`` header.
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        body: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{code} ({status}): {message}" if status else f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.body = body or {}
        self.retry_after = retry_after
