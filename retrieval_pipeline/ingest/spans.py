"""Retrieval spans as trace records: OTLP/JSON exports of OpenInference and GenAI spans.

RAG applications log retrieval as spans, not as this project's records. The OpenTelemetry
Collector's file exporter writes one `ExportTraceServiceRequest` per line; each retrieval span in
it becomes one trace record (`docs/spans.md`): `trace_id` is the span's `spanId` as written,
`timestamp` its start, `retrieved_ids` the document ids by position (never re-sorted by score),
and the query id, segment, variant and labels come from the span's `metadata` JSON, through the
mapping of `[trace_format]`. A RERANKER span gives two records, its input and its output
ranking, scored against the labels of the RETRIEVER span of the same OTLP trace.

A retrieval span without documents is an empty result (OpenInference writes nothing for an
empty list), unless it is nested: LlamaIndex writes a documentless RETRIEVER span inside (or
around) the one with the documents, and that one alone is the retrieval. Such spans are held per
trace until their relative arrives (it may come lines later) or the converter is flushed.

What one span says (its stage, ids and fields, and its records checked with the record rules)
is read in `ingest.span_records`; this converter holds what the spans of a trace share, and
quarantines a bad span with its file, line and span id, as it does a retrieval span whose span
id was read before in its trace (the recent `RECENT_SPANS` kept) and one whose document
positions are not ASCII digits; spans of other kinds, and nested ones, are counted as skipped,
so `read = converted + quarantined + skipped` once the converter is flushed. Pure: json and the
standard library.
"""

from __future__ import annotations

import contextlib
import json
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from retrieval_pipeline import environment
from retrieval_pipeline.ingest.otlp import OTLP_FIELD, BadSpan, SpanView, otlp_spans, read_lines
from retrieval_pipeline.ingest.span_documents import SpanError, words
from retrieval_pipeline.ingest.span_records import (  # the span kinds re-exported here
    GENAI_OPERATION_ATTRIBUTE,
    GENAI_RETRIEVAL,
    RERANKER_KIND,
    RETRIEVER_KIND,
    SPAN_KIND_ATTRIBUTE,
    Fields,
    checked_text,
    has_documents,
    position_problem,
    reranker_ids,
    reranker_own_fields,
    retriever_fields,
    retriever_ids,
    span_record,
    span_stage,
    span_timestamp,
)
from retrieval_pipeline.ingest.topics import Topics, load_topics
from retrieval_pipeline.records import (  # the stage names are the records' (re-exported here)
    INPUT_SUFFIX,
    STAGE_RERANKER,
    STAGE_RERANKER_INPUT,
    STAGE_RETRIEVER,
)

if TYPE_CHECKING:  # the configuration's models (pydantic) load only where spans are read
    from retrieval_pipeline.config import TraceFormatConfig

__all__ = [
    "GENAI_OPERATION_ATTRIBUTE",
    "GENAI_RETRIEVAL",
    "INPUT_SUFFIX",
    "RECENT_SPANS",
    "RECENT_TRACES",
    "RERANKER_KIND",
    "RETRIEVER_KIND",
    "SPAN_KIND_ATTRIBUTE",
    "STAGE_RERANKER",
    "STAGE_RERANKER_INPUT",
    "STAGE_RETRIEVER",
    "SpanConverter",
    "SpanCounts",
    "SpanRow",
    "default_trace_format",
]


# How many traces' RETRIEVER fields are kept for the RERANKER spans that follow them. A reranker
# starts after its retriever ends, and exporters write spans as they end, so its retriever is a
# few batches back at most; the bound keeps a day's memory flat.
RECENT_TRACES = 10_000
# How many retrieval spans' (trace id, span id) are kept to find a span id repeated in its
# trace: a span exported twice lies a batch or a few apart. A repeat further back is still
# found downstream (its record's trace_id is the span id), as a repeated trace id.
RECENT_SPANS = 100_000


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
    span_number: int = 0  # the span's records share it (1, 2, ... in the order made)

    def message(self) -> str:
        """The quarantine line a person reads: file, line, span and reason."""
        return f"{self.source_file} line {self.source_line}: {self.error}"


