"""Span exports shaped as the frameworks write them, scored end to end (issue 31).

LlamaIndex writes two RETRIEVER spans per call (`BM25Retriever.retrieve` with the documents, its
child `BM25Retriever._retrieve` without), node UUIDs as `document.id` and the user's id in the
metadata; LangChain writes only each document's metadata and the query text; an empty result
has no document attribute at all. Each is run through `run_evaluation` with id-keyed judgments
and every per-trace value is compared with trec_eval's (pytrec_eval, `conformance_data.oracle`;
linear gains, as trec_eval's), from the rankings the spans were written with.
"""

from __future__ import annotations

import json
import math
import random
import uuid
from pathlib import Path
from typing import Any

from retrieval_pipeline.config import TraceFormatConfig
from retrieval_pipeline.ingest.span_pieces import SpanReading
from retrieval_pipeline.ingest.spans import SpanConverter, SpanCounts
from retrieval_pipeline.warehouse.evaluation import EvaluationRun, run_evaluation
from tests.conformance_data import METRICS, oracle
from tests.ingest.span_exports import attribute, base64_ids, export_line, other_span, span

DAY = "2026-12-01"
DOCS = [f"d{n:02d}" for n in range(30)]
QRELS = {
    f"q{n}": {doc: grade for doc, grade in zip(DOCS[n : n + 6], (3, 0, 2, 1, 0, 2), strict=True)}
    for n in range(8)
}


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def qrels_file(tmp_path: Path) -> Path:
    text = "".join(
        f"{query} 0 {doc} {grade}\n" for query, docs in QRELS.items() for doc, grade in docs.items()
    )
    path = tmp_path / "qrels.txt"
    path.write_text(text, encoding="utf-8")
    return path


def ranking(n: int) -> list[str]:
    rng = random.Random(n)
    return rng.sample(DOCS[:14], rng.randrange(1, 10))


def at(n: int) -> str:
    return f"{DAY}T{n:02d}:10:00.{n:06d}Z"


def compare(run: EvaluationRun, rankings: dict[str, list[str]], queries: dict[str, str]) -> None:
    """Every per-trace value equals the oracle's; an empty ranking with labels gives 0."""
    expected = oracle(rankings, {key: QRELS.get(query) for key, query in queries.items()})
    frame = run.per_query.set_index("trace_id")
    assert sorted(frame.index) == sorted(rankings)
    for key, values in expected.items():
        for metric in METRICS:
            got = frame.loc[key, metric]
            if values is None:
                assert math.isnan(got), (key, metric)
            else:
                assert math.isclose(got, values[metric], abs_tol=1e-12), (key, metric, got)


# --- LlamaIndex: nested RETRIEVER spans, node UUIDs, the user's id in the metadata ------------


def llamaindex_call(n: int) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], list[str]]:
    """One call: the query engine's CHAIN span, its RETRIEVER `retrieve` span with the
    documents (node UUIDs as ids, the user's under `doc_id` in the metadata) and that one's
    child `_retrieve` without documents; and the user's ranking."""
    trace, chain = f"{n + 1:032x}", f"{n + 1:08x}000000c0"
    outer, inner = f"{n + 1:08x}0000000a", f"{n + 1:08x}0000000b"
    query = f"q{n % 8}"
    ids = ranking(n)
    meta = attribute("metadata", json.dumps({"query_id": query}))
    documents = []
    for i, doc in enumerate(ids):
        documents += [
            attribute(f"retrieval.documents.{i}.document.id", str(uuid.UUID(int=n * 100 + i))),
            attribute(f"retrieval.documents.{i}.document.score", 1.0 / (i + 1)),
            attribute(f"retrieval.documents.{i}.document.content", f"text of {doc}"),
            attribute(
                f"retrieval.documents.{i}.document.metadata",
                json.dumps({"doc_id": doc, "file_name": f"{doc}.txt"}),
            ),
        ]
    kind = attribute("openinference.span.kind", "RETRIEVER")
    question = attribute("input.value", f"the question of {query}")
    parent = span(
        outer, trace, at(n), "BM25Retriever.retrieve", [kind, question, meta, *documents], chain
    )
    child = span(inner, trace, at(n), "BM25Retriever._retrieve", [kind, question, meta], outer)
    return other_span(chain, trace, at(n), "CHAIN"), parent, child, ids


def llamaindex_lines(count: int) -> tuple[list[str], dict[str, list[str]], dict[str, str]]:
    """`count` calls. The child ends first: on even calls it is written a line before its
    parent, on odd ones in the parent's line after it, and every third call the parent comes a
    line before the child."""
    lines: list[list[dict[str, Any]]] = [[] for _ in range(count + 2)]
    rankings, queries = {}, {}
    for n in range(count):
        engine, parent, child, ids = llamaindex_call(n)
        rankings[parent["spanId"]], queries[parent["spanId"]] = ids, f"q{n % 8}"
        if n % 3 == 2:
            lines[n] += [parent]
            lines[n + 1] += [child, engine]
        elif n % 2 == 0:
            lines[n] += [child]
            lines[n + 1] += [parent, engine]
        else:
            lines[n + 1] += [parent, child, engine]
    return [export_line([group]) for group in lines if group], rankings, queries


