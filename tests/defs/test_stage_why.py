"""Why a reranker finding moved (docs/why.md, "The reranker's stages"): span exports whose reranker
demotes the relevant document of three queries on the last day, run through the nightly; the
report's Reranker stage section, its JSON and the `reranker_stage` check's metadata name those
queries first and put the output's change in reranking, against hand arithmetic and pandas over
the stored per-span rows.

Every query has one relevant document `<q>-rel` (grade 3) and nine judged non-relevant ones, so
a span's nDCG@10 is 1 / log2(1 + the relevant document's rank). Ten queries, two spans a day.
"""

from __future__ import annotations

import json
import math
import random
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from retrieval_pipeline.defs import ASSETS
from retrieval_pipeline.defs.nightly import checks
from retrieval_pipeline.segments import OVERALL_SEGMENT
from tests.dagster_runs import RunFolder, checks_by_name, materialize
from tests.ingest.span_exports import export_line, openinference_retriever, reranker

DAY = date(2026, 12, 3)
BASELINE = [DAY - timedelta(days=2), DAY - timedelta(days=1)]
QUERIES = [f"q{n:02d}" for n in range(10)]
DEMOTED = ["q00", "q01", "q02"]  # on the day the reranker puts the relevant document last
WORSE_INPUT = "q05"  # on the day the retriever gives it at rank 5; the reranker restores it
EVERYTHING = [*ASSETS, *checks.ALL_CHECKS]


def ndcg(rank: int) -> float:
    return 1 / math.log2(1 + rank)


def documents(q: str, relevant_at: int) -> list[str]:
    rest = [f"{q}-n{i}" for i in range(9)]
    return [*rest[: relevant_at - 1], f"{q}-rel", *rest[relevant_at - 1 :]]


