"""The live node the tests run against: ``FRESHET_QUERY_URL`` (a query node with ``[llm]``),
``FRESHET_INGEST_URL`` and ``FRESHET_INGEST_KEY`` (an ingest service writing to the node's
topic). tests/tests/clients_e2e.rs starts them and runs these tests; without them the live
tests fail, they do not skip."""

from __future__ import annotations

import os
import uuid

import pytest
from freshet_client import FreshetClient


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: the live tests need a running node (see tests/conftest.py)")
    return value


@pytest.fixture(scope="session")
def client() -> FreshetClient:
    return FreshetClient(
        _env("FRESHET_QUERY_URL"),
        ingest_url=_env("FRESHET_INGEST_URL"),
        ingest_key=_env("FRESHET_INGEST_KEY"),
        timeout=30,
    )


@pytest.fixture()
def unique() -> str:
    """A word no other document holds, so that a test finds its own document only."""
    return "zq" + uuid.uuid4().hex[:10]