LLAMAINDEX = TraceFormatConfig(document_metadata_id_key="doc_id")


def test_llamaindex_nested_retrievers_are_one_retrieval(tmp_path: Path) -> None:
    lines, rankings, queries = llamaindex_lines(12)
    path = write(tmp_path / "llamaindex.jsonl", lines)
    run = run_evaluation(
        [path],
        METRICS,
        gain="linear",
        spans=SpanReading(LLAMAINDEX),
        judgments=[qrels_file(tmp_path)],
    )
    compare(run, rankings, queries)
    counts = run.ingest
    # 12 parents scored; 12 children (nested) and 12 CHAIN spans skipped
    assert (counts.read, counts.valid, counts.quarantined, counts.skipped) == (36, 12, 0, 24)
    assert counts.read == counts.valid + counts.quarantined + counts.skipped
    converter = SpanConverter(LLAMAINDEX)
    rows = list(converter.convert_file(path))
    assert converter.counts == SpanCounts(read=36, converted=12, skipped=24, records=12, nested=12)
    assert {json.loads(r.record or "")["trace_id"] for r in rows} == set(rankings)


def test_node_uuids_without_the_metadata_key_are_scored_as_written(tmp_path: Path) -> None:
    """Without `document_metadata_id_key` the document.id (a node UUID) is the id."""
    lines, rankings, _ = llamaindex_lines(3)
    rows = list(SpanConverter().convert_file(write(tmp_path / "l.jsonl", lines)))
    made = {json.loads(r.record or "")["trace_id"]: json.loads(r.record or "") for r in rows}
    for n, (key, ids) in enumerate(sorted(rankings.items())):
        assert made[key]["retrieved_ids"] == [
            str(uuid.UUID(int=n * 100 + i)) for i in range(len(ids))
        ]


def test_a_document_without_the_metadata_key_quarantines_its_span(tmp_path: Path) -> None:
    attributes = [
        attribute("openinference.span.kind", "RETRIEVER"),
        attribute("metadata", json.dumps({"query_id": "q1"})),
        attribute("retrieval.documents.0.document.metadata", json.dumps({"doc_id": "d1"})),
        attribute("retrieval.documents.1.document.metadata", json.dumps({"page": 2})),
        attribute("retrieval.documents.2.document.metadata", "[1]"),
    ]
    item = span("00000000000000aa", "ab" * 16, at(1), "retrieve", attributes)
    converter = SpanConverter(LLAMAINDEX)
    (row,) = converter.convert_file(write(tmp_path / "m.jsonl", [export_line([[item]])]))
    assert row.error == (
        "span 00000000000000aa: retrieval.documents.1.document.metadata has no key 'doc_id', so "
        "document 1 has no id ([trace_format] document_metadata_id_key = 'doc_id')"
    )
    assert converter.counts == SpanCounts(read=1, quarantined=1)


def test_ids_in_base64_give_the_same_records_as_in_hex(tmp_path: Path) -> None:
    """protobuf's JSON mapping writes traceId, spanId and parentSpanId in base64: the records
    are those of the hex export, nesting included."""
    lines, _, _ = llamaindex_lines(7)
    hex_rows = list(SpanConverter(LLAMAINDEX).convert_file(write(tmp_path / "h.jsonl", lines)))
    converter = SpanConverter(LLAMAINDEX)
    encoded = [base64_ids(line) for line in lines]
    assert '"spanId": "AAAAAQAAAAo="' in encoded[1]  # 000000010000000a, in base64
    b64_rows = list(converter.convert_file(write(tmp_path / "b.jsonl", encoded)))
    assert [r.record for r in b64_rows] == [r.record for r in hex_rows]
    assert all(r.record for r in b64_rows)
    first = json.loads(b64_rows[0].record or "")
    assert first["otel_trace_id"] == f"{int(first['trace_id'][:8], 16):032x}"
    assert converter.counts.nested == 7


def test_a_span_id_neither_hex_nor_base64_is_quarantined(tmp_path: Path) -> None:
    attributes = [
        attribute("openinference.span.kind", "RETRIEVER"),
        attribute("input.value", "q"),
        attribute("retrieval.documents.0.document.id", "d1"),
    ]
    item = span("span-one", "ab" * 16, at(1), "retrieve", attributes)
    (row,) = SpanConverter().convert_file(write(tmp_path / "x.jsonl", [export_line([[item]])]))
    assert row.error == (
        'span span-one: spanId "span-one" is neither 16 hex digits nor the base64 of 8 bytes'
    )


