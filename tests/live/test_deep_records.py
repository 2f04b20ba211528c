"""A record nested thousands of levels deep is a reason, not a crash, on the per-example path
(`records.parse_line`, which `monitor` and the live sensor read every arrival with): Python's JSON
reader raised RecursionError, which stopped the monitor for good on that line (issue 27, class 5).

DuckDB's reader has no such limit, so the batch path still reads a deep line that is a valid
record; the difference is pinned here, as the lenient-JSON one is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retrieval_pipeline.records import RecordError, parse_line
from retrieval_pipeline.warehouse.evaluation import run_evaluation

BASE = {
    "trace_id": "t",
    "query_id": "q",
    "timestamp": "2026-11-30",
    "retrieved_ids": ["a"],
    "relevant_ids": ["a"],
}
TOO_DEEP = "JSON nested too deeply to read one record at a time"


def with_extra(trace_id: str, extra: str) -> str:
    """BASE under `trace_id`, with a field `extra` holding the JSON text `extra`."""
    return json.dumps(BASE | {"trace_id": trace_id})[:-1] + f', "extra": {extra}}}'


LINES = {
    "unclosed": "[" * 5000,
    "a deep list": "[" * 5000 + "]" * 5000,
    "a deep field": with_extra("deep-field", "[" * 5000 + "]" * 5000),
    "a deep grade": json.dumps(BASE | {"trace_id": "deep-grade"})[:-1]
    + ', "relevance_scores": {"a": '
    + "[" * 5000
    + "]" * 5000
    + "}}",
}


@pytest.mark.parametrize("name", sorted(LINES))
def test_a_deep_line_is_a_reason_on_the_per_example_path(name: str) -> None:
    with pytest.raises(RecordError) as caught:
        parse_line(LINES[name])
    assert caught.value.reason.startswith(TOO_DEEP)
    assert caught.value.field is None


def test_a_shallow_line_is_read_as_before() -> None:
    assert parse_line(with_extra("shallow", "[" * 100 + "]" * 100)).trace_id == "shallow"


def test_deep_lines_are_a_known_difference_with_the_batch_validator(tmp_path: Path) -> None:
    path = tmp_path / "deep.jsonl"
    path.write_text("".join(LINES[name] + "\n" for name in sorted(LINES)))
    run = run_evaluation(path, "mrr")
    reasons = {int(row.source_line): row.reason for row in run.quarantine.itertuples()}
    # sorted: a deep field (scored), a deep grade, a deep list, unclosed
    assert reasons == {
        # the reason shows the first 40 characters of the grade
        2: f'relevance_scores["a"] must be a finite number >= 0 (got {"[" * 40})',
        3: "not a JSON object (got a list)",
        4: "malformed JSON",
    }
    assert run.per_query.trace_id.tolist() == ["deep-field"]