@dataclass
class SpanCounts:
    """Spans read, and what became of them: `read = converted + quarantined + skipped` (once
    flushed). An unreadable line counts as one read and one quarantined. `records` counts
    records made (a RERANKER span makes two); `unpaired_rerankers` those whose trace's RETRIEVER
    was not seen; `empty` the converted spans with an empty ranking (a reranker: either one);
    `nested` the documentless RETRIEVER spans inside or around one with documents (skipped);
    `unknown_query_texts` the converted spans whose query id is a query text that the topics
    file does not hold (0 without topics)."""

    read: int = 0
    converted: int = 0
    quarantined: int = 0
    skipped: int = 0
    records: int = 0
    unpaired_rerankers: int = 0
    empty: int = 0
    nested: int = 0
    unknown_query_texts: int = 0


@dataclass(frozen=True)
class _Retriever:
    span_id: str
    fields: Fields


@dataclass(frozen=True)
class _Held:
    """A documentless retrieval span waiting to be told nested or empty, and where it was read."""

    span: SpanView
    source_file: str
    line_number: int


def default_trace_format() -> TraceFormatConfig:
    """The `[trace_format]` section's defaults (OpenInference names), imported where spans are
    read: the configuration's models cost a command that reads no span (`evaluate` of JSON
    lines) a good share of its start-up."""
    from retrieval_pipeline.config import TraceFormatConfig

    return TraceFormatConfig()


_SEVERAL = "several"  # a trace with more than one RETRIEVER span


