"""A grade too large to score is quarantined on every path, in the same words.

Exponential gain is 2^g - 1: a grade of 1024 made the gain infinite, nDCG NaN (inf / inf), the
segment mean NaN, and NaN compared as meeting its threshold, so one such trace hid a day's real
regression from the deploy gate (issue 27). A grade is now at most `records.MAX_GRADE` (100) in
both validators (DuckDB's two lanes and `records.py`) and in the per-example scorer; at that bound
the gains of any list a line can hold sum to a finite number, so a trace that passes validation
always scores."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from retrieval_pipeline.metrics import parse_metrics
from retrieval_pipeline.records import (
    MAX_GRADE,
    OVERALL_SEGMENT_REASON,
    RecordError,
    parse_line,
)
from retrieval_pipeline.reference import RetrievalMetricsEvaluator, score_trace
from retrieval_pipeline.segments import OVERALL_SEGMENT
from retrieval_pipeline.warehouse.connection import connect
from retrieval_pipeline.warehouse.evaluation import EvaluationRun, run_evaluation

FIELD = "relevance_scores"


def too_large(key: str, got: str) -> tuple[str, str]:
    return FIELD, f'relevance_scores["{key}"] must be a grade from 0 to 100 (got {got})'


def not_finite(key: str, got: str) -> tuple[str, str]:
    return FIELD, f'relevance_scores["{key}"] must be a finite number >= 0 (got {got})'


def line(trace_id: str, scores: str) -> str:
    """A record with `scores` as the literal JSON text of its relevance_scores."""
    return (
        f'{{"trace_id": "{trace_id}", "query_id": "q", "timestamp": "2026-11-30T10:00:00Z", '
        f'"retrieved_ids": ["a", "d"], "relevance_scores": {scores}}}'
    )


# (relevance_scores as written, the verdict: None for a scored record)
CASES: list[tuple[str, tuple[str, str] | None]] = [
    ('{"d": 1024}', too_large("d", "1024")),
    ('{"a": 1, "d": 100.5}', too_large("d", "100.5")),
    ('{"d": 1e300}', too_large("d", "1e300")),
    ('{"d": 1E3}', too_large("d", "1000.0")),  # DuckDB writes a double back in its own form
    ('{"d": 18446744073709551615}', too_large("d", "18446744073709551615")),
    ('{"d": 1000000000000000000000000000000}', too_large("d", "1000000000000000000000000000000")),
    # the first grade that breaks a rule decides, whichever rule it breaks
    ('{"d": -5, "e": 1024}', not_finite("d", "-5")),
    ('{"e": 1024, "d": -5}', too_large("e", "1024")),
    ('{"d": 1e309}', not_finite("d", "1e309")),
    ('{"d": 100}', None),
    ('{"d": 100.0, "a": 0}', None),
    ('{"d": 99.99999}', None),
]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(text + "\n" for text in lines))
    return path


def verdicts(run: EvaluationRun) -> dict[int, tuple[str, str]]:
    return {
        int(row.source_line): (str(row.field), str(row.reason))
        for row in run.quarantine.itertuples()
    }


def test_the_batch_validator_quarantines_grades_above_the_maximum(tmp_path: Path) -> None:
    lines = [line(f"t{n}", scores) for n, (scores, _) in enumerate(CASES, 1)]
    run = run_evaluation(write_lines(tmp_path / "day.jsonl", lines), "ndcg@10,mrr")
    expected = {n: verdict for n, (_, verdict) in enumerate(CASES, 1) if verdict is not None}
    assert verdicts(run) == expected
    scored = [f"t{n}" for n, (_, verdict) in enumerate(CASES, 1) if verdict is None]
    assert sorted(run.per_query.trace_id) == sorted(scored)
    assert run.ingest.read == run.ingest.valid + run.ingest.quarantined == len(CASES)
    assert run.per_query["ndcg@10"].notna().all()


def test_the_python_validator_gives_the_same_verdicts() -> None:
    for scores, verdict in CASES:
        text = line("t", scores)
        if verdict is None:
            assert parse_line(text).trace_id == "t"
            continue
        with pytest.raises(RecordError) as caught:
            parse_line(text)
        assert (caught.value.field, caught.value.reason) == verdict, scores


@pytest.mark.parametrize(
    "grade", [1024, 1024.0, 100.5], ids=["integer", "double", "a fraction above"]
)
def test_the_plain_lane_refuses_a_piece_whose_one_record_is_too_large(
    tmp_path: Path, grade: float
) -> None:
    # alone in its piece, the record would be read by the plain lane only: it must fall back to
    # the JSON lane (which names the reason) instead of storing the grade
    path = write_lines(tmp_path / "one.jsonl", [line("t", json.dumps({"d": grade}))])
    run = run_evaluation(path, "ndcg@10")
    assert verdicts(run) == {1: too_large("d", json.dumps(grade))}
    assert run.per_query.empty


@pytest.mark.parametrize("kind", [pa.float64(), pa.int64(), pa.float32()])
def test_typed_parquet_grades_above_the_maximum_are_quarantined(
    tmp_path: Path, kind: pa.DataType
) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(
        pa.table(
            {
                "trace_id": ["big", "fine"],
                "query_id": ["q", "q"],
                "timestamp": ["2026-11-30T10:00:00Z"] * 2,
                "retrieved_ids": [["a", "d"], ["a", "d"]],
                "relevance_scores": pa.array(
                    [[("a", 1), ("d", 1024)], [("d", 100)]], pa.map_(pa.string(), kind)
                ),
            }
        ),
        path,
    )
    run = run_evaluation(path, "ndcg@10")
    got = "1024" if pa.types.is_integer(kind) else "1024.0"
    assert verdicts(run) == {1: too_large("d", got)}
    # "fine": d at rank 2 is the only label: (2^100 - 1) / log2(3) over (2^100 - 1) / log2(1 + 1)
    assert run.per_query["ndcg@10"].tolist() == [pytest.approx(1 / math.log2(3))]


def test_the_largest_grade_scores_without_overflow_in_both_scorers(tmp_path: Path) -> None:
    gain_a, gain_b = 2.0**100 - 1, 2.0**99 - 1
    # retrieved [b, a]; the ideal order is [a, b]
    expected = (gain_b / 1 + gain_a / math.log2(3)) / (gain_a / 1 + gain_b / math.log2(3))
    record = {
        "trace_id": "t",
        "query_id": "q",
        "timestamp": "2026-11-30T10:00:00Z",
        "retrieved_ids": ["b", "a"],
        "relevance_scores": {"a": 100, "b": 99},
    }
    run = run_evaluation(write_lines(tmp_path / "t.jsonl", [json.dumps(record)]), "ndcg@10")
    assert run.per_query["ndcg@10"].tolist() == [pytest.approx(expected, rel=1e-12)]
    python = score_trace(["b", "a"], {"a": 100.0, "b": 99.0}, parse_metrics("ndcg@10"))
    assert python == {"ndcg@10": pytest.approx(expected, rel=1e-12)}


def test_a_long_list_of_the_largest_grade_sums_to_a_finite_score(tmp_path: Path) -> None:
    # 100,000 labels of grade 100, retrieved in reverse id order: every rank holds the largest
    # gain, so DCG = ideal DCG and nDCG = 1; MAP = 1 (every relevant document at its own rank)
    ids = [f"d{n}" for n in range(100_000)]
    record = {
        "trace_id": "t",
        "query_id": "q",
        "timestamp": "2026-11-30T10:00:00Z",
        "retrieved_ids": ids[::-1],
        "relevance_scores": dict.fromkeys(ids, MAX_GRADE),
    }
    run = run_evaluation(write_lines(tmp_path / "t.jsonl", [json.dumps(record)]), "ndcg@100000,map")
    assert run.ingest.quarantined == 0
    assert run.per_query[["ndcg@100000", "map"]].values.tolist() == [
        [pytest.approx(1.0), pytest.approx(1.0)]
    ]


def test_the_per_example_evaluator_quarantines_instead_of_overflowing() -> None:
    evaluator = RetrievalMetricsEvaluator({"ndcg@10": 0.5})
    record = json.loads(line("t", '{"d": 1024}'))
    with pytest.raises(RecordError) as caught:
        evaluator.evaluate(record)
    assert (caught.value.field, caught.value.reason) == too_large("d", "1024")


def test_the_reference_scorer_refuses_labels_it_cannot_score() -> None:
    # labels handed in directly, not through parse_record: the scorer checks them itself
    metrics = parse_metrics("ndcg@10")
    for grade, verdict in [
        (1024.0, too_large("d", "1024.0")),
        (math.inf, not_finite("d", "Infinity")),
        (math.nan, not_finite("d", "NaN")),
    ]:
        with pytest.raises(RecordError) as caught:
            score_trace(["d"], {"d": grade}, metrics)
        assert (caught.value.field, caught.value.reason) == verdict
    # a negative grade, even -inf, adds nothing (trec_eval): "a" alone counts, at rank 2
    scores = score_trace(["d", "a"], {"d": -math.inf, "a": 1.0}, metrics)
    assert scores == {"ndcg@10": pytest.approx(1 / math.log2(3))}


def test_both_validators_hold_the_same_maximum_and_reserved_segment() -> None:
    conn = connect(":memory:")
    try:
        assert conn.execute("select max_grade()").fetchone() == (MAX_GRADE,)
        row = conn.execute("select overall_segment(), overall_segment_reason()").fetchone()
        assert row == (OVERALL_SEGMENT, OVERALL_SEGMENT_REASON)
    finally:
        conn.close()
