"""The benchmark harness runs end to end at its smallest size and every engine agrees.

Speed is never asserted here: `bench/run_all.py` and `bench/shards.py` measure it (see
bench/README.md). This only proves the harness works, that every engine's means equal
pytrec_eval's to 1e-9, and that a day merged from 2 and 4 shard processes holds the 1-shard
run's rows and means.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import guard, shards
from bench.smoke import SMOKE_SIZE, run_smoke


@pytest.mark.slow
def test_every_measurement_runs_and_the_means_agree(tmp_path: Path) -> None:
    run_smoke(tmp_path)


@pytest.mark.slow
def test_sharded_days_merge_to_the_one_shard_run(tmp_path: Path) -> None:
    # 8 files: each of 4 shards gets 2; `measure` raises when a count or a mean differs
    runs, _ = shards.measure(SMOKE_SIZE, 7, [1, 2, 4], 8, single=True, data_root=tmp_path)
    assert [run.shards for run in runs] == [1, 2, 4]
    assert [len(run.shard_procs) for run in runs] == [1, 2, 4]
    assert all(run.max_abs_diff <= shards.EQUAL for run in runs)
    assert all(run.summary["counts"]["traces"] == SMOKE_SIZE for run in runs)
    assert all(p.peak_rss_mib > 0 for run in runs for p in [*run.shard_procs, run.merge_proc])


@pytest.mark.slow
def test_the_guard_measures_both_ratios_and_reads_the_last_record(tmp_path: Path) -> None:
    figures = guard.measure(SMOKE_SIZE, 1, data_root=tmp_path)  # raises when means disagree
    assert set(figures) == {f"throughput@{SMOKE_SIZE}", "start-up"}
    for row in figures.values():
        assert row["ratio"] == row["s"] / row["floor_s"] > 0
    row = {"s": 3.0, "floor_s": 1.5, "ratio": 2.0}
    assert guard.line("start-up", row, {"ratio": 2.5, "commit": "abc1234"}) == (
        "start-up: evaluate 3.00 s, floor 1.50 s: 2.00x (OVER the target of 1.5x); "
        "last committed 2.50x at abc1234 (-0.50x)"
    )
    assert guard.line("throughput@1000000", row, None).endswith(
        "(within the target of 3x); nothing committed yet"
    )
