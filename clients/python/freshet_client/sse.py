"""Server-sent events read from a streamed HTTP body (the subset of the WHATWG rules the node
uses: ``event:`` and ``data:`` fields, comments, a blank line ends an event)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass


@dataclass
class Event:
    event: str
    data: str


def events(lines: Iterable[str]) -> Iterator[Event]:
    """The events of a stream given line by line (without line ends)."""
    name, data = "", []
    for line in lines:
        if line == "":
            if data:
                yield Event(name or "message", "\n".join(data))
            name, data = "", []
            continue
        if line.startswith(":"):
            continue
        key, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if key == "event":
            name = value
        elif key == "data":
            data.append(value)
    if data:
        yield Event(name or "message", "\n".join(data))
