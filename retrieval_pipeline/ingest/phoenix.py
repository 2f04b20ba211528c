"""A Phoenix server as a trace store: a day's retrieval spans, read through the Phoenix client.

Arize Phoenix collects OpenInference spans over OTLP and serves them back through its client's
span query (`Client.spans.get_spans_dataframe`), which returns at most `limit` spans (1,000 by
default), newest first, started in [start_time, end_time). A day is read in pages that walk that
window down: each full page keeps the spans that started after its oldest instant, and the next
page ends just after that instant, so that spans sharing a start time are never split or lost.
The spans go through the same mapping as an OTLP/JSON export (`spans.SpanConverter`).

Labels come from the span's metadata, as in a file. Phoenix's document annotations are not read:
the client writes them (`log_document_annotations`) but offers no way to read them back.

The client is imported only when a day is read (`phoenix.client`; with the Phoenix server
installed beside it, that import loads the whole server package).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retrieval_pipeline.config import TraceFormatConfig
from retrieval_pipeline.ingest.otlp import SpanView
from retrieval_pipeline.ingest.pieces import RawPiece
from retrieval_pipeline.ingest.span_documents import position_regex
from retrieval_pipeline.ingest.span_pieces import SpanReading, span_pieces
from retrieval_pipeline.ingest.spans import (
    RERANKER_KIND,
    RETRIEVER_KIND,
    SPAN_KIND_ATTRIBUTE,
    SpanConverter,
    SpanRow,
)
from retrieval_pipeline.store import TraceStoreError

if TYPE_CHECKING:
    import pandas as pd

# The client's default limit; a page of spans at a time is what a day's memory holds.
PAGE_SPANS = 1000
# Traces looked up at once for the RETRIEVER spans of a page's RERANKER spans.
TRACES_PER_LOOKUP = 100
TIMEOUT_S = 60

RETRIEVAL_SPANS = f"span_kind == '{RETRIEVER_KIND}' or span_kind == '{RERANKER_KIND}'"
_ATTRIBUTES = "attributes."
_HEX_ID = re.compile(r"[0-9a-f]{1,64}")
_TICK = timedelta(microseconds=1)  # Phoenix keeps start times to the microsecond


class PhoenixError(ValueError):
    """A Phoenix server that answered what this reader cannot use."""


@dataclass(frozen=True)
class PhoenixStore:
    """Where the spans are: the server's base URL and the project that holds them."""

    endpoint: str
    project: str
    api_key: str | None = None
    page_spans: int = PAGE_SPANS
    timeout_s: int = TIMEOUT_S

    @property
    def name(self) -> str:
        """How rows name their source (the `file` of a quarantined span)."""
        return f"{self.endpoint.rstrip('/')} project {self.project}"

    def client(self) -> Any:
        """A `phoenix.client.Client` for the endpoint."""
        from phoenix.client import Client

        return Client(base_url=self.endpoint, api_key=self.api_key)

    # --- the trace store's interface (`store.TraceStore`): a day is a query, not files -------

    def describe(self) -> str:
        return f"Phoenix project {self.project} at {self.endpoint}"

    def days(self) -> list[date]:
        """Unknown without reading every span: none are listed."""
        return []

    def trace_files(self, day: date) -> list[Path]:
        raise TraceStoreError(
            f"{self.describe()} serves spans, not files: read {day.isoformat()} as a PhoenixDay"
        )

    def corpus_file(self) -> Path | None:
        """Phoenix holds no corpus snapshot: no label is treated as stale."""
        return None

    def day_source(self, day: date) -> PhoenixDay:
        return PhoenixDay(self, day)


@dataclass(frozen=True)
class PhoenixDay:
    """One UTC day of a Phoenix project, as a trace source for ingestion."""

    store: PhoenixStore
    day: date


def phoenix_pieces(source: PhoenixDay, reading: SpanReading) -> Iterator[RawPiece]:
    """The day's spans as raw pieces (`ingest.span_pieces`); a server that cannot be reached or
    answers an error stops the ingestion with a `PhoenixError` naming it."""
    import httpx

    converter = reading.converter()
    rows = read_day(source.store, source.day, converter)
    try:
        yield from span_pieces(rows, converter, 0, reading)
    except httpx.HTTPError as exc:
        raise PhoenixError(f"{source.store.name}: {exc}") from exc


def day_window(day: date) -> tuple[datetime, datetime]:
    """The UTC day as [start, end)."""
    start = datetime.combine(day, time(0), tzinfo=UTC)
    return start, start + timedelta(days=1)


def read_day(
    store: PhoenixStore, day: date, converter: SpanConverter, client: Any = None
) -> Iterator[SpanRow]:
    """Rows for every RETRIEVER and RERANKER span that started on `day` (UTC), newest first;
    the `line` of a row is the number of its page. `converter.counts` counts them."""
    client = client if client is not None else store.client()
    start, end = day_window(day)
    for number, page in enumerate(_pages(client, store, start, end), start=1):
        views = [span_view(row, converter.format) for row in _records(page)]
        _find_retrievers(client, store, converter, views)
        yield from converter.convert_spans(views, store.name, number)
    yield from converter.flush()  # documentless retrievers with no relative: empty results


def _query(client: Any, store: PhoenixStore, condition: str, **window: Any) -> pd.DataFrame:
    from phoenix.client.types.spans import SpanQuery

    frame = client.spans.get_spans_dataframe(
        query=SpanQuery().where(condition),
        project_identifier=store.project,
        timeout=store.timeout_s,
        **window,
    )
    return frame


