"""One retrieval span, read through the `[trace_format]` mapping: its stage, its documents, the
fields its request shares, and the trace records made of it (`docs/spans.md`).

What is read here depends on the span alone (and the mapping and topics), never on the spans
read before it; what spans of a trace share (a RERANKER span's RETRIEVER, nesting, repeats) is
the converter's (`ingest.spans`), which calls these in the order that decides which of several
problems a quarantined span is reported for. The stage is the OpenInference span kind
(`openinference.span.kind`), or the GenAI convention's retrieval operation. Each record is
checked with the record rules (`records.parse_record`) before it is written out as JSON text, so
that a bad span is quarantined with its reason in the rules' words. Pure: json and the standard
library.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from retrieval_pipeline.ingest.otlp import SpanView
from retrieval_pipeline.ingest.span_documents import (
    SpanError,
    check_positions,
    genai_ids,
    json_value,
    positions,
    ranked_ids,
    shortened,
    words,
)
from retrieval_pipeline.records import (
    STAGE_RERANKER,
    STAGE_RETRIEVER,
    RecordError,
    parse_record,
)

if TYPE_CHECKING:  # the configuration's models (pydantic) load only where spans are read
    from retrieval_pipeline.config import TraceFormatConfig
    from retrieval_pipeline.ingest.topics import Topics

SPAN_KIND_ATTRIBUTE = "openinference.span.kind"
RETRIEVER_KIND, RERANKER_KIND = "RETRIEVER", "RERANKER"
GENAI_OPERATION_ATTRIBUTE = "gen_ai.operation.name"
GENAI_RETRIEVAL = "retrieval"

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_END_NS = 253402300800 * 10**9  # 10000-01-01T00:00:00Z, past the record's range


@dataclass(frozen=True)
class Fields:
    """What the stages of a request share (query_id, segment, variant, labels), and whether the
    query id is a query text that the topics do not hold."""

    values: dict[str, object]
    unknown_text: bool = False


def span_stage(span: SpanView) -> str | None:
    """The stage of the records a span makes (retriever or reranker), or None for a span of
    another kind: the OpenInference span kind in any case, else the GenAI retrieval operation."""
    kind = span.attributes.get(SPAN_KIND_ATTRIBUTE)
    kind = kind.upper() if isinstance(kind, str) else kind
    if kind == RETRIEVER_KIND:
        return STAGE_RETRIEVER
    if kind == RERANKER_KIND:
        return STAGE_RERANKER
    if kind is None and span.attributes.get(GENAI_OPERATION_ATTRIBUTE) == GENAI_RETRIEVAL:
        return STAGE_RETRIEVER
    return None


def position_problem(span: SpanView, fmt: TraceFormatConfig) -> str | None:
    """Why the span's document attributes cannot be ranked (a position that is not ASCII
    digits), or None; checked before anything else reads a position."""
    patterns = (
        fmt.document_id_attribute,
        fmt.document_metadata_attribute,
        fmt.reranker_input_id_attribute,
        fmt.reranker_input_metadata_attribute,
        fmt.reranker_output_id_attribute,
        fmt.reranker_output_metadata_attribute,
    )
    try:
        check_positions(span.attributes, patterns)
    except SpanError as exc:
        return str(exc)
    return None


def has_documents(span: SpanView, fmt: TraceFormatConfig) -> bool:
    """Whether a retrieval span writes any document (a documentless one may be nested)."""
    attributes = span.attributes
    return (
        attributes.get(fmt.genai_documents_attribute) is not None
        or bool(positions(attributes, fmt.document_id_attribute, False))
        or bool(positions(attributes, fmt.document_metadata_attribute, False))
    )


def retriever_ids(span: SpanView, fmt: TraceFormatConfig) -> list[str | int]:
    """A RETRIEVER span's document ids in rank order: OpenInference's indexed attributes, else
    the GenAI list; no document attribute at all is OpenInference's way of writing an empty
    list."""
    ids = ranked_ids(
        span.attributes,
        fmt.document_id_attribute,
        fmt.document_metadata_attribute,
        fmt.document_metadata_id_key,
    )
    if ids is None:
        documents = span.attributes.get(fmt.genai_documents_attribute)
        ids = [] if documents is None else genai_ids(documents, fmt.genai_documents_attribute)
    return ids


def reranker_ids(span: SpanView, fmt: TraceFormatConfig) -> tuple[list[str | int], list[str | int]]:
    """A RERANKER span's input and output document ids in rank order (read in that order; none
    written is an empty ranking)."""
    key = fmt.document_metadata_id_key
    attributes = span.attributes
    ids_in = ranked_ids(
        attributes, fmt.reranker_input_id_attribute, fmt.reranker_input_metadata_attribute, key
    )
    output_metadata = fmt.reranker_output_metadata_attribute
    ids_out = ranked_ids(attributes, fmt.reranker_output_id_attribute, output_metadata, key)
    return ids_in or [], ids_out or []


def retriever_fields(span: SpanView, fmt: TraceFormatConfig, topics: Topics | None) -> Fields:
    """A RETRIEVER span's shared fields, the query id falling back on its query text."""
    return shared_fields(span, (fmt.query_attribute, fmt.genai_query_attribute), fmt, topics)


