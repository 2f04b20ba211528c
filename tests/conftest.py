"""Fixtures every room's tests share (the generated trace stores they read), and the check that
no process a test started outlives the session.

Each store is written once a session and only read: a test that changes a store copies it first.
The suite's partitions start on a fixed day, whatever a checkout's data/store holds: the tests
materialize days of 2026 (defs/partitions.py reads $RETRIEVAL_PIPELINE_START_DATE first).

Nothing a test starts outlives the session: every process this session starts carries a mark in
its environment, and once every fixture has been torn down, any process below this one or
carrying the mark is named with the module after which it was first seen, killed, and fails
the run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest

from retrieval_pipeline.sample import write_sample_store
from tests.ingest.phoenix_server import PhoenixServer, phoenix_server
from tests.processes import SESSION_MARK, Survivor, started_processes
from tests.warehouse_snapshots import write_small_store

os.environ.setdefault("RETRIEVAL_PIPELINE_START_DATE", "2026-01-01")

SAMPLE_END = date(2026, 11, 30)  # the sample store's last day, and its injected regression's

os.environ[SESSION_MARK] = uuid.uuid4().hex
# Python's own helpers, kept for the life of this process and gone with it: multiprocessing's
# resource tracker (started by the first spawned process, a Dask worker) and its fork server.
OWN_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")
SURVIVORS_GO_WITHIN_S = 10.0  # a process killed by a stopped server's group may still be exiting
_first_seen: dict[int, str] = {}


def _survivors() -> list[Survivor]:
    found = started_processes(os.environ[SESSION_MARK])
    return [s for s in found if not any(helper in s.command for helper in OWN_HELPERS)]


@pytest.fixture(scope="module", autouse=True)
def _note_processes(request: pytest.FixtureRequest) -> Iterator[None]:
    """Which module's tests a process that is still running after them was first seen after
    (a session fixture's server shows up here too, and goes when the session ends)."""
    yield
    for survivor in _survivors():
        _first_seen.setdefault(survivor.pid, request.node.nodeid)


@pytest.fixture(scope="session", autouse=True)
def nothing_outlives_the_session() -> Iterator[None]:
    """Set up before every other fixture, so torn down after them all: then no process this
    session started may be left (module docstring)."""
    yield
    deadline = time.monotonic() + SURVIVORS_GO_WITHIN_S
    while (left := _survivors()) and time.monotonic() < deadline:
        time.sleep(0.2)
    for survivor in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(survivor.pid, signal.SIGKILL)
    if left:
        named = "\n".join(
            f"  pid {s.pid}, first seen after {_first_seen.get(s.pid, 'the last module')}: "
            f"{s.command[:300]}"
            for s in left
        )
        pytest.fail(
            f"{len(left)} process(es) the tests started outlived them (now killed):\n{named}"
        )


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
