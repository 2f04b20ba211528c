"""Phoenix both ways through a real Dagster run on a real Phoenix server (issue 35).

A day of unlabelled RETRIEVER spans is annotated in Phoenix: HUMAN labels under `relevance`, an
LLM judge under `relevance_llm` (losing to HUMAN on the same document, counting where no person
graded one), a label without a score (refused), a CODE label (skipped), a span with labels of
its own in its metadata (which win), and spans left unannotated (an empty result among them).
The nightly scores the day equal to pytrec_eval on the labels that should win, writes one CODE
span annotation per scored span and metric equal to the per-trace values, and a rerun leaves
their count unchanged; the HUMAN/LLM agreement is checked against a hand-computed table. With
no start date the first partition is the day of the project's earliest span (docs/phoenix.md).
"""

from __future__ import annotations

import json
import logging
import random
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import pandas as pd
import pytest
from click.testing import CliRunner

import retrieval_pipeline
from retrieval_pipeline.cli import main as cli
from retrieval_pipeline.config import CONFIG_ENV
from retrieval_pipeline.defs.nightly.phoenix import phoenix_scores
from retrieval_pipeline.defs.partitions import PHOENIX_DAYS, START_DATE_ENV, start_date
from retrieval_pipeline.defs.resources import (
    PHOENIX_ENDPOINT_ENV,
    PHOENIX_PROJECT_ENV,
    PipelineSettingsResource,
    TraceStoreResource,
    WarehouseResource,
)
from retrieval_pipeline.ingest.phoenix import PhoenixStore
from retrieval_pipeline.ingest.phoenix_annotations import read_span_annotations
from tests.conformance_data import METRICS, oracle
from tests.dagster_runs import NIGHTLY, RunFolder, materialize
from tests.ingest.phoenix_server import PhoenixServer
from tests.ingest.span_exports import (
    export_line,
    openinference_retriever,
    reranker,
    to_protobuf,
)
from tests.ingest.test_phoenix import wait_until_stored

pytestmark = pytest.mark.slow
DAY = date(2026, 11, 20)
PROJECT = "both-ways"
CONFIG = f"""gain = "linear"
metrics = {list(METRICS)!r}
[phoenix]
label_annotation = ["relevance", "relevance_llm"]
""".replace("'", '"')


def span_id(name: str) -> str:
    """Ids of this test's own (`e5`...): Phoenix keeps a trace in the first project it saw."""
    return "e5" + f"{ord(name):014x}"


# name -> (segment, retrieved ids, the span's own labels in its metadata or None)
SPANS: dict[str, tuple[str, list[str], dict[str, Any] | None]] = {
    "A": ("faq", ["d1", "d2", "d3", "d4"], None),
    "B": ("faq", ["d5", "d6", "d7"], None),
    "C": ("long_tail", ["d1", "d8"], None),
    "D": ("long_tail", ["d2", "d3", "d9"], None),
    "E": ("faq", ["d4", "d5"], {"relevant_ids": ["d4"]}),
    "F": ("navigational", ["d1", "d2"], None),
    "G": ("navigational", [], None),
}


def note(name: str, position: int, kind: str, label_name: str, **result: Any) -> dict[str, Any]:
    return {
        "span_id": span_id(name),
        "document_position": position,
        "name": label_name,
        "annotator_kind": kind,
        "result": result,
    }


def human(name: str, position: int, **result: Any) -> dict[str, Any]:
    return note(name, position, "HUMAN", "relevance", **result)


def llm(name: str, position: int, **result: Any) -> dict[str, Any]:
    return note(name, position, "LLM", "relevance_llm", **result)


