"""A nightly day run with `shards = 4` gives the regression report, the A/B comparison and the
warehouse rows of the same day run in one process: on the multiprocess executor with the shard
outputs in a local folder, and on a Dask LocalCluster of two worker processes with them on an S3
server on 127.0.0.1. Each run is `dagster asset materialize`, as a user runs it."""

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pyarrow.fs as pafs
import pytest

from retrieval_pipeline.shards import filesystem
from retrieval_pipeline.warehouse.connection import connect
from tests.defs.dask_cluster import local_cluster, worker_pids
from tests.defs.moto_s3 import s3_server
from tests.processes import default_signals
from tests.shard_days import DAY, write_day

REPO = Path(__file__).resolve().parents[2]
SELECTION = (
    "traces,corpus,judgments,labels,query_metrics,segment_metrics,regression_report,deploy_gate,"
    "variant_comparison"
)
BASE_CONFIG = "thresholds = {}\n\n[checks]\nmax_quarantine_rate = 0.2\n"
TABLES = {
    "traces": "select * from traces order by all",  # the id lists too: the shards keep them
    "quarantine": "select * from quarantine order by all",
    "labels": "select * from labels order by all",
    "query_metrics": "select * from query_metrics order by all",
}
TOLERANCE = 1e-12


def _environment(folder: Path, store: Path) -> dict[str, str]:
    home = folder / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text((REPO / "dagster_home" / "dagster.yaml").read_text())
    return {
        "DAGSTER_HOME": str(home),
        "RETRIEVAL_PIPELINE_CONFIG": str(folder / "config.toml"),
        "RETRIEVAL_PIPELINE_STORE": str(store),
        "RETRIEVAL_PIPELINE_DB": str(folder / "db" / "warehouse.duckdb"),
    }


def _materialize(folder: Path, env: dict[str, str]) -> None:
    command = [
        str(Path(sys.executable).parent / "dagster"), "asset", "materialize",
        "-m", "retrieval_pipeline.defs", "--select", SELECTION, "--partition", DAY.isoformat(),
    ]  # fmt: skip
    with (folder / "run.log").open("w") as log:
        done = subprocess.run(
            command, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
            timeout=600, check=False, preexec_fn=default_signals,
        )  # fmt: skip
    assert done.returncode == 0, (folder / "run.log").read_text()[-3000:]


def _close(got: object, expected: object, where: str) -> None:
    """Equal, floats to TOLERANCE (the order of a sum is not the same in shards)."""
    if isinstance(expected, float) and isinstance(got, float):
        assert abs(got - expected) <= TOLERANCE, where
    elif isinstance(expected, dict) and isinstance(got, dict):
        assert got.keys() == expected.keys(), where
        for key in expected:
            _close(got[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, list) and isinstance(got, list):
        assert len(got) == len(expected), where
        for index, (a, b) in enumerate(zip(got, expected, strict=True)):
            _close(a, b, f"{where}[{index}]")
    else:
        assert got == expected, where


def _outputs(folder: Path) -> dict[str, object]:
    reports = folder / "db" / "reports"
    with contextlib.closing(connect(folder / "db" / "warehouse.duckdb")) as conn:
        rows = {table: conn.execute(sql).fetchall() for table, sql in TABLES.items()}
    return {
        "regression": json.loads((reports / f"regression_report_{DAY}.json").read_text()),
        "comparison": json.loads((reports / f"variant_comparison_{DAY}.json").read_text()),
        "rows": rows,
    }


def _same_as_one_process(got: dict[str, object], expected: dict[str, object]) -> None:
    regression = got["regression"]
    assert isinstance(regression, dict) and regression["rows"]
    _close(regression, expected["regression"], "regression report")
    _close(got["comparison"], expected["comparison"], "variant comparison")
    assert got["rows"] == expected["rows"]  # every row of the four tables, exactly


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("store")
    write_day(folder)
    return folder


@pytest.fixture(scope="module")
def one_process(store: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    folder = tmp_path_factory.mktemp("one-process")
    (folder / "config.toml").write_text(BASE_CONFIG)
    _materialize(folder, _environment(folder, store))
    return _outputs(folder)


@pytest.mark.slow
def test_four_shards_on_the_multiprocess_executor(
    store: Path, one_process: dict[str, object], tmp_path: Path
) -> None:
    shards = tmp_path / "shard_root"
    (tmp_path / "config.toml").write_text(
        BASE_CONFIG
        + f'\n[execution]\nshards = 4\nexecutor = "multiprocess"\nshard_root = "{shards}"\n'
    )
    _materialize(tmp_path, _environment(tmp_path, store))
    _same_as_one_process(_outputs(tmp_path), one_process)
    # the traces without labels of their own (u0..u4) are labelled by the store's judgments
    labels = one_process["rows"]["labels"]  # type: ignore[index]
    assert {row[1] for row in labels if str(row[1]).startswith("u")} == {f"u{n}" for n in range(5)}
    written = sorted(p.parent.name for p in shards.rglob("manifest.json"))
    assert written == [f"shard={i}-of-4" for i in range(4)]
    # the traces asset says where the day's rows are: the 4 shards' files of each table
    with dg.DagsterInstance.local_temp(str(tmp_path / "dagster_home")) as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey("traces"))
    assert event is not None and event.asset_materialization is not None
    metadata = event.asset_materialization.metadata
    folder = tmp_path / "db" / "warehouse.duckdb.merged"
    assert metadata["rows_folder"].value == str(folder)
    assert f"placed beside the warehouse in {folder} (not inserted)" in str(
        metadata["summary"].value
    )
    for table in ("traces", "labels", "query_metrics"):
        assert len(list((folder / table).glob(f"partition_date={DAY}/run=*/*.parquet"))) == 4


@pytest.fixture
def dask_on_s3(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, dict[str, str]]]:
    """An S3 server, then a Dask cluster whose workers see the run's environment (they load the
    definitions, and the configuration with them, when their first step arrives)."""
    with s3_server(tmp_path) as s3:
        env = {**_environment(tmp_path, store), **s3}
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        with local_cluster(workers=2) as address:
            yield address, env


@pytest.mark.slow
def test_four_shards_on_a_dask_cluster_with_outputs_on_s3(
    one_process: dict[str, object], tmp_path: Path, dask_on_s3: tuple[str, dict[str, str]]
) -> None:
    address, env = dask_on_s3
    (tmp_path / "config.toml").write_text(
        BASE_CONFIG + '\n[execution]\nshards = 4\nexecutor = "dask"\n'
        f'dask_scheduler = "{address}"\nshard_root = "s3://shards/nightly"\n'
    )
    _materialize(tmp_path, env)
    _same_as_one_process(_outputs(tmp_path), one_process)
    fs, base = filesystem("s3://shards/nightly")
    found = fs.get_file_info(pafs.FileSelector(base, recursive=True))
    written = sorted(f.path.split("/")[-2] for f in found if f.base_name == "manifest.json")
    assert written == [f"shard={i}-of-4" for i in range(4)]
    # the shard steps ran in the cluster's worker processes
    with dg.DagsterInstance.local_temp(env["DAGSTER_HOME"]) as instance:
        (run,) = instance.get_runs(limit=1)
        messages = [record.user_message for record in instance.all_logs(run.run_id)]
    pids = {int(m.rsplit("(process ", 1)[1].rstrip(")")) for m in messages if "(process " in m}
    assert pids and pids <= set(worker_pids(address))
