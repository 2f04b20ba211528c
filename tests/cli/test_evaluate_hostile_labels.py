"""`evaluate` against hostile labels (issue 32): judgments with grades past the trace records'
range, and a mean never told over traces whose values are missing."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from retrieval_pipeline.cli import main
from retrieval_pipeline.cli.evaluate import summary, summary_text
from retrieval_pipeline.warehouse.evaluation import run_evaluation

TS = "2026-11-30T10:00:00Z"


def _traces(path: Path) -> Path:
    lines = (
        json.dumps({"trace_id": f"t{i}", "query_id": f"q{i}", "timestamp": TS,
                    "retrieved_ids": ["d1", "d2"]})
        for i in (1, 2, 3)
    )  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    return path


def test_judgments_past_the_grade_range_are_quarantined_and_the_mean_counts_its_values(
    tmp_path: Path,
) -> None:
    traces = _traces(tmp_path / "traces.jsonl")
    qrels = tmp_path / "set.qrels"
    qrels.write_text("q1 0 d1 1\nq2 0 d2 1\nq3 0 d1 1024\nq3 0 d2 1\nq3 0 d3 1e300\n")
    quarantine = tmp_path / "bad.jsonl"
    args = ["evaluate", str(traces), "--judgments", str(qrels), "--metrics", "ndcg@10"]
    result = CliRunner().invoke(main, [*args, "--quarantine", str(quarantine)])
    assert result.exit_code == 0, result.output
    # t1 finds its relevant document first, t2 and t3 second (q3's 1024 is left out, so d2 is
    # its one relevant document): nDCG 1, 1/log2(3), 1/log2(3)
    mean = (1 + 2 / math.log2(3)) / 3
    assert f"ndcg@10             {mean:.4f}  3 annotated traces" in result.output
    rule = "grade must be a grade from 0 to 100"
    assert f'{qrels}:3: {rule} (got "1024")' in result.output
    assert f'{qrels}:5: {rule} (got "1e300")' in result.output
    rows = [json.loads(line) for line in quarantine.read_text().splitlines()]
    assert [(r["source_file"], r["source_line"], r["reason"]) for r in rows] == [
        (str(qrels), 3, f'{rule} (got "1024")'),
        (str(qrels), 5, f'{rule} (got "1e300")'),
    ]


def test_a_mean_is_told_over_the_values_it_holds(tmp_path: Path) -> None:
    """Should a value be missing for an annotated trace (a NaN stored as null), the count beside
    the mean is the count of values in it, and the traces left out are told."""
    traces = tmp_path / "traces.jsonl"
    lines = [
        json.dumps({"trace_id": f"t{n}", "query_id": "q", "timestamp": TS,
                    "retrieved_ids": ["d1", "d2"], "relevant_ids": [f"d{rank}"]})
        for n, rank in ((1, 1), (2, 2), (3, 2))
    ]  # fmt: skip
    traces.write_text("\n".join(lines) + "\n")
    run = run_evaluation(traces, "mrr")
    assert run.means() == {"mrr": pytest.approx((1 + 1 / 2 + 1 / 2) / 3)}
    per_query = run.per_query.copy()
    per_query.loc[per_query["trace_id"] == "t3", "mrr"] = float("nan")
    holed = replace(run, rows=pa.Table.from_pandas(per_query, preserve_index=False))
    assert holed.rows.column("mrr").null_count == 1  # pandas' NaN is Arrow's null
    assert holed.means() == {"mrr": pytest.approx((1 + 1 / 2) / 2)}
    assert holed.means_over() == {"mrr": 2}
    # a NaN kept as NaN (not null) is left out of the mean all the same
    column = run.rows.column_names.index("mrr")
    nan = pa.array([1.0, 0.5, float("nan")], pa.float64(), from_pandas=False)
    assert (nan.null_count, holed.rows.column("trace_id").to_pylist()) == (0, ["t1", "t2", "t3"])
    with_nan = replace(run, rows=run.rows.set_column(column, "mrr", nan))
    assert (with_nan.means(), with_nan.means_over()) == (holed.means(), holed.means_over())
    text = summary_text(holed)
    assert (
        f"mrr                 {0.75:.4f}  2 annotated traces (1 more annotated without a value: "
        "it could not be computed)" in text
    )
    assert summary(holed)["means_over"] == {"mrr": 2}
    assert summary(run)["means_over"] == {"mrr": 3}