class SpanConverter:
    """Turns spans into trace-record JSON texts under one `[trace_format]` mapping, remembering
    the recent traces' RETRIEVER fields for their RERANKER spans, and counting as it goes."""

    def __init__(
        self,
        trace_format: TraceFormatConfig | None = None,
        recent_traces: int = RECENT_TRACES,
        max_line_bytes: int | None = None,
        topics: Topics | None = None,
        recent_spans: int = RECENT_SPANS,
    ) -> None:
        self.format = trace_format or default_trace_format()
        # query texts to ids: given (loaded once for many converters), else the format's file
        if topics is None and self.format.topics_file is not None:
            topics = load_topics(self.format.topics_file)
        self.topics = topics
        # an export line longer than this is quarantined unread ($RETRIEVAL_PIPELINE_MAX_LINE_BYTES)
        self.max_line_bytes = (
            environment.max_line_bytes() if max_line_bytes is None else max_line_bytes
        )
        self.counts = SpanCounts()
        self._recent: OrderedDict[str, _Retriever | str] = OrderedDict()
        self._recent_max = max(int(recent_traces), 1)
        # per trace: documentless retrieval spans held, and the span -> parent ids of those with
        # documents (a held span whose parent or child is one of these is nested)
        self._held: OrderedDict[str, list[_Held]] = OrderedDict()
        self._documented: OrderedDict[str, dict[str, str]] = OrderedDict()
        # (trace id, span id) -> the line the retrieval span was first read on, the newest kept
        self._seen: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._seen_max = max(int(recent_spans), 1)
        self._made = 0  # spans that made records

    # --- files and lines ---------------------------------------------------------------------

    def convert_file(self, path: Path, name: str | None = None) -> Iterator[SpanRow]:
        """Every span of an OTLP/JSON export (`.gz` too), as rows, the converter flushed at its
        end; `name` is the file as the rows name it (default: the path)."""
        shown = name or str(path)
        for number, line, error in read_lines(path, max_line_bytes=self.max_line_bytes):
            if error is not None:
                yield self._unreadable(shown, number, error)
            else:
                yield from self.convert_line(line, shown, number)
        yield from self.flush()

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
                f"{OTLP_FIELD} is {words(request.get(OTLP_FIELD))}"
                if isinstance(request, dict)
                else f"the line is {words(request)}"
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
            stage = span_stage(span)
            problem = None if stage is None else self._problem(span, line_number)
            if stage is None:
                self.counts.skipped += 1
            elif problem is not None:
                yield self._quarantine(source_file, line_number, span.span_id, span.where, problem)
            elif stage == STAGE_RERANKER:
                rerankers.append(span)
            else:
                yield from self._retriever(span, source_file, line_number)
        for span in rerankers:
            yield from self._rows(span, source_file, line_number, self._reranker_records)

    def flush(self) -> Iterator[SpanRow]:
        """Rows for the documentless retrieval spans still held: no relative with documents
        came, so each is an empty result. Called at the end of a file, or of a Phoenix day."""
        while self._held:
            _, held = self._held.popitem(last=False)
            yield from self._release(held)

    def _release(self, held: list[_Held]) -> Iterator[SpanRow]:
        for item in held:
            yield from self._rows(
                item.span, item.source_file, item.line_number, self._retriever_records
            )

    def _retriever(self, span: SpanView, source_file: str, line_number: int) -> Iterator[SpanRow]:
        """A retrieval span's rows: now, or (documentless, in a trace) once it is known whether
        a relative with documents makes it nested."""
        trace = span.trace_id
        if not (trace and span.span_id and span.problem is None):
            yield from self._rows(span, source_file, line_number, self._retriever_records)
        elif not has_documents(span, self.format):
            documented = self._documented.get(trace, {})
            if any(_related(span.span_id, span.parent_id, *d) for d in documented.items()):
                self._nested()
                return
            self._held.setdefault(trace, []).append(_Held(span, source_file, line_number))
            self._held.move_to_end(trace)
            while len(self._held) > self._recent_max:
                yield from self._release(self._held.popitem(last=False)[1])
        else:
            self._note_documented(span)
            yield from self._rows(span, source_file, line_number, self._retriever_records)

    def _note_documented(self, span: SpanView) -> None:
        """Keep a retrieval span with documents, and skip the held spans it makes nested."""
        trace = span.trace_id
        self._documented.setdefault(trace, {})[span.span_id] = span.parent_id
        self._documented.move_to_end(trace)
        while len(self._documented) > self._recent_max:
            self._documented.popitem(last=False)
        held = self._held.get(trace)
        if not held:
            return
        kept = [h for h in held if not _related(h.span.span_id, h.span.parent_id, *_pair(span))]
        for _ in range(len(held) - len(kept)):
            self._nested()
        if kept:
            self._held[trace] = kept
        else:
            del self._held[trace]

    def _nested(self) -> None:
        self.counts.nested += 1
        self.counts.skipped += 1

    def _problem(self, span: SpanView, line_number: int) -> str | None:
        """Why a retrieval span is quarantined before its records are made: its span id read
        before in its trace, or a document position that is not one."""
        return self._repeated(span, line_number) or position_problem(span, self.format)

    def _repeated(self, span: SpanView, line_number: int) -> str | None:
        """Why the span is a repeat (its span id read before in its trace), or None; the span
        is noted as read either way."""
        if not span.span_id:
            return None  # quarantined for that
        key = (span.trace_id, span.span_id)
        first = self._seen.get(key)
        if first is not None:
            trace = f"trace {span.trace_id}" if span.trace_id else "no trace"
            return f"duplicate span id {span.span_id} in {trace}: first seen at line {first}"
        self._seen[key] = line_number
        if len(self._seen) > self._seen_max:
            self._seen.popitem(last=False)
        return None

    def remember(self, span: SpanView) -> None:
        """Keep a RETRIEVER span with documents (its shared fields for its trace's RERANKER
        spans, and its ids for nesting) without making its record (a Phoenix page of rerankers
        looks up its retrievers this way). A documentless one is not kept: it may be nested."""
        if position_problem(span, self.format) is not None:
            return  # its own record is quarantined when read
        if span_stage(span) == STAGE_RETRIEVER and has_documents(span, self.format):
            if span.trace_id and span.span_id:
                self._note_documented(span)
            with contextlib.suppress(SpanError):  # its own record is quarantined when read
                self._remember(span, retriever_fields(span, self.format, self.topics))

    def knows_trace(self, trace_id: str) -> bool:
        """Whether a RETRIEVER span of this trace is remembered."""
        return trace_id in self._recent

    def _rows(
        self,
        span: SpanView,
        source_file: str,
        line_number: int,
        make: Callable[[SpanView], tuple[list[dict[str, object]], bool]],
    ) -> Iterator[SpanRow]:
        try:
            if not span.span_id:
                raise SpanError("the span has no spanId")
            if span.problem is not None:
                raise SpanError(span.problem)
            records, unknown_text = make(span)
            texts = [(checked_text(record), str(record["stage"])) for record in records]
        except SpanError as exc:
            yield self._quarantine(
                source_file, line_number, span.span_id or None, span.where, str(exc)
            )
            return
        self.counts.converted += 1
        self.counts.records += len(texts)
        self.counts.empty += any(record["retrieved_ids"] == [] for record in records)
        self.counts.unknown_query_texts += unknown_text
        self._made += 1
        for text, stage in texts:
            yield SpanRow(
                source_file, line_number, span.span_id, text, stage=stage, span_number=self._made
            )

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

    def _retriever_records(self, span: SpanView) -> tuple[list[dict[str, object]], bool]:
        """A RETRIEVER span's record, its fields remembered for its trace's RERANKER spans."""
        fields = retriever_fields(span, self.format, self.topics)
        self._remember(span, fields)  # before the checks below: its reranker shares its fields
        ids = retriever_ids(span, self.format)
        timestamp = span_timestamp(span.start_ns)
        record = span_record(span, span.span_id, timestamp, ids, fields.values, STAGE_RETRIEVER)
        return [record], fields.unknown_text

    def _reranker_records(self, span: SpanView) -> tuple[list[dict[str, object]], bool]:
        """A RERANKER span's two records, its input ranking and its output, sharing the fields
        of its trace's RETRIEVER (read in this order, so that a span's first problem is told)."""
        ids_in, ids_out = reranker_ids(span, self.format)
        timestamp = span_timestamp(span.start_ns)
        fields = self._reranker_fields(span)
        values = fields.values
        input_id = span.span_id + INPUT_SUFFIX
        given = span_record(span, input_id, timestamp, ids_in, values, STAGE_RERANKER_INPUT)
        reranked = span_record(span, span.span_id, timestamp, ids_out, values, STAGE_RERANKER)
        return [given, reranked], fields.unknown_text

    def _reranker_fields(self, span: SpanView) -> Fields:
        """The retriever's fields when its trace holds one RETRIEVER span seen so far (or one
        documentless span held); else the reranker's own metadata (OpenInference's
        `using_metadata` sets it on every span)."""
        entry = self._recent.get(span.trace_id) if span.trace_id else None
        if isinstance(entry, _Retriever):
            self._recent.move_to_end(span.trace_id)
            return entry.fields
        held = self._held.get(span.trace_id, []) if entry is None and span.trace_id else []
        if len(held) == 1:
            with contextlib.suppress(SpanError):  # its own record says why, when released
                return retriever_fields(held[0].span, self.format, self.topics)
        try:
            fields = reranker_own_fields(span, self.format, self.topics)
        except SpanError as exc:
            if entry == _SEVERAL:
                raise SpanError(
                    f"its trace {span.trace_id} holds several RETRIEVER spans, so which one it "
                    f"reranks is unknown, and {exc}"
                ) from None
            raise
        self.counts.unpaired_rerankers += 1
        return fields

    def _remember(self, span: SpanView, fields: Fields) -> None:
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


def _pair(span: SpanView) -> tuple[str, str]:
    return span.span_id, span.parent_id


def _related(span_id: str, parent_id: str, other_id: str, other_parent: str) -> bool:
    """Whether two spans of a trace are parent and child, either way round."""
    return (bool(parent_id) and parent_id == other_id) or (
        bool(other_parent) and other_parent == span_id
    )
