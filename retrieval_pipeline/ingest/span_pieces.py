"""Span exports (files found by content, or a Phoenix day) as raw pieces for ingestion.

A span export holds many spans on one line, where the rest of ingestion counts on a record's
file order and line naming it alone (repeated trace ids are found and reported by them). So the
records of an export keep the export's own file order (its place in the day, as any file's, so a
shard of a day orders them as the whole day does) and are numbered in the order written across
the export, each named by its line: `<file> line <n>:<record>`; a quarantined span's reason names
its span id.
Only the records of one stage are kept (`SpanReading.stage`); spans of other kinds, nested
retrieval spans and the records of other stages are counted as skipped. The converter is
flushed at the end of the rows, so that every span read is counted.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from retrieval_pipeline.ingest.pieces import RAW_SCHEMA, RawPiece
from retrieval_pipeline.ingest.topics import Topics, load_topics
from retrieval_pipeline.records import STAGE_RETRIEVER

if TYPE_CHECKING:  # the span converter and the configuration load where spans are read
    from retrieval_pipeline.config import TraceFormatConfig
    from retrieval_pipeline.ingest.spans import SpanConverter, SpanRow

# Records per piece: a piece of spans is small beside a JSON-lines piece, as each record was
# built in Python already.
ROWS_PER_PIECE = 20_000


@dataclass(frozen=True)
class SpanReading:
    """How spans become records: the `[trace_format]` mapping (its `topics_file` included), and
    which stage is kept (`retriever`, `reranker_input` or `reranker`). Without a mapping
    (None) the section's defaults apply, built when a span is first read (`format`)."""

    trace_format: TraceFormatConfig | None = None
    stage: str = STAGE_RETRIEVER

    @cached_property
    def format(self) -> TraceFormatConfig:
        """The mapping in force: the one given, else the defaults (OpenInference names)."""
        from retrieval_pipeline.ingest.spans import default_trace_format

        return self.trace_format if self.trace_format is not None else default_trace_format()

    @cached_property
    def topics(self) -> Topics | None:
        """The topics file of the mapping, read once for every converter (None: no file)."""
        path = self.format.topics_file
        return None if path is None else load_topics(path)

    def converter(self) -> SpanConverter:
        from retrieval_pipeline.ingest.spans import SpanConverter

        return SpanConverter(self.format, topics=self.topics)


def span_file_pieces(path: Path, order: int, reading: SpanReading) -> Iterator[RawPiece]:
    """Raw records of one OTLP/JSON export (file order `order`), a piece at a time."""
    converter = reading.converter()
    yield from span_pieces(converter.convert_file(path), converter, order, reading)


def span_pieces(
    rows: Iterable[SpanRow], converter: SpanConverter, order: int, reading: SpanReading
) -> Generator[RawPiece, None, None]:
    """`rows` (of one source, read by `converter`) as raw pieces, every record with file order
    `order` and numbered across the source."""
    batch: list[tuple[str, int, int, str, str | None]] = []
    place = 0
    kept, last_kept = 0, 0  # spans with a record kept (a span's records come together)
    for row in itertools.chain(rows, converter.flush()):
        name = f"{row.source_file} line {row.source_line}"
        if row.error is not None:
            raw = json.dumps({"spanId": row.span_id}) if row.span_id else ""
            place += 1
            batch.append((name, order, place, raw, row.error))
        elif row.stage == reading.stage:
            place += 1
            batch.append((name, order, place, row.record or "", None))
            if row.span_number != last_kept:
                kept, last_kept = kept + 1, row.span_number
        if len(batch) >= ROWS_PER_PIECE:
            yield _piece(batch, 0)
            batch = []
    # every span read that left no row: another kind, or all its records of other stages
    counts = converter.counts
    yield _piece(batch, counts.read - counts.quarantined - kept)


def _piece(rows: list[tuple[str, int, int, str, str | None]], skipped: int) -> RawPiece:
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(RAW_SCHEMA)
    table = pa.Table.from_arrays(
        [pa.array(list(c), type=f.type) for c, f in zip(columns, RAW_SCHEMA, strict=True)],
        schema=RAW_SCHEMA,
    )
    return RawPiece(table, skipped=skipped, from_spans=True)
