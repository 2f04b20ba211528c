"""One record's rules (`records.py`) on grades no float can hold: a 400-digit integer grade is a
reason to quarantine that record, never an exception that stops the reader (issue 32, item 1).
The live monitor, which reads a record at a time and runs for days, goes on past it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from retrieval_pipeline.cli import main
from retrieval_pipeline.records import RecordError, parse_line

HUGE = int("9" * 400)


def _line(trace_id: str, grade: object) -> str:
    record = {
        "trace_id": trace_id,
        "query_id": "q",
        "timestamp": "2026-12-01T00:00:00Z",
        "retrieved_ids": ["a", "b"],
        "relevance_scores": {"a": grade},
    }
    return json.dumps(record)


@pytest.mark.parametrize(("grade", "shown"), [(HUGE, "an integer of 400 digits"), (-HUGE, "")])
def test_a_grade_past_any_float_is_a_reason(grade: int, shown: str) -> None:
    with pytest.raises(RecordError) as caught:
        parse_line(_line("t1", grade))
    assert caught.value.field == "relevance_scores"
    assert caught.value.reason.startswith('relevance_scores["a"] must be a')
    assert shown in caught.value.reason


def test_the_monitor_goes_on_past_a_huge_grade(tmp_path: Path) -> None:
    path = tmp_path / "live.jsonl"
    path.write_text(_line("t1", HUGE) + "\n" + _line("t2", 2) + "\n", encoding="utf-8")
    result = CliRunner().invoke(
        main,
        ["monitor", "--follow", str(path), "--once", "--window-records", "10",
         "--metrics", "mrr", "--format", "json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    window = json.loads(result.stdout.splitlines()[0])
    # t2 alone is scored: "a" (grade 2) at rank 1, so its reciprocal rank is 1/1
    assert (window["records"], window["labelled"], window["means"]["mrr"]) == (1, 1, 1.0)
    assert "live.jsonl:1: relevance_scores" in result.stderr
