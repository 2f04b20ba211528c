"""A misspelt field is named, not read as absent without a word: `evaluate` tells each field a
trace record does not have, with the records that carry it and the field it most likely
misspells, and exits 1 when no trace could be scored (issue 34, item 3)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from click.testing import CliRunner, Result

from retrieval_pipeline.cli import main
from retrieval_pipeline.records import unknown_field_lines
from retrieval_pipeline.warehouse.ingestion import IngestCounts

BASE = {"timestamp": "2026-11-30T08:00:00Z", "retrieved_ids": ["d1", "d2"]}


def write(path: Path, records: list[dict[str, object]], extra: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + extra, encoding="utf-8")
    return path


def run(*args: str) -> Result:
    return CliRunner().invoke(main, ["evaluate", *args])


def test_a_misspelt_label_field_is_named_and_nothing_scored_exits_1(tmp_path: Path) -> None:
    traces = write(
        tmp_path / "t.jsonl",
        [
            {"trace_id": "t1", "query_id": "q1", **BASE, "relevant_docs": ["d2"]},
            {"trace_id": "t2", "query_id": "q2", **BASE, "relevant_docs": ["d1"]},
        ],
    )
    result = run(str(traces))
    assert result.exit_code == 1
    assert "Unknown field relevant_docs in 2 records: did you mean relevant_ids?" in result.output
    assert result.output.rstrip().splitlines()[-1] == (
        "Error: no trace could be scored; "
        "unknown field relevant_docs in 2 records: did you mean relevant_ids?"
    )
    data = json.loads(run(str(traces), "--output-format", "json").stdout)
    assert data["unknown_fields"] == {"relevant_docs": 2}


def test_a_misspelt_required_field_quarantines_and_is_named(tmp_path: Path) -> None:
    records: list[dict[str, object]] = [
        {"trace_id": f"t{i}", "query_id": "q", "timestamp": BASE["timestamp"],
         "retrieved_docs": ["d1"], "relevant_ids": ["d1"]}
        for i in range(3)
    ]  # fmt: skip
    result = run(str(write(tmp_path / "t.jsonl", records)))
    assert result.exit_code == 1
    assert "0 valid (0 scored; 0 unannotated, not scored), 3 quarantined" in result.output
    assert "Unknown field retrieved_docs in 3 records: did you mean retrieved_ids?" in (
        result.output
    )


def test_extra_fields_beside_scored_traces_are_told_and_exit_0(tmp_path: Path) -> None:
    # one record takes the JSON lane (a null grade is not plainly valid): counted there too
    traces = write(
        tmp_path / "t.jsonl",
        [
            {"trace_id": "t1", "query_id": "q1", **BASE, "relevant_ids": ["d2"], "latency_ms": 3},
            {"trace_id": "t2", "query_id": "q2", **BASE, "relevant_ids": ["d1"]},
        ],
        extra='{"trace_id": "t3", "query_id": "q3", "timestamp": "2026-11-30T08:00:00Z", '
        '"retrieved_ids": ["d1"], "relevance_scores": {"d1": null}, "latency_ms": 4}\n',
    )
    result = run(str(traces))
    assert result.exit_code == 0, result.output
    assert "Unknown field latency_ms in 2 records, not read" in result.output
    # t1: relevant d2 at rank 2 -> rr 1/2; t2: d1 at rank 1 -> rr 1; t3 quarantined
    assert "2 valid (2 scored; 0 unannotated, not scored), 1 quarantined" in result.output
    data = json.loads(run(str(traces), "--output-format", "json").stdout)
    assert data["means"]["mrr"] == (1 / 2 + 1) / 2


def test_parquet_columns_a_record_does_not_have_are_named(tmp_path: Path) -> None:
    table = pa.table(
        {
            "trace_id": ["t1", "t2"],
            "query_id": ["q1", "q2"],
            "timestamp": [BASE["timestamp"]] * 2,
            "retrieved_ids": [["d1", "d2"]] * 2,
            "relevant_ids": [["d1"], ["d2"]],
            "segmnet": ["a", None],
        }
    )
    pq.write_table(table, tmp_path / "t.parquet")
    result = run(str(tmp_path / "t.parquet"))
    assert result.exit_code == 0, result.output
    assert "Unknown field segmnet in 1 record: did you mean segment?" in result.output


def test_the_summary_names_the_five_commonest_fields() -> None:
    counts = IngestCounts(files=1, read=1, valid=1, quarantined=0, duplicate_ids_dropped=0)
    assert counts.unknown_fields == ()
    lines = unknown_field_lines([(f"f{i}", 7 - i) for i in range(7)], ["trace_id"])
    assert lines[0] == "unknown field f0 in 7 records, not read"
    assert lines[-1] == "... and 2 more unknown fields"
    assert len(lines) == 6
