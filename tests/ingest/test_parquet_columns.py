"""Parquet files that crashed ingestion with a traceback naming no file (issue 27, class 9): an
extra column of an Arrow type DuckDB lacks is ignored, a trace field of such a type or a column
name given twice fails in words naming the file, and binary ids that are not UTF-8 are quarantined
as a JSON line with invalid UTF-8 is (they became the text `\\xFF`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from retrieval_pipeline.ingest.files import TraceFileError
from retrieval_pipeline.warehouse.evaluation import run_evaluation

BASE = {
    "trace_id": ["t1", "t2"],
    "query_id": ["q", "q"],
    "timestamp": ["2026-11-30"] * 2,
    "retrieved_ids": [["a", "b"], ["b", "a"]],
    "relevant_ids": [["a"], ["a"]],
}


def write(tmp_path: Path, table: pa.Table) -> Path:
    path = tmp_path / "t.parquet"
    pq.write_table(table, path)
    return path


@pytest.mark.parametrize(
    "extra",
    [
        pa.array(np.array([1.5, 2.5], dtype=np.float16)),
        pa.array([1, 2], pa.decimal256(40, 2)),
        pa.array([[np.float16(1)], []], pa.list_(pa.float16())),
    ],
    ids=["float16", "decimal256", "list of float16"],
)
def test_an_unused_column_of_an_unreadable_type_is_ignored(tmp_path: Path, extra: pa.Array) -> None:
    run = run_evaluation(write(tmp_path, pa.table({**BASE, "extra": extra})), "mrr")
    assert run.ingest.quarantined == 0
    assert run.per_query.mrr.tolist() == [1.0, 1 / 2]  # a at rank 1, then at rank 2


def test_a_trace_field_of_an_unreadable_type_is_named(tmp_path: Path) -> None:
    scores = pa.array([[("a", 1.0)], [("a", 2.0)]], pa.map_(pa.string(), pa.float16()))
    path = write(tmp_path, pa.table({**BASE, "relevance_scores": scores}))
    with pytest.raises(TraceFileError, match=r"t\.parquet: column relevance_scores has the Arrow"):
        run_evaluation(path, "mrr")


def test_a_column_name_given_twice_is_named(tmp_path: Path) -> None:
    names = [*BASE, "segment", "segment"]
    arrays = [pa.array(v) for v in BASE.values()] + [pa.array(["x", "x"]), pa.array(["y", "y"])]
    path = write(tmp_path, pa.Table.from_arrays(arrays, names=names))
    with pytest.raises(TraceFileError, match=r"t\.parquet: column name\(s\) 'segment' given more"):
        run_evaluation(path, "mrr")


def test_binary_ids_are_read_as_utf8_and_invalid_ones_quarantined(tmp_path: Path) -> None:
    table = pa.table(
        {
            **BASE,
            "trace_id": pa.array([b"t1", b"\xfft2"], pa.binary()),
            "retrieved_ids": pa.array([[b"a", b"b"], [b"b", b"a\xfe"]], pa.list_(pa.binary())),
        }
    )
    run = run_evaluation(write(tmp_path, table), "mrr")
    assert run.per_query.trace_id.tolist() == ["t1"]  # a valid binary id is its text
    assert run.per_query.mrr.tolist() == [1.0]
    assert run.quarantine.reason.tolist() == ["invalid UTF-8 at byte 0 of trace_id"]
    assert run.quarantine.source_line.tolist() == [2]
    assert "\\xFF" not in run.quarantine.raw_record.iloc[0]


def test_the_first_bad_value_of_a_row_is_its_reason(tmp_path: Path) -> None:
    table = pa.table(
        {**BASE, "retrieved_ids": pa.array([[b"a", b"\xc3("], [b"b"]], pa.list_(pa.binary()))}
    )
    run = run_evaluation(write(tmp_path, table), "mrr")
    assert run.quarantine.reason.tolist() == ["invalid UTF-8 at byte 0 of retrieved_ids[1]"]
