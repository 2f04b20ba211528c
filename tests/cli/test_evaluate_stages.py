"""`evaluate --stages` on a span export: each stage's means, and the reranker's gain over its
input per segment, against the same stages written as trace records and scored apart."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from retrieval_pipeline.cli import main
from retrieval_pipeline.warehouse.evaluation import run_evaluation
from tests.ingest.span_exports import (
    export_line,
    make_records,
    openinference_retriever,
    other_span,
    reranker,
    trace_id_for,
)

METRICS = "ndcg@10,mrr"


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_stages_and_the_rerankers_gain(tmp_path: Path) -> None:
    records = [
        r | {"segment": ("faq", "long_tail")[n % 2]} for n, r in enumerate(make_records(40, 41))
    ]
    rng = random.Random(5)
    lines: list[str] = []
    given: list[dict[str, Any]] = []
    reranked: list[dict[str, Any]] = []
    for n, record in enumerate(records):
        trace, span_id = trace_id_for(n), f"{n:08x}0000beef"
        ids = record["retrieved_ids"]
        # the reranker puts a relevant document first on even spans, and last on odd ones
        relevant = record.get("relevant_ids", ["doc-0"])[0]
        rest = [d for d in ids if str(d) != relevant]
        output = [relevant, *rest] if n % 2 == 0 else [*rest, relevant]
        spans = [
            openinference_retriever(record, trace, rng),
            reranker(span_id, trace, record["timestamp"], ids, output),
            other_span(f"{n:08x}0000cafe", trace, record["timestamp"], "LLM"),
        ]
        lines.append(export_line([spans]))
        given.append(record | {"trace_id": span_id + ":input"})
        reranked.append(record | {"trace_id": span_id, "retrieved_ids": output})
    export = write(tmp_path / "spans.jsonl", lines)

    result = CliRunner().invoke(
        main, ["evaluate", str(export), "--metrics", METRICS, "--stages", "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["records_scored"] == 40 and data["spans_skipped"] == 80  # rerankers, LLM spans

    inputs = run_evaluation([write(tmp_path / "in.jsonl", [json.dumps(r) for r in given])], METRICS)
    outputs = run_evaluation(
        [write(tmp_path / "out.jsonl", [json.dumps(r) for r in reranked])], METRICS
    )
    assert data["stages"]["reranker_input"]["means"] == inputs.means()
    assert data["stages"]["reranker"]["means"] == outputs.means()
    assert data["stages"]["reranker"]["records_scored"] == 40

    both = inputs.per_query.merge(
        outputs.per_query.assign(trace_id=outputs.per_query["trace_id"] + ":input"),
        on=["trace_id", "segment"],
        suffixes=("_in", "_out"),
    )
    for row in data["reranker_gain"]:
        cell = both if row["segment"] == "__all__" else both[both["segment"] == row["segment"]]
        pairs = cell[[f"{row['metric']}_in", f"{row['metric']}_out"]].dropna()
        difference = pairs.iloc[:, 1] - pairs.iloc[:, 0]
        assert row["pairs"] == len(pairs) > 0
        assert abs(row["gain"] - difference.mean()) < 1e-12
        assert row["ci_low"] <= row["gain"] <= row["ci_high"]
    faq = {r["metric"]: r["gain"] for r in data["reranker_gain"] if r["segment"] == "faq"}
    tail = {r["metric"]: r["gain"] for r in data["reranker_gain"] if r["segment"] == "long_tail"}
    assert faq["mrr"] > 0 > tail["mrr"]  # first on even (faq) spans, last on odd (long_tail)

    text = CliRunner().invoke(main, ["evaluate", str(export), "--metrics", METRICS, "--stages"])
    assert "Reranker gain over its input" in text.output
    assert "80 skipped (spans of other kinds or stages)" in text.output