NOTES = [
    human("A", 0, score=2), llm("A", 0, score=0),  # HUMAN 2 wins
    llm("A", 1, label="relevant"),  # only the LLM graded it: 1
    human("A", 2, score=0), llm("A", 2, score=1),  # HUMAN 0 wins
    human("B", 1, label="relevant"), llm("B", 1, label="irrelevant"),  # HUMAN 1 wins
    llm("B", 0, score=0),
    llm("C", 1, score=2),
    human("D", 2, score=1), llm("D", 2, score=1),  # agree
    human("D", 0, label="maybe"),  # no score and no known label: refused
    note("D", 1, "CODE", "relevance", score=1),  # CODE does not count by default: skipped
    human("E", 1, score=2),  # E's own labels win (Phoenix refuses a position past the end)
]  # fmt: skip
# B's reranker's output (its input is B's ranking): d6, B's one relevant document, first.
RERANKED = ["d6", "d5", "d7"]
# What should win, by hand from NOTES (E: its own labels; F, G: none, so unannotated).
LABELS: dict[str, dict[str, int] | None] = {
    "A": {"d1": 2, "d2": 1, "d3": 0},
    "B": {"d6": 1, "d5": 0},
    "C": {"d8": 2},
    "D": {"d9": 1},
    "E": {"d4": 1},
    "F": None,
    "G": None,
}


@pytest.fixture(scope="module")
def annotated_day(phoenix: PhoenixServer) -> str:
    rng = random.Random(35)
    spans = []
    for n, (name, (segment, ids, own)) in enumerate(SPANS.items()):
        record = {
            "trace_id": span_id(name),
            "query_id": f"q{name}",
            "timestamp": f"{DAY.isoformat()}T0{n}:00:00.000000Z",
            "retrieved_ids": ids,
            "segment": segment,
            "variant": "control",
            **(own or {}),
        }
        spans.append(openinference_retriever(record, "e5" + f"{n + 1:030x}", rng))
    # B's reranker, in B's trace: it takes B's ranking and puts its relevant document first
    at = f"{DAY.isoformat()}T01:00:00.500000Z"
    spans.append(reranker(span_id("R"), "e5" + f"{2:030x}", at, SPANS["B"][1], RERANKED))
    phoenix.send(to_protobuf(export_line([spans], project=PROJECT)))
    wait_until_stored(phoenix, len(spans), PROJECT)
    phoenix.annotate_documents(NOTES)
    return phoenix.base_url


def resources(folder: RunFolder, endpoint: str, config: Path) -> dict[str, object]:
    return {
        "trace_store": TraceStoreResource(
            root=str(folder.path / "no-store"),
            phoenix_endpoint=endpoint,
            phoenix_project=PROJECT,
            config_path=str(config),
        ),
        "warehouse": WarehouseResource(database=str(folder.database)),
        "settings": PipelineSettingsResource(
            config_path=str(config), reports_dir=str(folder.reports)
        ),
    }


STEPS = ["judgments", "corpus", "traces", "labels", "query_metrics", "segment_metrics"]


def run_day(folder: RunFolder, endpoint: str, config: Path) -> dg.ExecuteInProcessResult:
    selection = [*(NIGHTLY[name] for name in STEPS), NIGHTLY["stage_metrics"], phoenix_scores]
    result = materialize(
        [*selection, NIGHTLY["regression_report"]], resources(folder, endpoint, config), day=DAY
    )
    assert result.success, [e.message for e in result.all_events if e.is_step_failure]
    return result


def metadata(result: dg.ExecuteInProcessResult, asset: str) -> dict[str, Any]:
    found = result.asset_materializations_for_node(asset)[0].metadata
    return {key: getattr(value, "value", value) for key, value in found.items()}


