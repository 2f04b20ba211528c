"""The nightly pipeline on one day served by four stores: a local folder, the same folder in an
S3 server (moto, started on 127.0.0.1 by the tests), and a Delta Lake table at `traces/`, locally
and in the S3 server; with judgments kept apart from the traces in the store's `judgments/`.

Expected values are computed another way: each trace's labels by hand from the rules (its own
labels, else its query's judgments less the stale ones), scored by the per-trace Python scorer
(`reference.score_trace`).
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import dagster as dg
import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from retrieval_pipeline.config import PipelineConfig
from retrieval_pipeline.defs.nightly import assets, judgments
from retrieval_pipeline.defs.resources import (
    PipelineSettingsResource,
    TraceStoreResource,
    WarehouseResource,
)
from retrieval_pipeline.reference import score_trace
from retrieval_pipeline.segments import OVERALL_SEGMENT
from retrieval_pipeline.warehouse.evaluation import run_evaluation
from tests.s3_server import S3

deltalake = pytest.importorskip("deltalake", reason="the Delta store needs deltalake")

DAY = date(2026, 11, 30)
SERVED = "2026-11-30T12:00:00Z"
CONFIG = PipelineConfig()
ASSETS = [
    judgments.judgments,
    assets.corpus,
    assets.traces,
    assets.labels,
    assets.query_metrics,
    assets.segment_metrics,
]


def _trace(trace_id: str, query_id: str, retrieved: list[str], **labels: object) -> dict:
    fields = {"trace_id": trace_id, "query_id": query_id, "timestamp": SERVED}
    return {**fields, "segment": "web", "variant": "control", "retrieved_ids": retrieved, **labels}


TRACES = [
    _trace("t1", "q1", ["d1", "d2", "d3", "d4"]),  # no labels: q1's judgments
    _trace("t2", "q1", ["d3", "d9", "d1"]),  # no labels: q1's judgments
    _trace("t3", "q2", ["d5", "d6"], relevance_scores={"d6": 2}),  # its own, alone
    _trace("t4", "q3", ["d7", "d8"]),  # q3 is not judged: unannotated
    _trace("t5", "q2", ["x"], relevant_ids=[]),  # judged, nothing relevant: its own (none)
    _trace("t6", "q4", ["d2", "d4"]),  # q4 judged non-relevant only: scores 0
]
QRELS = "q1 0 d1 2\nq1 0 d2 0\nq1 0 d3 1\nq1 0 d4 3\nq2 0 d5 3\nq4 0 d2 -1\nq9 0 d1 1\n"
CLICKS = (
    "query_id,doc_id,grade,judged_at,estimate\nq1,d9,1,2026-11-20T00:00:00Z,0.4\nq1,d3,oops,,\n"
)
# d4 was deleted before the day: its judgment is stale for every trace, whatever judged_at says
CORPUS = pa.table(
    {
        "doc_id": ["d1", "d2", "d3", "d4", "d5", "d6", "d7", "d8", "d9", "x"],
        "added_at": pa.nulls(10, pa.timestamp("us", tz="UTC")),
        "deleted_at": pa.array(
            [None, None, None, 1_762_000_000_000_000, None, None, None, None, None, None],
            pa.timestamp("us", tz="UTC"),
        ),
    }
)
OWN = {"t3": {"d6": 2.0}, "t5": {}}
JUDGED = {"q1": {"d1": 2.0, "d2": 0.0, "d3": 1.0, "d9": 1.0}, "q4": {"d2": 0.0}}  # d4 stale


def expected_scores() -> dict[str, dict[str, float] | None]:
    """Per trace: its own labels if it names any, else its query's fresh judgments."""
    out: dict[str, dict[str, float] | None] = {}
    for trace in TRACES:
        trace_id = str(trace["trace_id"])
        labels = OWN.get(trace_id, JUDGED.get(str(trace["query_id"]), {}))
        scores = score_trace(trace["retrieved_ids"], labels, CONFIG.metric_objects())
        if scores is None and trace_id in OWN:  # judged with nothing relevant: 0, as trec_eval
            scores = dict.fromkeys(CONFIG.metrics, 0.0)
        out[trace_id] = scores
    return out


