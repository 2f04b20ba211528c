"""Faults: a run killed with SIGKILL during each asset in turn, the concurrency slot it leaves,
three runs at once on one DuckDB file, re-materializing, and days that are missing, empty or
unreadable.

Runs that are killed or run at once are the Dagster CLI (`dagster asset materialize`) in their
own processes, with a DAGSTER_HOME in tmp holding the committed dagster.yaml (the `duckdb` pool
limited to one slot); see `tests/dagster_runs.py`. A kill lands at a random moment inside the
step: after its start is logged, within the time the same step took in an uninterrupted run
(the seed is printed, and FAULTS_SEED replays it). These runs do not draw the regression
report's HTML page (see `ForkServer`); everything the assertions read is written as usual.
DuckDB's checkpoint stopped at each of its abort points is in `tests/warehouse/test_rewrites.py`.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from datetime import date, timedelta
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest

from retrieval_pipeline.config import PipelineConfig
from retrieval_pipeline.defs import executor as reaper
from retrieval_pipeline.defs.nightly import checks, gate
from retrieval_pipeline.reports import regression_html
from retrieval_pipeline.reports.regression import build_report
from retrieval_pipeline.sample import write_sample_store
from retrieval_pipeline.store import LocalTraceStore
from retrieval_pipeline.warehouse import attribution, connection, nightly
from retrieval_pipeline.warehouse.stages import read_stage_gains, read_stage_metrics
from tests.dagster_runs import (
    ASSET_NAMES,
    NIGHTLY,
    PIPELINE,
    ROOT,
    ForkServer,
    Run,
    Selection,
    World,
    checks_by_name,
    failures,
    listening_sockets,
    make_world,
    materialize,
    materialize_args,
)
from tests.processes import default_signals
from tests.warehouse_snapshots import (
    DAY,
    PARTITIONED,
    WAREHOUSE_STEPS,
    same,
    second_version,
    snapshot,
    warehouse_step,
)

SELECT = ",".join(ASSET_NAMES)
REPORTS = ("md", "json")


# The kill that tries the documented slot-freeing command lands at once, when the step's
# pool slot is certainly held; every other kill lands at a random moment in its step.
SLOT_STEP = "segment_metrics"
FREE_SLOTS_COMMAND = (
    "import dagster as dg; dg.DagsterInstance.get().event_log_storage"
    ".free_concurrency_slots_for_run('{run_id}')"
)


def _close(left: object, right: object) -> bool:
    if isinstance(left, float) and isinstance(right, float):
        return math.isclose(left, right, rel_tol=1e-12, abs_tol=1e-15)
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_close(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(_close, left, right))
    return left == right


def same_report(left: Mapping[str, str | None], right: Mapping[str, str | None]) -> bool:
    """The Markdown identical; the JSON identical but for the last bits of its floats: DuckDB
    sums in parallel, so a mean can differ by an ulp from run to run (see the README)."""
    if left["md"] != right["md"] or (left["json"] is None) != (right["json"] is None):
        return False
    return left["json"] is None or _close(json.loads(left["json"]), json.loads(str(right["json"])))


def report_texts(folder: Path, day: date) -> dict[str, str | None]:
    texts = {}
    for suffix in REPORTS:
        path = folder / f"regression_report_{day}.{suffix}"
        texts[suffix] = path.read_text() if path.exists() else None
    return texts


def in_process(world: World, store: Path, day: date) -> None:
    """The same assets and checks, uninterrupted, in this process (the reference)."""
    result = materialize(PIPELINE, world.resources(store), day=day)
    assert result.success, failures(result)


def claimed_by(home: Path) -> set[str]:
    """Run ids holding or waiting for a `duckdb` slot in the instance at `home`."""
    instance = dg.DagsterInstance.from_config(str(home))
    try:
        info = instance.event_log_storage.get_concurrency_info("duckdb")
        return {s.run_id for s in info.claimed_slots} | {s.run_id for s in info.pending_steps}
    finally:
        instance.dispose()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServer]:
    placeholder = tmp_path_factory.mktemp("server")
    fork_server = ForkServer(make_world(placeholder).env(placeholder), html_report=False)
    yield fork_server
    fork_server.close()


@pytest.fixture
def world(tmp_path: Path) -> World:
    """A run folder with its own DAGSTER_HOME, at `tmp_path / "world"`."""
    return make_world(tmp_path / "world")


@pytest.mark.slow
def test_sigkill_during_each_step_leaves_old_or_new_and_a_rerun_matches(
    server: ForkServer, world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # as the server's
    monkeypatch.setattr(regression_html, "write_regression_html", lambda *args: None)
    seed = int(os.environ.get("FAULTS_SEED") or random.randrange(2**32))
    print(f"FAULTS_SEED={seed}")
    rng = random.Random(seed)
    store_a = tmp_path / "store_a"
    write_sample_store(store_a, days=2, seed=3, end_date=DAY, regression_day=DAY - timedelta(1))
    store_b = second_version(store_a, tmp_path / "store_b")

    # the previous complete result: an uninterrupted CLI run on store A
    first = server.start(
        materialize_args(SELECT, DAY.isoformat()), tmp_path / "a.log", world.env(store_a)
    )
    assert first.wait() == 0, first.text()[-3000:]
    durations = first.step_seconds()
    old = snapshot(world.database, [DAY])
    old_reports = report_texts(world.reports, DAY)
    # the new result, uninterrupted, elsewhere
    reference = make_world(tmp_path / "reference")
    in_process(reference, store_b, DAY)
    new = snapshot(reference.database, [DAY])
    new_reports = report_texts(reference.reports, DAY)
    for table in [*PARTITIONED, "corpus"]:
        assert len(old[table]) and not same(old[table], new[table]), table
    assert not same_report(old_reports, new_reports)

    previous: Run | None = None
    for number, step in enumerate(ASSET_NAMES):
        held = claimed_by(world.home)
        run = server.start(
            materialize_args(SELECT, DAY.isoformat()),
            tmp_path / f"kill-{number}-{step}.log",
            world.env(store_b),
        )
        run.wait_for_step(step)
        # each step's time is read from the first run's log, which twice in about 60 runs lacked
        # the line of deploy_gate's success (the run succeeded): then the kill comes as it starts.
        # Dagster copies what its steps write to the run's stderr through `tail -F`, which polls
        # once a second and is stopped as the capture ends, so the last step's last lines can be
        # lost (dagster/_core/execution/compute_logs.py, execute_posix_tail)
        time.sleep(0 if step == SLOT_STEP else rng.uniform(0, durations.get(step, 0.0)))
        assert listening_sockets(run.pid) == set()  # a run opens no port
        run.kill()
        assert run.wait() == -9
        if previous is not None and held:
            # this run found the slot the previous one was killed with, and freed it
            assert "freed the concurrency slots of run" in run.text(), step
        previous = run

        state = snapshot(world.database, [DAY])  # the warehouse opens
        for table in [*PARTITIONED, "corpus"]:
            assert same(state[table], old[table]) or same(state[table], new[table]), (
                f"{table} after a kill in {step} is neither the old nor the new result"
            )
        reports = report_texts(world.reports, DAY)
        assert same_report(reports, old_reports) or same_report(reports, new_reports), step
        approval = world.approvals / f"deploy_approval_{DAY}.json"
        assert json.loads(approval.read_text())["approved"] is True  # never half written

        if step == SLOT_STEP:
            (killed,) = claimed_by(world.home)  # it died holding the pool's one slot
            done = subprocess.run(
                [sys.executable, "-c", FREE_SLOTS_COMMAND.format(run_id=killed)],
                env=os.environ | {"DAGSTER_HOME": str(world.home)},
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
                preexec_fn=default_signals,
            )
            assert done.returncode == 0, done.stderr
            assert claimed_by(world.home) == set()  # the documented command freed it

    rerun = server.start(
        materialize_args(SELECT, DAY.isoformat()), tmp_path / "rerun.log", world.env(store_b)
    )
    assert rerun.wait() == 0, rerun.text()[-3000:]
    final = snapshot(world.database, [DAY])
    for table in [*PARTITIONED, "corpus"]:
        assert same(final[table], new[table]), table
    assert same_report(report_texts(world.reports, DAY), new_reports)
    assert claimed_by(world.home) == set()


def _tagged_run(instance: dg.DagsterInstance, tags: dict[str, str]) -> str:
    from dagster._core.test_utils import create_run_for_test

    run = create_run_for_test(
        instance, job_name="nightly", tags=tags, status=dg.DagsterRunStatus.STARTED
    )
    return run.run_id


def test_slots_of_dead_runs_are_freed_and_live_ones_kept(tmp_path: Path) -> None:
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        storage = instance.event_log_storage
        storage.set_concurrency_slots("duckdb", 5)
        host = {reaper.HOST_TAG: reaper.socket.gethostname()}
        sleeper = subprocess.Popen(["sleep", "60"], preexec_fn=default_signals)
        dying = subprocess.Popen(["sleep", "60"], preexec_fn=default_signals)
        dead_identity = reaper.process_identity(dying.pid)
        dying.kill()
        dying.wait()
        recycled = reaper.process_identity().rsplit(":", 1)[0] + ":1"  # our pid, other start
        runs = {
            "dead": _tagged_run(instance, host | {reaper.PROCESS_TAG: dead_identity}),
            "recycled": _tagged_run(instance, host | {reaper.PROCESS_TAG: recycled}),
            "alive": _tagged_run(
                instance, host | {reaper.PROCESS_TAG: reaper.process_identity(sleeper.pid)}
            ),
            "other host": _tagged_run(
                instance, {reaper.HOST_TAG: "elsewhere", reaper.PROCESS_TAG: dead_identity}
            ),
            "untagged": _tagged_run(instance, {}),
        }
        for name, run_id in runs.items():
            assert storage.claim_concurrency_slot("duckdb", run_id, f"step-{name}").is_claimed
        try:
            freed = reaper.free_slots_of_dead_runs(instance)
        finally:
            sleeper.kill()
            sleeper.wait()
        assert sorted(freed) == sorted([runs["dead"], runs["recycled"]])
        for name in ("dead", "recycled"):
            run = instance.get_run_by_id(runs[name])
            assert run is not None and run.status == dg.DagsterRunStatus.FAILURE
        alive = instance.get_run_by_id(runs["alive"])
        assert alive is not None and not alive.is_finished
        holders = {s.run_id for s in storage.get_concurrency_info("duckdb").claimed_slots}
        assert runs["alive"] in holders and runs["dead"] not in holders


def test_the_by_hand_command_reports_in_words(
    world: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    assert reaper.main() == 1
    assert "DAGSTER_HOME is not set" in capsys.readouterr().err
    monkeypatch.setenv("DAGSTER_HOME", str(world.home))
    assert reaper.main() == 0
    assert capsys.readouterr().out.strip() == "no slot is held by a run whose process is gone"


def test_the_pipeline_uses_the_freeing_executor() -> None:
    from retrieval_pipeline.defs import defs

    job = defs.resolve_job_def("nightly")
    assert job.executor_def is reaper.in_process_freeing_dead_slots
    yaml_text = (ROOT / "dagster_home" / "dagster.yaml").read_text()
    assert "free_concurrency_slots_for_run('RUN_ID')" in yaml_text


@pytest.mark.slow
def test_three_runs_at_once_all_succeed_and_equal_sequential_runs(
    server: ForkServer, world: World, tmp_path: Path
) -> None:
    # four clean days, moved 10 days apart so that no run's baseline is another run's output
    raw = tmp_path / "raw"
    first = date(2026, 11, 1)
    write_sample_store(raw, days=5, seed=5, end_date=first + timedelta(4), regression_day=first)
    single_a, single_b = date(2026, 11, 1), date(2026, 11, 11)
    backfill = [date(2026, 11, 21), date(2026, 11, 22)]
    store = tmp_path / "store"
    shutil.copytree(raw, store, ignore=shutil.ignore_patterns("date=*"))
    for source, target in zip(range(1, 5), [single_a, single_b, *backfill], strict=True):
        shutil.copytree(
            raw / "traces" / f"date={first + timedelta(source)}",
            store / "traces" / f"date={target}",
        )
    env = world.env(store)
    runs = [
        server.start(materialize_args(SELECT, single_a.isoformat()), tmp_path / "a.log", env),
        server.start(materialize_args(SELECT, single_b.isoformat()), tmp_path / "b.log", env),
        server.start(
            materialize_args(SELECT, range_=f"{backfill[0]}...{backfill[-1]}"),
            tmp_path / "range.log",
            env,
        ),
    ]
    logs = [run.text() for run in runs if run.wait(600) is not None]
    for run, text in zip(runs, logs, strict=True):
        assert run.status == 0, text[-4000:]
        assert "Could not set lock" not in text and "Conflicting lock" not in text
    assert any("blocked by limit for pool duckdb" in text for text in logs)  # they did queue
    days = [single_a, single_b, *backfill]
    together = snapshot(world.database, days)

    # sequential: the assets' warehouse steps, one run after the other, in a fresh warehouse
    database = tmp_path / "sequential.duckdb"
    conn = connection.connect(database)
    config = PipelineConfig()
    try:
        for run_days in ([single_a], [single_b], backfill):
            for step in WAREHOUSE_STEPS:
                warehouse_step(conn, store, step, run_days)
        expected_reports = {
            day: attribution.with_why(  # and why its findings moved, as the asset adds
                conn,
                config,
                build_report(
                    nightly.read_regression_rows(conn, day, day),
                    config,
                    day,
                    nightly.label_sources(conn, day),
                    # the sample has no reranker spans: the report says so
                    (read_stage_metrics(conn, day, day), read_stage_gains(conn, day, day)),
                ),
            )
            for day in days
        }
    finally:
        conn.close()
    alone = snapshot(database, days)
    for table in [*PARTITIONED, "corpus"]:
        assert len(alone[table]) and same(together[table], alone[table]), table
    for day in days:
        built = expected_reports[day]
        expected = {"md": built.to_markdown(), "json": built.to_json()}
        assert same_report(report_texts(world.reports, day), expected), day
        approval = json.loads((world.approvals / f"deploy_approval_{day}.json").read_text())
        assert approval["approved"] and approval["partition"] == day.isoformat()


def test_the_gate_reads_its_own_runs_checks_when_other_days_ran_since(
    small_store: Path, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs of different days at once: a check's latest evaluation can be another run's, for
    another day, by the time this run's gate asks. The gate takes its own run's evaluations
    (found by the concurrency test above; here made certain by answering the day's "latest" with
    the other day's records), and alone it still refuses what its latest checks did not cover."""
    # not under test
    monkeypatch.setattr(regression_html, "write_regression_html", lambda *args: None)
    instance = dg.DagsterInstance.ephemeral()
    other, day = LocalTraceStore(small_store).days()[:2]

    def run(selection: Selection, partition: date) -> dg.ExecuteInProcessResult:
        return materialize(selection, world.resources(small_store), partition, instance=instance)

    assert run(PIPELINE, other).success
    records = {key: gate._latest_record(instance, key, other) for key in gate.BLOCKING_CHECK_KEYS}
    monkeypatch.setattr(gate, "_latest_record", lambda instance, key, day: records[key])
    result = run(PIPELINE, day)
    assert result.success, failures(result)
    assert (world.approvals / f"deploy_approval_{day}.json").exists()
    alone = run([gate.deploy_gate], day)
    ((_, _, message),) = failures(alone)
    assert f"covers {other}..{other}, not {day}" in message


