"""A Phoenix server as a trace store (`ingest.phoenix`), against a real server.

A day of spans, with more than the client's default page of 1,000 on it and some on the days
either side, is sent to Phoenix over OTLP HTTP, read back a day at a time, and compared with the
same OTLP lines read from a file (`ingest.spans`) and with the records they were written from.
"""

from __future__ import annotations

import json
import random
import time
from datetime import date
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from retrieval_pipeline.config import TraceFormatConfig
from retrieval_pipeline.ingest.phoenix import PhoenixStore, read_day
from retrieval_pipeline.ingest.spans import INPUT_SUFFIX, SpanConverter, SpanCounts, SpanRow
from retrieval_pipeline.records import parse_record
from tests.ingest.phoenix_server import PhoenixServer
from tests.ingest.span_exports import (
    export_line,
    genai_retriever,
    make_records,
    openinference_retriever,
    other_span,
    reranker,
    to_protobuf,
    trace_id_for,
)
from tests.ingest.test_span_shapes import llamaindex_call

pytestmark = pytest.mark.slow

DAY = date(2026, 12, 1)
PROJECT = "retrieval-day"
SPANS_PER_REQUEST = 100
INGESTED_WITHIN_S = 180


def build_spans() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The day's 1,100 RETRIEVER spans (40 of them GenAI spans), 60 RERANKER spans, 60 spans on
    the days either side, one reranker just after midnight whose retriever started just before,
    and an LLM span for every ten retrieval spans. Returns (source records of the day, spans)."""
    rng = random.Random(20)
    day = make_records(1100, seed=20, day="2026-12-01")
    for record in day[:150]:  # more spans at one instant than a page of 100 holds
        record["timestamp"] = "2026-12-01T05:00:00.000000Z"
    day[150]["timestamp"] = "2026-12-01T00:00:00.000000Z"  # the day's first instant: in it
    before = make_records(30, seed=21, day="2026-11-30")
    after = make_records(30, seed=22, day="2026-12-02")
    before[0]["timestamp"] = "2026-11-30T23:59:59.999999Z"  # the last instant before: out
    after[0]["timestamp"] = "2026-12-02T00:00:00.000000Z"  # the next day's first: out
    before[1]["timestamp"] = "2026-11-30T23:59:59.900000Z"

    spans: list[dict[str, Any]] = []
    for n, record in enumerate(day + before + after):
        trace = trace_id_for(n)
        if 300 <= n < 340:
            spans.append(genai_retriever(record, trace, rng, as_json_text=n % 2 == 0))
        else:
            spans.append(openinference_retriever(record, trace, rng, n % 3 != 0))
        if 200 <= n < 260:
            ids = record["retrieved_ids"]
            spans.append(reranker(f"{n:08x}0000beef", trace, record["timestamp"], ids, ids[::-1]))
        if n % 10 == 0:
            spans.append(other_span(f"{n:08x}0000cafe", trace, record["timestamp"], "LLM"))
    crossing = trace_id_for(1100 + 1)  # before[1]'s trace
    ids = before[1]["retrieved_ids"]
    spans.append(
        reranker("00000000feedbeef", crossing, "2026-12-01T00:00:00.100000Z", ids, ids[:1])
    )
    return day, spans


def lines_of(spans: list[dict[str, Any]]) -> list[str]:
    return [
        export_line([spans[at : at + SPANS_PER_REQUEST]], project=PROJECT)
        for at in range(0, len(spans), SPANS_PER_REQUEST)
    ]


@pytest.fixture(scope="module")
def day_in_phoenix(phoenix: PhoenixServer) -> tuple[list[dict[str, Any]], list[str]]:
    day, spans = build_spans()
    lines = lines_of(spans)
    for line in lines:
        phoenix.send(to_protobuf(line))
    wait_until_stored(phoenix, len(spans))
    return day, lines


def wait_until_stored(phoenix: PhoenixServer, count: int, project: str = PROJECT) -> None:
    """Phoenix writes spans behind the export's answer: wait until all of them are stored."""
    from phoenix.client import Client
    from phoenix.client.types.spans import SpanQuery

    client = Client(base_url=phoenix.base_url)
    deadline = time.monotonic() + INGESTED_WITHIN_S
    stored = -1
    while stored < count and time.monotonic() < deadline:
        frame = client.spans.get_spans_dataframe(
            query=SpanQuery().select("name"),
            project_identifier=project,
            limit=count + 1,
            timeout=60,
        )
        stored = len(frame)
        time.sleep(0.5)
    assert stored == count, f"Phoenix stored {stored} of {count} spans; log: {phoenix.log}"


