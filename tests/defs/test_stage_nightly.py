"""The reranker's stages in the nightly (docs/spans.md, "Stages in the nightly"): a day of span
exports with RERANKER spans scored stage by stage, stored, reported and held to `[stages]` by the
blocking `reranker_stage` check; the same day through `evaluate --stages` gives the same means and
gains; a day without reranker spans stores nothing and says so."""

from __future__ import annotations

import json
import math
import random
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from retrieval_pipeline.cli import main
from retrieval_pipeline.defs import ASSETS
from retrieval_pipeline.defs.nightly import checks
from retrieval_pipeline.environment import METRICS_DIR
from retrieval_pipeline.segments import OVERALL_SEGMENT
from tests.dagster_runs import RunFolder, checks_by_name, materialize
from tests.ingest.span_exports import (
    export_line,
    make_records,
    openinference_retriever,
    other_span,
    reranker,
    trace_id_for,
)
from tests.reports import test_prometheus as prometheus

DAY = date(2026, 12, 1)
EVERYTHING = [*ASSETS, *checks.ALL_CHECKS]
METRICS = '["ndcg@10", "mrr"]'


def write_day(store: Path, with_rerankers: bool = True) -> Path:
    """A day of 40 retrievals as span exports, one variant, segments faq and long_tail; the
    reranker puts a relevant document first on even (faq) spans and last on odd (long_tail)."""
    records = [
        r | {"segment": ("faq", "long_tail")[n % 2], "variant": "control"}
        for n, r in enumerate(make_records(40, 41))
    ]
    rng = random.Random(5)
    lines: list[str] = []
    for n, record in enumerate(records):
        trace, span_id = trace_id_for(n), f"{n:08x}0000beef"
        ids = record["retrieved_ids"]
        relevant = record.get("relevant_ids", ["doc-0"])[0]
        rest = [d for d in ids if str(d) != relevant]
        output = [relevant, *rest] if n % 2 == 0 else [*rest, relevant]
        spans: list[dict[str, Any]] = [openinference_retriever(record, trace, rng)]
        if with_rerankers:
            spans.append(reranker(span_id, trace, record["timestamp"], ids, output))
        spans.append(other_span(f"{n:08x}0000cafe", trace, record["timestamp"], "LLM"))
        lines.append(export_line([spans]))
    folder = store / "traces" / f"date={DAY.isoformat()}"
    folder.mkdir(parents=True)
    export = folder / "spans.jsonl"
    export.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return export


def config(tmp_path: Path, stages: str) -> Path:
    path = tmp_path / "pipeline.toml"
    path.write_text(
        f"metrics = {METRICS}\nthresholds = {{}}\n[checks]\nmin_coverage = 0.0\n"
        f"min_annotated_traces = 0\n[stages]\n{stages}\n",
        encoding="utf-8",
    )
    return path


def run_day(tmp_path: Path, stages: str, with_rerankers: bool = True) -> tuple[Any, RunFolder]:
    store = tmp_path / "store"
    write_day(store, with_rerankers)
    folder = RunFolder(tmp_path / "run")
    resources = folder.resources(store, config(tmp_path, stages))
    return materialize(EVERYTHING, resources, day=DAY), folder


