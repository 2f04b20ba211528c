"""Hostile Parquet files: missing and mistyped columns, typed timestamps and integer ids, pandas'
struct scores, maps with a null grade or a repeated key. Every row is scored or quarantined with
its file, row, field and reason, as a JSON line would be.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from retrieval_pipeline.ingest.files import TraceFileError
from retrieval_pipeline.warehouse.evaluation import run_evaluation
from tests.hostile_records import ID_RULE, finite, verdicts

BASE_COLUMNS = {
    "trace_id": ["p1", "p2"],
    "query_id": ["q", "q"],
    "timestamp": ["2026-11-30T10:00:00Z", "2026-11-30T11:00:00Z"],
}


def _parquet(tmp_path: Path, columns: dict[str, object]) -> Path:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({**BASE_COLUMNS, **columns}), path)
    return path


MISTYPED = [
    (
        "retrieved_ids as int64",
        {"retrieved_ids": pa.array([1, 2], pa.int64())},
        "retrieved_ids",
        "retrieved_ids must be a list of ids (got an integer)",
    ),
    (
        "retrieved_ids as a string",
        {"retrieved_ids": ["a,b", "c"]},
        "retrieved_ids",
        "retrieved_ids must be a list of ids (got a string)",
    ),
    (
        "retrieved_ids as a list of floats",
        {"retrieved_ids": pa.array([[1.0], [2.5]], pa.list_(pa.float64()))},
        "retrieved_ids",
        f"retrieved_ids[0] is a number with a fraction; {ID_RULE}",
    ),
    (
        "retrieved_ids as a list of structs",
        {"retrieved_ids": pa.array([[{"id": "a"}], [{"id": "b"}]])},
        "retrieved_ids",
        f"retrieved_ids[0] is an object; {ID_RULE}",
    ),
    (
        "timestamp as epoch seconds",
        {"retrieved_ids": [["a"], ["b"]], "timestamp": pa.array([1, 2], pa.int64())},
        "timestamp",
        "timestamp must be an ISO 8601 string (got an integer)",
    ),
    (
        "trace_id as float64",
        {"retrieved_ids": [["a"], ["b"]], "trace_id": pa.array([1.5, 2.5])},
        "trace_id",
        "trace_id must be a non-empty string or an integer (got a number with a fraction)",
    ),
    (
        "relevance_scores as strings",
        {"retrieved_ids": [["a"], ["b"]], "relevance_scores": ["a:1", "b:2"]},
        "relevance_scores",
        "relevance_scores must be an object of doc_id -> grade (got a string)",
    ),
]


@pytest.mark.parametrize(
    ("columns", "field", "reason"),
    [case[1:] for case in MISTYPED],
    ids=[case[0] for case in MISTYPED],
)
def test_a_mistyped_parquet_column_quarantines_every_row(
    tmp_path: Path, columns: dict[str, object], field: str, reason: str
) -> None:
    run = run_evaluation(_parquet(tmp_path, columns), "mrr")
    assert run.ingest.read == 2 and run.ingest.valid == 0
    assert verdicts(run) == {1: (field, reason), 2: (field, reason)}


@pytest.mark.parametrize("missing", ["trace_id", "query_id", "timestamp", "retrieved_ids"])
def test_a_parquet_file_without_a_required_column_is_named(tmp_path: Path, missing: str) -> None:
    columns = {**BASE_COLUMNS, "retrieved_ids": [["a"], ["b"]]}
    del columns[missing]
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table(columns), path)
    with pytest.raises(
        TraceFileError, match=rf"t\.parquet: .*lacks required column\(s\) {missing}"
    ):
        run_evaluation(path, "mrr")


def test_parquet_typed_timestamps_and_integer_ids_are_read(tmp_path: Path) -> None:
    moment = datetime(2026, 11, 30, 10, tzinfo=UTC)
    path = _parquet(
        tmp_path,
        {
            "trace_id": pa.array([2**64 - 1, 5], pa.uint64()),
            "timestamp": pa.array([moment, moment], pa.timestamp("ns", tz="America/New_York")),
            "retrieved_ids": pa.array([[7, 8], [9]], pa.list_(pa.int64())),
            "relevant_ids": pa.array([["8"], ["9"]], pa.large_list(pa.large_string())),
        },
    )
    run = run_evaluation(path, "mrr")
    assert run.per_query.trace_id.tolist() == [str(2**64 - 1), "5"]
    assert run.per_query.mrr.tolist() == [1 / 2, 1.0]


def test_parquet_struct_scores_from_pandas_dicts(tmp_path: Path) -> None:
    # pandas writes a dict column as a struct of every key seen: null where a row lacks a key
    frame = pd.DataFrame(
        {
            **BASE_COLUMNS,
            "retrieved_ids": [["a", "b"], ["c"]],
            "relevance_scores": [{"a": 1, "b": 3}, {"c": 2}],
        }
    )
    path = tmp_path / "t.parquet"
    frame.to_parquet(path)
    assert pa.types.is_struct(pq.read_schema(path).field("relevance_scores").type)
    run = run_evaluation(path, "mrr,ndcg@5")
    assert run.ingest.quarantined == 0
    assert run.per_query.mrr.tolist() == [1.0, 1.0]
    assert (run.labels.labels, run.per_query.n_relevant.tolist()) == (3, [2, 1])


def test_parquet_maps_with_a_null_grade_or_a_repeated_key(tmp_path: Path) -> None:
    scores = pa.array(
        [[("a", None)], [("a", 2), ("a", 1)], [("b", 1)]], pa.map_(pa.string(), pa.int64())
    )
    path = tmp_path / "t.parquet"
    pq.write_table(
        pa.table(
            {
                "trace_id": ["null-grade", "twice", "fine"],
                "query_id": ["q"] * 3,
                "timestamp": ["2026-11-30"] * 3,
                "retrieved_ids": [["a"], ["a"], ["b"]],
                "relevance_scores": scores,
            }
        ),
        path,
    )
    run = run_evaluation(path, "mrr")  # DuckDB cannot read the repeated key as a map
    assert verdicts(run) == {
        1: finite("relevance_scores", "a", "null"),
        2: ("relevance_scores", 'relevance_scores grades document "a" more than once'),
    }
    assert run.per_query.trace_id.tolist() == ["fine"]
