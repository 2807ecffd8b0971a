"""The server-sent event reader, offline."""

from freshet_client.sse import Event, events


def test_events_fields_comments_and_multiline_data() -> None:
    lines = [
        ": keep-alive",
        "event: retrieval",
        'data: {"passages": []}',
        "",
        "",
        "event: delta",
        'data: {"text":',
        'data:  " a"}',
        "",
        'data: {"x": 1}',
    ]
    assert list(events(lines)) == [
        Event("retrieval", '{"passages": []}'),
        Event("delta", '{"text":\n " a"}'),
        Event("message", '{"x": 1}'),
    ]


def test_an_event_without_data_is_not_dispatched() -> None:
    assert list(events(["event: delta", "", ": only a comment", ""])) == []
