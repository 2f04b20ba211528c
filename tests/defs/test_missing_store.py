"""A trace store folder that does not exist (`dagster dev` started from another folder) is told
when the definitions load and in one line when a run starts, naming RETRIEVAL_PIPELINE_STORE and
the folder tried; the failed run leaves nothing behind (issue 34, item 4)."""

from __future__ import annotations

import logging
from datetime import date
from pathlib import Path

import pytest

from retrieval_pipeline.defs import build_defs
from retrieval_pipeline.defs.nightly import assets
from retrieval_pipeline.defs.resources import (
    DB_ENV,
    STORE_ENV,
    PipelineSettingsResource,
    TraceStoreResource,
    WarehouseResource,
)
from tests.dagster_runs import materialize

DAY = date(2026, 11, 30)


def test_the_definitions_say_the_store_is_missing_when_they_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    missing = tmp_path / "nowhere" / "store"
    monkeypatch.setenv(STORE_ENV, str(missing))
    monkeypatch.setenv(DB_ENV, str(tmp_path / "data" / "warehouse.duckdb"))
    with caplog.at_level(logging.WARNING):
        build_defs()
    [record] = [r for r in caplog.records if "trace store folder" in r.getMessage()]
    assert f"the trace store folder {missing} does not exist: set {STORE_ENV}" in (
        record.getMessage()
    )
    assert not (tmp_path / "data").exists()  # loading creates nothing


def test_a_run_on_a_missing_store_fails_in_one_line_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "store"
    data = tmp_path / "data"
    resources: dict[str, object] = {
        "trace_store": TraceStoreResource(root=str(missing)),
        "warehouse": WarehouseResource(database=str(data / "warehouse.duckdb")),
        "settings": PipelineSettingsResource(),
    }
    result = materialize([assets.traces, assets.corpus], resources, day=DAY)
    assert not result.success
    # a resource that cannot start fails the run before any step: its event names the cause
    errors = [getattr(e.event_specific_data, "error", None) for e in result.all_events]
    messages = " ".join(e.message for e in errors if e is not None)
    assert f"the trace store folder {missing} does not exist: set {STORE_ENV}" in messages
    assert not data.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_an_existing_store_and_an_object_store_are_not_missing(tmp_path: Path) -> None:
    assert TraceStoreResource(root=str(tmp_path)).missing_folder() is None
    assert TraceStoreResource(root="s3://bucket/store").missing_folder() is None