def test_held_spans_are_released_as_empty_results_past_the_bound(tmp_path: Path) -> None:
    """With room for one trace, call 1's held child releases call 0's as an empty result
    before call 0's parent arrives; call 1's child is still told nested. Every span counts once."""
    (_, parent0, child0, ids0), (_, parent1, child1, ids1) = llamaindex_call(0), llamaindex_call(1)
    lines = [export_line([[item]]) for item in (child0, child1, parent0, parent1)]
    converter = SpanConverter(LLAMAINDEX, recent_traces=1)
    rows = list(converter.convert_file(write(tmp_path / "e.jsonl", lines)))
    made = [
        (json.loads(r.record or "")["trace_id"], json.loads(r.record or "")["retrieved_ids"])
        for r in rows
    ]
    assert made == [(child0["spanId"], []), (parent0["spanId"], ids0), (parent1["spanId"], ids1)]
    assert converter.counts == SpanCounts(
        read=4, converted=3, skipped=1, records=3, empty=1, nested=1
    )


# --- LangChain: ids only in the document metadata, the query only as text ---------------------


def langchain_span(n: int, text: str, ids: list[str]) -> dict[str, Any]:
    attributes = [
        attribute("openinference.span.kind", "RETRIEVER"),
        attribute("input.value", text),
    ]
    for i, doc in enumerate(ids):
        attributes.append(attribute(f"retrieval.documents.{i}.document.content", f"about {doc}"))
        attributes.append(
            attribute(
                f"retrieval.documents.{i}.document.metadata",
                json.dumps({"id": doc, "source": f"kb/{doc}.md"}),
            )
        )
    return span(f"{n + 1:08x}00000001", f"{n + 1:032x}", at(n), "VectorStoreRetriever", attributes)


def test_langchain_spans_score_through_the_topics(tmp_path: Path) -> None:
    texts = {f"q{n}": f"How do I do thing number {n}?" for n in range(8)}
    topics = tmp_path / "topics.tsv"
    topics.write_text(
        "".join(f"{qid}\t{text}\n" for qid, text in texts.items())
        + "q0-copy\tHow do I do thing number 0?\n",  # one text under two ids
        encoding="utf-8",
    )
    spans, rankings, queries = [], {}, {}
    for n in range(16):
        query = f"q{n % 8}"
        text = "an unknown question" if n == 15 else f"  {texts[query]} "
        ids = ranking(100 + n)
        spans.append(langchain_span(n, text, ids))
        if query != "q0":  # q0's text is under two ids: quarantined
            key = spans[-1]["spanId"]
            rankings[key], queries[key] = ids, "none" if n == 15 else query
    path = write(tmp_path / "langchain.jsonl", [export_line([spans[:9]]), export_line([spans[9:]])])
    trace_format = TraceFormatConfig(document_metadata_id_key="id").model_copy(
        update={"topics_file": str(topics)}
    )
    run = run_evaluation(
        [path],
        METRICS,
        gain="linear",
        spans=SpanReading(trace_format),
        judgments=[qrels_file(tmp_path)],
    )
    compare(run, rankings, queries)
    assert run.ingest.quarantined == 2
    converter = SpanReading(trace_format).converter()
    rows = list(converter.convert_file(path))
    errors = [r.error for r in rows if r.error]
    assert len(errors) == 2
    assert all(
        'the query text "How do I do thing number 0?" is under several query ids in the topics '
        "(q0, q0-copy)" in error
        for error in errors
    ), errors
    made = {json.loads(r.record)["trace_id"]: json.loads(r.record) for r in rows if r.record}
    assert made[spans[15]["spanId"]]["query_id"] == "an unknown question"
    assert made[spans[1]["spanId"]]["query_id"] == "q1"
    assert converter.counts == SpanCounts(
        read=16, converted=14, quarantined=2, records=14, unknown_query_texts=1
    )


# --- an empty result ---------------------------------------------------------------------------


def test_an_empty_retriever_span_scores_zero_against_its_labels(tmp_path: Path) -> None:
    rankings, queries, spans = {}, {}, []
    for n in range(4):
        ids = [] if n % 2 == 0 else ranking(200 + n)
        attributes = [
            attribute("openinference.span.kind", "RETRIEVER"),
            attribute("metadata", json.dumps({"query_id": f"q{n}"})),
            *(attribute(f"retrieval.documents.{i}.document.id", d) for i, d in enumerate(ids)),
        ]
        item = span(f"{n + 1:016x}", f"{n + 1:032x}", at(n), "retrieve", attributes)
        spans.append(item)
        rankings[item["spanId"]], queries[item["spanId"]] = ids, f"q{n}"
    path = write(tmp_path / "empty.jsonl", [export_line([spans])])
    run = run_evaluation([path], METRICS, gain="linear", judgments=[qrels_file(tmp_path)])
    compare(run, rankings, queries)
    frame = run.per_query.set_index("trace_id")
    for key in (spans[0]["spanId"], spans[2]["spanId"]):
        assert [frame.loc[key, metric] for metric in METRICS] == [0.0] * len(METRICS)
    assert (run.ingest.read, run.ingest.valid, run.ingest.quarantined) == (4, 4, 0)
    converter = SpanConverter()
    list(converter.convert_file(path))
    assert converter.counts == SpanCounts(read=4, converted=4, records=4, empty=2)
