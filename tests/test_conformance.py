"""The conformance matrix: every trace source, with every label source, through every door, gives
trec_eval's numbers for every trace, empty results included (issue 31, docs/conformance.md).

One seeded dataset (`tests/conformance_data.py`) is written as each source: JSON lines, gzipped
JSON lines, Parquet, OTLP/JSON span exports with hex and with base64 ids, a live Phoenix project
(a real server on 127.0.0.1), an S3 bucket (moto's server on 127.0.0.1), a Delta table with an
older version beside the current one, and a TREC run. Each door reads it: `evaluate` (the
command), the Python `evaluate()`, `--stages` (the reranker's stages too, per trace), the
nightly (a real Dagster run), the sharded nightly (`dagster asset materialize` with two shards)
and `monitor`. Every per-trace value is compared with pytrec_eval's on the trace's labels (its
own, else its query's judgments); each label source is a group of traces in every run. A cell
that cannot apply is listed in `CELLS` with its reason, and docs/conformance.md is the table of
`CELLS`, held equal to it here.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

import retrieval_pipeline
from retrieval_pipeline.cli import main as cli
from retrieval_pipeline.defs.resources import (
    PipelineSettingsResource,
    TraceStoreResource,
    WarehouseResource,
)
from retrieval_pipeline.ingest.trec import read_trec_run
from retrieval_pipeline.warehouse.connection import connect
from tests.conformance_data import (
    DAY,
    FILE_KINDS,
    METRICS,
    PROJECT,
    SPAN_KINDS,
    Dataset,
    dataset,
    expected,
    oracle,
    span_lines,
    trec_run,
    write_delta,
    write_file,
    write_qrels,
    write_store,
)
from tests.dagster_runs import NIGHTLY, materialize
from tests.ingest.phoenix_server import PhoenixServer
from tests.ingest.span_exports import to_protobuf
from tests.processes import default_signals
from tests.s3_server import S3, aws_env, s3, s3_endpoint

__all__ = ["aws_env", "s3", "s3_endpoint"]

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SOURCES = (*FILE_KINDS, "s3", "delta", "phoenix", "trec-run")
LABEL_SOURCES = ("inline", "judgments", "mixed", "clicks")
DOORS = ("evaluate", "python", "stages", "nightly", "shards", "monitor")
TOLERANCE = 1e-9
STORED_WITHIN_S = 180

# --- the matrix: which cells run, and why the others cannot --------------------------------------

TREC_LABELS = "a TREC run carries no labels: its qrels label it (the judgments cell)"
TREC_DOOR = "a store's day holds trace records or spans; a TREC run is read by evaluate --trec-run"
CLICKS = (
    "click logs become a judgments file (labels-from-clicks, docs/click-labels.md), read as the "
    "judgments cell is; the debiasing is held by tests/labels/"
)
STREAMS = (
    "shards deal a local day's files; an object store's, a Delta table's or a Phoenix day is "
    "read as one stream (docs/scaling.md)"
)
MONITOR = "monitor tails a local JSON-lines file as it grows"
MONITOR_LABELS = "monitor scores each record on its own labels; judgments are not read live"


def reason(source: str, label: str, door: str) -> str | None:
    """Why a cell cannot apply (None: it runs)."""
    if label == "clicks":
        return CLICKS
    if source == "trec-run":
        if door in ("nightly", "shards", "monitor", "stages"):
            return TREC_DOOR
        if label != "judgments":
            return TREC_LABELS
        return None
    if door == "shards" and source not in FILE_KINDS:
        return STREAMS
    if door == "monitor":
        if source != "jsonl":
            return MONITOR
        if label != "inline":
            return MONITOR_LABELS
    return None


@dataclass(frozen=True)
class Cell:
    source: str
    label: str
    door: str
    reason: str | None

    @property
    def test(self) -> str:
        return f"test_conformance.py::test_cell[{self.source}-{self.door}]"


CELLS = [
    Cell(source, label, door, reason(source, label, door))
    for source in SOURCES
    for door in DOORS
    for label in LABEL_SOURCES
]
RUNS = sorted(
    {(c.source, c.door) for c in CELLS if c.reason is None},
    key=lambda pair: (SOURCES.index(pair[0]), DOORS.index(pair[1])),
)


def matrix_markdown() -> str:
    """docs/conformance.md's table: one row per source and door, a column per label source."""
    lines = [
        "| source | door | " + " | ".join(LABEL_SOURCES) + " |",
        "| --- | --- | " + " | ".join("---" for _ in LABEL_SOURCES) + " |",
    ]
    reasons: dict[str, int] = {}
    for source in SOURCES:
        for door in DOORS:
            cells = []
            for label in LABEL_SOURCES:
                why = reason(source, label, door)
                if why is None:
                    cells.append(f"[yes](../tests/test_conformance.py) `{source}-{door}`")
                else:
                    cells.append(f"n/a ({reasons.setdefault(why, len(reasons) + 1)})")
            lines.append(f"| {source} | {door} | " + " | ".join(cells) + " |")
    lines.append("")
    lines += [f"{n}. {why}" for why, n in reasons.items()]
    return "\n".join(lines)


