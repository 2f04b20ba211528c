"""A Phoenix server as a trace store: a day's retrieval spans, read through the Phoenix client.

Arize Phoenix collects OpenInference spans over OTLP and serves them back through its client's
span query (`Client.spans.get_spans_dataframe`), which returns at most `limit` spans (1,000 by
default), newest first, started in [start_time, end_time). A day is read in pages that walk that
window down: each full page keeps the spans that started after its oldest instant, and the next
page ends just after that instant, so that spans sharing a start time are never split or lost;
more spans at one instant than a page holds are read by ranges of span ids. An answer that is
not a page of spans (an HTML page with status 200, say) is an error naming the endpoint, never
taken for the end of the day.
The spans go through the same mapping as an OTLP/JSON export (`spans.SpanConverter`).

Labels come from the span's metadata, as in a file; with `labels` (the `[phoenix]` config, as
the nightly's store has it) a span without labels of its own is labelled by its document
annotations, read a page at a time (`ingest.phoenix_day_labels`), and `PhoenixDay.tally` counts
what they gave.

The client is imported only when a day is read (`phoenix.client`; with the Phoenix server
installed beside it, that import loads the whole server package).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retrieval_pipeline.ingest.otlp import SpanView
from retrieval_pipeline.ingest.phoenix_labels import LabelTally
from retrieval_pipeline.ingest.pieces import RawPiece
from retrieval_pipeline.ingest.span_documents import position_regex
from retrieval_pipeline.ingest.span_pieces import SpanReading, span_pieces
from retrieval_pipeline.ingest.span_records import (
    RERANKER_KIND,
    RETRIEVER_KIND,
    SPAN_KIND_ATTRIBUTE,
)
from retrieval_pipeline.ingest.spans import SpanConverter, SpanRow
from retrieval_pipeline.store import TraceStoreError

if TYPE_CHECKING:
    import pandas as pd

    from retrieval_pipeline.config import PhoenixConfig, TraceFormatConfig

# The client's default limit; a page of spans at a time is what a day's memory holds.
PAGE_SPANS = 1000
# Traces looked up at once for the RETRIEVER spans of a page's RERANKER spans.
TRACES_PER_LOOKUP = 100
TIMEOUT_S = 60

RETRIEVAL_SPANS = f"span_kind == '{RETRIEVER_KIND}' or span_kind == '{RERANKER_KIND}'"
SPANS_PATH = "/v1/spans"  # where the client sends a span query
_JSON_PART = re.compile(r"content-type:\s*application/json", re.IGNORECASE)
# A range of span ids is halved at most this often while reading one instant (`_instant`).
MAX_HALVINGS = 64
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
    # document annotations read as labels (None: not read, only the spans' own labels count)
    labels: PhoenixConfig | None = field(default=None, compare=False)

    @property
    def name(self) -> str:
        """How rows name their source (the `file` of a quarantined span)."""
        return f"{self.endpoint.rstrip('/')} project {self.project}"

    def client(self) -> Any:
        """A `phoenix.client.Client` for the endpoint, whose span queries fail unless answered
        with a page of spans (`_check_answer`): the client itself takes any other answer with
        status 200 (an HTML page, a proxy's) for an empty page, which would end a day early."""
        import httpx
        from phoenix.client import Client
        from phoenix.client.utils.config import get_env_client_headers

        headers = dict(get_env_client_headers())  # as the client gathers them itself
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        http = httpx.Client(
            base_url=self.endpoint,
            headers=headers,
            timeout=self.timeout_s,
            event_hooks={"response": [lambda response: _check_answer(self, response)]},
        )
        return Client(http_client=http)

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
    tally: LabelTally = field(default_factory=LabelTally, compare=False)  # what labels gave


def phoenix_pieces(source: PhoenixDay, reading: SpanReading) -> Iterator[RawPiece]:
    """The day's spans as raw pieces (`ingest.span_pieces`); a server that cannot be reached or
    answers an error stops the ingestion with a `PhoenixError` naming it."""
    import httpx

    converter = reading.converter()
    rows = read_day(source.store, source.day, converter, tally=source.tally)
    try:
        yield from span_pieces(rows, converter, 0, reading)
    except httpx.HTTPError as exc:
        raise PhoenixError(f"{source.store.name}: {exc}") from exc


def day_window(day: date) -> tuple[datetime, datetime]:
    """The UTC day as [start, end)."""
    start = datetime.combine(day, time(0), tzinfo=UTC)
    return start, start + timedelta(days=1)


def read_day(
    store: PhoenixStore,
    day: date,
    converter: SpanConverter,
    client: Any = None,
    tally: LabelTally | None = None,
) -> Iterator[SpanRow]:
    """Rows for every RETRIEVER and RERANKER span that started on `day` (UTC), newest first;
    the `line` of a row is the number of its page. `converter.counts` counts them; `tally`
    what the document annotations gave, when the store reads them (`store.labels`)."""
    client = client if client is not None else store.client()
    label = _labeller(store, converter.format, tally)
    # the RETRIEVER spans looked up for a page's rerankers are labelled the same way, and counted
    # where they are read as the day's spans (their own page; one of the day before, on its day):
    # counted here too, a reranker's retriever would count its labels and HUMAN/LLM pairs twice
    label_looked_up = _labeller(store, converter.format, LabelTally())
    start, end = day_window(day)
    for number, page in enumerate(_pages(client, store, start, end), start=1):
        views = label([span_view(row, converter.format) for row in _records(page)])
        _find_retrievers(client, store, converter, views, label_looked_up)
        yield from converter.convert_spans(views, store.name, number)
    yield from converter.flush()  # documentless retrievers with no relative: empty results


def _labeller(
    store: PhoenixStore, trace_format: TraceFormatConfig, tally: LabelTally | None
) -> Callable[[list[SpanView]], list[SpanView]]:
    """What labels a page's spans: their document annotations, or nothing (`store.labels`)."""
    if store.labels is None:
        return lambda views: views
    from retrieval_pipeline.ingest.phoenix_day_labels import DayLabeller  # it imports this

    labeller = DayLabeller(store, store.labels, trace_format, tally or LabelTally())
    return labeller.label


def _check_answer(store: PhoenixStore, response: Any) -> None:
    """Raise PhoenixError, naming the endpoint, unless an answer to a span query is a page of
    spans: status 2xx, `multipart/mixed` with a boundary, and a JSON part (Phoenix answers an
    empty page so too)."""
    request = response.request
    if request.method != "POST" or not request.url.path.endswith(SPANS_PATH):
        return
    kind = response.headers.get("content-type", "")
    answered = f"answered {response.status_code} {response.reason_phrase}".rstrip()
    if response.is_success and "multipart/mixed" in kind and "boundary=" in kind:
        response.read()  # a page is small; the client reads it again from memory
        if _JSON_PART.search(response.text):
            return
        answered += " with no JSON part"
    else:
        answered += " as " + (kind or "no content type")
    raise PhoenixError(
        f"{store.name}: the span query {request.url} {answered}, not a page of spans; is "
        f"{store.endpoint} a Phoenix server?"
    )


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
    """The retrieval spans of [start, end) in pages of at most `store.page_spans`, each span
    once: a full page gives the spans newer than its oldest instant, and the next page ends
    just after that instant; a full page that all started at one instant gives way to reading
    that instant alone (`_instant`), and the next page ends at it."""
    upper, limit = end, max(int(store.page_spans), 2)
    while True:
        page = _query(client, store, RETRIEVAL_SPANS, start_time=start, end_time=upper, limit=limit)
        if page.empty:
            return
        starts = _start_times(page, start, upper)
        if len(page) < limit:
            yield page
            return
        oldest = starts.iloc[-1].to_pydatetime()
        newer = page[starts > starts.iloc[-1]]
        if newer.empty:  # a whole page started at one instant
            yield from _instant(client, store, oldest, limit)
            upper = oldest
        else:
            yield newer
            upper = oldest + _TICK


def _instant(client: Any, store: PhoenixStore, at: datetime, limit: int) -> Iterator[pd.DataFrame]:
    """The retrieval spans that started at the instant `at`, more than a page of them: read by
    ranges of span ids, a range whose page is full cut in two at the page's middle id. Either
    half leaves out at least one span of that page, so each holds fewer spans than the range it
    was cut from, and the walk ends; no page asks for more than `limit`."""
    ranges: list[tuple[str, str, int]] = [("", "", 0)]  # low (inclusive), high, halvings
    while ranges:
        low, high, halvings = ranges.pop()
        condition = f"({RETRIEVAL_SPANS}){_id_range(low, high)}"
        page = _query(client, store, condition, start_time=at, end_time=at + _TICK, limit=limit)
        if page.empty:
            continue
        _start_times(page, at, at + _TICK)
        if len(page) < limit:
            yield page
            continue
        ids = sorted(str(span_id) for span_id in page["context.span_id"])
        middle = ids[len(ids) // 2]
        if ids[0] == middle or not _HEX_ID.fullmatch(middle) or halvings >= MAX_HALVINGS:
            raise PhoenixError(
                f"{store.name}: more than {limit} spans started at {at.isoformat()} and their "
                f"span ids ({middle!r} among them) cannot be told apart into pages"
            )
        ranges += [(low, middle, halvings + 1), (middle, high, halvings + 1)]


def _id_range(low: str, high: str) -> str:
    """The span query's condition for span ids in [low, high) (hex ids; "" is no bound)."""
    bounds = [f"context.span_id >= '{low}'"] if low else []
    bounds += [f"context.span_id < '{high}'"] if high else []
    return "".join(f" and {bound}" for bound in bounds)


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
    client: Any,
    store: PhoenixStore,
    converter: SpanConverter,
    views: list[SpanView],
    label: Callable[[list[SpanView]], list[SpanView]],
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
        for view in label([span_view(row, converter.format) for row in _records(found)]):
            converter.remember(view)


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
