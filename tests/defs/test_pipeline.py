"""The Dagster pipeline on generated sample data, with an ephemeral instance and a DuckDB file.

Expected numbers are computed another way: the engine's per-trace table from `run_evaluation`
(the `evaluate` command's code) on the same trace files, grouped with pandas.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb
import pandas as pd
import pytest
import yaml

from retrieval_pipeline.config import CONFIG_ENV, ConfigError, PipelineConfig
from retrieval_pipeline.defs import ASSETS, build_defs, defs
from retrieval_pipeline.defs.nightly import assets, checks
from retrieval_pipeline.defs.nightly.gate import BLOCKING_CHECK_KEYS, deploy_gate
from retrieval_pipeline.defs.resources import DB_ENV, STORE_IDS_ENV, store_retrieved_ids
from retrieval_pipeline.files import write_atomically
from retrieval_pipeline.intervals import bounded_mean_interval
from retrieval_pipeline.sample import MANIFEST_NAME, write_sample_store
from retrieval_pipeline.segments import OVERALL_SEGMENT
from retrieval_pipeline.store import LocalTraceStore
from retrieval_pipeline.warehouse import connection
from retrieval_pipeline.warehouse.evaluation import run_evaluation
from tests import warehouse_snapshots as snapshots
from tests.dagster_runs import RunFolder, Selection, checks_by_name, failure_messages, materialize
from tests.processes import default_signals

END = date(2026, 11, 30)  # the injected regression's day
CLEAN = [END - timedelta(days=n) for n in (3, 2, 1)]
CONFIG = PipelineConfig()
EVERYTHING = [*ASSETS, *checks.ALL_CHECKS]
PARTITIONED = ["traces", "labels", "query_metrics", "segment_metrics", "regression_report"]


@dataclass
class Setup(RunFolder):
    """A trace store and a folder for what runs write; runs on one instance."""

    store: Path
    instance: dg.DagsterInstance = field(default_factory=dg.DagsterInstance.ephemeral)
    range_result: Any = None  # the `nightly` fixture's runs
    day_result: Any = None
    store_retrieved_ids: bool = True

    def run(
        self,
        assets: Selection = EVERYTHING,
        day: date | None = None,
        days: list[date] | None = None,
    ) -> dg.ExecuteInProcessResult:
        resources = self.resources(self.store, store_retrieved_ids=self.store_retrieved_ids)
        return materialize(assets, resources, day, days, self.instance)


@contextmanager
def defs_warehouse() -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection of the definitions' own warehouse resource (its file named by DB_ENV)."""
    resources = build_defs().resources
    assert resources is not None
    with (
        dg.build_resources({"warehouse": resources["warehouse"]}) as built,
        built.warehouse.get_connection() as conn,
    ):
        yield conn


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pipeline") / "store"
    write_sample_store(root, days=4, seed=7, end_date=END)
    return root


@pytest.fixture(scope="module")
def nightly(store: Path, tmp_path_factory: pytest.TempPathFactory) -> Setup:
    """Three clean days backfilled in one run, then the regression day on its own."""
    setup = Setup(tmp_path_factory.mktemp("run"), store)
    setup.range_result = setup.run(days=CLEAN)
    setup.day_result = setup.run(day=END)
    return setup


def fresh(store: Path, tmp_path: Path) -> Setup:
    return Setup(tmp_path, store)


# --- definitions -----------------------------------------------------------------------------