def test_every_cell_runs_or_says_why_and_the_docs_list_them() -> None:
    assert len(CELLS) == len(SOURCES) * len(LABEL_SOURCES) * len(DOORS)
    assert all(cell.reason is None or len(cell.reason) > 20 for cell in CELLS)
    # each source runs through evaluate and the Python API with the judgments at least
    for source in SOURCES:
        assert reason(source, "judgments", "evaluate") is None
        assert reason(source, "judgments", "python") is None
    page = (ROOT / "docs" / "conformance.md").read_text(encoding="utf-8")
    assert matrix_markdown() in page, "docs/conformance.md's table is not CELLS: regenerate it"


# --- the sources ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data() -> Dataset:
    return dataset()


@pytest.fixture(scope="module")
def local(data: Dataset, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local store whose day holds every local file kind, and the judgments."""
    return write_store(data, tmp_path_factory.mktemp("conformance") / "store")


@pytest.fixture(scope="module")
def in_phoenix(data: Dataset, phoenix: PhoenixServer) -> str:
    """The dataset's spans sent to the session's Phoenix server over OTLP, once stored."""
    lines = span_lines(data, "phoenix")
    for line in lines:
        phoenix.send(to_protobuf(line))
    spans = sum(len(s["spans"]) for line in lines for r in json.loads(line)["resourceSpans"]
                for s in r["scopeSpans"])  # fmt: skip
    _wait_until_stored(phoenix, spans)
    return phoenix.base_url


def _wait_until_stored(phoenix: PhoenixServer, count: int) -> None:
    from phoenix.client import Client
    from phoenix.client.types.spans import SpanQuery

    client = Client(base_url=phoenix.base_url)
    deadline, stored = time.monotonic() + STORED_WITHIN_S, -1
    while stored < count and time.monotonic() < deadline:
        frame = client.spans.get_spans_dataframe(
            query=SpanQuery().select("name"), project_identifier=PROJECT, limit=count + 1
        )
        stored = len(frame)
        time.sleep(0.5)
    assert stored == count, f"Phoenix stored {stored} of {count} spans; log: {phoenix.log}"


@dataclass(frozen=True)
class Source:
    """A source as `evaluate` names it, and as the nightly's store (root, Phoenix settings)."""

    spec: str
    qrels: Path
    store: str | None = None
    phoenix: str | None = None


def source_of(kind: str, data: Dataset, local: Path, folder: Path, request: Any) -> Source:
    qrels = local / "judgments" / "qrels.txt"
    if kind in FILE_KINDS:
        return Source(str(write_file(data, kind, folder)), qrels, str(local))
    if kind == "s3":
        s3_server: S3 = request.getfixturevalue("s3")
        store = folder / "s3-store"
        write_file(data, "jsonl.gz", store / "traces" / f"date={DAY}", ids="s3")
        write_qrels(data, store / "judgments")
        s3_server.upload(store, "bucket/conformance")
        request.getfixturevalue("monkeypatch").setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
        return Source(
            f"s3://bucket/conformance/traces/date={DAY}/", qrels, "s3://bucket/conformance"
        )
    if kind == "delta":
        store = folder / "delta-store"
        write_delta(data, store / "traces")
        write_qrels(data, store / "judgments")
        return Source(str(store / "traces"), qrels, str(store))
    if kind == "phoenix":
        url = request.getfixturevalue("in_phoenix")
        return Source(f"phoenix+{url}/{PROJECT}?day={DAY}", qrels, None, url)
    assert kind == "trec-run", kind
    return Source(str(folder / "run.txt"), qrels)


@pytest.fixture(scope="module")
def local_nightly(local: Path, tmp_path_factory: pytest.TempPathFactory) -> Values:
    source = Source("", local / "judgments" / "qrels.txt", str(local))
    return through_nightly(source, tmp_path_factory.mktemp("nightly"))


@pytest.fixture(scope="module")
def local_shards(local: Path, tmp_path_factory: pytest.TempPathFactory) -> Values:
    source = Source("", local / "judgments" / "qrels.txt", str(local))
    return through_shards(source, tmp_path_factory.mktemp("shards"))


# --- the doors -----------------------------------------------------------------------------------

Values = dict[str, dict[str, float | None]]


def _values(frame: pd.DataFrame) -> Values:
    return {
        str(row["trace_id"]): {m: _number(row[m]) for m in METRICS}
        for row in frame.to_dict("records")
    }


def _number(value: object) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)  # type: ignore[arg-type]


