"""Retrieval spans as trace records: OTLP/JSON exports of OpenInference and GenAI spans.

RAG applications log retrieval as spans, not as this project's records. The OpenTelemetry
Collector's file exporter writes one `ExportTraceServiceRequest` per line; each retrieval span in
it becomes one trace record (`docs/spans.md`): `trace_id` is the span's `spanId` as written,
`timestamp` its start, `retrieved_ids` the document ids by position (never re-sorted by score),
and the query id, segment, variant and labels come from the span's `metadata` JSON, through the
mapping of `[trace_format]`. A RERANKER span gives two records, its input and its output
ranking, scored against the labels of the RETRIEVER span of the same OTLP trace.

Each record is checked with the record rules (`records.parse_record`) here, so that a bad span is
quarantined with its file, line and span id; spans of other kinds are counted as skipped, so
`read = converted + quarantined + skipped`. Pure: json and the standard library.
"""

from __future__ import annotations

import contextlib
import json
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from retrieval_pipeline import environment
from retrieval_pipeline.config import TraceFormatConfig
from retrieval_pipeline.ingest.otlp import OTLP_FIELD, BadSpan, SpanView, otlp_spans, read_lines

# the record rules' own id test and words, so that a span's reasons read like a record's
from retrieval_pipeline.records import RecordError, _is_id, parse_record
from retrieval_pipeline.records import _words as json_type_in_words

SPAN_KIND_ATTRIBUTE = "openinference.span.kind"
RETRIEVER_KIND, RERANKER_KIND = "RETRIEVER", "RERANKER"
GENAI_OPERATION_ATTRIBUTE = "gen_ai.operation.name"
GENAI_RETRIEVAL = "retrieval"

# The stage a record scores (its `stage` field): the first-stage ranking, and a reranker's input
# and output. The input's record is the reranker span's id with INPUT_SUFFIX as its trace_id.
STAGE_RETRIEVER, STAGE_RERANKER_INPUT, STAGE_RERANKER = "retriever", "reranker_input", "reranker"
INPUT_SUFFIX = ":input"

# How many traces' RETRIEVER fields are kept for the RERANKER spans that follow them. A reranker
# starts after its retriever ends, and exporters write spans as they end, so its retriever is a
# few batches back at most; the bound keeps a day's memory flat.
RECENT_TRACES = 10_000

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_END_NS = 253402300800 * 10**9  # 10000-01-01T00:00:00Z, past the record's range


class SpanError(ValueError):
    """A span that cannot become a record; the message is the reason, in words."""


@dataclass(frozen=True)
class SpanRow:
    """What one span (or an unreadable line) gives: a record's JSON text, or the reason it was
    quarantined, which names the span."""

    source_file: str
    source_line: int
    span_id: str | None
    record: str | None = None
    error: str | None = None
    stage: str | None = None  # the record's stage

    def message(self) -> str:
        """The quarantine line a person reads: file, line, span and reason."""
        return f"{self.source_file} line {self.source_line}: {self.error}"


@dataclass
class SpanCounts:
    """Spans read, and what became of them: `read = converted + quarantined + skipped`. An
    unreadable line counts as one read and one quarantined. `records` counts records made (a
    RERANKER span makes two); `unpaired_rerankers` those whose trace's RETRIEVER was not seen."""

    read: int = 0
    converted: int = 0
    quarantined: int = 0
    skipped: int = 0
    records: int = 0
    unpaired_rerankers: int = 0


def _words(value: object) -> str:
    """A JSON value's type in the record rules' words."""
    return "an empty string" if value == "" else json_type_in_words(value)


def _document_id(value: object, name: str) -> str | int:
    if _is_id(value):
        return value  # type: ignore[return-value]  # a str or an int, as _is_id says
    raise SpanError(f"{name} is {_words(value)}; ids must be non-empty strings or integers")


