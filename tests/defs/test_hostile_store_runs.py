"""The nightly `traces` step and the live sensor on a hostile store (issue 27, classes 5 and 10):
the step fails in its own words, naming the path, on a symlink loop, a file name that is not UTF-8
or a full disk on a new day; the sensor moves past a bad folder, a bad day and bad records, each
with its reason, and never stops."""

from __future__ import annotations

import json
import os
from datetime import date
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb
import pytest

from retrieval_pipeline.defs.live.resources import LiveMonitorResource
from retrieval_pipeline.defs.live.sensor import live_monitoring_sensor
from retrieval_pipeline.defs.nightly import assets
from retrieval_pipeline.defs.resources import TraceStoreResource, WarehouseResource
from retrieval_pipeline.live.advance import advance
from retrieval_pipeline.live.rules import MonitorConfig
from retrieval_pipeline.live.tailing import StoreCursor
from retrieval_pipeline.store import LocalTraceStore

DAY = date(2026, 11, 30)


def record(n: int, **changes: object) -> str:
    return json.dumps(
        {
            "trace_id": f"t{n}",
            "query_id": f"q{n}",
            "timestamp": f"2026-11-30T10:00:{n:02d}Z",
            "retrieved_ids": ["a", "b"],
            "relevant_ids": ["a"],
        }
        | changes
    )


def store_with_day(tmp_path: Path) -> Path:
    folder = tmp_path / "store" / "traces" / f"date={DAY.isoformat()}"
    folder.mkdir(parents=True)
    (folder / "good.jsonl").write_text(record(1) + "\n" + record(2) + "\n")
    return folder


def traces_run(tmp_path: Path) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [assets.traces],
        partition_key=DAY.isoformat(),
        resources={
            "trace_store": TraceStoreResource(root=str(tmp_path / "store")),
            "warehouse": WarehouseResource(database=str(tmp_path / "db" / "w.duckdb")),
        },
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )


def failure(result: dg.ExecuteInProcessResult) -> str:
    (message,) = [
        event.step_failure_data.error.message
        for event in result.all_events
        if event.is_step_failure and event.step_failure_data.error is not None
    ]
    assert "Traceback" not in message
    return message


def test_a_symlink_loop_fails_the_step_in_words(tmp_path: Path) -> None:
    folder = store_with_day(tmp_path)
    (folder / "x.jsonl").symlink_to(folder / "y.jsonl")
    (folder / "y.jsonl").symlink_to(folder / "x.jsonl")
    message = failure(traces_run(tmp_path))
    assert f"refusing {folder / 'x.jsonl'}: it cannot be resolved" in message


def test_a_file_name_that_is_not_utf8_fails_the_step_in_words(tmp_path: Path) -> None:
    folder = store_with_day(tmp_path)
    with open(os.fsencode(folder) + b"/z\xfe.jsonl", "w") as handle:
        handle.write(record(3) + "\n")
    assert "the file name b'z\\xfe.jsonl' is not UTF-8" in failure(traces_run(tmp_path))


def test_a_full_disk_on_a_new_day_fails_the_step_in_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store_with_day(tmp_path)

    def full(*args: object, **kwargs: object) -> None:
        raise duckdb.IOException(
            'IO Error: Could not write file "w.duckdb": No space left on device'
        )

    monkeypatch.setattr(assets, "ingest_traces", full)
    message = failure(traces_run(tmp_path))
    assert message.endswith(
        "Failure: cannot ingest 2026-11-30: the warehouse could not be written (IO Error: Could "
        'not write file "w.duckdb": No space left on device)\n'
    )


def hostile_store(tmp_path: Path) -> Path:
    """A good day with bad records in it, a folder that is no day, and a day with a file whose
    name is not UTF-8."""
    folder = store_with_day(tmp_path)
    with (folder / "good.jsonl").open("a") as out:
        out.write("[" * 5000 + "\n")
        out.write(record(3, relevance_scores={"a": 1024}) + "\n")
        out.write(record(4) + "\n")
    (tmp_path / "store" / "traces" / "date=2026-13-45").mkdir()
    other = tmp_path / "store" / "traces" / "date=2026-11-29"
    other.mkdir()
    with open(os.fsencode(other) + b"/w\xff.jsonl", "w") as handle:
        handle.write(record(5) + "\n")
    return tmp_path / "store"


def test_the_monitor_moves_past_bad_records_and_folders_with_reasons(tmp_path: Path) -> None:
    store = LocalTraceStore(hostile_store(tmp_path))
    config = MonitorConfig(metrics=("mrr",), window_records=100)
    step = advance(store, StoreCursor(), config, backfill_days=1)
    assert step.lines == 5  # the good day's five lines; the other day waits, named
    assert [line.split(": ", 1)[1] for line in step.bad] == [
        "JSON nested too deeply to read one record at a time (lists or objects more than about "
        "1000 levels deep)",
        'relevance_scores["a"] must be a grade from 0 to 100 (got 1024)',
    ]
    assert [line.split(":")[1] for line in step.bad] == ["3", "4"]  # their line numbers
    assert any("2026-13-45 is not a date" in problem for problem in step.problems)
    assert any("is not UTF-8" in problem for problem in step.problems)
    # the next step starts after them: nothing is read twice, and nothing stops
    again = advance(store, step.cursor, config, backfill_days=1)
    assert (again.lines, again.bad) == (0, [])


def test_the_sensor_ticks_past_them(tmp_path: Path) -> None:
    resources: dict[str, Any] = {
        "trace_store": TraceStoreResource(root=str(hostile_store(tmp_path))),
        "warehouse": WarehouseResource(database=str(tmp_path / "w" / "live.duckdb")),
        "live_monitor": LiveMonitorResource(backfill_days=1),
    }
    instance = dg.DagsterInstance.ephemeral()
    context = dg.build_sensor_context(cursor=None, resources=resources, instance=instance)
    result = live_monitoring_sensor.evaluate_tick(context)
    assert result.cursor is not None  # it moved on
    cursor = StoreCursor.from_json(result.cursor)
    (progress,) = cursor.files.values()
    assert progress.lines == 5
