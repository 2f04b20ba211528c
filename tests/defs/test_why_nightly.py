"""The nightly's report says why the sample's injected regression moved (docs/why.md): in its
JSON, Markdown and HTML files and its asset metadata, with contributions checked against pandas
over query_metrics and the documents that fell against the store's own trace files."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from retrieval_pipeline.sample import write_sample_store
from tests.defs.test_pipeline import CLEAN, END, Setup


@pytest.fixture(scope="module")
def nightly(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    """Three clean days backfilled, then the regression day (as test_pipeline's fixture)."""
    store = tmp_path_factory.mktemp("why") / "store"
    write_sample_store(store, days=4, seed=7, end_date=END)
    setup = Setup(tmp_path_factory.mktemp("run"), store)
    setup.range_result = setup.run(days=CLEAN)
    setup.day_result = setup.run(day=END)
    return setup


def the_miss(nightly: Setup) -> dict[str, Any]:
    report = json.loads((nightly.reports / f"regression_report_{END}.json").read_text())
    (miss,) = [w for w in report["why"] if w["kind"] == "miss"]
    return miss


def candidate_traces(store: Path, query_id: str) -> dict[str, list[dict[str, Any]]]:
    """The query's candidate traces as the store holds them: the day's and the baseline's."""
    sides: dict[str, list[dict[str, Any]]] = {"day": [], "base": []}
    for folder in sorted((store / "traces").iterdir()):
        with gzip.open(folder / "candidate.jsonl.gz", "rt") as lines:
            records = [json.loads(line) for line in lines]
        side = "day" if folder.name == f"date={END}" else "base"
        sides[side] += [r for r in records if r["query_id"] == query_id]
    return sides


def test_the_miss_is_explained_by_its_queries(nightly: Setup) -> None:
    miss = the_miss(nightly)
    assert (miss["segment"], miss["variant"], miss["metric"]) == (
        "multi_hop",
        "candidate",
        "ndcg@10",
    )
    report = json.loads((nightly.reports / f"regression_report_{END}.json").read_text())
    (row,) = [
        r for r in report["rows"]
        if (r["segment"], r["variant"], r["metric"]) == ("multi_hop", "candidate", "ndcg@10")
    ]  # fmt: skip
    assert miss["change"] == pytest.approx(row["delta"])
    assert math.fsum(c["value"] for c in miss["causes"]) == pytest.approx(miss["change"])
    # each query's contribution, computed here with pandas from query_metrics
    values = nightly.query(
        "select partition_date, query_id, value from query_metrics where segment = 'multi_hop'"
        " and variant = 'candidate' and metric = 'ndcg@10' and value is not null"
    )
    values["day"] = values["partition_date"].dt.date == END
    day, base = values[values["day"]], values[~values["day"]]
    baseline = base["value"].mean()
    shares_day = day.groupby("query_id").size() / len(day)
    shares_base = base.groupby("query_id").size() / len(base)
    means_day = day.groupby("query_id")["value"].mean()
    means_base = base.groupby("query_id")["value"].mean()
    recurring = means_day.index.intersection(means_base.index)
    contribution = shares_day[recurring] * (means_day[recurring] - means_base[recurring]) + (
        shares_day[recurring] - shares_base[recurring]
    ) * (means_base[recurring] - baseline)
    # the most negative first, ties by query id; the top ten's share of the change
    ranked = sorted(contribution.items(), key=lambda item: (round(item[1], 12), item[0]))[:10]
    shown = miss["contributors"]
    assert [c["query_id"] for c in shown] == [query for query, _ in ranked]
    assert [c["contribution"] for c in shown] == pytest.approx([value for _, value in ranked])
    assert miss["top_share"] == pytest.approx(sum(v for _, v in ranked) / miss["change"])
    new = means_day.index.difference(means_base.index)
    assert miss["new_queries"]["queries"] == len(new)


def test_the_documents_that_fell_are_the_store_s(nightly: Setup) -> None:
    """Each relevant document named as having left the top 10 of the first query: grade 3 in
    its labels, in the top 10 of most of its baseline traces and of fewer than half its day
    traces, as its trace files say."""
    lead = the_miss(nightly)["contributors"][0]
    assert lead["fell"], "the injected regression pushes the best documents below rank 10"
    sides = candidate_traces(nightly.store, lead["query_id"])
    for moved in lead["fell"]:
        doc = moved["doc_id"]
        assert moved["grade_then"] == 3
        grades = [r.get("relevance_scores", {}).get(doc) for r in sides["base"]]
        assert 3 in grades

        def in_top(records: list[dict[str, Any]]) -> int:
            return sum(doc in r["retrieved_ids"][:10] for r in records)  # noqa: B023

        assert in_top(sides["base"]) > len(sides["base"]) / 2
        assert in_top(sides["day"]) < len(sides["day"]) / 2 or not sides["day"]
        assert moved["rank_then"] <= 10 and (moved["rank_now"] is None or moved["rank_now"] > 10)


def test_markdown_html_and_metadata_say_why(nightly: Setup) -> None:
    miss = the_miss(nightly)
    markdown = (nightly.reports / f"regression_report_{END}.md").read_text()
    head = markdown.split("| segment |")[0]  # what the quickstart prints
    lines = miss["lines"]
    assert len(lines) == 3
    assert lines[0].startswith("multi_hop / candidate: ndcg@10 ")
    assert lines[2].startswith(f"In {miss['contributors'][0]['query_id']}: left the top 10: ")
    for line in lines:
        assert f"- {line}" in head
    html = (nightly.reports / f"regression_report_{END}.html").read_text()
    assert "<h2>Why</h2>" in html and miss["contributors"][0]["query_id"] in html
    (materialization,) = nightly.day_result.asset_materializations_for_node("regression_report")
    table = materialization.metadata["why"]
    assert isinstance(table, dg.MarkdownMetadataValue)
    assert "multi_hop / candidate: ndcg@10" in str(table.value)
    words = materialization.metadata["why_in_words"]
    assert lines[0] in str(words.value)