def test_labels_in_scores_out_a_rerun_updates(annotated_day: str, tmp_path: Path) -> None:
    config = tmp_path / "pipeline.toml"
    config.write_text(CONFIG, encoding="utf-8")
    folder = RunFolder(tmp_path / "run")
    first = run_day(folder, annotated_day, config)

    # labels in: the nightly's values are trec_eval's on the labels that should win
    rows = folder.query("select trace_id, metric, value from query_metrics")
    got: dict[str, dict[str, float | None]] = {}
    for trace_id, metric, value in rows.itertuples(index=False):
        got.setdefault(trace_id, {})[metric] = None if value != value else value
    rankings = {span_id(name): ids for name, (_, ids, _) in SPANS.items()}
    want = oracle(rankings, {span_id(name): labels for name, labels in LABELS.items()})
    for trace_id, values in want.items():
        if values is None:
            assert all(v is None for v in got[trace_id].values()), trace_id
        else:
            assert {m: got[trace_id][m] for m in METRICS} == pytest.approx(values), trace_id
    sources = dict(
        folder.query("select trace_id, coalesce(label_source, 'own') from traces").itertuples(
            index=False
        )
    )
    assert sources[span_id("A")] == "phoenix:human+llm"
    assert sources[span_id("C")] == "phoenix:llm"
    assert sources[span_id("D")] == "phoenix:human"
    assert sources[span_id("E")] == "own"  # its own labels, which name no source

    traced = metadata(first, "traces")
    assert traced["phoenix_labels (phoenix:human)"] == 4  # A d1, A d3, B d6, D d9
    assert traced["phoenix_labels (phoenix:llm)"] == 3  # A d2, B d5, C d8
    assert traced["phoenix_annotations_refused"] == 1  # D's "maybe"
    # agreement, by hand: faq pairs (human, llm) = (2, 0), (0, 1), (1, 0); long_tail (1, 1).
    # faq binarised: agree 0/3, p_e = 2/3*1/3 + 1/3*2/3 = 4/9, kappa = (0 - 4/9) / (5/9)
    assert traced["kappa (faq)"] == pytest.approx(-0.8)
    assert traced["kappa_pairs (faq)"] == 3
    # quadratic weights ((i - j) / 2)^2 over grades 0, 1, 2: observed (1 + 1/4 + 1/4) / 3,
    # expected (0 + 1/4 + 2*1/4 + 0 + 2*1 + 1/4) / 9 = 3 / 9
    assert traced["weighted_kappa (faq)"] == pytest.approx(1 - 0.5 / (3 / 9))
    assert "kappa (long_tail)" not in traced  # one category throughout: undefined
    assert traced["kappa_pairs (long_tail)"] == 1
    # overall: agree 1/4, p_e = 3/4*1/2 + 1/4*1/2 = 1/2; weighted: 0.375 / (4 / 16)
    assert traced["kappa (__all__)"] == pytest.approx((1 / 4 - 1 / 2) / (1 / 2))
    assert traced["weighted_kappa (__all__)"] == pytest.approx(1 - 0.375 / 0.25)

    # scores out: one CODE annotation per scored span and configured metric, equal to its value
    store = PhoenixStore(annotated_day, PROJECT)
    scored = {t: v for t, v in want.items() if v is not None}
    back = read_span_annotations(store, list(rankings), list(METRICS))
    assert len(back) == len(scored) * len(METRICS)
    assert {a["annotator_kind"] for a in back} == {"CODE"}
    assert {(a["span_id"], a["name"]): a["result"]["score"] for a in back} == pytest.approx(
        {(t, m): got[t][m] for t in scored for m in METRICS}
    )
    assert all(first.run_id in a["result"]["explanation"] for a in back)
    # B's reranker span: its output's values, and output less input (B's own) as `... gain`,
    # each by pytrec_eval on B's labels (the reranker is labelled as its retriever)
    output = oracle({"R": RERANKED}, {"R": LABELS["B"]})["R"]
    given = want[span_id("B")]
    assert output is not None and given is not None
    gains = [f"{m} gain" for m in METRICS]
    reranked = read_span_annotations(store, [span_id("R")], [*METRICS, *gains])
    assert {a["name"]: a["result"]["score"] for a in reranked} == pytest.approx(
        {**output, **{f"{m} gain": output[m] - given[m] for m in METRICS}}
    )
    written = metadata(first, "phoenix_scores")
    assert (written["annotations_written"], written["batches_failed"]) == (
        len(back) + len(reranked),
        0,
    )

    # the report's label-source line shows Phoenix's shares, and the agreement
    report = (folder.reports / f"regression_report_{DAY.isoformat()}.md").read_text()
    assert "phoenix:human+llm 40% (2)" in report
    assert (
        "Agreement of LLM with HUMAN labels of the same documents: all segments: kappa -0.500"
        in report
    )

    # a rerun of the day updates the annotations, it does not add
    second = run_day(folder, annotated_day, config)
    again = read_span_annotations(store, list(rankings), list(METRICS))
    assert len(again) == len(back)
    assert all(second.run_id in a["result"]["explanation"] for a in again)