# --- re-materializing ---------------------------------------------------------------------------


def test_rematerializing_days_and_ranges_through_dagster(small_store: Path, world: World) -> None:
    days = LocalTraceStore(small_store).days()[:2]
    fast = PIPELINE[:5]  # up to segment_metrics: the report's rows are covered in warehouse/
    instance = dg.DagsterInstance.ephemeral()

    def run(day: date | None = None, span: list[date] | None = None) -> None:
        result = materialize(fast, world.resources(small_store), day, span, instance)
        assert result.success

    run(span=days)
    expected = snapshot(world.database, days)
    run(day=days[1])
    run(day=days[0])
    run(span=days)
    for table, frame in snapshot(world.database, days).items():
        assert same(frame, expected[table]), table


def _run_in_process(
    world: World, store: Path, day: date, selection: Selection | None = None
) -> dg.ExecuteInProcessResult:
    return materialize(selection or PIPELINE, world.resources(store), day=day)


def _in_words(message: str) -> None:
    assert "Traceback" not in message and 'File "' not in message
    assert len(message.splitlines()) <= 2


def test_a_missing_day_fails_in_words_and_nothing_downstream_runs(
    small_store: Path, world: World
) -> None:
    result = _run_in_process(world, small_store, date(2026, 11, 1))
    assert not result.success
    ((step, cls, message),) = failures(result)
    assert (step, cls) == ("traces", "Failure")
    _in_words(message)
    assert "no traces for 2026-11-01 under " in message
    assert not result.get_asset_check_evaluations()  # no check passed on no data
    assert not result.asset_materializations_for_node("deploy_gate")


