"""The benchmark harness runs end to end at its smallest size and every engine agrees.

Speed is never asserted here: `bench/run_all.py` and `bench/shards.py` measure it (see
bench/README.md). This only proves the harness works, that every engine's means equal
pytrec_eval's to 1e-9, that a day merged from 2 and 4 shard processes holds the 1-shard
run's rows and means (and its statements can be timed one by one), and that the speed guard
prints its rows and records them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from bench import (
    common,
    flat_merge,
    generate,
    guard,
    interval_cost,
    merge_scale,
    merge_steps,
    profile_hotspots,
    shards,
)
from bench.common import REPO
from bench.smoke import SMOKE_SIZE, run_smoke
from retrieval_pipeline.warehouse.merged_days import MERGED_TABLES


@pytest.mark.slow
def test_every_measurement_runs_and_the_means_agree(tmp_path: Path) -> None:
    run_smoke(tmp_path)


@pytest.mark.slow
def test_sharded_days_merge_to_the_one_shard_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 8 files: each of 4 shards gets 2; `measure` raises when a count or a mean differs
    runs, _ = shards.measure(SMOKE_SIZE, 7, [1, 2, 4], 8, single=True, data_root=tmp_path)
    assert [run.shards for run in runs] == [1, 2, 4]
    assert [len(run.shard_procs) for run in runs] == [1, 2, 4]
    assert all(run.max_abs_diff <= shards.EQUAL for run in runs)
    assert all(run.summary["counts"]["traces"] == SMOKE_SIZE for run in runs)
    assert all(p.peak_rss_mib > 0 for run in runs for p in [*run.shard_procs, run.merge_proc])
    # the merge's statements, timed one by one, on the 2-shard run's outputs
    merged = merge_steps.merge_once(REPO, merge_steps.default_outputs(SMOKE_SIZE, tmp_path))
    assert merged["valid"] == SMOKE_SIZE
    timed = merged["seconds"]
    assert isinstance(timed, dict)
    # the merge registers the shards' files and inserts no row of theirs (docs/scaling.md)
    heads = {" ".join(statement.split()[:5]) for statement in timed}
    assert {
        "insert into merged_parts by name",
        'insert into "warehouse".main.quarantine by name',
    } <= heads
    rows = {f'insert into "warehouse".main.{table} by name' for table in MERGED_TABLES}
    assert not heads & rows, heads & rows
    # and the merge as the day grows: the day's outputs replicated twice hold twice its traces
    monkeypatch.setattr(common, "RESULTS", tmp_path / "results")
    outputs = merge_steps.default_outputs(SMOKE_SIZE, tmp_path)
    merge_scale.main(["--outputs", str(outputs), "--copies", "1,2", "--work", str(tmp_path / "x")])
    figures = (tmp_path / "results" / "merge_scale.md").read_text().splitlines()[2:4]
    assert [row.split(" | ")[1] for row in figures] == [f"{SMOKE_SIZE:,}", f"{2 * SMOKE_SIZE:,}"]


@pytest.mark.slow
def test_the_guard_measures_both_ratios_and_reads_the_last_record(tmp_path: Path) -> None:
    figures = guard.measure(SMOKE_SIZE, 1, data_root=tmp_path)  # raises when means disagree
    assert set(figures) == {f"throughput@{SMOKE_SIZE}", "start-up"}
    for row in figures.values():
        assert row["ratio"] == row["s"] / row["floor_s"] > 0
    row = {"s": 3.0, "floor_s": 1.5, "ratio": 2.0}
    assert guard.line("start-up", row, {"ratio": 2.5, "commit": "abc1234"}) == (
        "start-up: evaluate 3.00 s, floor 1.50 s: 2.00x (OVER the target of 1.5x); "
        "last committed 2.50x at abc1234 (-0.50x, -20.0%)"
    )
    assert guard.line("throughput@1000000", row, None).endswith(
        "(within the target of 3x); nothing committed yet"
    )


@pytest.mark.slow
def test_the_guard_prints_and_records_the_nightly_and_merge_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = tmp_path / "guard.json"
    kept = {"commit": "abc1234", "floor_s": 0.5, "ratio": 1.6, "s": 0.8}
    record.write_text(json.dumps({"start-up": kept}))
    half = SMOKE_SIZE // 2
    guard.main(
        [
            "--sizes=",  # the ratio rows are the test above's
            "--nightly", "--nightly-size", str(SMOKE_SIZE),
            "--merge", "--merge-sizes", f"{half},{SMOKE_SIZE}",
            "--data-root", str(tmp_path / "data"), "--record-to", str(record),
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    rows = {
        f"nightly@{SMOKE_SIZE}": r"one partition \d+\.\d+ s \(the traces step \d+\.\d+ s, \d+%",
        f"merge@{half}": r"\d+\.\d+ s per 1M traces",
        f"merge@{SMOKE_SIZE}": r"\d+\.\d+ s per 1M traces",
        f"merge-flatness@{half}-{SMOKE_SIZE}": r": \d+\.\d+x \((within|OVER) the target of 1\.2x",
    }
    for name, figure in rows.items():
        assert re.search(rf"^{re.escape(name)}: .*{figure}.*nothing committed yet$", out, re.M), out
    assert "the target of 25 s is for 1,000,000 traces" in out
    recorded = json.loads(record.read_text())
    assert set(recorded) == {"start-up", *rows}
    assert recorded["start-up"] == kept  # a row not measured this time is kept
    assert recorded[f"nightly@{SMOKE_SIZE}"]["s"] > 0
    assert recorded[f"merge@{SMOKE_SIZE}"]["per_1m_s"] > 0
    assert recorded[f"merge-flatness@{half}-{SMOKE_SIZE}"]["ratio"] > 0
    assert all(recorded[name]["commit"] for name in rows)


@pytest.mark.slow
def test_the_merge_by_statistics_equals_the_rows_at_two_sizes(tmp_path: Path) -> None:
    out = tmp_path / "flat.json"
    flat_merge.main(
        [
            "--sizes", f"{SMOKE_SIZE},{3 * SMOKE_SIZE}", "--shards", "2", "--buckets", "3",
            "--files", "8", "--data-root", str(tmp_path), "--json", str(out),
        ]
    )  # fmt: skip  # raises when a count, mean or standard deviation differs from the rows'
    figures = json.loads(out.read_text())["figures"]
    assert [f["copies"] for f in figures] == [1, 3]
    assert all(f["repeated"] > 0 and f["worst"] <= flat_merge.EQUAL for f in figures)
    assert all(len(f["reduce"]) == 3 and len(f["scatter"]) == 2 for f in figures)
    # the merge reads at most a row per bucket and group, whatever the traces: one day's groups
    assert figures[0]["rows"] == figures[1]["rows"]
    assert all(f["merge_parts"] <= 3 * f["rows"] for f in figures)


def test_the_statistics_check_fails_on_a_count_or_a_mean() -> None:
    truth = [["a", "v1", "mrr", 10, 8, 2, 8, 0.5, 0.25, 0.0, 1.0]]
    assert flat_merge.compare([list(truth[0])], truth) == 0.0
    with pytest.raises(flat_merge.StatisticsDisagree, match="counts differ"):
        flat_merge.compare([["a", "v1", "mrr", 10, 8, 2, 7, 0.5, 0.25, 0.0, 1.0]], truth)
    with pytest.raises(flat_merge.StatisticsDisagree, match=r"1\.0e-06"):
        flat_merge.compare([["a", "v1", "mrr", 10, 8, 2, 8, 0.500001, 0.25, 0.0, 1.0]], truth)
    with pytest.raises(flat_merge.StatisticsDisagree):
        flat_merge.compare([["a", "v1", "mrr", 10, 8, 2, 8, float("nan"), 0.25, 0.0, 1.0]], truth)


@pytest.mark.slow
def test_the_profiling_scripts_run_on_the_statements_as_they_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`profile_hotspots.py` and `interval_cost.py` bind the statements' parameters themselves:
    both had failed since a statement took a parameter more or less (issue 25's $gmax, the
    segment statistics), with nothing to say so."""
    monkeypatch.setattr(generate, "DATA_ROOT", tmp_path / "data")
    monkeypatch.setattr(common, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(profile_hotspots, "RESULTS", tmp_path / "results")
    profile_hotspots.main(["--size", str(SMOKE_SIZE)])
    report = (tmp_path / "results" / f"profile_n{SMOKE_SIZE}.md").read_text()
    cut = report.split("## `sql/fct_query_metrics.sql`, cut at each CTE")[1].split("\n\n")[1]
    timed = [line.split(" | ")[0].removeprefix("| ") for line in cut.splitlines()[2:]]
    statement = (REPO / "sql" / "fct_query_metrics.sql").read_text()
    # a timed row for each of the statement's CTEs (`name as (` opening a line), in its order
    assert timed == re.findall(r"^(\w+) as \($", statement, flags=re.MULTILINE)
    assert len(timed) >= 3
    row = interval_cost.worker(SMOKE_SIZE, 1)  # asserts both intervals' means equal
    traces = pq.read_table(generate.dataset(SMOKE_SIZE).parquet, columns=["segment", "variant"])
    pairs = {tuple(p.values()) for p in traces.to_pylist()}
    variants = {variant for _, variant in pairs}
    # a row per segment and variant, and per variant over every segment, for each metric
    assert row["rows"] == (len(pairs) + len(variants)) * len(common.METRICS)
    assert isinstance(row["normal_rows_outside"], int)
