"""Fixtures every room's tests share: the generated trace stores they read.

Each store is written once a session and only read: a test that changes a store copies it first.
The suite's partitions start on a fixed day, whatever a checkout's data/store holds: the tests
materialize days of 2026 (defs/partitions.py reads $RETRIEVAL_PIPELINE_START_DATE first).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest

from retrieval_pipeline.sample import write_sample_store
from tests.ingest.phoenix_server import PhoenixServer, phoenix_server
from tests.warehouse_snapshots import write_small_store

os.environ.setdefault("RETRIEVAL_PIPELINE_START_DATE", "2026-01-01")

SAMPLE_END = date(2026, 11, 30)  # the sample store's last day, and its injected regression's


@pytest.fixture(scope="session")
def sample_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled sample store: three days (seed 7) ending SAMPLE_END, the injected regression
    on the last."""
    root = tmp_path_factory.mktemp("sample") / "store"
    write_sample_store(root, days=3, seed=7, end_date=SAMPLE_END)
    return root


@pytest.fixture(scope="session")
def small_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three days of the sample store (seed 11) ending `warehouse_snapshots.DAY`, the regression
    on the last (`warehouse_snapshots.write_small_store`)."""
    return write_small_store(tmp_path_factory.mktemp("small") / "store")


@pytest.fixture(scope="session")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PhoenixServer]:
    """A Phoenix server on 127.0.0.1 with an empty SQLite store of its own, started once a
    session for the tests that need one (each writes its own project)."""
    with phoenix_server(tmp_path_factory.mktemp("phoenix")) as server:
        yield server