def local_store(root: Path, delta: bool = False) -> Path:
    day = root / "traces" / f"date={DAY.isoformat()}"
    if delta:
        rows = [{**t, "date": DAY.isoformat()} for t in TRACES]
        table = pa.Table.from_pylist(
            rows,
            schema=pa.schema(
                [
                    ("trace_id", pa.string()),
                    ("query_id", pa.string()),
                    ("timestamp", pa.string()),
                    ("segment", pa.string()),
                    ("variant", pa.string()),
                    ("retrieved_ids", pa.list_(pa.string())),
                    ("relevance_scores", pa.map_(pa.string(), pa.float64())),
                    ("relevant_ids", pa.list_(pa.string())),
                    ("date", pa.string()),
                ]
            ),
        )
        deltalake.write_deltalake(str(root / "traces"), table, partition_by=["date"])
    else:
        day.mkdir(parents=True)
        lines = [json.dumps(t) + "\n" for t in TRACES]
        (day / "a.jsonl").write_text("".join(lines[:3]))
        (day / "b.jsonl").write_text("".join(lines[3:]))
    (root / "judgments").mkdir(parents=True)
    (root / "judgments" / "set.qrels").write_text(QRELS)
    (root / "judgments" / "clicks.csv").write_text(CLICKS)
    (root / "corpus").mkdir()
    pq.write_table(CORPUS, root / "corpus" / "corpus.parquet")
    return root


def run(root: str, folder: Path) -> tuple[dg.ExecuteInProcessResult, Path]:
    database = folder / "db" / "warehouse.duckdb"
    result = dg.materialize(
        ASSETS,
        partition_key=DAY.isoformat(),
        resources={
            "trace_store": TraceStoreResource(root=root),
            "warehouse": WarehouseResource(database=str(database)),
            "settings": PipelineSettingsResource(reports_dir=str(folder / "reports")),
        },
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )
    return result, database


def metadata(result: dg.ExecuteInProcessResult, node: str) -> dict[str, object]:
    (event,) = result.asset_materializations_for_node(node)
    return {key: value.value for key, value in event.metadata.items()}


@pytest.mark.parametrize("kind", ["local", "s3", "delta", "delta in s3"])
def test_each_store_serves_the_day_and_the_judgments_label_it(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = local_store(tmp_path / "store", delta=kind.startswith("delta"))
    root = str(local)
    if kind.endswith("s3"):
        s3: S3 = request.getfixturevalue("s3")
        prefix = f"bucket/{kind.replace(' ', '-')}/store"
        s3.upload(local, prefix)
        monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
        root = f"s3://{prefix}"
    result, database = run(root, tmp_path)
    assert result.success, [e.message for e in result.all_events if e.is_step_failure]

    with duckdb.connect(str(database), read_only=True) as conn:
        rows = conn.execute(
            "select trace_id, metric, value from query_metrics order by all"
        ).fetchall()
        (judged_traces,) = conn.execute(
            "select max(judged_traces) from segment_metrics where segment = $all",
            {"all": OVERALL_SEGMENT},
        ).fetchone() or (None,)
    got: dict[str, dict[str, float | None]] = {}
    for trace_id, metric, value in rows:
        got.setdefault(trace_id, {})[metric] = value
    for trace_id, scores in expected_scores().items():
        for metric in CONFIG.metrics:
            value = got[trace_id][metric]
            if scores is None:
                assert value is None, (trace_id, metric)
            else:
                assert value == pytest.approx(scores[metric], abs=1e-12), (trace_id, metric)

    traces = metadata(result, "query_metrics")
    assert (traces["annotated_traces"], traces["unannotated_traces"]) == (5, 1)
    assert (traces["traces_labelled_by_own_labels"], traces["traces_labelled_by_judgments"]) == (
        2,
        3,
    )
    assert judged_traces == 3
    loaded = metadata(result, "judgments")
    # 7 qrels lines and 2 CSV records read; the CSV's bad grade quarantined
    assert (loaded["lines_read"], loaded["lines_quarantined"], loaded["judgments"]) == (9, 1, 8)
    assert str(loaded["first_quarantined_lines"]).endswith(
        'clicks.csv:3: grade is not a number (got "oops")'
    )
    labels = metadata(result, "labels")
    assert (labels["judged_queries"], labels["judged_queries_without_trace"]) == (4, 1)  # q9
    assert labels["stale_labels"] == 2  # d4, judged for q1: stale in t1's and t2's labels


def test_evaluate_reads_traces_judgments_from_s3_as_from_disk(
    s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = local_store(tmp_path / "store")
    s3.upload(local, "bucket/evaluate/store")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    day = f"traces/date={DAY.isoformat()}"
    here = run_evaluation([local / day], judgments=[local / "judgments"])
    there = run_evaluation(
        [f"s3://bucket/evaluate/store/{day}/"], judgments=["s3://bucket/evaluate/store/judgments"]
    )
    metrics = list(CONFIG.metrics)
    assert there.per_query[metrics].equals(here.per_query[metrics])
    assert (there.ingest.files, there.ingest.read) == (2, 6)
    assert (there.traces.by_judgments, there.judgments.judgments) == (3, 8)
    assert set(there.quarantine["source_file"]) == {
        "s3://bucket/evaluate/store/judgments/clicks.csv"
    }
