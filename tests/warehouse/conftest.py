"""Fixtures the warehouse tests share. A module that wants a connection prepared otherwise
defines its own `conn` (test_nightly.py, test_validation_lanes.py), which takes the place of
this one there."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from retrieval_pipeline.warehouse import connection


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """A new warehouse (`connection.connect`) on the file `tmp_path / "w.duckdb"`, closed after
    the test."""
    conn = connection.connect(tmp_path / "w.duckdb")
    yield conn
    conn.close()
