"""A day's reranker stages (warehouse/stages.py): a day of trace records holds no span export, so
it is not read for its stages at all, and gives what scoring it gives: no stage, nothing stored."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from retrieval_pipeline.ingest.span_pieces import SpanReading
from retrieval_pipeline.metrics import parse_metrics
from retrieval_pipeline.warehouse import stages
from retrieval_pipeline.warehouse.sources import may_hold_reranker_spans
from retrieval_pipeline.warehouse.stages import (
    RERANKER_STAGES,
    score_stage_day,
    stage_rows,
    stage_runs,
)
from tests.defs.test_stage_nightly import write_day
from tests.trace_records import good, write_lines


def test_only_span_exports_and_phoenix_days_may_hold_reranker_spans(tmp_path: Path) -> None:
    spans = write_day(tmp_path / "spans")
    records = write_lines(tmp_path / "t.jsonl", [json.dumps(good("a"))])
    assert may_hold_reranker_spans([spans])
    assert may_hold_reranker_spans([spans.parent])  # the day's folder
    assert may_hold_reranker_spans([records, spans])
    assert not may_hold_reranker_spans([records])
    assert not may_hold_reranker_spans([tmp_path / "t.jsonl"])
    assert not may_hold_reranker_spans(pa.table({"trace_id": ["a"]}))


def test_a_day_of_trace_records_scores_as_no_stage_without_reading_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The short way (no span export: nothing read) gives the frames the runs give when they
    read the day and find no reranker span."""
    records = write_lines(
        tmp_path / "t.jsonl", [json.dumps(good(f"t{n}", relevant_ids=["doc-1"])) for n in range(5)]
    )
    metrics = parse_metrics("ndcg@10,mrr")
    names = [m.name for m in metrics]

    def traces() -> list[Path]:
        return [records]

    with monkeypatch.context() as patched:

        def no_run(*args: object, **kwargs: object) -> None:
            raise AssertionError("a day of trace records was scored for its stages")

        patched.setattr(stages, "run_evaluation", no_run)
        short = score_stage_day(traces, metrics, SpanReading())
    runs = stage_runs(traces, metrics, RERANKER_STAGES, SpanReading())
    scored = stage_rows(runs, names)
    assert short.scored == scored.scored == {stage: 0 for stage in RERANKER_STAGES}
    assert short.means.equals(scored.means) and short.means.empty
    assert short.gains.equals(scored.gains) and short.gains.empty
    assert short.stage_gains == scored.stage_gains == []
    assert len(short.queries) == len(scored.queries) == 0
    assert short.overall_means(names) == scored.overall_means(names)