def from_file(tmp_path: Path, lines: list[str]) -> dict[str, dict[str, Any]]:
    """The oracle: the same OTLP lines read as an export file, kept to the spans of DAY."""
    path = tmp_path / "export.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    rows = list(SpanConverter().convert_file(path))
    assert [row.error for row in rows if row.error] == []
    records = [json.loads(row.record or "") for row in rows]
    return {r["trace_id"]: r for r in records if r["timestamp"].startswith(DAY.isoformat())}


def read(
    phoenix: PhoenixServer, page_spans: int, day: date = DAY
) -> tuple[list[SpanRow], SpanCounts]:
    converter = SpanConverter()
    store = PhoenixStore(phoenix.base_url, PROJECT, page_spans=page_spans)
    rows = list(read_day(store, day, converter))
    return rows, converter.counts


@pytest.mark.parametrize("page_spans", [1000, 100])
def test_a_day_read_from_phoenix_is_the_day_of_the_export_file(
    phoenix: PhoenixServer,
    day_in_phoenix: tuple[list[dict[str, Any]], list[str]],
    tmp_path: Path,
    page_spans: int,
) -> None:
    day, lines = day_in_phoenix
    expected = from_file(tmp_path, lines)
    rows, counts = read(phoenix, page_spans)
    assert [row.error for row in rows if row.error] == []
    got = [json.loads(row.record or "") for row in rows]
    by_id = {record["trace_id"]: record for record in got}
    assert len(by_id) == len(got), "each span is read once"
    assert set(by_id) == set(expected)
    for trace_id, record in by_id.items():
        mine, theirs = parse_record(record), parse_record(expected[trace_id])
        assert mine == theirs, trace_id
        for field in ("stage", "otel_trace_id", "span_id"):
            assert record[field] == expected[trace_id][field]
    for source in day:  # the retrievers against the records they were written from
        assert parse_record(by_id[source["trace_id"]]) == parse_record(source)
    # 1,100 retrievers and 61 rerankers started on the day; each reranker gives two records
    assert counts == SpanCounts(read=1161, converted=1161, records=1100 + 2 * 61)
    pages = max(row.source_line for row in rows)
    assert pages >= -(-1161 // page_spans)


def test_a_reranker_after_midnight_gets_its_retrievers_labels_from_the_day_before(
    phoenix: PhoenixServer, day_in_phoenix: tuple[list[dict[str, Any]], list[str]]
) -> None:
    rows, _ = read(phoenix, 1000)
    records = {r["trace_id"]: r for r in (json.loads(row.record or "") for row in rows)}
    retriever = make_records(30, seed=21, day="2026-11-30")[1]
    for trace_id in ("00000000feedbeef", "00000000feedbeef" + INPUT_SUFFIX):
        record = records[trace_id]
        assert record["query_id"] == retriever["query_id"]
        assert record.get("relevant_ids") == retriever.get("relevant_ids")
        assert record["timestamp"] == "2026-12-01T00:00:00.100000Z"
    assert retriever["trace_id"] not in records


def test_the_neighbouring_days_and_an_empty_day(
    phoenix: PhoenixServer, day_in_phoenix: tuple[list[dict[str, Any]], list[str]]
) -> None:
    before, _ = read(phoenix, 1000, date(2026, 11, 30))
    after, _ = read(phoenix, 1000, date(2026, 12, 2))
    assert len(before) == len(after) == 30
    assert all(json.loads(r.record or "")["timestamp"].startswith("2026-11-30") for r in before)
    assert all(json.loads(r.record or "")["timestamp"].startswith("2026-12-02") for r in after)
    empty, counts = read(phoenix, 1000, date(2026, 12, 3))
    assert (empty, counts) == ([], SpanCounts())


def test_the_nightly_pipeline_scores_a_day_from_phoenix(
    phoenix: PhoenixServer,
    day_in_phoenix: tuple[list[dict[str, Any]], list[str]],
    tmp_path: Path,
) -> None:
    """The `traces` asset with a Phoenix store, then labels and metrics: the stored per-trace
    scores equal `evaluate`'s of the day's records written as trace records."""
    import dagster as dg

    from retrieval_pipeline.defs.nightly.assets import corpus, labels, query_metrics, traces
    from retrieval_pipeline.defs.resources import (
        PipelineSettingsResource,
        TraceStoreResource,
        WarehouseResource,
    )
    from retrieval_pipeline.metrics import DEFAULT_METRICS, parse_metrics
    from retrieval_pipeline.warehouse.connection import connect
    from retrieval_pipeline.warehouse.evaluation import run_evaluation

    day, _ = day_in_phoenix
    database = tmp_path / "db" / "warehouse.duckdb"
    result = dg.materialize(
        [traces, corpus, labels, query_metrics],
        partition_key=DAY.isoformat(),
        resources={
            "trace_store": TraceStoreResource(
                root=str(tmp_path / "unused"),
                phoenix_endpoint=phoenix.base_url,
                phoenix_project=PROJECT,
            ),
            "warehouse": WarehouseResource(database=str(database)),
            "settings": PipelineSettingsResource(reports_dir=str(tmp_path / "reports")),
        },
        instance=dg.DagsterInstance.ephemeral(),
    )
    assert result.success
    metadata = result.asset_materializations_for_node("traces")[0].metadata
    # 1,100 retrievers scored; the 61 rerankers are another stage, counted as skipped
    assert (metadata["records_read"].value, metadata["records_quarantined"].value) == (1100, 0)
    assert metadata["spans_skipped"].value == 61

    metrics = parse_metrics(list(DEFAULT_METRICS))
    with connect(database) as conn:
        long = conn.sql(
            "select trace_id, query_id, segment, variant, metric, value from query_metrics"
        ).df()
    stored = (
        long.pivot(
            index=["trace_id", "query_id", "segment", "variant"], columns="metric", values="value"
        )
        .rename_axis(columns=None)
        .reset_index()
    )
    records = tmp_path / "day.jsonl"
    records.write_text("\n".join(json.dumps(r) for r in day) + "\n", encoding="utf-8")
    expected = run_evaluation([records], metrics).per_query
    columns = ["trace_id", "query_id", "segment", "variant", *(m.name for m in metrics)]
    pd.testing.assert_frame_equal(
        stored.sort_values("trace_id").reset_index(drop=True)[columns],
        expected.sort_values("trace_id").reset_index(drop=True)[columns],
    )


def test_nested_retrievers_metadata_ids_and_an_empty_result_from_phoenix(
    phoenix: PhoenixServer,
) -> None:
    """LlamaIndex's nested RETRIEVER spans read from Phoenix: the parent (its documents' ids
    from their metadata, which Phoenix keeps as objects) scored, the child skipped by Phoenix's
    `parent_id`; a documentless span without a relative is an empty result."""
    project = "llamaindex-day"
    calls = [llamaindex_call(n) for n in range(5)]
    spans = [item for engine, parent, child, _ in calls for item in (child, parent, engine)]
    for item in spans:  # traces of their own: Phoenix keeps a trace in its first project
        item["traceId"] = "f" + item["traceId"][1:]
    empty = calls[0][2] | {"spanId": "00000000000000ee", "traceId": "ee" * 16}
    empty.pop("parentSpanId")
    for line in (export_line([spans], project=project), export_line([[empty]], project=project)):
        phoenix.send(to_protobuf(line))
    wait_until_stored(phoenix, len(spans) + 1, project)
    converter = SpanConverter(TraceFormatConfig(document_metadata_id_key="doc_id"))
    rows = list(read_day(PhoenixStore(phoenix.base_url, project), DAY, converter))
    assert [row.error for row in rows if row.error] == []
    made = {r["trace_id"]: r["retrieved_ids"] for r in (json.loads(x.record or "") for x in rows)}
    assert made == {parent["spanId"]: ids for _, parent, _, ids in calls} | {"00000000000000ee": []}
    # only retrieval spans are asked for: 5 parents and the empty span, 5 nested children
    assert converter.counts == SpanCounts(
        read=11, converted=6, skipped=5, records=6, empty=1, nested=5
    )


def test_more_spans_at_one_instant_than_a_page_holds_are_read_once_a_page_at_a_time(
    phoenix: PhoenixServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """250 spans started at one instant, read 40 at a time: each span once, and no query asks
    for more than a page (the reader once doubled its limit until one page held them all, or
    the request timed out)."""
    project = "one-instant"
    records = make_records(250, seed=30)
    for record in records:
        record["timestamp"] = "2026-12-01T07:00:00.000000Z"
    rng = random.Random(30)
    spans = [
        openinference_retriever(record, trace_id_for(5000 + n), rng)
        for n, record in enumerate(records)
    ]
    for at in range(0, len(spans), SPANS_PER_REQUEST):
        phoenix.send(to_protobuf(export_line([spans[at : at + SPANS_PER_REQUEST]], project)))
    wait_until_stored(phoenix, len(spans), project)
    store = PhoenixStore(phoenix.base_url, project, page_spans=40)
    client = store.client()
    limits: list[int] = []
    query = client.spans.get_spans_dataframe

    def counted(**arguments: Any) -> pd.DataFrame:
        limits.append(arguments["limit"])
        return query(**arguments)

    monkeypatch.setattr(client.spans, "get_spans_dataframe", counted)
    converter = SpanConverter()
    rows = list(read_day(store, DAY, converter, client))
    assert [row.error for row in rows if row.error] == []
    made = sorted(json.loads(row.record or "")["trace_id"] for row in rows)
    assert made == sorted(record["trace_id"] for record in records)
    assert converter.counts == SpanCounts(read=250, converted=250, records=250)
    assert max(limits) == 40
