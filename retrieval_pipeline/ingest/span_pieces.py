"""Span exports (files found by content, or a Phoenix day) as raw pieces for ingestion.

A span export holds many spans on one line, where the rest of ingestion counts on a record's
file and line naming it alone (repeated trace ids are found and reported by them). So each line
of an export is a file of its own to ingestion, named `<file> line <n>`, and each record on it a
line of that file, numbered in the order written; a quarantined span's reason names its span id.
Only the records of one stage are kept (`SpanReading.stage`); spans of other kinds and the
records of other stages are counted as skipped.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from retrieval_pipeline.config import TraceFormatConfig
from retrieval_pipeline.ingest.pieces import RAW_SCHEMA, RawPiece
from retrieval_pipeline.ingest.spans import STAGE_RETRIEVER, SpanConverter, SpanRow

# Records per piece: a piece of spans is small beside a JSON-lines piece, as each record was
# built in Python already.
ROWS_PER_PIECE = 20_000


@dataclass(frozen=True)
class SpanReading:
    """How spans become records: the `[trace_format]` mapping, and which stage is kept
    (`retriever`, `reranker_input` or `reranker`)."""

    trace_format: TraceFormatConfig = field(default_factory=TraceFormatConfig)
    stage: str = STAGE_RETRIEVER

    def converter(self) -> SpanConverter:
        return SpanConverter(self.trace_format)


def span_file_pieces(
    path: Path, first_order: int, reading: SpanReading
) -> Generator[RawPiece, None, int]:
    """Raw records of one OTLP/JSON export, a piece at a time; returns the next file order free
    (each line of the export takes one)."""
    converter = reading.converter()
    return (yield from span_pieces(converter.convert_file(path), converter, first_order, reading))


def span_pieces(
    rows: Iterable[SpanRow], converter: SpanConverter, first_order: int, reading: SpanReading
) -> Generator[RawPiece, None, int]:
    """`rows` (of one source, read by `converter`) as raw pieces; returns the next file order."""
    batch: list[tuple[str, int, int, str, str | None]] = []
    order, place, current = first_order - 1, 0, None
    kept, last_kept = 0, None  # spans with a record kept (a span's records come together)
    for row in rows:
        where = (row.source_file, row.source_line)
        if where != current:
            order, place, current = order + 1, 0, where
        name = f"{row.source_file} line {row.source_line}"
        if row.error is not None:
            raw = json.dumps({"spanId": row.span_id}) if row.span_id else ""
            place += 1
            batch.append((name, order, place, raw, row.error))
        elif row.stage == reading.stage:
            place += 1
            batch.append((name, order, place, row.record or "", None))
            if (order, row.span_id) != last_kept:
                kept, last_kept = kept + 1, (order, row.span_id)
        if len(batch) >= ROWS_PER_PIECE:
            yield _piece(batch, 0)
            batch = []
    # every span read that left no row: another kind, or all its records of other stages
    counts = converter.counts
    yield _piece(batch, counts.read - counts.quarantined - kept)
    return order + 1


def _piece(rows: list[tuple[str, int, int, str, str | None]], skipped: int) -> RawPiece:
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(RAW_SCHEMA)
    table = pa.Table.from_arrays(
        [pa.array(list(c), type=f.type) for c, f in zip(columns, RAW_SCHEMA, strict=True)],
        schema=RAW_SCHEMA,
    )
    return RawPiece(table, skipped=skipped)
