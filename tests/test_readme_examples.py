"""The README's shell examples that the quickstart's data supports run as written (issue 34,
item 3): the nightly's one-day run and backfill, and `monitor`, each command taken from the
README's own text and run in a folder holding the quickstart's sample store (`data/store`, the
defaults' paths). The other blocks name the user's own files (`traces/`, `exports/`)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import default_signals

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def shell_blocks() -> list[str]:
    return re.findall(r"```(?:bash|sh)\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def commands(block: str) -> list[str]:
    """The block's commands: comments dropped, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", block)
    return [
        line.strip() for line in joined.splitlines() if line.strip() and not line.startswith("#")
    ]


def block_with(text: str) -> list[str]:
    [block] = [b for b in shell_blocks() if text in b]
    return commands(block)


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder laid out as the quickstart leaves it: data/store and dagster_home/."""
    folder = tmp_path_factory.mktemp("readme")
    shutil.copytree(ROOT / "dagster_home", folder / "dagster_home")
    run(f"retrieval-pipeline sample --out {folder / 'data' / 'store'} --days 14 --seed 7", folder)
    return folder


def run(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    bin_dir = str(Path(sys.executable).parent)
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("RETRIEVAL_PIPELINE_", "DAGSTER_HOME"))
    }
    environment["PATH"] = bin_dir + os.pathsep + environment.get("PATH", "")
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        preexec_fn=default_signals,
    )


def test_the_nightly_runs_as_the_readme_shows(quickstart: Path) -> None:
    export, one_day, backfill = block_with("dagster asset materialize")
    assert export.startswith("export DAGSTER_HOME=")
    # the latest day holds the sample's injected regression: the blocking check stops the run
    day = run(f"{export}; {one_day}", quickstart)
    assert day.returncode == 1, day.stderr[-2000:]
    assert "segment_thresholds" in day.stderr + day.stdout
    # the days before it pass: the backfill, one run over four days, exits 0
    days = run(f"{export}; {backfill}", quickstart)
    assert days.returncode == 0, days.stderr[-2000:]
    assert (quickstart / "data" / "warehouse.duckdb").is_file()


def test_monitor_runs_as_the_readme_shows(quickstart: Path) -> None:
    [monitor] = block_with("retrieval-pipeline monitor")
    result = run(monitor, quickstart)
    assert result.returncode == 0, result.stderr[-2000:]
    summary = result.stderr.strip().splitlines()[-1]  # the windows on stdout, the tally on stderr
    assert "window 1 " in result.stdout
    assert re.fullmatch(r"read \d+ lines: \d+ records, \d+ bad; \d+ windows closed; .*", summary)
    read, records, bad = map(int, re.findall(r"\d+", summary)[:3])
    assert read == records + bad > 0
