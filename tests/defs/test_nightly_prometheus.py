"""The nightly run's Prometheus file: written by `regression_report` for the newest day of the
run, its last success set by the deploy gate's approval and kept over a failing night, and the
values those of `segment_metrics` (docs/operations.md)."""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import dagster as dg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from retrieval_pipeline.defs.nightly import metrics_file
from retrieval_pipeline.reports import prometheus
from tests.dagster_runs import failure_messages
from tests.defs.test_pipeline import Setup
from tests.prometheus_server import check_metrics

END = date(2026, 11, 30)  # the sample's injected regression
CLEAN = [END - timedelta(days=2), END - timedelta(days=1)]


def gauges(path: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(path.read_text(encoding="utf-8"))
        for sample in family.samples
    }


def midnight(day: date) -> float:
    return (day - date(1970, 1, 1)).days * 86400.0


def test_the_variable_names_agree() -> None:
    assert metrics_file.METRICS_DIR_ENV == prometheus.METRICS_DIR_ENV


def test_the_nightly_writes_the_file_and_the_gate_its_success(
    sample_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = sample_store  # three days ending END, the regression on the last
    folder = tmp_path / "textfile"
    folder.mkdir()
    monkeypatch.setenv(prometheus.METRICS_DIR_ENV, str(folder))
    path = folder / prometheus.FILE_NAME
    setup = Setup(tmp_path / "run", store, dg.DagsterInstance.ephemeral())

    clean = setup.run(days=CLEAN)
    assert clean.success, failure_messages(clean)
    first = gauges(path)
    assert first[("retrieval_eval_partition_timestamp_seconds", ())] == midnight(CLEAN[-1])
    success = first[("retrieval_eval_last_success_timestamp_seconds", ())]
    assert success >= first[("retrieval_eval_last_run_timestamp_seconds", ())]
    gate = clean.asset_materializations_for_node("deploy_gate")[-1]
    assert gate.metadata["metrics_file"].value == str(path)

    failing = setup.run(day=END)
    assert not failing.success  # the injected regression fails segment_thresholds
    after = gauges(path)
    assert after[("retrieval_eval_partition_timestamp_seconds", ())] == midnight(END)
    assert after[("retrieval_eval_last_success_timestamp_seconds", ())] == success
    assert after[("retrieval_eval_last_run_timestamp_seconds", ())] > success
    rows = setup.query(
        "select segment, variant, metric, mean, ci_low, ci_high, status from segment_metrics"
        " where partition_date = $day",
        {"day": END},
    )
    assert len(rows) > 0
    for row in rows.itertuples():
        labels = (("metric", row.metric), ("segment", row.segment), ("variant", row.variant))
        assert after[("retrieval_eval_metric_mean_ratio", labels)] == pytest.approx(row.mean)
        assert after[("retrieval_eval_metric_ci_lower_ratio", labels)] == pytest.approx(row.ci_low)
        assert after[("retrieval_eval_metric_ci_upper_ratio", labels)] == pytest.approx(row.ci_high)
        status = tuple(sorted((*labels, ("status", row.status))))
        assert after[("retrieval_eval_metric_status", status)] == 1
    failed = {
        dict(labels)["segment"]
        for (name, labels), value in after.items()
        if name == "retrieval_eval_metric_status" and dict(labels)["status"] == "fail" and value
    }
    assert "multi_hop" in failed
    exposition = path.read_text(encoding="utf-8")

    # A backfill of an older day leaves the newer day's file alone, in words.
    older = setup.run(day=CLEAN[0])
    (report,) = older.asset_materializations_for_node("regression_report")
    assert report.metadata["metrics_file"].value == (
        f"{path} kept: it holds {END.isoformat()}, later than {CLEAN[0].isoformat()}"
    )
    assert gauges(path) == after
    check_metrics(exposition)  # last: a skip without promtool comes after every other check


def test_a_bad_folder_fails_the_report_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(prometheus.METRICS_DIR_ENV, str(tmp_path / "absent"))
    with pytest.raises(dg.Failure, match=f"^{prometheus.METRICS_DIR_ENV}=.*absent: not an"):
        metrics_file.record_success(END)
    monkeypatch.delenv(prometheus.METRICS_DIR_ENV)
    assert metrics_file.record_success(END) == {}
