"""The benchmark harness runs end to end at its smallest size and every engine agrees.

Speed is never asserted here: `bench/run_all.py` measures it (see bench/README.md). This only
proves the harness works and that every engine's means equal pytrec_eval's to 1e-9.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.smoke import run_smoke


@pytest.mark.slow
def test_every_measurement_runs_and_the_means_agree(tmp_path: Path) -> None:
    run_smoke(tmp_path)
