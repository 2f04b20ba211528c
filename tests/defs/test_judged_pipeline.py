"""The nightly pipeline with incomplete judgments: the new measures, `judged_only` and `gmax` from
the TOML file, and the list-level coverage in the segment metrics and the regression report;
expected numbers from `run_evaluation` (the `evaluate` command's code) on the same traces."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import dagster as dg
import duckdb
import pandas as pd
import pytest

from retrieval_pipeline.defs.nightly import assets
from retrieval_pipeline.defs.resources import (
    PipelineSettingsResource,
    TraceStoreResource,
    WarehouseResource,
)
from retrieval_pipeline.sample import write_sample_store
from retrieval_pipeline.segments import OVERALL_SEGMENT
from retrieval_pipeline.store import LocalTraceStore
from retrieval_pipeline.warehouse.evaluation import run_evaluation

DAY = date(2026, 11, 30)
METRICS = ["ndcg@10", "bpref", "rbp@0.8", "err@5", "judged@5", "judged@3"]
CONFIG = f"metrics = {json.dumps(METRICS)}\ngmax = 2.0\njudged_only = true\n[thresholds]\n"


def test_the_nightly_scores_condensed_lists_and_reports_the_judged_share(tmp_path: Path) -> None:
    store = tmp_path / "store"
    write_sample_store(store, days=1, seed=11, end_date=DAY)
    config = tmp_path / "pipeline.toml"
    config.write_text(CONFIG)
    database = tmp_path / "db" / "warehouse.duckdb"
    result = dg.materialize(
        [assets.traces, assets.corpus, assets.labels, assets.query_metrics,
         assets.segment_metrics, assets.regression_report],
        resources={
            "trace_store": TraceStoreResource(root=str(store)),
            "warehouse": WarehouseResource(database=str(database)),
            "settings": PipelineSettingsResource(
                config_path=str(config), reports_dir=str(tmp_path / "reports")
            ),
        },
        partition_key=DAY.isoformat(),
        instance=dg.DagsterInstance.ephemeral(),
    )  # fmt: skip
    assert result.success
    sample = LocalTraceStore(store)
    expected = run_evaluation(
        sample.trace_files(DAY), METRICS, sample.corpus_file(), gmax=2.0, judged_only=True
    ).per_query.set_index("trace_id")
    scored = [*METRICS[:3], "rbp@0.8_residual", *METRICS[3:]]
    with duckdb.connect(str(database), read_only=True) as conn:
        rows = conn.execute("select trace_id, metric, value from query_metrics").fetchall()
        segment_metrics = {
            r[:2]: r[2]
            for r in conn.execute(
                "select variant, metric, mean from segment_metrics where segment = $all",
                {"all": OVERALL_SEGMENT},
            ).fetchall()
        }
    # the configured metrics, rbp's residual, and no judged@10: judged@5 is the coverage
    assert {metric for _, metric, _ in rows} == set(scored)
    for trace_id, metric, value in rows:
        want = expected.loc[trace_id, metric]
        assert (value is None) == bool(want != want), (trace_id, metric)
        if value is not None:
            assert value == pytest.approx(want, abs=1e-9), (trace_id, metric)
    (materialization,) = result.asset_materializations_for_node("query_metrics")
    assert materialization.metadata["judged_only"].value is True
    report = json.loads((tmp_path / "reports" / f"regression_report_{DAY}.json").read_text())
    assert report["judged"]["metric"] == "judged@5"
    means = expected.groupby("variant")["judged@5"].mean()
    assert report["judged"]["overall"] == pytest.approx(means.to_dict())
    assert {v: m for (v, metric), m in segment_metrics.items() if metric == "judged@5"} == (
        pytest.approx(means.to_dict())
    )
    (segments,) = result.asset_materializations_for_node("segment_metrics")
    for variant, mean in means.items():
        assert segments.metadata[f"judged@5 ({variant})"].value == pytest.approx(mean)
    # each label source's share of the annotated traces, per variant
    sources = pd.DataFrame(report["label_sources"])
    annotated = expected[expected["judged@5"].notna()]
    assert sources.groupby("variant")["annotated_traces"].sum().to_dict() == (
        annotated.groupby("variant").size().to_dict()
    )
    markdown = (tmp_path / "reports" / f"regression_report_{DAY}.md").read_text()
    assert "Label sources of the annotated traces: " in markdown
    assert "Judged share of the top 5 (judged@5, mean over annotated traces), every segment:" in (
        markdown
    )
