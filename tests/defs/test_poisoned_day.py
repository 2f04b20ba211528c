"""The deploy gate refuses the poisoned day: the sample store's real regression (multi_hop /
candidate, ndcg@10) plus one trace whose grade of 1024 once made the segment's mean NaN, and NaN
passed its threshold (issue 27, class 1). The trace is quarantined with its reason, the report
names the miss and the gate writes no approval."""

from __future__ import annotations

import gzip
import json
from datetime import date
from pathlib import Path

import dagster as dg
import duckdb

from retrieval_pipeline.defs import ASSETS
from retrieval_pipeline.defs.nightly import checks
from retrieval_pipeline.defs.resources import (
    PipelineSettingsResource,
    TraceStoreResource,
    WarehouseResource,
)
from retrieval_pipeline.sample import write_sample_store

DAY = date(2026, 11, 30)


def poisoned_copy(day_folder: Path) -> dict[str, object]:
    """A labelled multi_hop / candidate trace of the day, its first retrieved document graded
    1024: a document of the corpus (a label of another would be stale, the trace unannotated),
    retrieved, so DCG and ideal DCG are both infinite and nDCG was NaN."""
    with gzip.open(day_folder / "candidate.jsonl.gz", "rt") as lines:
        records = (json.loads(text) for text in lines if text.strip())
        found = next(
            r for r in records if r["segment"] == "multi_hop" and r.get("relevance_scores")
        )
    first = found["retrieved_ids"][0]
    return found | {"trace_id": "poisoned", "relevance_scores": {first: 1024}}


def test_the_gate_refuses_the_poisoned_day(tmp_path: Path) -> None:
    store = tmp_path / "store"
    write_sample_store(store, days=1, seed=7, end_date=DAY)
    day_folder = store / "traces" / f"date={DAY.isoformat()}"
    poison = poisoned_copy(day_folder)
    (day_folder / "zz_poisoned.jsonl").write_text(json.dumps(poison) + "\n")
    reports, approvals = tmp_path / "reports", tmp_path / "approvals"
    result = dg.materialize(
        [*ASSETS, *checks.ALL_CHECKS],
        partition_key=DAY.isoformat(),
        resources={
            "trace_store": TraceStoreResource(root=str(store)),
            "warehouse": WarehouseResource(database=str(tmp_path / "db" / "warehouse.duckdb")),
            "settings": PipelineSettingsResource(
                reports_dir=str(reports), approvals_dir=str(approvals)
            ),
        },
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )
    assert not result.success
    assert not result.asset_materializations_for_node("deploy_gate")
    assert not (approvals / f"deploy_approval_{DAY.isoformat()}.json").exists()
    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    thresholds = evaluations["segment_thresholds"]
    assert not thresholds.passed
    assert "multi_hop / candidate: ndcg@10 = " in (thresholds.description or "")
    report = json.loads((reports / f"regression_report_{DAY.isoformat()}.json").read_text())
    assert report["passed"] is False
    missed = {(m["segment"], m["variant"], m["metric"]) for m in report["misses"]}
    assert ("multi_hop", "candidate", "ndcg@10") in missed
    # every mean in the report is a number: the poisoned trace was quarantined, not scored
    assert all(row["mean"] is not None for row in report["rows"] if row["status"] != "no_threshold")
    assert evaluations["quarantine_rate"].passed  # 4 malformed sample lines and this one
    with duckdb.connect(str(tmp_path / "db" / "warehouse.duckdb"), read_only=True) as conn:
        reasons = conn.execute(
            "select reason from quarantine where trace_id = 'poisoned'"
        ).fetchall()
    scores = poison["relevance_scores"]
    assert isinstance(scores, dict)
    (doc_id,) = scores
    assert reasons == [(f'relevance_scores["{doc_id}"] must be a grade from 0 to 100 (got 1024)',)]