def _pages(
    client: Any, store: PhoenixStore, start: datetime, end: datetime
) -> Iterator[pd.DataFrame]:
    """The retrieval spans of [start, end) in pages of at most `store.page_spans` (more when
    that many share one start time), each span once."""
    upper, limit = end, max(int(store.page_spans), 1)
    while True:
        page = _query(client, store, RETRIEVAL_SPANS, start_time=start, end_time=upper, limit=limit)
        if page.empty:
            return
        starts = _start_times(page, start, upper)
        if len(page) < limit:
            yield page
            return
        oldest = starts.iloc[-1]
        newer = page[starts > oldest]
        if newer.empty:  # a whole page started at one instant: ask for more at once
            limit *= 2
            continue
        yield newer
        upper, limit = oldest.to_pydatetime() + _TICK, max(int(store.page_spans), 1)


def _start_times(page: pd.DataFrame, start: datetime, upper: datetime) -> pd.Series:
    """The page's start times, checked to be what paging relies on: inside the window asked
    for, and newest first."""
    starts = page["start_time"]
    if starts.isna().any():
        raise PhoenixError("the Phoenix span query returned a span without a start time")
    if not starts.is_monotonic_decreasing:
        raise PhoenixError(
            "the Phoenix span query no longer returns spans newest first, which paging needs"
        )
    if starts.iloc[-1] < start or starts.iloc[0] >= upper:
        raise PhoenixError(
            f"the Phoenix span query returned spans outside [{start.isoformat()}, "
            f"{upper.isoformat()})"
        )
    return starts


def _records(page: pd.DataFrame) -> list[dict[str, Any]]:
    return page.to_dict("records")


def _find_retrievers(
    client: Any, store: PhoenixStore, converter: SpanConverter, views: list[SpanView]
) -> None:
    """Show the converter the RETRIEVER spans of the traces of this page's RERANKER spans that
    it has not seen: newest first, a reranker comes before its retriever, which may even have
    started the day before."""
    wanted = sorted(
        {
            view.trace_id
            for view in views
            if view.attributes.get(SPAN_KIND_ATTRIBUTE) == RERANKER_KIND
            and _HEX_ID.fullmatch(view.trace_id)
            and not converter.knows_trace(view.trace_id)
        }
    )
    for at in range(0, len(wanted), TRACES_PER_LOOKUP):
        chunk = wanted[at : at + TRACES_PER_LOOKUP]
        quoted = ", ".join(f"'{trace_id}'" for trace_id in chunk)
        condition = f"span_kind == '{RETRIEVER_KIND}' and context.trace_id in [{quoted}]"
        # a trace may hold several retrievers: ask for more than one each
        found = _query(client, store, condition, limit=4 * len(chunk) + 1)
        for row in _records(found):
            converter.remember(span_view(row, converter.format))


def span_view(row: Mapping[str, Any], trace_format: TraceFormatConfig) -> SpanView:
    """One row of the client's span frame as a span with flat attribute names: Phoenix nests
    attributes (`retrieval.documents` becomes a list of `{"document.id": ...}`), and joining the
    keys back with dots gives the names the span was sent with. The metadata and the GenAI
    documents are single attributes holding an object or a list, and stay whole, as does each
    document's metadata."""
    whole = {trace_format.metadata_attribute, trace_format.genai_documents_attribute}
    indexed = (
        trace_format.document_metadata_attribute,
        trace_format.reranker_input_metadata_attribute,
        trace_format.reranker_output_metadata_attribute,
    )
    whole_pattern = re.compile("|".join(position_regex(pattern) for pattern in indexed))
    attributes: dict[str, object] = {}
    for column, value in row.items():
        if column.startswith(_ATTRIBUTES):
            _flatten(column[len(_ATTRIBUTES) :], value, attributes, whole, whole_pattern)
    started = row.get("start_time")
    start_ns = None if started is None or _absent(started) else int(started.value)
    return SpanView(
        span_id=str(row.get("context.span_id") or ""),
        trace_id=str(row.get("context.trace_id") or ""),
        start_ns=start_ns,
        attributes=attributes,
        parent_id=str(row.get("parent_id") or ""),
    )


def _absent(value: object) -> bool:
    if value is None:
        return True
    if isinstance(value, float):
        return math.isnan(value)
    return type(value).__name__ == "NaTType"


def _flatten(
    key: str, value: object, out: dict[str, object], whole: set[str], pattern: re.Pattern[str]
) -> None:
    if _absent(value):
        return
    items = _items(value)
    if key in whole or pattern.fullmatch(key):
        out[key] = value
    elif isinstance(value, Mapping):
        for name, item in value.items():
            _flatten(f"{key}.{name}", item, out, whole, pattern)
    elif items is not None and any(isinstance(item, Mapping) for item in items):
        for position, item in enumerate(items):
            _flatten(f"{key}.{position}", item, out, whole, pattern)
    elif items is not None:
        out[key] = [_plain(item) for item in items]
    else:
        out[key] = _plain(value)


def _items(value: object) -> list[object] | None:
    """A list, tuple or numpy array as a list; None for anything else."""
    if isinstance(value, list | tuple):
        return list(value)
    tolist = getattr(value, "tolist", None)
    if type(value).__name__ == "ndarray" and callable(tolist):
        return list(value)  # type: ignore[call-overload]
    return None


def _plain(value: object) -> object:
    """A numpy scalar as the Python value it holds."""
    item = getattr(value, "item", None)
    return item() if callable(item) and type(value).__module__ == "numpy" else value
