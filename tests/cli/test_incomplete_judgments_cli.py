"""The commands with incomplete judgments: `evaluate` with the new measures and --judged-only,
`compare` naming a variant whose lists are less judged, and `labels-from-clicks`."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from retrieval_pipeline.cli import main
from retrieval_pipeline.metrics import parse_metrics
from retrieval_pipeline.reference import score_trace
from tests.labels.click_simulation import simulate

TS = "2026-11-30T10:00:00Z"
GRADES = {"d1": 3, "d0": 0, "d2": 2, "d9": 1}
TRACES = [
    {"trace_id": "a", "retrieved_ids": ["d1", "u", "d0", "d2", "v"]},
    {"trace_id": "b", "retrieved_ids": ["x", "y", "d1", "z", "d1"]},  # d1 repeated
]
NAMES = "judged@10,rprec,bpref,rbp@0.8,err@10"


def write_traces(path: Path, records: list[dict]) -> Path:
    lines = (
        json.dumps({"query_id": "q", "timestamp": TS, "relevance_scores": GRADES} | r)
        for r in records
    )
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("judged_only", [False, True])
def test_evaluate_scores_the_new_measures(tmp_path: Path, judged_only: bool) -> None:
    source = write_traces(tmp_path / "t.jsonl", TRACES)
    out = tmp_path / "per_query.csv"
    args = ["evaluate", str(source), "--metrics", NAMES, "--output", str(out), "--format", "json"]
    result = CliRunner().invoke(main, args + (["--judged-only"] if judged_only else []))
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out).set_index("trace_id")
    # every rbp@P comes with its residual
    assert list(table.columns[-6:]) == [*NAMES.split(",")[:4], "rbp@0.8_residual", "err@10"]
    metrics = parse_metrics([*NAMES.split(","), "rbp@0.8_residual"])
    for record in TRACES:
        labels = {doc: float(grade) for doc, grade in GRADES.items()}
        expected = score_trace(
            record["retrieved_ids"], labels, metrics, judged_only=judged_only
        )  # fmt: skip
        assert expected is not None
        for name, value in expected.items():
            assert table.loc[record["trace_id"], name] == pytest.approx(value, abs=1e-9), name
    summary = json.loads(result.output)
    assert summary["judged_only"] is judged_only
    # judged@10 describes the lists as served: a 3 of 10, b 1 of 10
    share = summary["judged_share"]
    assert share == {"metric": "judged@10", "mean": pytest.approx((0.3 + 0.1) / 2)}


def test_evaluate_reports_the_judged_share_without_being_asked(tmp_path: Path) -> None:
    source = write_traces(tmp_path / "t.jsonl", TRACES)
    out = tmp_path / "per_query.csv"
    result = CliRunner().invoke(main, ["evaluate", str(source), "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert (
        "Judged share of the top 10 (judged@10, mean over annotated traces): 20.0%; unjudged "
        "documents count as non-relevant." in result.output
    )
    assert "judged@10" not in pd.read_csv(out).columns  # not asked for: not a column


def test_compare_names_a_variant_whose_lists_are_less_judged(tmp_path: Path) -> None:
    records = [
        {"trace_id": f"{arm}{i}", "query_id": f"q{i}", "variant": arm, "retrieved_ids": ranked}
        for i in range(8)
        for arm, ranked in (("control", ["d1", "d0", "d2"]), ("candidate", ["n1", "d1", "n2"]))
    ]
    source = write_traces(tmp_path / "t.jsonl", records)
    result = CliRunner().invoke(
        main,
        ["compare", str(source), "--control", "control", "--candidate", "candidate",
         "--metrics", "ndcg@10", "--n-resamples", "99"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    # control: 3 of its top 10 judged; candidate: 1 of 10
    assert "Judged share of the top K (judged@10): control 30.0%, candidate 10.0%." in result.output
    assert (
        "all segments: candidate has 10% of its top 10 documents judged (judged@10), against "
        "30% for control: its lower scores may be unjudged documents" in result.output
    )


def test_labels_from_clicks_command(tmp_path: Path) -> None:
    log = simulate(seed=3, n_queries=6, pages_per_variant=15)
    source = tmp_path / "clicks.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in log.records) + "{broken\n")
    out, props = tmp_path / "judgments.parquet", tmp_path / "PROPENSITIES.json"
    args = ["labels-from-clicks", str(source), "--out", str(out), "--propensities-out"]
    args += [str(props), "--max-rank", "10", "--quarantine", str(tmp_path / "q.jsonl")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "361 impression records read from 1 file(s): 360 used, 1 quarantined" in result.output
    assert f"quarantined: {source}:361: malformed JSON" in result.output
    table = pd.read_parquet(out)
    assert set(table["label_source"]) == {"clicks"} and len(table) == 6 * 10
    assert json.loads(props.read_text())["propensities"]["1"] == 1.0
    bad = CliRunner().invoke(main, [*args, "--cut-points", "0.5,0.1"])
    assert bad.exit_code == 2 and "--cut-points must be three increasing numbers" in bad.output


@pytest.mark.parametrize("clip", ["1e-300", "5e-324", "0", "1.5", "nan"])
def test_labels_from_clicks_refuses_a_clip_that_could_overflow(tmp_path: Path, clip: str) -> None:
    """Issue 32: `--clip 1e-300` over a long rank chain wrote NaN (weights of 1e300 squared).
    Refused now before anything is read or written, in one line naming the option and its range."""
    source = tmp_path / "clicks.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in simulate(seed=3, n_queries=1).records))
    out, props = tmp_path / "judgments.jsonl", tmp_path / "PROPENSITIES.json"
    args = ["labels-from-clicks", str(source), "--out", str(out), "--propensities-out", str(props)]
    result = CliRunner().invoke(main, [*args, "--clip", clip])
    assert result.exit_code == 2
    error = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(error) == 1 and "--clip must be a number in [1e-06, 1]" in error[0], result.output
    assert not out.exists() and not props.exists()
    bad = CliRunner().invoke(main, [*args, "--cut-points", "a,b,c"])
    assert bad.exit_code == 2 and "three comma-separated numbers" in bad.output
