"""A Delta Lake table partitioned by date serves a day's traces, locally and from S3."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pyarrow as pa
import pytest

from retrieval_pipeline.ingest.delta import DeltaTableError, delta_days, read_delta_day
from retrieval_pipeline.ingest.filesystems import S3Settings, StoreError
from tests.processes import free_port
from tests.s3_server import S3

deltalake = pytest.importorskip("deltalake", reason="the Delta tests need deltalake (test extra)")

DAYS = ("2026-11-29", "2026-11-30", "2026-12-01")


def _traces(n: int = 90) -> pa.Table:
    """n traces spread over three days, with list and map columns as the trace contract has."""
    return pa.table(
        {
            "trace_id": [f"t{i:03d}" for i in range(n)],
            "query_id": [f"q{i % 7}" for i in range(n)],
            "timestamp": [f"{DAYS[i % 3]}T{i % 24:02d}:00:00Z" for i in range(n)],
            "retrieved_ids": [[f"d{i}", f"d{i + 1}", f"d{i + 2}"] for i in range(n)],
            "relevance_scores": pa.array(
                [[(f"d{i}", i % 4)] for i in range(n)], pa.map_(pa.string(), pa.int64())
            ),
            "date": [DAYS[i % 3] for i in range(n)],
        }
    )


def _day(table: pa.Table, day: str) -> pa.Table:
    return table.filter(pa.compute.equal(table["date"], day)).sort_by("trace_id")


def _read(url: str, day: date, settings: S3Settings | None = None, **kwargs: object) -> pa.Table:
    batches = list(read_delta_day(url, day, settings=settings, **kwargs))  # type: ignore[arg-type]
    return pa.Table.from_batches(batches).sort_by("trace_id")


def test_a_local_tables_day_partition_reads_back_as_written(tmp_path: Path) -> None:
    written = _traces()
    table = tmp_path / "lake" / "traces"
    deltalake.write_deltalake(str(table), written, partition_by=["date"])

    assert delta_days(table) == [date(2026, 11, 29), date(2026, 11, 30), date(2026, 12, 1)]
    day = _read(str(table), date(2026, 11, 30), batch_rows=7)  # several batches
    expected = _day(written, "2026-11-30")
    assert day.num_rows == 30
    assert day.select(expected.column_names).equals(expected)
    assert list(read_delta_day(table, date(2026, 10, 1))) == []  # a day it does not hold


def test_a_day_partition_read_from_s3_equals_what_was_written(s3: S3) -> None:
    written = _traces()
    url = "s3://bucket/lake/traces"
    deltalake.write_deltalake(url, written, partition_by=["date"],
                              storage_options=s3.settings.storage_options())  # fmt: skip
    assert delta_days(url, settings=s3.settings)[-1] == date(2026, 12, 1)
    day = _read(url, date(2026, 12, 1), s3.settings)
    expected = _day(written, "2026-12-01")
    assert day.select(expected.column_names).equals(expected)


def test_a_table_partitioned_otherwise_or_missing_is_refused(tmp_path: Path) -> None:
    written = _traces(6)
    by_query = tmp_path / "by_query"
    deltalake.write_deltalake(str(by_query), written, partition_by=["query_id"])
    with pytest.raises(DeltaTableError, match=r"not partitioned by date \(by query_id\)"):
        list(read_delta_day(by_query, date(2026, 11, 30)))
    with pytest.raises(DeltaTableError, match="no Delta table there"):
        delta_days(tmp_path / "nothing")


def test_an_unreachable_delta_store_is_one_line_naming_it(aws_env: None) -> None:
    port = free_port()
    settings = S3Settings(endpoint_url=f"http://127.0.0.1:{port}", connect_timeout_s=1,
                          request_timeout_s=2, max_attempts=1)  # fmt: skip
    with pytest.raises(StoreError) as failure:
        delta_days("s3://bucket/lake/traces", settings=settings)
    message = str(failure.value)
    assert "\n" not in message
    assert message.startswith(
        f"cannot reach the object store at http://127.0.0.1:{port} for s3://bucket/lake/traces: "
    )


def test_a_date_typed_partition_column_is_read_the_same(tmp_path: Path) -> None:
    written = _traces(9)
    typed = written.set_column(
        written.schema.get_field_index("date"),
        "date",
        pa.array([date.fromisoformat(d) for d in written["date"].to_pylist()], pa.date32()),
    )
    deltalake.write_deltalake(str(tmp_path / "typed"), typed, partition_by=["date"])
    day = _read(str(tmp_path / "typed"), date(2026, 11, 29))
    assert day["trace_id"].to_pylist() == ["t000", "t003", "t006"]
    assert day["date"].to_pylist() == [date(2026, 11, 29)] * 3
