"""Dagster runs for the tests: in this process (`materialize` with a `RunFolder`'s resources), and
`dagster asset materialize` as separate processes that a test can watch and kill (`ForkServer`;
a `World` is a run folder with a DAGSTER_HOME of its own).

Each CLI run is the Dagster CLI (`dagster._cli.main`) with the given arguments, in its own process
with its own environment and log file, so SIGKILL ends it exactly as it would end a nightly run.
Starting the CLI costs several seconds of imports (Dagster, SciPy, pandas) before the first step;
to keep the fault tests inside CI's time budget, one warm server process pays them once and
forks a fresh child per run. The server is single-threaded when it forks (BLAS and Arrow thread
pools are disabled in its environment), and a child never returns to the server's code.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import dagster as dg
import pandas as pd

from retrieval_pipeline.defs import ASSETS
from retrieval_pipeline.defs.nightly import checks
from retrieval_pipeline.defs.resources import (
    PipelineSettingsResource,
    TraceStoreResource,
    WarehouseResource,
)
from retrieval_pipeline.warehouse import connection
from tests.processes import default_signals
from tests.warehouse_snapshots import WAREHOUSE_STEPS

ROOT = Path(__file__).resolve().parents[1]
# The nightly's assets in the order they run (the warehouse's steps, then the gate), and then its
# checks: a slice is its first steps.
ASSET_NAMES = [*WAREHOUSE_STEPS, "deploy_gate"]
NIGHTLY = {asset.key.path[-1]: asset for asset in ASSETS}
PIPELINE = [NIGHTLY[name] for name in ASSET_NAMES] + list(checks.ALL_CHECKS)

# --- in this process ---------------------------------------------------------------------------

# What `materialize` runs: assets and asset checks (each an AssetsDefinition).
Selection = Sequence[dg.AssetsDefinition]


@dataclass
class RunFolder:
    """What the nightly's runs write, under one folder: the warehouse (`db/warehouse.duckdb`),
    the reports (`reports/`) and the approval records (`approvals/`)."""

    path: Path

    @property
    def database(self) -> Path:
        return self.path / "db" / "warehouse.duckdb"

    @property
    def reports(self) -> Path:
        return self.path / "reports"

    @property
    def approvals(self) -> Path:
        return self.path / "approvals"

    def resources(
        self,
        store: Path,
        config: Path | None = None,
        reports: Path | None = None,
        store_retrieved_ids: bool = True,
    ) -> dict[str, object]:
        """The nightly's resources: the traces of `store` in, this folder's files out (the
        reports in `reports` when given); `config` the pipeline's TOML file (None: defaults)."""
        return {
            "trace_store": TraceStoreResource(root=str(store)),
            "warehouse": WarehouseResource(
                database=str(self.database), store_retrieved_ids=store_retrieved_ids
            ),
            "settings": PipelineSettingsResource(
                config_path=None if config is None else str(config),
                reports_dir=str(reports or self.reports),
                approvals_dir=str(self.approvals),
            ),
        }

    def query(self, sql: str, params: dict[str, object] | None = None) -> pd.DataFrame:
        """`sql` on the warehouse as every step reads it (`connect`: the days' traces are in
        files beside it)."""
        with contextlib.closing(connection.connect(self.database)) as conn:
            return conn.execute(sql, params or {}).df()


def range_tags(days: Sequence[date]) -> dict[str, str]:
    """The tags of one run over the partitions `days[0]`..`days[-1]` (a single-run backfill)."""
    return {
        "dagster/asset_partition_range_start": days[0].isoformat(),
        "dagster/asset_partition_range_end": days[-1].isoformat(),
    }


def materialize(
    selection: Selection,
    resources: dict[str, object],
    day: date | None = None,
    days: Sequence[date] | None = None,
    instance: dg.DagsterInstance | None = None,
) -> dg.ExecuteInProcessResult:
    """`selection` run in this process for partition `day` or the range `days` (neither: an
    unpartitioned run), on `instance` (None: a new ephemeral one); failures are in the result."""
    return dg.materialize(
        selection,
        resources=resources,
        instance=instance or dg.DagsterInstance.ephemeral(),
        partition_key=None if day is None else day.isoformat(),
        tags=range_tags(days) if days else None,
        raise_on_error=False,
    )