def reranker_own_fields(span: SpanView, fmt: TraceFormatConfig, topics: Topics | None) -> Fields:
    """A RERANKER span's own shared fields (read when its trace's RETRIEVER is not known), the
    query id falling back on the reranker's query, then the retriever's query attribute."""
    return shared_fields(span, (fmt.reranker_query_attribute, fmt.query_attribute), fmt, topics)


def shared_fields(
    span: SpanView, queries: tuple[str, ...], fmt: TraceFormatConfig, topics: Topics | None
) -> Fields:
    """query_id, segment, variant and the labels, from the metadata keys of the mapping; the
    query_id falls back on the first of `queries` the span has (the query text), which the
    topics, when given, turn into its query id."""
    metadata = json_value(span.attributes.get(fmt.metadata_attribute), fmt.metadata_attribute)
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise SpanError(f"{fmt.metadata_attribute} must be a JSON object (got {words(metadata)})")
    fields = {field: metadata[key] for field, key in fmt.metadata_keys().items() if key in metadata}
    if fields.get("query_id") is None:
        query = next(
            (span.attributes[q] for q in queries if span.attributes.get(q) is not None), None
        )
        if query is None:
            raise SpanError(
                f"no query id: {fmt.metadata_attribute} has no {fmt.query_id_key} and the "
                f"span has no {' or '.join(queries)}"
            )
        fields["query_id"], unknown = topic_id(query, topics)
        return Fields(fields, unknown)
    return Fields(fields)


def topic_id(query: object, topics: Topics | None) -> tuple[object, bool]:
    """A query text's id in the topics, and whether the topics lack the text (it is kept as
    the query id then); a text under several ids is an error naming them."""
    if topics is None or not isinstance(query, str):
        return query, False
    ids = topics.ids(query)
    if len(ids) > 1:
        raise SpanError(
            f"the query text {shortened(query.strip())} is under several query ids in the "
            f"topics ({', '.join(ids)}): which one is meant is unknown"
        )
    return (ids[0], False) if ids else (query, True)


def span_timestamp(start_ns: int | None) -> str:
    """The span's start as the record's ISO 8601 text, to the microsecond (truncated, so that a
    span stays on the day it started)."""
    if start_ns is None:
        raise SpanError("missing startTimeUnixNano")
    if not 0 < start_ns < _END_NS:
        raise SpanError(f"startTimeUnixNano {start_ns} is not a time (1970 to 9999)")
    served_at = _EPOCH + timedelta(microseconds=start_ns // 1000)
    return served_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def span_record(
    span: SpanView,
    trace_id: str,
    timestamp: str,
    ids: list[str | int],
    fields: Mapping[str, object],
    stage: str,
) -> dict[str, object]:
    """One trace record of a span, its fields in the order written: the record's own, then the
    span's OTLP ids (so a record can be traced back to its span)."""
    return {
        "trace_id": trace_id,
        "query_id": fields["query_id"],
        "timestamp": timestamp,
        "retrieved_ids": ids,
        **{k: v for k, v in fields.items() if k != "query_id"},
        "stage": stage,
        "otel_trace_id": span.trace_id,
        "span_id": span.span_id,
    }


def checked_text(record: dict[str, object]) -> str:
    """The record as JSON text, once the record rules accept it."""
    try:
        parse_record(record)
    except RecordError as exc:
        raise SpanError(exc.reason) from None
    text = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # an escape such as \ud800 in the metadata JSON: not Unicode, as the record rules say
        raise SpanError("a string holds a lone surrogate escape, which is not Unicode") from None
    return text