def test_a_failed_write_is_a_warning_and_the_day_stays(annotated_day: str, tmp_path: Path) -> None:
    config = tmp_path / "pipeline.toml"
    config.write_text(CONFIG, encoding="utf-8")
    folder = RunFolder(tmp_path / "run")
    run_day(folder, annotated_day, config)
    dead = resources(folder, "http://127.0.0.1:9", config)
    result = materialize([phoenix_scores], dead, day=DAY)
    assert result.success
    written = metadata(result, "phoenix_scores")
    assert written["annotations_written"] == 0 and written["batches_failed"] == 1
    assert "not written" in written["warnings"]


def test_the_first_partition_is_the_day_of_the_earliest_span(
    annotated_day: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(START_DATE_ENV, raising=False)
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    monkeypatch.setenv(PHOENIX_ENDPOINT_ENV, annotated_day)
    monkeypatch.setenv(PHOENIX_PROJECT_ENV, PROJECT)
    assert start_date() == DAY.isoformat()  # the spans all started on DAY
    fallback = (datetime.now(UTC).date() - timedelta(days=PHOENIX_DAYS)).isoformat()
    monkeypatch.setenv(PHOENIX_PROJECT_ENV, "no-such-project")
    assert start_date() == fallback
    monkeypatch.setenv(PHOENIX_ENDPOINT_ENV, "http://127.0.0.1:9")  # nothing listens there
    with caplog.at_level(logging.WARNING):
        assert start_date() == fallback
    assert "cannot read the first span" in caplog.text


def test_evaluate_and_the_python_api_read_the_same_labels(
    annotated_day: str, tmp_path: Path
) -> None:
    """The same Phoenix day through `evaluate` and `retrieval_pipeline.evaluate`: the document
    annotations are labels by the same rule as in the nightly, so the values are the oracle's on
    the labels that should win (LABELS), and the counts are the nightly's metadata's."""
    config = tmp_path / "pipeline.toml"
    config.write_text(CONFIG, encoding="utf-8")
    spec = f"phoenix+{annotated_day}/{PROJECT}?day={DAY.isoformat()}"
    out = tmp_path / "per_trace.parquet"
    result = CliRunner().invoke(
        cli,
        ["evaluate", spec, "--config", str(config), "--gain", "linear",
         "--metrics", ",".join(METRICS), "--output", str(out), "--format", "json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    counts = json.loads(result.stdout)["phoenix_labels"]
    assert counts["labels"] == {"phoenix:human": 4, "phoenix:llm": 3}
    assert (counts["spans_with_own_labels"], counts["annotations_refused"]) == (1, 1)

    rankings = {span_id(name): ids for name, (_, ids, _) in SPANS.items()}
    want = oracle(rankings, {span_id(name): labels for name, labels in LABELS.items()})
    through_api = retrieval_pipeline.evaluate(
        spec,
        list(METRICS),
        gain="linear",
        phoenix={"label_annotation": ["relevance", "relevance_llm"]},
    )
    for frame in (pd.read_parquet(out), through_api):
        got = {row["trace_id"]: row for row in frame.to_dict("records")}
        assert set(got) == set(want)
        for trace_id, values in want.items():
            row = [got[trace_id][m] for m in METRICS]
            if values is None:
                assert all(v != v for v in row), trace_id  # unannotated: no value
            else:
                assert row == pytest.approx([values[m] for m in METRICS]), trace_id

    # without the config, only the `relevance` annotations are labels: A keeps HUMAN's d1 (2) and
    # d3 (0) but not the LLM's d2, so its nDCG falls
    plain = retrieval_pipeline.evaluate(spec, ["ndcg@10"], gain="linear")
    a_only_human = oracle({span_id("A"): SPANS["A"][1]}, {span_id("A"): {"d1": 2, "d3": 0}})
    value = plain.set_index("trace_id").loc[span_id("A"), "ndcg@10"]
    expected = a_only_human[span_id("A")]
    assert expected is not None and value == pytest.approx(expected["ndcg@10"])