def failures(result: dg.ExecuteInProcessResult) -> list[tuple[str, str, str]]:
    """(step, error class, message) of each step that failed."""
    out = []
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data.error is not None:
            error = event.step_failure_data.error
            out.append((event.step_key or "", error.cls_name or "", error.message))
    return out


def failure_messages(result: dg.ExecuteInProcessResult) -> list[str]:
    return [message for _, _, message in failures(result)]


def checks_by_name(result: dg.ExecuteInProcessResult) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def listening_sockets(pid: int | None = None) -> set[str]:
    """Inodes of the listening TCP sockets that process `pid` (None: this one) holds."""
    listening = set()
    for table in (Path("/proc/net/tcp"), Path("/proc/net/tcp6")):
        if table.exists():
            for line in table.read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A":  # LISTEN
                    listening.add(fields[9])  # the socket's inode
    held = set()
    for fd in Path(f"/proc/{pid or 'self'}/fd").iterdir():
        try:
            target = fd.readlink().name
        except OSError:
            continue
        if target.startswith("socket:["):
            held.add(target[len("socket:[") : -1])
    return held & listening


# --- as separate processes ---------------------------------------------------------------------


@dataclass
class World(RunFolder):
    """A run folder with its own DAGSTER_HOME (`dagster_home/`), for runs of the Dagster CLI."""

    @property
    def home(self) -> Path:
        return self.path / "dagster_home"

    def env(self, store: Path) -> dict[str, str]:
        """The environment of a CLI run on `store` that writes into this world."""
        return {
            "DAGSTER_HOME": str(self.home),
            "RETRIEVAL_PIPELINE_STORE": str(store),
            "RETRIEVAL_PIPELINE_DB": str(self.database),
            "RETRIEVAL_PIPELINE_REPORTS": str(self.reports),
            "RETRIEVAL_PIPELINE_APPROVALS": str(self.approvals),
        }


def make_world(base: Path) -> World:
    """A world at `base`, its DAGSTER_HOME holding the committed dagster.yaml (the `duckdb` pool
    limited to one slot) and its instance's tables already created."""
    world = World(base)
    world.home.mkdir(parents=True)
    shutil.copy(ROOT / "dagster_home" / "dagster.yaml", world.home / "dagster.yaml")
    # A new DAGSTER_HOME creates its SQLite tables on first use; two runs doing that at the same
    # moment collide (UNIQUE constraint failed: alembic_version), so create them first, as any
    # earlier command would have (see the README).
    dg.DagsterInstance.from_config(str(world.home)).dispose()
    return world


# The server: imports once, then forks one child per request read from stdin. Replies on stdout:
# {"id", "pid"} when a child starts, {"id", "status"} when it ends (negative: killed by signal).
_SERVER = r"""
import json, os, select, sys, time
import dagster._cli
import retrieval_pipeline.defs  # noqa: F401  (the definitions, loaded once)
import dagster as dg

# the instance's storage modules (SQLite, SQLAlchemy, Alembic) load on first use: load them here
dg.DagsterInstance.get().dispose()

if os.environ.get("RUNS_WITHOUT_HTML_REPORT"):
    import retrieval_pipeline.reports.regression_html
    retrieval_pipeline.reports.regression_html.write_regression_html = lambda *args, **kwargs: None

def child(request):
    os.environ.update(request["env"])
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.argv = ["dagster", *request["args"]]
    code = 0
    try:
        dagster._cli.main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

def reply(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()

children = {}
pending = b""
reply({"ready": True})
open_input = True
while open_input or children:
    readable = select.select([0], [], [], 0.02)[0] if open_input else time.sleep(0.02)
    if readable:
        chunk = os.read(0, 65536)
        if not chunk:
            open_input = False
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                child(request)
            children[pid] = request["id"]
            reply({"id": request["id"], "pid": pid})
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            break
        reply({"id": children.pop(pid), "status": os.waitstatus_to_exitcode(status)})
"""