def test_definitions_snapshot() -> None:
    assert {a.key.to_user_string() for a in ASSETS} == {
        "judgments",
        "traces",
        "corpus",
        "labels",
        "query_metrics",
        "segment_metrics",
        "stage_metrics",
        "regression_report",
        "deploy_gate",
    }
    check_keys = {k for c in checks.ALL_CHECKS for k in c.check_keys}
    assert {(k.asset_key.to_user_string(), k.name) for k in check_keys} == {
        ("regression_report", "segment_thresholds"),
        ("regression_report", "annotation_coverage"),
        ("regression_report", "reranker_stage"),
        ("traces", "quarantine_rate"),
        ("labels", "stale_label_rate"),
    }
    assert set(BLOCKING_CHECK_KEYS) == {k for c in checks.BLOCKING_CHECKS for k in c.check_keys}
    for c in checks.ALL_CHECKS:
        assert c.op.pool == "duckdb"
        assert [s.blocking for s in c.check_specs] == [c in checks.BLOCKING_CHECKS]
    for asset in ASSETS:
        assert asset.backfill_policy == dg.BackfillPolicy.single_run()
        if asset is not deploy_gate:  # the gate reads the instance, not the warehouse
            assert asset.op.pool == "duckdb"
            assert [s.kinds for s in asset.specs] == [{"duckdb"}]
    job = defs.resolve_job_def("nightly")
    nodes = {node.name for node in job.graph.nodes}
    assert {a.key.to_user_string() for a in ASSETS} <= nodes
    assert {f"{k.asset_key.to_user_string()}_{k.name}" for k in check_keys} <= nodes
    assert job.partitions_def is not None
    assert job.partitions_def.get_first_partition_key() == "2026-01-01"


def test_dagster_home_limits_the_duckdb_pool_to_one() -> None:
    home = Path(__file__).resolve().parents[2] / "dagster_home"
    settings = yaml.safe_load((home / "dagster.yaml").read_text())
    assert settings["concurrency"]["pools"] == {"default_limit": 1, "granularity": "op"}
    assert settings["telemetry"] == {"enabled": False}


def test_the_warehouse_threads_and_memory_limit_follow_the_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def settings() -> tuple[str, str]:
        monkeypatch.setenv(DB_ENV, str(tmp_path / "w.duckdb"))
        with defs_warehouse() as conn:
            row = conn.execute(
                "select current_setting('threads')::varchar, current_setting('memory_limit')"
            ).fetchone()
        return (str(row[0]), str(row[1])) if row else ("", "")

    monkeypatch.delenv(connection.MEMORY_LIMIT_ENV, raising=False)
    monkeypatch.delenv(connection.THREADS_ENV, raising=False)
    threads = connection.duckdb_budget().threads
    # 128 MiB a thread, at least 512 MiB (resources_budget; 2 cores here: 512 MiB)
    words = duckdb.connect()
    words.execute("set memory_limit = $limit", {"limit": f"{max(512, 128 * threads)}MiB"})
    assert settings() == (
        str(threads),
        words.sql("select current_setting('memory_limit')").fetchall()[0][0],
    )
    monkeypatch.setenv(connection.THREADS_ENV, "16")
    assert settings() == ("16", "2.0 GiB")  # 16 x 128 MiB
    monkeypatch.setenv(connection.MEMORY_LIMIT_ENV, "3GB")
    assert settings() == ("16", "2.7 GiB")  # both given: as given; 3 * 10^9 bytes


def test_the_warehouse_has_row_groups_of_16k_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # DuckDB scans a row group per thread: a day of 100k traces must be more than one of them.
    monkeypatch.setenv(DB_ENV, str(tmp_path / "w.duckdb"))
    with defs_warehouse() as conn:
        conn.execute("create table rows_of_a_day as select range as i from range(100000)")
        row = conn.execute(
            "select count(distinct row_group_id) from pragma_storage_info('rows_of_a_day')"
        ).fetchone()
    assert row == (math.ceil(100_000 / 16_384),)


def test_schedule_tick_asks_for_the_previous_day() -> None:
    schedule = defs.resolve_schedule_def("nightly_schedule")
    assert schedule.cron_schedule == "0 2 * * *"
    assert schedule.execution_timezone == "UTC"
    assert schedule.job_name == "nightly"
    context = dg.build_schedule_context(
        instance=dg.DagsterInstance.ephemeral(),
        scheduled_execution_time=datetime(2026, 12, 1, 2, 0, tzinfo=UTC),
    )
    requests = schedule.evaluate_tick(context).run_requests
    assert requests is not None
    assert [r.partition_key for r in requests] == ["2026-11-30"]