def through_evaluate(source: Source, folder: Path, trec: bool = False) -> Values:
    out = folder / "per_trace.parquet"
    where = ["--trec-run", source.spec] if trec else [source.spec]
    result = CliRunner().invoke(
        cli,
        ["evaluate", *where, "--judgments", str(source.qrels), "--gain", "linear",
         "--metrics", ",".join(METRICS), "--output", str(out), "--format", "json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["records_quarantined"] == 0, summary
    return _values(pd.read_parquet(out))


def through_python(source: Source, trec: bool = False, stage: str = "retriever") -> Values:
    traces: Any = read_trec_run(source.spec).records if trec else source.spec
    frame = retrieval_pipeline.evaluate(
        traces, METRICS, gain="linear", judgments=source.qrels, stage=stage
    )
    return _values(frame)


def through_stages(source: Source, kind: str, data: Dataset) -> Values:
    """`evaluate --stages`: its first stage is the summary above it, its stage means are the
    oracle's; the reranker's stages per trace through the Python API, against the oracle."""
    result = CliRunner().invoke(
        cli,
        ["evaluate", source.spec, "--judgments", str(source.qrels), "--gain", "linear",
         "--metrics", ",".join(METRICS), "--stages", "--format", "json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["stages"]["retriever"]["means"] == summary["means"]
    assert summary["reranker_stage"] is (kind in SPAN_KINDS)
    first = [v for v in expected(data, kind).values() if v is not None]
    for metric in METRICS:
        mean = sum(v[metric] for v in first) / len(first)
        assert summary["means"][metric] == pytest.approx(mean, abs=TOLERANCE)
    if kind in SPAN_KINDS:
        for stage in ("reranker_input", "reranker"):
            want = expected(data, kind, stage)
            _same(through_python(source, stage=stage), want, f"{kind} {stage}")
            means = summary["stages"][stage]["means"]
            for metric in METRICS:
                values = [v[metric] for v in want.values() if v is not None]
                assert means[metric] == pytest.approx(sum(values) / len(values), abs=TOLERANCE)
    return through_python(source)


def _config(folder: Path, text: str) -> Path:
    path = folder / "config.toml"
    path.write_text('gain = "linear"\n' + text, encoding="utf-8")
    return path


def _query_metrics(database: Path) -> Values:
    with contextlib.closing(connect(database)) as conn:
        rows = conn.execute("select trace_id, metric, value from query_metrics").fetchall()
    out: Values = {}
    for trace_id, metric, value in rows:
        out.setdefault(trace_id, {})[metric] = value
    return out


def through_nightly(source: Source, folder: Path) -> Values:
    configured = f'judgments = ["{source.qrels}"]\n' if source.phoenix else ""
    config = _config(folder, configured)
    database = folder / "db" / "warehouse.duckdb"
    store = TraceStoreResource(
        root=source.store or str(folder / "no-store"),
        phoenix_endpoint=source.phoenix,
        phoenix_project=PROJECT if source.phoenix else None,
        config_path=str(config),
    )
    selection = [NIGHTLY[name] for name in ("judgments", "corpus", "traces", "labels")]
    result = materialize(
        [*selection, NIGHTLY["query_metrics"]],
        {
            "trace_store": store,
            "warehouse": WarehouseResource(database=str(database)),
            "settings": PipelineSettingsResource(
                config_path=str(config), reports_dir=str(folder / "reports")
            ),
        },
        day=date.fromisoformat(DAY),
    )
    assert result.success, [e.message for e in result.all_events if e.is_step_failure]
    return _query_metrics(database)


def through_shards(source: Source, folder: Path) -> Values:
    """`dagster asset materialize` of the day in two shards on the multiprocess executor."""
    config = _config(
        folder,
        # the checks judge the day, not the readers: none of them stops the run here
        "thresholds = {}\n[checks]\nmax_quarantine_rate = 1.0\nmin_coverage = 0.0\n"
        '\n[execution]\nshards = 2\nexecutor = "multiprocess"\n'
        f'shard_root = "{folder / "shards"}"\n',
    )
    home = folder / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((ROOT / "dagster_home" / "dagster.yaml").read_text())
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "RETRIEVAL_PIPELINE_CONFIG": str(config),
        "RETRIEVAL_PIPELINE_STORE": str(source.store),
        "RETRIEVAL_PIPELINE_DB": str(folder / "db" / "warehouse.duckdb"),
        "RETRIEVAL_PIPELINE_START_DATE": DAY,
    }
    command = [
        str(Path(sys.executable).parent / "dagster"), "asset", "materialize",
        "-m", "retrieval_pipeline.defs", "--select",
        "traces,corpus,judgments,labels,query_metrics", "--partition", DAY,
    ]  # fmt: skip
    done = subprocess.run(
        command,
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        preexec_fn=default_signals,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return _query_metrics(folder / "db" / "warehouse.duckdb")


def through_monitor(source: Source, data: Dataset) -> Values:
    """`monitor --once`: one window of the whole file; its means are over the traces labelled
    by their own labels (a live monitor reads no judgments), empty results among them."""
    result = CliRunner().invoke(
        cli,
        ["monitor", "--follow", source.spec, "--once", "--window-records", "10000",
         "--metrics", ",".join(METRICS), "--gain", "linear", "--format", "json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    window = json.loads(result.stdout.splitlines()[0])
    own = {t.trace_id("jsonl") for t in data.traces if t.own is not None}
    want = {k: v for k, v in expected(data, "jsonl").items() if k in own}
    assert window["labelled"] == len(own)
    for metric in METRICS:
        values = [v[metric] for v in want.values() if v is not None]
        assert window["means"][metric] == pytest.approx(sum(values) / len(values), abs=TOLERANCE)
    return {}


# --- the cells -----------------------------------------------------------------------------------


def _same(
    got: Mapping[str, Mapping[str, float | None]], want: Mapping[str, Any], where: str
) -> None:
    """Every expected trace scored (none dropped, none added), every value trec_eval's."""
    assert sorted(got) == sorted(want), where
    for trace_id, values in want.items():
        for metric in METRICS:
            value = got[trace_id].get(metric)
            if values is None:
                assert value is None, (where, trace_id, metric)
            else:
                assert value == pytest.approx(values[metric], abs=TOLERANCE), (
                    where, trace_id, metric,
                )  # fmt: skip


@pytest.mark.parametrize(("kind", "door"), RUNS, ids=[f"{s}-{d}" for s, d in RUNS])
def test_cell(
    kind: str,
    door: str,
    data: Dataset,
    local: Path,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    source = source_of(kind, data, local, tmp_path, request)
    if kind == "trec-run":
        rankings = trec_run(data, Path(source.spec))
        want: Mapping[str, Any] = oracle(rankings, {q: data.qrels.get(q) for q in rankings})
        trec = True
        got = through_evaluate(source, tmp_path, trec) if door == "evaluate" else None
        got = got if got is not None else through_python(source, trec)
        _same(got, want, f"{kind} {door}")
        return
    want = expected(data, kind)
    if door == "monitor":
        through_monitor(source, data)
        return
    if door in ("nightly", "shards") and kind in FILE_KINDS:
        # one run of the local store, whose day holds every local file kind, for all of them
        got = request.getfixturevalue(f"local_{door}")
    else:
        got = {
            "evaluate": lambda: through_evaluate(source, tmp_path),
            "python": lambda: through_python(source),
            "stages": lambda: through_stages(source, kind, data),
            "nightly": lambda: through_nightly(source, tmp_path),
        }[door]()
    if door in ("nightly", "shards"):  # the store's day holds every local file kind
        got = {k: v for k, v in got.items() if k in want}
    _same(got, want, f"{kind} {door}")
    # every label source is a group of the compared traces, empty results in each
    for trace in data.traces:
        assert trace.trace_id(kind) in got
    groups = {data.groups[t.key] for t in data.traces}
    assert groups == {"inline", "judgments", "mixed: inline", "mixed: judgments", "unlabelled"}
    empties = [t for t in data.traces if not t.retrieved and data.labels(t) is not None]
    assert empties and all(got[t.trace_id(kind)]["ndcg@10"] == 0.0 for t in empties)