STEP_START = re.compile(r'STEP_START - Started execution of step "([^"]+)"')
STEP_SUCCESS = re.compile(r'STEP_SUCCESS - Finished execution of step "([^"]+)" in ([0-9.]+)(ms|s)')


@dataclass
class Run:
    """One CLI run: its process id, its log, and its exit status once it ended."""

    id: int
    log: Path
    pid: int = 0
    status: int | None = None
    started: threading.Event = field(default_factory=threading.Event)
    ended: threading.Event = field(default_factory=threading.Event)

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_for_step(self, step: str, timeout: float = 120) -> float:
        """Block until the run logs the start of `step`; the time.monotonic() it was seen."""
        needle = f'STEP_START - Started execution of step "{step}"'
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.text():
                return time.monotonic()
            if self.ended.is_set():
                raise AssertionError(f"the run ended before step {step}:\n{self.text()[-3000:]}")
            time.sleep(0.005)
        raise AssertionError(f"step {step} did not start within {timeout}s:\n{self.text()[-3000:]}")

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)

    def wait(self, timeout: float = 300) -> int:
        if not self.ended.wait(timeout):
            raise AssertionError(f"the run did not end within {timeout}s:\n{self.text()[-3000:]}")
        assert self.status is not None
        return self.status

    def step_seconds(self) -> dict[str, float]:
        """How long each step that succeeded took, from the log."""
        return {
            step: float(value) / (1000 if unit == "ms" else 1)
            for step, value, unit in STEP_SUCCESS.findall(self.text())
        }


class ForkServer:
    """A warm process that starts CLI runs; `env` holds what every run shares.

    With `html_report=False` the regression report's HTML page
    (`reports.regression_html.write_regression_html`) is not drawn: it takes 3 s per day on a
    quiet machine and far more on a busy one, and has its own tests (its trend, a short query,
    is still read in the same step and connection); the Markdown and JSON reports, the tables
    and the approval records, which the fault tests check, are written as usual."""

    def __init__(self, env: dict[str, str], html_report: bool = True) -> None:
        server_env = os.environ | env
        if not html_report:
            server_env["RUNS_WITHOUT_HTML_REPORT"] = "1"
        # one thread in the server when it forks
        server_env |= {
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "ARROW_DEFAULT_MEMORY_POOL": "system",
            "PYTHONUNBUFFERED": "1",
        }
        self._process = subprocess.Popen(
            [sys.executable, "-c", _SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=server_env,
            cwd=ROOT,
            preexec_fn=default_signals,
        )
        self._runs: dict[int, Run] = {}
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._ready.wait(120):
            raise AssertionError("the run server did not start")

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            message = json.loads(line)
            if message.get("ready"):
                self._ready.set()
                continue
            with self._lock:
                run = self._runs[message["id"]]
            if "pid" in message:
                run.pid = message["pid"]
                run.started.set()
            else:
                run.status = message["status"]
                run.ended.set()

    @property
    def pid(self) -> int:
        """The server's process id."""
        return self._process.pid

    def start(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> Run:
        with self._lock:
            run = Run(id=len(self._runs), log=log)
            self._runs[run.id] = run
        request = {"id": run.id, "args": args, "log": str(log), "env": env or {}}
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        if not run.started.wait(30):
            raise AssertionError("the run server did not start the run")
        return run

    def close(self) -> None:
        for run in self._runs.values():
            if not run.ended.is_set():
                with contextlib.suppress(ProcessLookupError):
                    run.kill()
        if self._process.stdin:
            self._process.stdin.close()
        try:
            self._process.wait(30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


def materialize_args(
    select: str, partition: str | None = None, range_: str | None = None
) -> list[str]:
    args = ["asset", "materialize", "-m", "retrieval_pipeline.defs", "--select", select]
    if partition:
        args += ["--partition", partition]
    if range_:
        args += ["--partition-range", range_]
    return args