def test_the_nightly_and_evaluate_stages_agree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "metrics").mkdir()
    monkeypatch.setenv(METRICS_DIR, str(tmp_path / "metrics"))
    result, folder = run_day(tmp_path, 'min_gain = {"mrr" = -1.0}')
    assert result.success
    evaluation = checks_by_name(result)["reranker_stage"]
    assert evaluation.passed, evaluation.description
    export = tmp_path / "store" / "traces" / f"date={DAY.isoformat()}" / "spans.jsonl"
    cli = CliRunner().invoke(
        main,
        ["evaluate", str(export), "--metrics", "ndcg@10,mrr", "--stages", "--format", "json"],
    )
    assert cli.exit_code == 0, cli.output
    data = json.loads(cli.output)

    means = folder.query("select * from stage_metrics")
    overall = means[means["segment"] == OVERALL_SEGMENT]
    assert set(overall["variant"]) == {"control"}  # one variant: its overall rows are the day's
    for stage in ("reranker_input", "reranker"):
        stored = overall[overall["stage"] == stage].set_index("metric")
        assert set(stored["traces"]) == {data["stages"][stage]["records_scored"]} == {40}
        for metric, mean in data["stages"][stage]["means"].items():
            assert math.isclose(stored.loc[metric, "mean"], mean, rel_tol=1e-12)
    gains = folder.query("select * from stage_gains").set_index(["segment", "metric"])
    assert len(gains) == len(data["reranker_gain"]) == 6  # faq, long_tail, overall x 2 metrics
    for row in data["reranker_gain"]:
        stored = gains.loc[(row["segment"], row["metric"])]
        assert stored["pairs"] == row["pairs"] > 0
        for key in ("input_mean", "output_mean", "gain", "ci_low", "ci_high"):
            assert math.isclose(stored[key], row[key], rel_tol=1e-12, abs_tol=1e-15), key
    # the first stage's tables hold the retriever alone, as before
    assert folder.query("select count(*) as n from traces")["n"].tolist() == [40]

    report = (folder.reports / f"regression_report_{DAY.isoformat()}.md").read_text()
    assert "## Reranker stage" in report and "No reranker stage" not in report
    as_json = json.loads((folder.reports / f"regression_report_{DAY.isoformat()}.json").read_text())
    assert as_json["stages"]["reranker_stage"] is True
    html = (folder.reports / f"regression_report_{DAY.isoformat()}.html").read_text()
    assert "<h2>Reranker stage</h2>" in html
    (materialization,) = result.asset_materializations_for_node("stage_metrics")
    metadata = materialization.metadata
    overall_gain = gains.loc[(OVERALL_SEGMENT, "mrr"), "gain"]
    assert math.isclose(metadata["mrr reranker gain"].value, overall_gain, rel_tol=1e-12)
    assert metadata["reranker_stage"].value is True
    assert "| segment | metric | pairs |" in metadata["reranker_gains"].value
    exposition = prometheus.samples((tmp_path / "metrics" / "retrieval_pipeline.prom").read_text())
    assert exposition[prometheus.key("reranker_stage")] == 1.0
    gain_key = prometheus.key("reranker_gain", metric="mrr", segment=OVERALL_SEGMENT)
    assert exposition[gain_key] == overall_gain


def test_a_reranker_losing_more_than_its_floor_fails_the_blocking_check(tmp_path: Path) -> None:
    # long_tail loses mrr (the relevant document moved last): its gain is far below -0.01
    result, folder = run_day(tmp_path, 'min_gain = {"mrr" = -0.01}')
    evaluation = checks_by_name(result)["reranker_stage"]
    assert not evaluation.passed
    assert "reranker gain long_tail: mrr" in (evaluation.description or "")
    assert "reranker gain faq" not in (evaluation.description or "")
    assert result.asset_materializations_for_node("regression_report")  # the report is written
    assert not result.asset_materializations_for_node("deploy_gate")  # the gate is blocked
    gains = folder.query("select gain from stage_gains where segment = 'long_tail'")
    assert (gains["gain"] < -0.01).all()


def test_a_stage_mean_below_its_floor_fails_the_check(tmp_path: Path) -> None:
    result, _ = run_day(tmp_path, 'thresholds = {reranker = {"ndcg@10" = 1.0}}')
    evaluation = checks_by_name(result)["reranker_stage"]
    assert not evaluation.passed
    assert "reranker all segments / control: ndcg@10" in (evaluation.description or "")
    assert "reranker_input" not in (evaluation.description or "")  # no floor for the input


@pytest.mark.parametrize("required", [False, True])
def test_a_day_without_reranker_spans(tmp_path: Path, required: bool) -> None:
    stages = f'min_gain = {{"mrr" = -0.01}}\nrequire_reranker = {str(required).lower()}'
    result, folder = run_day(tmp_path, stages, with_rerankers=False)
    evaluation = checks_by_name(result)["reranker_stage"]
    assert evaluation.passed is not required
    assert "no reranker stage" in (evaluation.description or "")
    assert folder.query("select count(*) as n from stage_metrics")["n"].tolist() == [0]
    assert folder.query("select count(*) as n from stage_gains")["n"].tolist() == [0]
    report = (folder.reports / f"regression_report_{DAY.isoformat()}.md").read_text()
    assert "No reranker stage" in report and "gain" not in report.split("## Reranker stage")[1]
    (materialization,) = result.asset_materializations_for_node("stage_metrics")
    assert materialization.metadata["reranker_stage"].value is False
    assert "no reranker stage" in str(materialization.metadata["summary"].value)
