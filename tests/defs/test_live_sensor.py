"""The live sensor (`retrieval_pipeline.defs.live`): restarts mid-stream neither double-count
nor skip, a locked warehouse skips the tick without moving the cursor, and each window lands on
`live_retrieval_metrics` with the `live_sustained_drop` check failing while an alert is open.

Each tick runs as the daemon runs it: a fresh evaluation context built from the saved cursor
string (`evaluate_tick`), and the reported events recorded with `report_runless_asset_event`.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb
import pytest

from retrieval_pipeline.defs.live.assets import (
    CHECK_NAME,
    LIVE_ASSET_KEY,
    live_retrieval_metrics,
    live_sustained_drop,
)
from retrieval_pipeline.defs.live.resources import LiveMonitorResource
from retrieval_pipeline.defs.live.sensor import build_live_monitoring_sensor, live_monitoring_sensor
from retrieval_pipeline.defs.resources import TraceStoreResource, WarehouseResource
from retrieval_pipeline.live.rules import SAMPLE_KEY
from retrieval_pipeline.live.tailing import StoreCursor
from tests.live.traces import trace_fields
from tests.processes import default_signals

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
RATE = 0.8
CHECK_KEY = dg.AssetCheckKey(LIVE_ASSET_KEY, CHECK_NAME)


def trace_line(n: int, seconds: float, rank: int, segment: str) -> str:
    at = T0 + timedelta(seconds=seconds)
    return json.dumps(trace_fields(n, at, rank, segment, trace_id=f"live-{n}"))


def day_streams() -> list[tuple[str, str, list[str]]]:
    """(day, file, lines) in the order they are written: 12 windows of 60 s, 10 traces each,
    reciprocal rank 1 until window 6, then 1/4; a bad line now and then. Day two's file starts
    once day one's two files are complete."""
    files: list[tuple[str, str, list[str]]] = [
        ("2026-03-02", "a.jsonl", []),
        ("2026-03-02", "b.jsonl", []),
        ("2026-03-03", "a.jsonl", []),
    ]
    n = 0
    for window in range(12):
        target = files[0 if window < 4 else 1 if window < 8 else 2][2]
        for i in range(10):
            rank = 1 if window < 6 else 4
            target.append(trace_line(n, window * 60 + i * 5, rank, ["multi_hop", "single"][i % 2]))
            n += 1
        if window % 5 == 2:
            target.append('{"trace_id": "broken", "query_id": ')
    return files


def resources(root: Path, **live: Any) -> dict[str, Any]:
    options: dict[str, Any] = {
        "metrics": ["mrr", "precision@5"],
        "sample_rate": RATE,
        "window_seconds": 60,
        "lateness_seconds": 0,
        "thresholds": {"mrr": 0.5, "coverage": 0.5},
        "margins": {},
        "consecutive": 3,
        "min_labels": 3,
        "backfill_days": 1,  # the first tick starts a day before the latest: everything
    }
    return {
        "trace_store": TraceStoreResource(root=str(root / "store")),
        "warehouse": WarehouseResource(database=str(root / "warehouse" / "live.duckdb")),
        "live_monitor": LiveMonitorResource(**(options | live)),
    }


_SHARED: list[dg.DagsterInstance] = []


def tick(
    cursor: str | None, res: dict[str, Any], instance: dg.DagsterInstance | None = None
) -> Any:
    """One tick from a fresh context. Contexts share one ephemeral instance unless given one:
    the sensor keeps nothing in it, and building an instance per tick is slow."""
    if instance is None:
        _SHARED[:] = _SHARED or [dg.DagsterInstance.ephemeral()]
        instance = _SHARED[0]
    context = dg.build_sensor_context(cursor=cursor, resources=res, instance=instance)
    return live_monitoring_sensor.evaluate_tick(context)


def warehouse_rows(root: Path) -> dict[str, list[tuple[Any, ...]]]:
    with duckdb.connect(str(root / "warehouse" / "live.duckdb"), read_only=True) as conn:
        return {
            table: conn.execute(f"select * from {table} order by all").fetchall()
            for table in ("live_window_metrics", "live_alerts")
        }


def file_path(root: Path, day: str, name: str) -> Path:
    folder = root / "store" / "traces" / f"date={day}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name


def write_all(root: Path) -> None:
    for day, name, lines in day_streams():
        file_path(root, day, name).write_text("".join(f"{x}\n" for x in lines))


