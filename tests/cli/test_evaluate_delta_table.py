"""`evaluate` on a Delta table folder scores the table's current rows (issue 32): the Parquet
files that an overwrite or a delete removed (`remove` actions in `_delta_log/`) stay in the folder
and must not be read."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from retrieval_pipeline.cli import main

deltalake = pytest.importorskip("deltalake", reason="the Delta tests need deltalake (test extra)")


def _rows(ranks: dict[str, int]) -> pa.Table:
    """One trace per id whose one relevant document is at `rank` of three (reciprocal rank 1 /
    rank)."""
    ids = sorted(ranks)
    return pa.table(
        {
            "trace_id": ids,
            "query_id": [f"q-{i}" for i in ids],
            "timestamp": ["2026-11-30T10:00:00Z"] * len(ids),
            "retrieved_ids": [["d1", "d2", "d3"]] * len(ids),
            "relevant_ids": [[f"d{ranks[i]}"] for i in ids],
        }
    )


def _scored(table: Path, out: Path) -> tuple[dict[str, object], list[str]]:
    result = CliRunner().invoke(
        main, ["evaluate", str(table), "--metrics", "mrr", "--format", "json", "--output", str(out)]
    )
    assert result.exit_code == 0, result.output
    per_trace = [json.loads(line)["trace_id"] for line in out.read_text().splitlines()]
    return json.loads(result.stdout), sorted(per_trace)


def test_evaluate_scores_the_current_rows_after_an_overwrite_and_a_delete(tmp_path: Path) -> None:
    table = tmp_path / "traces"
    deltalake.write_deltalake(str(table), _rows({"a1": 1, "a2": 1, "a3": 1}))
    deltalake.write_deltalake(str(table), _rows({"b1": 2, "b2": 3, "b3": 1}), mode="overwrite")
    assert len(list(table.glob("*.parquet"))) == 2  # the overwritten file is still there

    summary, traces = _scored(table, tmp_path / "after_overwrite.jsonl")
    assert traces == ["b1", "b2", "b3"]
    assert summary["records_read"] == 3
    assert summary["means"] == {"mrr": pytest.approx((1 / 2 + 1 / 3 + 1) / 3)}

    deltalake.DeltaTable(str(table)).delete("trace_id = 'b3'")
    assert len(list(table.glob("*.parquet"))) == 3  # b1, b2 rewritten beside the old files

    summary, traces = _scored(table, tmp_path / "after_delete.jsonl")
    assert traces == ["b1", "b2"]
    assert summary["records_read"] == 2
    assert summary["means"] == {"mrr": pytest.approx((1 / 2 + 1 / 3) / 2)}
