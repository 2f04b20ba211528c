"""A day outside the pipeline's range, given to `dagster asset materialize`, is told in one line
naming the range, where its first day comes from and RETRIEVAL_PIPELINE_START_DATE, not in a
traceback (issue 34, item 4). Dagster's CLI raises before any of this project's code runs."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from retrieval_pipeline.defs.partitions import START_DATE_ENV
from tests.conftest import SAMPLE_END
from tests.processes import default_signals

FIRST = (SAMPLE_END - timedelta(days=2)).isoformat()  # the sample store's three days
YESTERDAY = (datetime.now(UTC).date() - timedelta(days=1)).isoformat()


def materialize(store: Path, home: Path, *partition: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RETRIEVAL_PIPELINE_")}
    env |= {
        "DAGSTER_HOME": str(home),
        "RETRIEVAL_PIPELINE_STORE": str(store),
        "RETRIEVAL_PIPELINE_DB": str(home / "warehouse.duckdb"),
    }
    home.mkdir(exist_ok=True)
    dagster = Path(sys.executable).with_name("dagster")
    command = [str(dagster), "asset", "materialize", "-m", "retrieval_pipeline.defs"]
    return subprocess.run(
        [*command, "--select", "*", *partition],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=default_signals,
    )


@pytest.mark.parametrize(
    ("partition", "named", "hint"),
    [
        (
            ["--partition-range", "2026-11-01...2026-11-02"],
            "2026-11-01 and 2026-11-02: not days",
            f"For earlier days, set {START_DATE_ENV}=YYYY-MM-DD",
        ),
        (
            ["--partition", "2099-01-01"],
            "2099-01-01: not a day",
            "A day becomes a partition once it has ended (UTC).",
        ),
        (["--partition", "2026-11-31"], "2026-11-31: not a day", "A day is written YYYY-MM-DD."),
    ],
)
def test_a_day_outside_the_range_is_one_line(
    sample_store: Path, tmp_path: Path, partition: list[str], named: str, hint: str
) -> None:
    done = materialize(sample_store, tmp_path / "home", *partition)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr + done.stdout
    [line] = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    assert line == (
        f"Error: {named} of this pipeline, whose days run from {FIRST} (the earliest day in "
        f"the trace store {sample_store}) to {YESTERDAY}, yesterday (UTC). {hint}"
        + (" (the store must hold their traces)." if "START_DATE" in hint else "")
    )
    assert not (tmp_path / "home" / "warehouse.duckdb").exists()
