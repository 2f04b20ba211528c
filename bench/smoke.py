"""A smoke test of the harness at the smallest size, for CI: `run_smoke(tmp_dir)`.

It generates 1,000 traces under `tmp_dir`, runs every measurement once (ranx only when it is
installed, since it belongs to the `bench` extra), and fails when any engine's means differ from
pytrec_eval's by more than 1e-9, or when a row does not say what the machine did to it (its
waits for the disk and CPU steal, where the kernel tells). It asserts nothing about speed.

    from bench.smoke import run_smoke

    def test_bench_smoke(tmp_path):
        run_smoke(tmp_path)
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from bench import evaluate_e2e, floor, metric_step, nightly, reference_tools
from bench.common import TOLERANCE, Row, machine_waits, table

SMOKE_SIZE = 1000


def run_smoke(tmp_dir: Path, size: int = SMOKE_SIZE, with_ranx: bool | None = None) -> None:
    """Every measurement at `size` traces, data under `tmp_dir`; raises when means disagree."""
    root = Path(tmp_dir) / "bench_data"
    if with_ranx is None:
        with_ranx = importlib.util.find_spec("ranx") is not None
    rows: list[Row] = []
    rows += reference_tools.measure([size], data_root=root, with_ranx=with_ranx)
    rows += metric_step.measure([size], data_root=root)
    rows += floor.measure([size], data_root=root)
    rows += evaluate_e2e.measure([size], data_root=root)
    if nightly.defs_ready():
        rows += nightly.measure([size], data_root=root)
    scored = [r for r in rows if r.max_abs_diff is not None]
    assert len(scored) >= 4, table(rows)
    assert all(r.max_abs_diff <= TOLERANCE for r in scored if r.max_abs_diff is not None)
    assert all(r.wall_s > 0 and r.peak_rss_mib > 0 for r in rows), table(rows)
    # what the machine did to each run, wherever the kernel says (a slow run is then explained)
    io_stall, steal = machine_waits()
    assert all((r.io_stall_s is None) == (io_stall is None) for r in rows), table(rows)
    assert all((r.steal_s is None) == (steal is None) for r in rows), table(rows)


if __name__ == "__main__":
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        run_smoke(Path(tmp), with_ranx="--ranx" in sys.argv)
    print("bench smoke test passed")
