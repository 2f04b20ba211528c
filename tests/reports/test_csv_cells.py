"""CSV output never carries a formula (issue 27, class 8): a text cell that starts with `=`, `+`,
`-`, `@`, a tab or a carriage return is written with a `'` before it, which spreadsheets show as
text; numbers are written as they are, and Parquet and JSON lines keep every value as it is."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from retrieval_pipeline.cli import main
from retrieval_pipeline.reports.per_query import csv_safe

FORMULA = "=cmd|' /C calc'!A0"
RECORDS = [
    {
        "trace_id": "@t1",
        "query_id": "-1+1",
        "timestamp": "2026-11-30T10:00:00Z",
        "segment": FORMULA,
        "variant": "+candidate",
        "retrieved_ids": ["a"],
        "relevant_ids": ["a"],
    },
    {  # quarantined: its trace id is a formula too
        "trace_id": "=1+1",
        "query_id": "q",
        "timestamp": "yesterday",
        "retrieved_ids": ["a"],
    },
]


@pytest.mark.parametrize(
    ("value", "written"),
    [
        (FORMULA, "'" + FORMULA),
        ("+1", "'+1"),
        ("-1", "'-1"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\t=1", "'\t=1"),
        ("\r=1", "'\r=1"),
        ("multi_hop", "multi_hop"),
        ("a=b", "a=b"),
        (-1.5, -1.5),
        (None, None),
    ],
)
def test_csv_safe(value: object, written: object) -> None:
    assert csv_safe(value) == written


def run(tmp_path: Path, suffix: str) -> tuple[Path, Path]:
    traces = tmp_path / "t.jsonl"
    traces.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    output, quarantine = tmp_path / f"out{suffix}", tmp_path / f"q{suffix}"
    args = ["evaluate", str(traces), "--metrics", "mrr", "--output", str(output)]
    result = CliRunner().invoke(main, [*args, "--quarantine", str(quarantine)])
    assert result.exit_code == 0, result.output
    return output, quarantine


def test_evaluate_csv_cells_hold_no_formula(tmp_path: Path) -> None:
    output, quarantine = run(tmp_path, ".csv")
    with output.open(newline="") as handle:
        (row,) = list(csv.DictReader(handle))
    assert (row["trace_id"], row["query_id"]) == ("'@t1", "'-1+1")
    assert (row["segment"], row["variant"]) == ("'" + FORMULA, "'+candidate")
    assert float(row["mrr"]) == 1.0
    with quarantine.open(newline="") as handle:
        (rejected,) = list(csv.DictReader(handle))
    assert rejected["trace_id"] == "'=1+1"
    assert rejected["reason"] == 'unparsable timestamp "yesterday"'


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_parquet_and_json_lines_keep_values_as_they_are(tmp_path: Path, suffix: str) -> None:
    output, quarantine = run(tmp_path, suffix)

    def read(path: Path) -> pd.DataFrame:
        return pd.read_parquet(path) if suffix == ".parquet" else pd.read_json(path, lines=True)

    row = read(output).iloc[0]
    assert (row["trace_id"], row["segment"], row["variant"]) == ("@t1", FORMULA, "+candidate")
    assert read(quarantine).iloc[0]["trace_id"] == "=1+1"
