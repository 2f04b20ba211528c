"""Span exports scored through the warehouse: the same per-trace values as the same data written
as trace records (`evaluate`), for OpenInference and GenAI spans, and for each reranker stage."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pandas as pd

from retrieval_pipeline.ingest.span_pieces import SpanReading
from retrieval_pipeline.warehouse.evaluation import EvaluationRun, run_evaluation
from tests.ingest.span_exports import (
    export_line,
    genai_retriever,
    make_records,
    openinference_retriever,
    other_span,
    reranker,
    trace_id_for,
)

METRICS = "ndcg@10,mrr,precision@5,recall@20,map"
KEYS = ["trace_id", "query_id", "segment", "variant", "n_retrieved", "n_relevant"]


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def export(records: list[dict[str, Any]], genai: bool) -> tuple[list[str], list[dict[str, Any]]]:
    """The records as retrieval spans, an LLM span and (every third) a RERANKER span beside
    each; returns the lines and the reranker outputs written as trace records."""
    rng = random.Random(3)
    lines, reranked = [], []
    for n, record in enumerate(records):
        trace = trace_id_for(n)
        if genai:
            spans = [genai_retriever(record, trace, rng, as_json_text=n % 2 == 1)]
        else:
            spans = [openinference_retriever(record, trace, rng, n % 4 != 0)]
        spans.append(other_span(f"{n:08x}0000cafe", trace, record["timestamp"], "LLM"))
        if n % 3 == 0 and not genai:
            output = [*record["retrieved_ids"][::-1], "doc-7"]
            span_id = f"{n:08x}0000beef"
            spans.append(
                reranker(span_id, trace, record["timestamp"], record["retrieved_ids"], output)
            )
            reranked.append(record | {"trace_id": span_id, "retrieved_ids": output})
        lines.append(export_line([spans]))
    return lines, reranked


def scores(run: EvaluationRun) -> pd.DataFrame:
    frame = run.per_query.sort_values("trace_id").reset_index(drop=True)
    return frame[KEYS + [m.name for m in run.metrics]]


def test_openinference_spans_score_as_their_records(tmp_path: Path) -> None:
    records = make_records(60, seed=31)
    lines, _ = export(records, genai=False)
    spans = run_evaluation([write(tmp_path / "spans.jsonl", lines)], METRICS)
    plain = run_evaluation(
        [write(tmp_path / "records.jsonl", [json.dumps(r) for r in records])], METRICS
    )
    pd.testing.assert_frame_equal(scores(spans), scores(plain))
    assert scores(plain)["ndcg@10"].notna().sum() > 30  # most are annotated: a real comparison
    # 60 retrievers scored, 60 LLM spans and 20 rerankers (another stage) skipped
    counts = spans.ingest
    assert (counts.read, counts.valid, counts.quarantined, counts.skipped) == (140, 60, 0, 80)
    assert counts.read == counts.valid + counts.quarantined + counts.skipped


def test_genai_spans_score_as_their_records(tmp_path: Path) -> None:
    records = make_records(30, seed=32)
    lines, _ = export(records, genai=True)
    folder = tmp_path / "day"
    folder.mkdir()
    write(folder / "export.json", lines)  # a .json export, found by its content
    write(
        folder / "records.jsonl",
        [json.dumps(r | {"trace_id": "x" + r["trace_id"]}) for r in records],
    )
    both = scores(run_evaluation([folder], METRICS))
    from_spans = both[~both["trace_id"].str.startswith("x")].reset_index(drop=True)
    from_records = both[both["trace_id"].str.startswith("x")].reset_index(drop=True)
    from_records["trace_id"] = from_records["trace_id"].str[1:]
    pd.testing.assert_frame_equal(from_spans, from_records)


def test_the_reranker_stage_scores_its_output_against_the_retrievers_labels(tmp_path: Path) -> None:
    records = make_records(30, seed=33)
    lines, reranked = export(records, genai=False)
    path = write(tmp_path / "spans.jsonl", lines)
    stage = run_evaluation([path], METRICS, spans=SpanReading(stage="reranker"))
    expected = run_evaluation(
        [write(tmp_path / "reranked.jsonl", [json.dumps(r) for r in reranked])], METRICS
    )
    pd.testing.assert_frame_equal(scores(stage), scores(expected))
    given = run_evaluation([path], METRICS, spans=SpanReading(stage="reranker_input"))
    assert sorted(given.per_query["trace_id"]) == sorted(r["trace_id"] + ":input" for r in reranked)
    # 10 rerankers kept; 30 retrievers and 30 LLM spans skipped
    assert (stage.ingest.valid, stage.ingest.skipped) == (10, 60)


def test_a_bad_span_is_quarantined_with_its_file_line_and_span(tmp_path: Path) -> None:
    records = make_records(3, seed=34)
    lines, _ = export(records, genai=False)
    broken = json.loads(lines[1])
    span = broken["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span["attributes"] = [a for a in span["attributes"] if a["key"] != "metadata"] + [
        {"key": "metadata", "value": {"stringValue": "{not json"}}
    ]
    lines[1] = json.dumps(broken)
    run = run_evaluation([write(tmp_path / "spans.jsonl", lines)], METRICS)
    (row,) = run.quarantine.itertuples()
    # named by its export line; numbered among the export's records (the first line holds one)
    assert (row.source_file, row.source_line) == (f"{tmp_path / 'spans.jsonl'} line 2", 2)
    assert (
        row.reason == f"span {records[1]['trace_id']}: metadata is a string that is not valid JSON"
    )
    assert (run.ingest.valid, run.ingest.quarantined) == (2, 1)