def chunks() -> Iterator[tuple[str, str, bytes]]:
    """The whole stream as appends of awkward sizes, many ending mid-line."""
    for day, name, lines in day_streams():
        data = "".join(f"{x}\n" for x in lines).encode()
        position, size = 0, 97
        while position < len(data):
            yield day, name, data[position : position + size]
            position += size
            size = size * 7 % 1013 + 50


@pytest.fixture(scope="module")
def one_pass(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """Every file written first, then one tick reads it all."""
    root = tmp_path_factory.mktemp("one_pass")
    write_all(root)
    result = tick(None, resources(root))
    cursor = StoreCursor.from_json(result.cursor)
    assert tick(result.cursor, resources(root)).skip_message == "no new traces since the last tick"
    return root, {"cursor": cursor, "result": result}


def test_restarting_mid_stream_neither_double_counts_nor_skips(
    tmp_path: Path, one_pass: tuple[Path, dict[str, Any]]
) -> None:
    root, reference = one_pass
    res = resources(tmp_path, max_records_per_tick=7)  # files also end mid-read
    cursor: str | None = None
    ticks = 0
    for day, name, piece in chunks():
        with file_path(tmp_path, day, name).open("ab") as handle:
            handle.write(piece)
        result = tick(cursor, res)  # a new evaluation every time: a restart between ticks
        cursor = result.cursor if result.cursor is not None else cursor
        ticks += 1
    while True:  # drain what the per-tick limit left behind
        result = tick(cursor, res)
        if result.cursor in (None, cursor):
            break
        cursor = result.cursor
    assert ticks > 20 and cursor is not None
    final = StoreCursor.from_json(cursor)
    expected = reference["cursor"]
    assert final.monitor == expected.monitor  # same open window, runs, baselines, totals
    n_bad = sum("broken" in x for _, _, lines in day_streams() for x in lines)
    assert (final.records_read, final.bad_records) == (expected.records_read, n_bad)
    assert n_bad == expected.bad_records == 2
    assert warehouse_rows(tmp_path) == warehouse_rows(root)
    # ... and against the stream itself, counted independently
    valid = [x for _, _, lines in day_streams() for x in lines if "broken" not in x]
    ids = [json.loads(x)["trace_id"] for x in valid]
    key = SAMPLE_KEY
    chosen = [
        t
        for t in ids
        if int.from_bytes(hashlib.blake2b(t.encode(), digest_size=8, key=key).digest(), "big")
        < RATE * 2**64
    ]
    totals = final.monitor["totals"] if final.monitor else {}
    assert (totals["records"], totals["sampled"]) == (len(ids), len(chosen))


def test_the_step_drop_alerts_after_three_windows_in_the_warehouse(
    one_pass: tuple[Path, dict[str, Any]],
) -> None:
    root, _ = one_pass
    rows = warehouse_rows(root)
    # 12 windows; the last one stays open (no later trace has closed it)
    assert {row[0] for row in rows["live_window_metrics"]} == set(range(1, 12))
    alert_windows = {(row[1], row[3]) for row in rows["live_alerts"] if row[0] == "alert"}
    # the drop starts at window 7 (mean 1/4 < 0.5): alerts at window 9, overall and per segment
    assert alert_windows == {("__all__", 9), ("multi_hop", 9), ("single", 9)}
    with duckdb.connect(str(root / "warehouse" / "live.duckdb"), read_only=True) as conn:
        means = conn.execute(
            "select window_index, value from live_window_metrics"
            " where segment = '__all__' and metric = 'mrr' order by window_index"
        ).fetchall()
    assert means == [(i, 1.0) for i in range(1, 7)] + [(i, 1 / 4) for i in range(7, 12)]


def test_a_replayed_tick_writes_nothing_twice(tmp_path: Path) -> None:
    write_all(tmp_path)
    res = resources(tmp_path)
    first = tick(None, res)
    rows = warehouse_rows(tmp_path)
    again = tick(None, res)  # the daemon died before storing the cursor: same tick again
    assert again.cursor == first.cursor
    assert warehouse_rows(tmp_path) == rows


def test_a_locked_warehouse_skips_the_tick_and_keeps_the_cursor(tmp_path: Path) -> None:
    write_all(tmp_path)
    database = tmp_path / "warehouse" / "live.duckdb"
    database.parent.mkdir(parents=True)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, duckdb\n"
            f"conn = duckdb.connect({str(database)!r})\n"
            "print('locked', flush=True)\n"
            "sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        result = tick(None, resources(tmp_path))
        assert result.cursor is None  # unchanged: the next tick reads the same traces
        assert result.asset_events == []
        assert "is locked by another process" in result.skip_message
        assert "the cursor is unchanged" in result.skip_message
    finally:
        holder.communicate("", timeout=30)  # closing its stdin lets it exit
    result = tick(None, resources(tmp_path))
    assert result.cursor is not None and len(result.asset_events) == 2 * 11


def test_windows_land_on_the_asset_and_the_check_follows_alerts(tmp_path: Path) -> None:
    write_all(tmp_path)
    instance = dg.DagsterInstance.ephemeral()
    res = resources(tmp_path)
    result = tick(None, res, instance)
    for event in result.asset_events:
        instance.report_runless_asset_event(event)
    records = instance.fetch_materializations(LIVE_ASSET_KEY, limit=100).records
    assert len(records) == 11
    latest = instance.get_latest_materialization_event(LIVE_ASSET_KEY)
    assert latest is not None and latest.asset_materialization is not None
    metadata = latest.asset_materialization.metadata
    assert metadata["window_index"] == dg.MetadataValue.int(11)
    assert metadata["mrr"] == dg.MetadataValue.float(1 / 4)
    assert isinstance(metadata["multi_hop/mrr"], dg.FloatMetadataValue)
    assert isinstance(metadata["coverage"], dg.FloatMetadataValue)
    evaluation = instance.get_latest_asset_check_evaluation_record(CHECK_KEY)
    assert evaluation is not None and evaluation.event is not None
    assert evaluation.event.dagster_event is not None
    check = evaluation.event.dagster_event.asset_check_evaluation_data
    assert not check.passed
    assert (check.description or "").startswith(
        "3 live alert(s) open: all segments: mrr 0.25 < 0.50"
    )

    # Run on its own, the check reads the open alerts from the warehouse: the same verdict.
    run = dg.materialize(
        [live_retrieval_metrics, live_sustained_drop],
        selection=dg.AssetSelection.checks(live_sustained_drop),
        resources={"warehouse": res["warehouse"]},
        instance=instance,
        raise_on_error=False,
    )
    (own,) = run.get_asset_check_evaluations()
    assert (own.passed, own.description) == (check.passed, check.description)

    # Recovery: a good window after the drop closes every alert and the check passes again.
    day = file_path(tmp_path, "2026-03-03", "a.jsonl")
    with day.open("a") as handle:
        for i in range(10):
            seconds = 12 * 60 + i * 5
            handle.write(trace_line(1000 + i, seconds, 1, ["multi_hop", "single"][i % 2]) + "\n")
        handle.write(trace_line(2000, 14 * 60, 1, "multi_hop") + "\n")  # closes windows 12, 13
    result = tick(result.cursor, res, instance)
    for event in result.asset_events:
        instance.report_runless_asset_event(event)
    evaluation = instance.get_latest_asset_check_evaluation_record(CHECK_KEY)
    assert evaluation is not None and evaluation.event is not None
    assert evaluation.event.dagster_event is not None
    check = evaluation.event.dagster_event.asset_check_evaluation_data
    assert check.passed, check.description
    assert "3 recovered, 0 open" in result.skip_message
    rerun = dg.materialize(
        [live_retrieval_metrics, live_sustained_drop],
        selection=dg.AssetSelection.checks(live_sustained_drop),
        resources={"warehouse": res["warehouse"]},
        instance=instance,
    )
    assert rerun.get_asset_check_evaluations()[0].passed


def test_definitions_load_and_the_interval_is_configurable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    defs = dg.Definitions(
        assets=[live_retrieval_metrics],
        asset_checks=[live_sustained_drop],
        sensors=[live_monitoring_sensor],
        resources=resources(tmp_path),
    )
    dg.Definitions.validate_loadable(defs)
    assert defs.resolve_sensor_def("live_retrieval_monitor").minimum_interval_seconds == 300
    assert (
        build_live_monitoring_sensor(minimum_interval_seconds=120).minimum_interval_seconds == 120
    )
    monkeypatch.setenv("RETRIEVAL_PIPELINE_LIVE_INTERVAL", "60")
    assert build_live_monitoring_sensor().minimum_interval_seconds == 60
    monkeypatch.setenv("RETRIEVAL_PIPELINE_LIVE_INTERVAL", "soon")
    with pytest.raises(ValueError, match="RETRIEVAL_PIPELINE_LIVE_INTERVAL"):
        build_live_monitoring_sensor()
