"""The benchmark harness runs end to end at its smallest size and every engine agrees.

Speed is never asserted here: `bench/run_all.py` and `bench/shards.py` measure it (see
bench/README.md). This only proves the harness works, that every engine's means equal
pytrec_eval's to 1e-9, and that a day merged from 2 and 4 shard processes holds the 1-shard
run's rows and means.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import shards
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
