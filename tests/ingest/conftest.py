"""Fixtures for the ingest tests: a Phoenix server, started once for the tests that need it, and
an S3 server on 127.0.0.1 for the object-store tests (`tests/s3_server.py`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.ingest.phoenix_server import PhoenixServer, phoenix_server
from tests.s3_server import aws_env, s3, s3_endpoint

__all__ = ["aws_env", "phoenix", "s3", "s3_endpoint"]


@pytest.fixture(scope="session")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PhoenixServer]:
    """A Phoenix server on 127.0.0.1 with an empty SQLite store of its own."""
    with phoenix_server(tmp_path_factory.mktemp("phoenix")) as server:
        yield server