def _indexed_ids(attributes: Mapping[str, object], pattern: str) -> list[str | int] | None:
    """The ids of `pattern` (`retrieval.documents.{i}.document.id`) in order of i; None when
    the span has none. A missing position is an error: the ranks after it would be wrong."""
    prefix, suffix = pattern.split("{i}")
    found: dict[int, object] = {}
    for key, value in attributes.items():
        if key.startswith(prefix) and key.endswith(suffix):
            index = key[len(prefix) : len(key) - len(suffix)]
            if index.isdigit() and (index == "0" or index[0] != "0"):
                found.setdefault(int(index), value)
    if not found:
        return None
    missing = next((i for i in range(len(found)) if i not in found), None)
    if missing is not None:
        raise SpanError(
            f"{pattern.format(i=missing)} is missing, yet the span has ids up to position "
            f"{max(found)}: the ranks after it are unknown"
        )
    ids = [found[i] for i in range(len(found))]
    for i, value in enumerate(ids):
        if not _is_id(value):
            _document_id(value, pattern.format(i=i))  # raises, naming the attribute
    return ids  # type: ignore[return-value]  # checked above


def _json_value(value: object, name: str) -> object:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        raise SpanError(f"{name} is a string that is not valid JSON") from None
    except RecursionError:
        raise SpanError(f"{name} is JSON nested too deeply to read") from None


def _genai_ids(value: object, name: str) -> list[str | int]:
    """The ids of `gen_ai.retrieval.documents`: a list of {id, score} objects (or its JSON text,
    or a list of their JSON texts), in list order."""
    documents = _json_value(value, name)
    if not isinstance(documents, list):
        raise SpanError(f"{name} must be a list of {{id, score}} objects (got {_words(documents)})")
    ids: list[str | int] = []
    for position, item in enumerate(documents):
        document = _json_value(item, f"{name}[{position}]")
        if not isinstance(document, dict) or "id" not in document:
            raise SpanError(f"{name}[{position}] is not an object with an id")
        ids.append(_document_id(document["id"], f"{name}[{position}].id"))
    return ids


