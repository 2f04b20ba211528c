"""The statement files travel with an installed wheel, not only with a checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.processes import default_signals

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_wheel_carries_sql_and_finds_it_when_installed(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True,
        preexec_fn=default_signals,
    )
    (wheel,) = tmp_path.glob("retrieval_pipeline-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {Path(n).name for n in names if n.startswith("retrieval_pipeline/sql/")}
    assert shipped == {p.name for p in (ROOT / "sql").glob("*.sql")}

    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        preexec_fn=default_signals,
    )
    probe = (
        "from retrieval_pipeline.warehouse.sql import sql_dir, load_sql; "
        "print(sql_dir()); assert 'select * from final' in load_sql('fct_query_metrics')"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        preexec_fn=default_signals,
    )
    assert Path(out.stdout.strip()) == target / "retrieval_pipeline" / "sql"
