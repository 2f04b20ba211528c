"""Test data: trace records written as OTLP/JSON spans, the way instrumented applications log them.

One source of truth (a list of trace records) is turned into OpenInference RETRIEVER spans or
OpenTelemetry GenAI retrieval spans, with LLM, CHAIN and unlabelled spans mixed in, so that tests
can compare what `ingest.spans` makes of the spans with the records themselves. The same lines
feed a Phoenix server as protobuf (`to_protobuf`).
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

LABEL_FIELDS = ("segment", "variant", "relevant_ids", "relevance_scores", "label_source")
SEGMENTS = ("faq", "long_tail", "navigational")


def value(item: object) -> dict[str, Any]:
    """A plain value as an OTLP/JSON AnyValue (intValue as a string, as the spec writes it)."""
    if isinstance(item, bool):
        return {"boolValue": item}
    if isinstance(item, int):
        return {"intValue": str(item)}
    if isinstance(item, float):
        return {"doubleValue": item}
    if isinstance(item, list):
        return {"arrayValue": {"values": [value(x) for x in item]}}
    if isinstance(item, dict):
        return {"kvlistValue": {"values": [attribute(k, v) for k, v in item.items()]}}
    return {"stringValue": item}


def attribute(key: str, item: object) -> dict[str, Any]:
    return {"key": key, "value": value(item)}


def nanos(timestamp: str) -> int:
    """An ISO 8601 time as Unix nanoseconds, exactly (integer arithmetic, no float)."""
    moment = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 10**9 + delta.microseconds * 1000


def make_records(count: int, seed: int, day: str = "2026-12-01") -> list[dict[str, Any]]:
    """Trace records of one day with every optional field sometimes present, sometimes not;
    ids are 16 hex digits (a spanId), some document ids are integers."""
    rng = random.Random(seed)
    records: list[dict[str, Any]] = []
    for n in range(count):
        span_id = f"{rng.getrandbits(64):016x}"
        retrieved: list[str | int] = [
            f"doc-{rng.randrange(60)}" for _ in range(rng.randrange(1, 9))
        ]
        if n % 5 == 0:
            retrieved[0] = rng.randrange(1000, 2000)  # an integer id
        record: dict[str, Any] = {
            "trace_id": span_id,
            "query_id": f"q{rng.randrange(15)}",
            "timestamp": f"{day}T{n % 24:02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}."
            f"{rng.randrange(10**6):06d}Z",
            "retrieved_ids": list(dict.fromkeys(retrieved)),
        }
        if n % 3 != 2:
            record["relevant_ids"] = [str(rng.choice(record["retrieved_ids"])), "doc-99"]
        if n % 4 == 1:
            record["relevance_scores"] = {
                "doc-7": 3,
                "doc-8": 0,
                str(record["retrieved_ids"][-1]): 2,
            }
        if n % 6 != 5:
            record["segment"] = SEGMENTS[n % 3]
        if n % 2 == 0:
            record["variant"] = "control" if n % 4 == 0 else "candidate"
        if n % 7 == 3:
            record["label_source"] = "human"
        records.append(record)
    return records


def metadata_of(record: Mapping[str, Any], with_query_id: bool = True) -> str:
    kept = {key: record[key] for key in LABEL_FIELDS if key in record}
    if with_query_id:
        kept = {"query_id": record["query_id"], **kept}
    return json.dumps(kept)


def openinference_retriever(
    record: Mapping[str, Any], trace_id: str, rng: random.Random, query_in_metadata: bool = True
) -> dict[str, Any]:
    """A RETRIEVER span: documents by position with scores that are not in rank order, and the
    attributes shuffled, so that only the position can give the ranking."""
    attributes = [attribute("openinference.span.kind", "RETRIEVER")]
    attributes.append(attribute("metadata", metadata_of(record, query_in_metadata)))
    attributes.append(
        attribute("input.value", record["query_id"] if not query_in_metadata else "text")
    )
    for i, doc_id in enumerate(record["retrieved_ids"]):
        attributes.append(attribute(f"retrieval.documents.{i}.document.id", doc_id))
        attributes.append(attribute(f"retrieval.documents.{i}.document.score", rng.random()))
        attributes.append(
            attribute(f"retrieval.documents.{i}.document.content", f"text of {doc_id}")
        )
    rng.shuffle(attributes)
    return span(record["trace_id"], trace_id, record["timestamp"], "retrieve", attributes)


def genai_retriever(
    record: Mapping[str, Any], trace_id: str, rng: random.Random, as_json_text: bool
) -> dict[str, Any]:
    """A GenAI retrieval span; documents as a list of {id, score} or the JSON text of one, the
    query as `gen_ai.retrieval.query.text` (query_id) and the labels in `metadata`."""
    documents = [{"id": doc_id, "score": rng.random()} for doc_id in record["retrieved_ids"]]
    attributes = [
        attribute("gen_ai.operation.name", "retrieval"),
        attribute("gen_ai.retrieval.query.text", record["query_id"]),
        attribute("metadata", metadata_of(record, with_query_id=False)),
        attribute(
            "gen_ai.retrieval.documents", json.dumps(documents) if as_json_text else documents
        ),
    ]
    return span(record["trace_id"], trace_id, record["timestamp"], "retrieval", attributes)


def reranker(
    span_id: str,
    trace_id: str,
    timestamp: str,
    input_ids: Sequence[str | int],
    output_ids: Sequence[str | int],
    extra: Iterable[dict[str, Any]] = (),
) -> dict[str, Any]:
    attributes = [attribute("openinference.span.kind", "RERANKER"), *extra]
    attributes += [
        attribute(f"reranker.input_documents.{i}.document.id", d) for i, d in enumerate(input_ids)
    ]
    attributes += [
        attribute(f"reranker.output_documents.{i}.document.id", d) for i, d in enumerate(output_ids)
    ]
    return span(span_id, trace_id, timestamp, "rerank", attributes)


def other_span(span_id: str, trace_id: str, timestamp: str, kind: str | None) -> dict[str, Any]:
    """A span that is not a retrieval: an LLM call, a chain, or one without a span kind."""
    attributes = [attribute("llm.model_name", "m"), attribute("input.value", "hello")]
    if kind is not None:
        attributes.append(attribute("openinference.span.kind", kind))
    return span(span_id, trace_id, timestamp, kind or "plain", attributes)


def span(
    span_id: str,
    trace_id: str,
    timestamp: str,
    name: str,
    attributes: list[dict[str, Any]],
    parent_id: str | None = None,
) -> dict[str, Any]:
    start = nanos(timestamp)
    parent = {} if parent_id is None else {"parentSpanId": parent_id}
    return {
        "traceId": trace_id,
        "spanId": span_id,
        **parent,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 25_000_000),
        "attributes": attributes,
        "status": {},
    }


def export_line(groups: Sequence[Sequence[dict[str, Any]]], project: str = "rag") -> str:
    """One ExportTraceServiceRequest: a resource per group of spans, each in two scopes."""
    resource_spans = []
    for group in groups:
        half = len(group) // 2
        resource_spans.append(
            {
                "resource": {"attributes": [attribute("openinference.project.name", project)]},
                "scopeSpans": [
                    {"scope": {"name": "openinference"}, "spans": list(group[:half])},
                    {"scope": {"name": "app"}, "spans": list(group[half:])},
                ],
            }
        )
    return json.dumps({"resourceSpans": resource_spans})


def trace_id_for(n: int) -> str:
    return f"{n + 1:032x}"


def base64_ids(line: str) -> str:
    """An export line with its ids in base64, as protobuf's JSON mapping (`MessageToJson`)
    writes them, instead of OTLP/JSON's hex."""
    request = json.loads(line)
    for resource in request["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for item in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in item:
                        item[key] = base64.b64encode(bytes.fromhex(item[key])).decode("ascii")
    return json.dumps(request)


def to_protobuf(line: str) -> bytes:
    """An OTLP/JSON line as the protobuf body of an OTLP HTTP request. OTLP/JSON writes ids in
    hex where protobuf's JSON mapping wants base64, so the ids are re-encoded first."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = json.loads(base64_ids(line))
    message = json_format.ParseDict(request, ExportTraceServiceRequest())
    return bytes(message.SerializeToString())
