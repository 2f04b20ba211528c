"""The Dagster UI's history: every partition of a range run has its own metadata (numbers,
misses, report paths), so each day is its own point in the Plots view; and a backfill with a
missing day scores the days it has and names the missing one."""

from __future__ import annotations

import json
import shutil
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from tests.dagster_runs import checks_by_name, failure_messages
from tests.defs.test_pipeline import Setup

END = date(2026, 11, 30)  # the sample's injected regression
DAYS = [END - timedelta(days=n) for n in (2, 1, 0)]  # the session's sample store


def by_partition(result: dg.ExecuteInProcessResult, node: str) -> dict[str, dict[str, Any]]:
    """Each partition's metadata values."""
    return {
        str(m.partition): {key: value.value for key, value in m.metadata.items()}
        for m in result.asset_materializations_for_node(node)
    }


def test_each_partition_of_a_range_run_has_its_own_numbers(
    sample_store: Path, tmp_path: Path
) -> None:
    setup = Setup(tmp_path, sample_store, dg.DagsterInstance.ephemeral())
    result = setup.run(days=DAYS)
    reports = by_partition(result, "regression_report")
    assert set(reports) == {day.isoformat() for day in DAYS}
    seen = set()
    for day in DAYS:
        metadata = reports[day.isoformat()]
        report = json.loads((setup.reports / f"regression_report_{day}.json").read_text())
        for name, value in report["headline"].items():
            assert metadata[f"Overall {name}"] == pytest.approx(value)
        seen.add(tuple(round(v, 12) for v in report["headline"].values()))
        assert metadata["Misses"] == len(report["misses"])
        assert str(metadata["markdown_path"]).endswith(f"regression_report_{day}.md")
        # a segment's numbers too, from the report's own rows
        row = next(
            r
            for r in report["rows"]
            if (r["segment"], r["variant"], r["metric"]) == ("multi_hop", "candidate", "ndcg@10")
        )
        assert metadata["Segment multi_hop: ndcg@10 (candidate)"] == pytest.approx(row["mean"])
        assert metadata["Segment multi_hop: ndcg@10 (candidate) threshold"] == row["threshold"]
    assert len(seen) == len(DAYS)  # three days, three different points
    # the injected regression's day alone has misses
    assert [reports[d.isoformat()]["Misses"] > 0 for d in DAYS] == [False, False, True]
    read = setup.query("select partition_date, count(*) as n from traces group by all order by all")
    quarantined = setup.query(
        "select partition_date, count(*) as n from quarantine group by all order by all"
    )
    per_day = dict(zip(read["partition_date"].dt.date, read["n"], strict=True))
    for day, n in zip(quarantined["partition_date"].dt.date, quarantined["n"], strict=True):
        per_day[day] += n
    traces = by_partition(result, "traces")
    assert {d: traces[d.isoformat()]["records_read"] for d in DAYS} == per_day


def test_a_missing_day_is_named_and_the_others_are_scored(
    sample_store: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "store"
    shutil.copytree(sample_store, copy)
    gone = DAYS[1]
    shutil.rmtree(copy / "traces" / f"date={gone}")
    setup = Setup(tmp_path / "run", copy, dg.DagsterInstance.ephemeral())
    result = setup.run(days=DAYS)
    assert not result.success
    scored = setup.query("select distinct partition_date from segment_metrics order by 1")
    assert list(scored["partition_date"].dt.date) == [DAYS[0], DAYS[2]]
    traces = by_partition(result, "traces")
    folder = copy / "traces" / f"date={gone}"
    assert traces[gone.isoformat()]["summary"] == (
        f"0 records from 0 file(s): 0 valid, 0 quarantined; missing: no traces for {gone} under"
        f" {folder}"
    )
    quarantine = checks_by_name(result)["quarantine_rate"]
    assert not quarantine.passed
    assert quarantine.severity == dg.AssetCheckSeverity.WARN  # the other days are still scored
    assert quarantine.description == f"no data for {gone}: 0 records read"
    # the checks on the report name the missing day, one line each, and so keep the gate shut
    words = {
        "segment_thresholds": "(no segment metrics: the partition holds no traces)",
        "annotation_coverage": "(no traces)",
    }
    for name, why in words.items():
        lines = str(checks_by_name(result)[name].description).splitlines()
        assert [line for line in lines if str(gone) in line] == [f"no data for {gone} {why}"]
    assert not result.asset_materializations_for_node("deploy_gate")
    assert failure_messages(result)


def test_the_traces_metadata_names_the_most_pieces_validated_at_once() -> None:
    from retrieval_pipeline.defs.nightly.history import ingest_metadata
    from retrieval_pipeline.warehouse.ingestion import IngestCounts

    def counts(workers: int) -> IngestCounts:
        return IngestCounts(1, 10, 9, 1, 0, validation_workers=workers)

    assert (
        ingest_metadata([(DAYS[0], counts(1)), (DAYS[1], counts(3))], {})["validation_workers"] == 3
    )
    assert ingest_metadata([], {DAYS[0]: "no traces"})["validation_workers"] == 1