def test_bad_config_fails_to_load_naming_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('metrics = ["ndcg@10"]\n[thresholds]\n"ndcg@10" = 7\n[checks]\nmin_cov = 1\n')
    with pytest.raises(ConfigError) as caught:
        build_defs(bad)
    message = str(caught.value)
    assert str(bad) in message
    assert 'thresholds."ndcg@10": must be a number in [0, 1], got 7' in message
    assert "checks.min_cov: unknown key" in message
    monkeypatch.setenv(CONFIG_ENV, str(bad))
    with pytest.raises(ConfigError, match="min_cov"):
        build_defs()


@pytest.mark.slow
def test_dagster_refuses_to_load_a_bad_config(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('metrics = ["ndcg@-1"]\n')
    env = os.environ | {CONFIG_ENV: str(bad), "DAGSTER_HOME": str(tmp_path)}
    (tmp_path / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    dagster = Path(sys.executable).with_name("dagster")
    done = subprocess.run(
        [str(dagster), "definitions", "validate", "-m", "retrieval_pipeline.defs"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
        preexec_fn=default_signals,
    )
    assert done.returncode != 0
    assert "metrics: metric 'ndcg@-1': the cut-off K must be >= 1, got -1" in (
        done.stdout + done.stderr
    )


# --- runs ------------------------------------------------------------------------------------


def test_a_three_day_range_backfills_in_one_run(nightly: Setup) -> None:
    result = nightly.range_result
    assert result.success, failure_messages(result)
    # one run: every partition's materialization came from this run
    run_ids = {
        record.event_log_entry.run_id
        for record in nightly.instance.fetch_materializations(
            dg.AssetKey("traces"), limit=10
        ).records
        if record.partition_key in {d.isoformat() for d in CLEAN}
    }
    assert run_ids == {result.run_id}
    for name in [*PARTITIONED, "deploy_gate"]:
        partitions = {m.partition for m in result.asset_materializations_for_node(name)}
        assert partitions == {d.isoformat() for d in CLEAN}, name
    days = nightly.query("select distinct partition_date from segment_metrics order by 1")
    assert list(days["partition_date"].dt.date) == [*CLEAN, END]
    for day in CLEAN:
        approval = json.loads((nightly.approvals / f"deploy_approval_{day}.json").read_text())
        assert approval["partition"] == day.isoformat()
        assert {c["name"]: c["passed"] for c in approval["checks"]} == {
            "segment_thresholds": True,
            "annotation_coverage": True,
            "quarantine_rate": True,
            "reranker_stage": True,  # plain trace records: no reranker stage, which passes
        }


def test_every_check_passes_on_clean_days(nightly: Setup) -> None:
    evaluations = checks_by_name(nightly.range_result)
    assert {name: e.passed for name, e in evaluations.items()} == {
        "segment_thresholds": True,
        "annotation_coverage": True,
        "quarantine_rate": True,
        "stale_label_rate": True,
        "reranker_stage": True,
    }


def test_the_regression_day_materializes_everything_but_the_gate(nightly: Setup) -> None:
    result = nightly.day_result
    assert not result.success
    for name in PARTITIONED:
        assert [m.partition for m in result.asset_materializations_for_node(name)] == ["2026-11-30"]
    assert result.asset_materializations_for_node("corpus")
    assert not result.asset_materializations_for_node("deploy_gate")
    assert not (nightly.approvals / "deploy_approval_2026-11-30.json").exists()
    evaluations = checks_by_name(result)
    assert {name: e.passed for name, e in evaluations.items()} == {
        "segment_thresholds": False,
        "annotation_coverage": True,
        "quarantine_rate": True,
        "stale_label_rate": True,
        "reranker_stage": True,
    }
    assert evaluations["segment_thresholds"].severity == dg.AssetCheckSeverity.ERROR


def test_the_second_run_keeps_the_corpus_its_unchanged_snapshot_gave(nightly: Setup) -> None:
    snapshot = LocalTraceStore(nightly.store).corpus_file()
    assert snapshot is not None
    documents = pd.read_parquet(snapshot)["doc_id"].dropna().nunique()
    (first,) = nightly.range_result.asset_materializations_for_node("corpus")
    (second,) = nightly.day_result.asset_materializations_for_node("corpus")
    assert first.metadata["snapshot_read"].value is True
    assert first.metadata["summary"].value == f"{documents} documents read from {snapshot}"
    assert second.metadata["snapshot_read"].value is False
    assert second.metadata["documents"].value == documents
    assert second.metadata["rows_rejected"].value == first.metadata["rows_rejected"].value == 0
    assert second.metadata["loaded_at"].value == first.metadata["loaded_at"].value
    loaded_at = datetime.fromisoformat(first.metadata["loaded_at"].value)
    assert second.metadata["summary"].value == (
        f"{documents} documents from {snapshot}, kept as loaded at"
        f" {loaded_at:%Y-%m-%d %H:%M:%S} UTC: the file has not changed since"
    )


def test_traces_stored_without_their_id_lists_are_scored_the_same(
    nightly: Setup, tmp_path: Path
) -> None:
    lean = Setup(tmp_path, nightly.store, store_retrieved_ids=False)
    result = lean.run([assets.traces, assets.corpus, assets.labels, assets.query_metrics], day=END)
    assert result.success
    (materialization,) = result.asset_materializations_for_node("traces")
    assert materialization.metadata["retrieved_ids_stored"].value is False
    assert "retrieved id lists not stored" in str(materialization.metadata["summary"].value)
    # the day's traces are in a file beside the warehouse, which the metadata names
    rows_folder = Path(str(materialization.metadata["rows_folder"].value))
    assert rows_folder == lean.database.with_name(lean.database.name + ".merged")
    assert len(list(rows_folder.glob(f"traces/partition_date={END}/run=*/*.parquet"))) == 1
    traces_sql = (
        "select trace_id, len(retrieved_ids) as stored, n_retrieved, labels from traces"
        " where partition_date = $day order by trace_id"
    )
    kept, lean_traces = (
        nightly.query(traces_sql, {"day": END}),
        lean.query(traces_sql, {"day": END}),
    )
    assert len(kept) > 100 and (kept.stored == kept.n_retrieved).all()
    assert (lean_traces.stored == 0).all()
    pd.testing.assert_series_equal(lean_traces.n_retrieved, kept.n_retrieved)
    assert lean_traces.labels.map(str).equals(kept.labels.map(str))  # ranks found all the same
    metrics_sql = (
        "select trace_id, metric, value from query_metrics where partition_date = $day"
        " order by trace_id, metric"
    )
    pd.testing.assert_frame_equal(
        lean.query(metrics_sql, {"day": END}), nightly.query(metrics_sql, {"day": END})
    )


def test_the_store_retrieved_ids_variable_reads_yes_or_no(monkeypatch: pytest.MonkeyPatch) -> None:
    for text, expected in [
        ("", True),
        ("1", True),
        ("Yes", True),
        ("0", False),
        (" false ", False),
    ]:
        monkeypatch.setenv(STORE_IDS_ENV, text)
        assert store_retrieved_ids() is expected
    monkeypatch.setenv(STORE_IDS_ENV, "off")
    with pytest.raises(ValueError, match=r"RETRIEVAL_PIPELINE_STORE_RETRIEVED_IDS='off': must"):
        store_retrieved_ids()


def test_the_report_finds_the_injected_regression_and_nothing_else(nightly: Setup) -> None:
    injected = json.loads((nightly.store / MANIFEST_NAME).read_text())["injected_regression"]
    report = json.loads((nightly.reports / "regression_report_2026-11-30.json").read_text())
    assert [(m["segment"], m["variant"], m["metric"]) for m in report["misses"]] == [
        (injected["segment"], injected["variant"], injected["metric"])
    ]
    miss = report["misses"][0]
    words = (
        f"multi_hop / candidate: ndcg@10 = {miss['value']:.3f}, "
        f"{miss['threshold'] - miss['value']:.3f} below the threshold {miss['threshold']:.3f}"
    )
    assert miss["words"] == words
    assert f"- {words}" in (nightly.reports / "regression_report_2026-11-30.md").read_text()
    description = checks_by_name(nightly.day_result)["segment_thresholds"].description
    assert description == words
    assert report["baseline"]["days_with_data"] == len(CLEAN)
    for day in CLEAN:
        clean = json.loads((nightly.reports / f"regression_report_{day}.json").read_text())
        assert clean["misses"] == [] and clean["passed"] is True


def test_report_metadata_has_a_table_and_headline_numbers(nightly: Setup) -> None:
    (materialization,) = nightly.day_result.asset_materializations_for_node("regression_report")
    metadata = materialization.metadata
    assert isinstance(metadata["report"], dg.MarkdownMetadataValue)
    assert "| multi_hop | candidate | ndcg@10 |" in str(metadata["report"].value)
    report = json.loads((nightly.reports / "regression_report_2026-11-30.json").read_text())
    for name, value in report["headline"].items():  # plotted as `Overall ndcg@10 (control)`
        assert isinstance(metadata[f"Overall {name}"], dg.FloatMetadataValue)
        assert metadata[f"Overall {name}"].value == pytest.approx(value)
    assert set(report["headline"]) == {
        f"{metric} ({variant})"
        for metric in CONFIG.headline_metrics
        for variant in ("control", "candidate")
    }


def test_segment_numbers_equal_evaluate_on_the_same_traces(nightly: Setup) -> None:
    store = LocalTraceStore(nightly.store)
    run = run_evaluation(store.trace_files(END), CONFIG.metrics, corpus=store.corpus_file())
    # the list-level coverage (judged@10) is scored beside the configured metrics
    coverage = CONFIG.coverage_metric()
    per_query = run.per_query.assign(**{coverage: run.judged})
    overall = per_query.assign(segment=OVERALL_SEGMENT)
    expected = pd.concat([per_query, overall])
    stored = nightly.query(
        "select * from segment_metrics where partition_date = $day", {"day": END}
    ).set_index(["segment", "variant", "metric"])
    scored = [*CONFIG.metrics, coverage]
    assert len(stored) == expected.groupby(["segment", "variant"]).ngroups * len(scored)
    for (segment, variant), group in expected.groupby(["segment", "variant"]):
        for metric in scored:
            values = group[metric].dropna()
            row = stored.loc[(segment, variant, metric)]
            assert row["traces"] == len(group)
            assert row["annotated_traces"] == len(values)
            assert row["coverage"] == pytest.approx(len(values) / len(group))
            assert row["mean"] == pytest.approx(values.mean(), abs=1e-12)
            # the bounded interval (docs/intervals.md), in Python on the same values
            sd = values.std(ddof=1) if len(values) > 1 else None
            interval = bounded_mean_interval(len(values), values.mean(), sd)
            assert interval is not None
            assert row["ci_low"] == pytest.approx(interval.low, abs=1e-12)
            assert row["ci_high"] == pytest.approx(interval.high, abs=1e-12)
            assert 0 <= row["ci_low"] <= row["mean"] <= row["ci_high"] <= 1
            threshold = CONFIG.threshold(segment, metric)
            if threshold is not None:
                passed = values.mean() >= threshold
                assert row["status"] == ("pass" if passed else "fail")
                assert row["margin"] == pytest.approx(values.mean() - threshold, abs=1e-12)


def test_a_failed_blocking_check_cannot_be_bypassed_by_the_gate_alone(nightly: Setup) -> None:
    result = nightly.run([deploy_gate], day=END)
    assert not result.success
    (message,) = failure_messages(result)
    assert "deploy gate refuses 2026-11-30" in message
    assert "segment_thresholds failed in run" in message
    assert "multi_hop / candidate: ndcg@10 = " in message
    assert not (nightly.approvals / "deploy_approval_2026-11-30.json").exists()


def test_the_gate_alone_judges_a_backfilled_day_on_that_day_s_verdicts(nightly: Setup) -> None:
    """The regression day ran last, but the checks' verdicts are per day: the clean day's own,
    recorded by the backfill, approve it (tests/defs/test_faults.py: one covering other days
    does not)."""
    result = nightly.run([deploy_gate], day=CLEAN[-1])
    assert result.success, failure_messages(result)
    approval = json.loads((nightly.approvals / f"deploy_approval_{CLEAN[-1]}.json").read_text())
    assert {c["partition_end"] for c in approval["checks"]} == {CLEAN[-1].isoformat()}


def test_the_gate_alone_refuses_when_no_check_was_ever_evaluated(
    store: Path, tmp_path: Path
) -> None:
    result = fresh(store, tmp_path).run([deploy_gate], day=CLEAN[0])
    (message,) = failure_messages(result)
    for name in ("segment_thresholds", "annotation_coverage", "quarantine_rate"):
        assert f"{name}: no evaluation recorded" in message


def test_rematerializing_a_day_leaves_the_same_rows(store: Path, tmp_path: Path) -> None:
    setup = fresh(store, tmp_path)
    tables = snapshots.PARTITIONED

    def snapshot() -> dict[str, pd.DataFrame]:
        return {
            t: setup.query(
                f"select * from {t} where partition_date = $day order by all", {"day": CLEAN[0]}
            )
            for t in tables
        }

    assert setup.run(day=CLEAN[0]).success
    first = snapshot()
    assert all(len(frame) for frame in first.values())
    assert setup.run(day=CLEAN[0]).success
    second = snapshot()
    for table in tables:
        pd.testing.assert_frame_equal(first[table], second[table], obj=table)


def test_a_missing_day_fails_in_words(store: Path, tmp_path: Path) -> None:
    setup = fresh(store, tmp_path)
    result = setup.run([ASSETS[0]], day=date(2026, 11, 1))
    (message,) = failure_messages(result)
    assert f"no traces for 2026-11-01 under {store / 'traces' / 'date=2026-11-01'}" in message


def test_an_unreadable_warehouse_fails_at_once_in_words(store: Path, tmp_path: Path) -> None:
    setup = fresh(store, tmp_path)
    connection.connect(setup.database).close()
    with setup.database.open("r+b") as damaged:  # the first block, as in the one case seen
        damaged.seek(12288 + 64)
        damaged.write(b"\xff" * 64)
    result = setup.run([ASSETS[0]], day=END)
    (message,) = failure_messages(result)
    assert (
        f"{setup.database}: DuckDB cannot read this database file (Corrupt database file:"
        in message
    )
    assert "rebuild the days you need with a backfill" in message
    # a file that is not a DuckDB database at all says so too, without waiting out the retries
    setup.database.write_text("not a database\n" * 1000)
    result = setup.run([ASSETS[0]], day=END)
    (message,) = failure_messages(result)
    assert "it is not a valid DuckDB database file" in message
    assert f"{setup.database}: DuckDB cannot read this database file" in message


def test_an_empty_day_is_no_data_and_blocks_the_gate(store: Path, tmp_path: Path) -> None:
    empty = date(2026, 11, 20)
    (store / "traces" / f"date={empty}").mkdir()
    result = fresh(store, tmp_path).run(day=empty)
    assert not result.success
    (traces_materialization,) = result.asset_materializations_for_node("traces")
    assert traces_materialization.metadata["records_read"].value == 0
    quarantine = checks_by_name(result)["quarantine_rate"]
    assert not quarantine.passed
    assert quarantine.description == "no data for 2026-11-20: 0 records read"
    assert not result.asset_materializations_for_node("deploy_gate")


def test_report_files_written_together_are_replaced_together_or_not_at_all(tmp_path: Path) -> None:
    """A day's Markdown and JSON reports are both written before either is renamed into place:
    a failure writing the second leaves both old files (and no partial one)."""
    md, js = tmp_path / "r.md", tmp_path / "r.json"
    md.write_text("old md")
    js.write_text("old json")
    (tmp_path / ".r.json.partial").mkdir()  # the JSON cannot be written
    with pytest.raises(IsADirectoryError):
        write_atomically({md: "new md", js: "new json"})
    assert (md.read_text(), js.read_text()) == ("old md", "old json")
    assert not (tmp_path / ".r.md.partial").exists()
    (tmp_path / ".r.json.partial").rmdir()
    write_atomically({md: "new md", js: "new json"})
    assert (md.read_text(), js.read_text()) == ("new md", "new json")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["r.json", "r.md"]