def _timestamp(start_ns: int | None) -> str:
    """The span's start as the record's ISO 8601 text, to the microsecond (truncated, so that a
    span stays on the day it started)."""
    if start_ns is None:
        raise SpanError("missing startTimeUnixNano")
    if not 0 < start_ns < _END_NS:
        raise SpanError(f"startTimeUnixNano {start_ns} is not a time (1970 to 9999)")
    served_at = _EPOCH + timedelta(microseconds=start_ns // 1000)
    return served_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class _Retriever:
    span_id: str
    fields: dict[str, object]  # query_id, segment, variant and labels: what its stages share


_SEVERAL = "several"  # a trace with more than one RETRIEVER span


class SpanConverter:
    """Turns spans into trace-record JSON texts under one `[trace_format]` mapping, remembering
    the recent traces' RETRIEVER fields for their RERANKER spans, and counting as it goes."""

    def __init__(
        self,
        trace_format: TraceFormatConfig | None = None,
        recent_traces: int = RECENT_TRACES,
        max_line_bytes: int | None = None,
    ) -> None:
        self.format = trace_format or TraceFormatConfig()
        # an export line longer than this is quarantined unread ($RETRIEVAL_PIPELINE_MAX_LINE_BYTES)
        self.max_line_bytes = (
            environment.max_line_bytes() if max_line_bytes is None else max_line_bytes
        )
        self.counts = SpanCounts()
        self._recent: OrderedDict[str, _Retriever | str] = OrderedDict()
        self._recent_max = max(int(recent_traces), 1)

    # --- files and lines ---------------------------------------------------------------------

    def convert_file(self, path: Path, name: str | None = None) -> Iterator[SpanRow]:
        """Every span of an OTLP/JSON export (`.gz` too), as rows; `name` is the file as the
        rows name it (default: the path)."""
        shown = name or str(path)
        for number, line, error in read_lines(path, max_line_bytes=self.max_line_bytes):
            if error is not None:
                yield self._unreadable(shown, number, error)
            else:
                yield from self.convert_line(line, shown, number)

    def convert_line(
        self, line: bytes | str, source_file: str, line_number: int
    ) -> Iterator[SpanRow]:
        """The spans of one `ExportTraceServiceRequest` JSON line."""
        try:
            request = json.loads(line)
        except ValueError:
            yield self._unreadable(source_file, line_number, "malformed JSON")
            return
        except RecursionError:
            yield self._unreadable(source_file, line_number, "JSON nested too deeply to read")
            return
        if not isinstance(request, dict) or not isinstance(request.get(OTLP_FIELD), list):
            got = (
                f"{OTLP_FIELD} is {_words(request.get(OTLP_FIELD))}"
                if isinstance(request, dict)
                else f"the line is {_words(request)}"
            )
            reason = f"not an OTLP export line: {got}, not a list of resource spans"
            yield self._unreadable(source_file, line_number, reason)
            return
        yield from self.convert_spans(otlp_spans(request[OTLP_FIELD]), source_file, line_number)

    def _unreadable(self, source_file: str, line_number: int, reason: str) -> SpanRow:
        self.counts.read += 1
        self.counts.quarantined += 1
        return SpanRow(source_file, line_number, None, error=reason)

    # --- spans -------------------------------------------------------------------------------

    def convert_spans(
        self, spans: Iterable[SpanView | BadSpan], source_file: str, line_number: int
    ) -> Iterator[SpanRow]:
        """Rows for spans read together (one line, one page): RETRIEVER spans first, so that a
        RERANKER span finds its trace's retriever when both were exported at once."""
        rerankers: list[SpanView] = []
        for span in spans:
            self.counts.read += 1
            if isinstance(span, BadSpan):
                yield self._quarantine(
                    source_file, line_number, span.span_id, span.where, span.reason
                )
                continue
            stage = self._stage(span)
            if stage is None:
                self.counts.skipped += 1
            elif stage == STAGE_RERANKER:
                rerankers.append(span)
            else:
                yield from self._rows(span, source_file, line_number, self._retriever_records)
        for span in rerankers:
            yield from self._rows(span, source_file, line_number, self._reranker_records)

    def remember(self, span: SpanView) -> None:
        """Keep a RETRIEVER span's shared fields for its trace's RERANKER spans without making
        its record (a Phoenix page of rerankers looks up its retrievers this way)."""
        if self._stage(span) == STAGE_RETRIEVER:
            with contextlib.suppress(SpanError):  # its own record is quarantined when read
                self._remember(span, self._retriever_fields(span))

    def knows_trace(self, trace_id: str) -> bool:
        """Whether a RETRIEVER span of this trace is remembered."""
        return trace_id in self._recent

    def _stage(self, span: SpanView) -> str | None:
        kind = span.attributes.get(SPAN_KIND_ATTRIBUTE)
        kind = kind.upper() if isinstance(kind, str) else kind
        if kind == RETRIEVER_KIND:
            return STAGE_RETRIEVER
        if kind == RERANKER_KIND:
            return STAGE_RERANKER
        if kind is None and span.attributes.get(GENAI_OPERATION_ATTRIBUTE) == GENAI_RETRIEVAL:
            return STAGE_RETRIEVER
        return None

    def _rows(
        self,
        span: SpanView,
        source_file: str,
        line_number: int,
        make: Callable[[SpanView], list[dict[str, object]]],
    ) -> Iterator[SpanRow]:
        try:
            if not span.span_id:
                raise SpanError("the span has no spanId")
            if span.problem is not None:
                raise SpanError(span.problem)
            records = make(span)
            texts = [(_checked(record), str(record["stage"])) for record in records]
        except SpanError as exc:
            yield self._quarantine(
                source_file, line_number, span.span_id or None, span.where, str(exc)
            )
            return
        self.counts.converted += 1
        self.counts.records += len(texts)
        for text, stage in texts:
            yield SpanRow(source_file, line_number, span.span_id, record=text, stage=stage)

    def _quarantine(
        self,
        source_file: str,
        line_number: int,
        span_id: str | None,
        where: str | None,
        reason: str,
    ) -> SpanRow:
        self.counts.quarantined += 1
        named = f"span {span_id}" if span_id else f"span {where or '?'} (no spanId)"
        return SpanRow(source_file, line_number, span_id, error=f"{named}: {reason}")

    def _retriever_records(self, span: SpanView) -> list[dict[str, object]]:
        fields = self._retriever_fields(span)
        self._remember(span, fields)  # before the checks below: its reranker shares its fields
        fmt = self.format
        ids = _indexed_ids(span.attributes, fmt.document_id_attribute)
        if ids is None:
            documents = span.attributes.get(fmt.genai_documents_attribute)
            if documents is None:
                raise SpanError(
                    f"no document ids: neither {fmt.document_id_attribute} nor "
                    f"{fmt.genai_documents_attribute} is set"
                )
            ids = _genai_ids(documents, fmt.genai_documents_attribute)
        timestamp = _timestamp(span.start_ns)
        return [_record(span, span.span_id, timestamp, ids, fields, STAGE_RETRIEVER)]

    def _reranker_records(self, span: SpanView) -> list[dict[str, object]]:
        fmt = self.format
        ids_in = _indexed_ids(span.attributes, fmt.reranker_input_id_attribute)
        ids_out = _indexed_ids(span.attributes, fmt.reranker_output_id_attribute)
        for ids, pattern in (
            (ids_in, fmt.reranker_input_id_attribute),
            (ids_out, fmt.reranker_output_id_attribute),
        ):
            if ids is None:
                raise SpanError(f"no document ids: {pattern} is not set")
        assert ids_in is not None and ids_out is not None
        timestamp = _timestamp(span.start_ns)
        fields = self._reranker_fields(span)
        return [
            _record(
                span, span.span_id + INPUT_SUFFIX, timestamp, ids_in, fields, STAGE_RERANKER_INPUT
            ),
            _record(span, span.span_id, timestamp, ids_out, fields, STAGE_RERANKER),
        ]

    def _reranker_fields(self, span: SpanView) -> dict[str, object]:
        """The retriever's fields when its trace holds one RETRIEVER span seen so far; else
        the reranker's own metadata (OpenInference's `using_metadata` sets it on every span)."""
        entry = self._recent.get(span.trace_id) if span.trace_id else None
        if isinstance(entry, _Retriever):
            self._recent.move_to_end(span.trace_id)
            return entry.fields
        queries = (self.format.reranker_query_attribute, self.format.query_attribute)
        try:
            fields = self._shared_fields(span, queries)
        except SpanError as exc:
            if entry == _SEVERAL:
                raise SpanError(
                    f"its trace {span.trace_id} holds several RETRIEVER spans, so which one it "
                    f"reranks is unknown, and {exc}"
                ) from None
            raise
        self.counts.unpaired_rerankers += 1
        return fields

    def _retriever_fields(self, span: SpanView) -> dict[str, object]:
        queries = (self.format.query_attribute, self.format.genai_query_attribute)
        return self._shared_fields(span, queries)

    def _remember(self, span: SpanView, fields: dict[str, object]) -> None:
        if not span.trace_id:
            return  # no trace to share
        entry = self._recent.get(span.trace_id)
        if entry is None or (isinstance(entry, _Retriever) and entry.span_id == span.span_id):
            self._recent[span.trace_id] = _Retriever(span.span_id, fields)
        else:
            self._recent[span.trace_id] = _SEVERAL
        self._recent.move_to_end(span.trace_id)
        while len(self._recent) > self._recent_max:
            self._recent.popitem(last=False)

    def _shared_fields(self, span: SpanView, queries: tuple[str, ...]) -> dict[str, object]:
        """query_id, segment, variant and the labels, from the metadata keys of the mapping; the
        query_id falls back on the first of `queries` the span has (the query text)."""
        fmt = self.format
        metadata = _json_value(span.attributes.get(fmt.metadata_attribute), fmt.metadata_attribute)
        if metadata is None:
            metadata = {}
        if not isinstance(metadata, dict):
            raise SpanError(
                f"{fmt.metadata_attribute} must be a JSON object (got {_words(metadata)})"
            )
        fields = {
            field: metadata[key] for field, key in fmt.metadata_keys().items() if key in metadata
        }
        if fields.get("query_id") is None:
            query = next(
                (span.attributes[q] for q in queries if span.attributes.get(q) is not None), None
            )
            if query is None:
                raise SpanError(
                    f"no query id: {fmt.metadata_attribute} has no {fmt.query_id_key} and the "
                    f"span has no {' or '.join(queries)}"
                )
            fields["query_id"] = query
        return fields


def _record(
    span: SpanView,
    trace_id: str,
    timestamp: str,
    ids: list[str | int],
    fields: Mapping[str, object],
    stage: str,
) -> dict[str, object]:
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


def _checked(record: dict[str, object]) -> str:
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
