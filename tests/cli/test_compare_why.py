"""`retrieval-pipeline compare` says why the candidate is worse (ab/why.py, docs/why.md): on the
sample's regression day, the paired queries behind each worse cell, their contributions adding
up to the cell's delta, checked against pandas over `evaluate`'s per-trace table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import retrieval_pipeline
from retrieval_pipeline.cli import main
from tests.conftest import SAMPLE_END


def test_the_worse_cells_name_their_paired_queries(sample_store: Path, tmp_path: Path) -> None:
    day = sample_store / "traces" / f"date={SAMPLE_END}"
    corpus = next((sample_store / "corpus").iterdir())
    out = tmp_path / "compare.json"
    result = CliRunner().invoke(
        main,
        ["compare", str(day), "--control", "control", "--candidate", "candidate",
         "--metrics", "ndcg@10", "--corpus", str(corpus), "--n-resamples", "199",
         "--output", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    found = {(w["segment"], w["metric"]): w for w in report["why"]}
    assert ("multi_hop", "ndcg@10") in found, "the injected regression is a worse cell"
    why = found[("multi_hop", "ndcg@10")]
    (cell,) = [
        c for c in report["cells"] if (c["segment"], c["metric"]) == ("multi_hop", "ndcg@10")
    ]
    assert why["delta"] == pytest.approx(cell["delta"])
    # each paired query's mean per arm, with pandas over evaluate's per-trace table
    per_trace = retrieval_pipeline.evaluate(str(day), metrics=["ndcg@10"], corpus=str(corpus))
    rows = per_trace[per_trace["segment"] == "multi_hop"]
    means = rows.groupby(["query_id", "variant"])["ndcg@10"].mean().unstack("variant").dropna()
    difference = (means["candidate"] - means["control"]).sort_values(kind="stable")
    assert why["pairs"] == len(means)
    assert difference.mean() == pytest.approx(why["delta"])
    shown = why["contributors"]
    expected = sorted(difference.items(), key=lambda item: (item[1], item[0]))[:10]
    assert [c["query_id"] for c in shown] == [query for query, _ in expected]
    assert [c["contribution"] for c in shown] == pytest.approx(
        [value / len(means) for _, value in expected]
    )
    assert why["top_share"] == pytest.approx(
        sum(v for _, v in expected) / len(means) / cell["delta"]
    )
    assert "Why (paired queries):" in result.output
    assert f"multi_hop / ndcg@10: candidate - control = {cell['delta']:+.3f}" in result.output


@pytest.mark.parametrize(
    ("suffix", "heading"),
    [(".md", "## Why: the paired queries"), (".html", "<h2>Why: the paired queries</h2>")],
)
def test_the_markdown_and_html_reports_show_them(
    sample_store: Path, tmp_path: Path, suffix: str, heading: str
) -> None:
    day = sample_store / "traces" / f"date={SAMPLE_END}"
    out = tmp_path / f"compare{suffix}"
    args = ["compare", str(day), "--control", "control", "--candidate", "candidate",
            "--metrics", "ndcg@10", "--n-resamples", "199", "--output", str(out)]  # fmt: skip
    assert CliRunner().invoke(main, args).exit_code == 0
    data = out.with_suffix(".json")
    assert CliRunner().invoke(main, [*args[:-1], str(data)]).exit_code == 0
    first = json.loads(data.read_text())["why"][0]["contributors"][0]["query_id"]
    text = out.read_text()
    assert heading in text and first in text