def test_an_empty_day_is_no_data_for_every_blocking_check(
    small_store: Path, world: World, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    shutil.copytree(small_store, store)
    empty = date(2026, 11, 20)
    (store / "traces" / f"date={empty}").mkdir()
    result = _run_in_process(world, store, empty)
    evaluations = checks_by_name(result)
    assert evaluations["quarantine_rate"].passed is False
    assert evaluations["quarantine_rate"].description == f"no data for {empty}: 0 records read"
    # past the quarantine check (it stops the run), the other checks see no data as a failure
    rest = [
        *[NIGHTLY[name] for name in ASSET_NAMES],
        checks.segment_thresholds,
        checks.annotation_coverage,
        checks.stale_label_rate,
        checks.reranker_stage,
    ]
    result = _run_in_process(world, store, empty, rest)
    evaluations = checks_by_name(result)
    for name in ("segment_thresholds", "annotation_coverage", "stale_label_rate", "reranker_stage"):
        assert evaluations[name].passed is False, name
        assert (evaluations[name].description or "").startswith(f"no data for {empty}"), name
    assert not result.asset_materializations_for_node("deploy_gate")
    gate = [message for step, _, message in failures(result) if step == "deploy_gate"]
    assert len(gate) <= 1 and all("refuses" in message for message in gate)
    report = json.loads((world.reports / f"regression_report_{empty}.json").read_text())
    assert report["has_data"] is False and report["passed"] is False


@pytest.mark.parametrize(
    ("name", "content", "words"),
    [
        ("broken.parquet", b"PAR1 not really", "not a readable Parquet file"),
        ("fake.jsonl.gz", b'{"trace_id": "x"}\n', "not a gzip file"),
    ],
)
def test_an_unreadable_day_fails_in_words_and_keeps_its_previous_rows(
    small_store: Path, world: World, tmp_path: Path, name: str, content: bytes, words: str
) -> None:
    store = tmp_path / "store"
    shutil.copytree(small_store, store)
    fast = PIPELINE[:2]  # corpus, traces
    assert _run_in_process(world, store, DAY, fast).success
    before = snapshot(world.database, [DAY])
    (store / "traces" / f"date={DAY}" / name).write_bytes(content)
    result = _run_in_process(world, store, DAY, [*fast, checks.quarantine_rate])
    ((step, cls, message),) = failures(result)
    assert (step, cls) == ("traces", "Failure")
    _in_words(message)
    assert f"cannot ingest {DAY}: " in message and name in message and words in message
    after = snapshot(world.database, [DAY])
    assert same(after["traces"], before["traces"]) and len(after["traces"])
    assert not result.get_asset_check_evaluations()


def test_a_full_disk_while_staging_fails_in_words_and_keeps_the_day(
    small_store: Path, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = PIPELINE[:2]  # corpus, traces
    assert _run_in_process(world, small_store, DAY, fast).success
    before = snapshot(world.database, [DAY])

    def no_space(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq, "write_table", no_space)
    result = _run_in_process(world, small_store, DAY, fast)
    ((step, cls, message),) = failures(result)
    assert (step, cls) == ("traces", "Failure")
    _in_words(message)
    assert f"cannot ingest {DAY}: " in message
    assert "cannot write a staging file (No space left on device)" in message
    monkeypatch.undo()
    after = snapshot(world.database, [DAY])
    assert same(after["traces"], before["traces"]) and len(after["traces"])
    assert not (world.database.parent / (world.database.name + ".staging")).exists()


def test_the_cli_names_a_missing_day_and_exits_1(
    server: ForkServer, small_store: Path, world: World, tmp_path: Path
) -> None:
    run = server.start(
        materialize_args("traces", "2026-11-02"), tmp_path / "missing.log", world.env(small_store)
    )
    assert run.wait() == 1
    text = run.text()
    assert "no traces for 2026-11-02 under " in text
    assert text.rstrip().endswith("Error: Materialization failed.")