def write_store(store: Path) -> None:
    rng = random.Random(3)
    for d, day in enumerate([*BASELINE, DAY]):
        lines = []
        for n, (q, copy) in enumerate((q, c) for q in QUERIES for c in range(2)):
            on_day = day == DAY
            given = documents(q, 5 if on_day and q == WORSE_INPUT else 1)
            output = documents(q, 10 if on_day and q in DEMOTED else 1)
            record: dict[str, Any] = {
                "trace_id": f"{d:02x}{n:06x}{copy:08x}",
                "query_id": q,
                "timestamp": f"{day.isoformat()}T{n % 24:02d}:00:00.000000Z",
                "retrieved_ids": given,
                "relevance_scores": {f"{q}-rel": 3, **{f"{q}-n{i}": 0 for i in range(9)}},
                "segment": "faq",
                "variant": "control",
            }
            trace = f"{d + 1:08x}{n:024x}"
            spans = [
                openinference_retriever(record, trace, rng),
                reranker(f"{d:02x}{n:06x}0000beef", trace, record["timestamp"], given, output),
            ]
            lines.append(export_line([spans]))
        folder = store / "traces" / f"date={day.isoformat()}"
        folder.mkdir(parents=True)
        (folder / "spans.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def nightly(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, RunFolder]:
    root = tmp_path_factory.mktemp("stage_why")
    write_store(root / "store")
    config = root / "pipeline.toml"
    config.write_text(
        'metrics = ["ndcg@10", "mrr"]\nthresholds = {}\n[checks]\nmin_coverage = 0.0\n'
        'min_annotated_traces = 0\n[stages]\nthresholds = {reranker = {"ndcg@10" = 0.95}}\n'
        'min_gain = {"ndcg@10" = 0.0}\n',
        encoding="utf-8",
    )
    folder = RunFolder(root / "run")
    resources = folder.resources(root / "store", config)
    assert materialize(EVERYTHING, resources, days=BASELINE).success
    return materialize(EVERYTHING, resources, day=DAY), folder


def the_report(folder: RunFolder) -> dict[str, Any]:
    text = (folder.reports / f"regression_report_{DAY.isoformat()}.json").read_text()
    found: dict[str, Any] = json.loads(text)
    return found


def test_the_per_span_rows_are_stored(nightly: tuple[Any, RunFolder]) -> None:
    _, folder = nightly
    rows = folder.query(
        "select partition_date, query_id, metric, input_value, output_value "
        "from stage_query_metrics where metric = 'ndcg@10'"
    )
    assert len(rows) == 3 * len(QUERIES) * 2  # three days, two spans a query
    day = rows[pd.to_datetime(rows["partition_date"]).dt.date == DAY].set_index("query_id")
    for q, row in day.iterrows():
        assert row["input_value"] == pytest.approx(ndcg(5 if q == WORSE_INPUT else 1))
        assert row["output_value"] == pytest.approx(ndcg(10 if q in DEMOTED else 1))


def test_the_why_names_the_demoted_queries_and_puts_the_change_in_reranking(
    nightly: tuple[Any, RunFolder],
) -> None:
    result, folder = nightly
    found = {(w["segment"], w["variant"], w["kind"]): w for w in the_report(folder)["stage_why"]}
    floor = found[("faq", "control", "floor")]
    assert floor["metric"] == "ndcg@10"
    # by hand: every share is 1/10; the baseline's input and output are 1 everywhere
    share = 1 / len(QUERIES)
    demoted_gain = ndcg(10) - 1
    change = share * len(DEMOTED) * demoted_gain
    first_stage = share * (ndcg(5) - 1)  # the worse input of q05
    reranking = share * len(DEMOTED) * demoted_gain + share * (1 - ndcg(5))
    causes = {c["cause"]: c["value"] for c in floor["causes"]}
    assert floor["change"] == pytest.approx(change, abs=1e-12)
    assert causes["first stage"] == pytest.approx(first_stage, abs=1e-12)
    assert causes["reranking"] == pytest.approx(reranking, abs=1e-12)
    assert causes["traffic mix"] == pytest.approx(0, abs=1e-12)
    assert causes["new queries"] == causes["remainder"] == 0
    assert [q["query_id"] for q in floor["contributors"][:3]] == DEMOTED
    assert [q["query_id"] for q in floor["demoted"]] == DEMOTED
    assert floor["demoted_queries"] == len(DEMOTED)
    for q in floor["demoted"]:
        assert q["reranking"] == pytest.approx(share * demoted_gain, abs=1e-12)
        assert q["first_stage"] == pytest.approx(0, abs=1e-12)
    restored = next(q for q in floor["contributors"] if q["query_id"] == WORSE_INPUT)
    assert restored["first_stage"] == pytest.approx(-restored["reranking"], abs=1e-12)
    assert "largest cause reranking" in floor["lines"][0]
    assert floor["lines"][1].startswith("The reranker demoted relevant documents in 3 queries")
    # the gain below min_gain: every variant, the same queries demoted
    gain = found[(OVERALL_SEGMENT, None, "gain")]
    assert [q["query_id"] for q in gain["demoted"]] == DEMOTED
    assert gain["day_output"] - gain["day_input"] == pytest.approx(
        share * len(DEMOTED) * demoted_gain + share * (1 - ndcg(5)), abs=1e-12
    )

    # mrr has no floor: its output's fall is a significant drop against the baseline (the
    # day's 95% interval below 1), split the same way; by hand, mrr = 1 / rank
    drop = found[("faq", "control", "drop")]
    assert drop["metric"] == "mrr"
    causes = {c["cause"]: c["value"] for c in drop["causes"]}
    assert drop["change"] == pytest.approx(share * len(DEMOTED) * (1 / 10 - 1), abs=1e-12)
    assert causes["first stage"] == pytest.approx(share * (1 / 5 - 1), abs=1e-12)
    assert causes["reranking"] == pytest.approx(
        share * len(DEMOTED) * (1 / 10 - 1) + share * (1 - 1 / 5), abs=1e-12
    )
    assert [q["query_id"] for q in drop["demoted"]] == DEMOTED
    causes = {c["cause"]: c["value"] for c in floor["causes"]}

    # the same numbers from pandas over the stored per-span rows
    rows = folder.query(
        "select partition_date, query_id, input_value, output_value from stage_query_metrics "
        "where metric = 'ndcg@10'"
    )
    on_day = pd.to_datetime(rows["partition_date"]).dt.date == DAY
    day = rows[on_day].groupby("query_id")[["input_value", "output_value"]].mean()
    base = rows[~on_day].groupby("query_id")[["input_value", "output_value"]].mean()
    by_pandas = (
        (day["output_value"] - day["input_value"]) - (base["output_value"] - base["input_value"])
    ) * share
    assert causes["reranking"] == pytest.approx(by_pandas.sum(), abs=1e-12)

    report = (folder.reports / f"regression_report_{DAY.isoformat()}.md").read_text()
    section = report.split("## Reranker stage")[1]
    assert "### Why: reranker output faq / control: ndcg@10" in section
    assert section.index("q00") < section.index("q05")
    html = (folder.reports / f"regression_report_{DAY.isoformat()}.html").read_text()
    assert "Why: reranker output faq / control: ndcg@10" in html.split("<h2>Reranker stage</h2>")[1]
    (materialization,) = result.asset_materializations_for_node("regression_report")
    assert "most in: q00" in str(materialization.metadata["reranker_why"].value)
    evaluation = checks_by_name(result)["reranker_stage"]
    assert not evaluation.passed
    why = str(evaluation.metadata["why"].value)
    assert "largest cause reranking" in why and "most in: q00" in why
