"""Judgments: graded labels keyed by (query, document), kept apart from the traces.

Annotators judge a (query, document) pair once, not each logged trace, and IR teams hold TREC
qrels; a judgments file says so once and the pipeline applies it to every trace of the query.
This module reads such files into one Arrow table; what the labels then do to a trace is the
warehouse's business. Pure: pyarrow, never DuckDB or Dagster.

The contract (shared with the writers of click-derived labels, which use the same files):

- TREC qrels: `qid iter docno rel`, whitespace separated, exactly four fields; `iter` is ignored;
  a line starting with `#` is a comment. A negative `rel` means judged non-relevant and is kept as
  grade 0: for every measure this project computes, trec_eval treats it the same way
  (`form_res_rels.c` counts only `rel >= 0` towards the relevant set and gives gain only to
  `rel > 0`).
- CSV (with a header row), JSON lines (one object per line) or Parquet, with the columns
  `query_id`, `doc_id`, `grade` (a number from 0 to `records.MAX_GRADE`, 100, the trace records'
  range: a number in JSON lines and Parquet, its decimal text in CSV), optional `judged_at` (an
  ISO 8601 timestamp by the trace contract's rule, no offset meaning UTC; in Parquet also a
  timestamp or date column) and optional `label_source` (a string; `judgments` when absent or
  empty). Other columns (`estimate`, `impressions`, ...)
  are ignored. Ids are non-empty strings or integers (read as their decimal text). An empty CSV
  cell is a missing value.

Which format a file is: by its name (`.csv`, `.jsonl`, `.ndjson`, `.parquet`, `.qrels`, `.txt`;
the text formats also gzipped, `.gz`). Any other name given on its own (trec_eval's `qrels.test`,
no extension at all) is read by its content: Parquet's magic bytes make it Parquet, a first record
line starting with `{` JSON lines, one with a comma and a `query_id` column CSV, anything else
qrels. In a folder only files with the names above are read (a README beside them is not), hidden
names (`.x`, `_x`) left out, in path order.

Every line read is kept or quarantined with its file, line (Parquet: row) and reason: a missing
field, an empty id, a grade that is not a number, not finite, negative or above
`records.MAX_GRADE` (in qrels too: a gain of 2^1024 makes nDCG inf / inf), a `judged_at` that is
not a timestamp, a qrels line without exactly four fields, malformed JSON or CSV, invalid UTF-8.
Blank lines, comments and the CSV header are not records (`skipped`). A file that cannot be read
at all (a CSV or Parquet file without a required column, a store that cannot be reached) raises.

A (query, document) judged more than once: the judgment with the latest `judged_at` wins, one
without `judged_at` counting as older than any with one; between equal (or absent) times the later
line wins, files taken in the order given. trec_eval refuses such a qrels file outright
(`form_res_rels.c`: "duplicate docs"); here a re-judgment replaces the earlier one, which is
counted as `superseded`. So `read == kept + quarantined` and `kept == rows + superseded`.

Memory: files are read a block of lines (Parquet: a row batch) at a time and kept rows are held as
Arrow batches; what stays is the table of judgments and the quarantined lines.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from retrieval_pipeline.ingest.filesystems import (
    Location,
    S3Settings,
    list_files,
    open_file,
    open_stream,
    resolve,
    store_errors,
)
from retrieval_pipeline.ingest.judgment_rules import (
    COLUMNS,
    JUDGMENTS_SCHEMA,
    KEPT_SCHEMA,
    ORDER,
    REQUIRED_COLUMNS,
    Bad,
    check_columns,
    check_judgment,
    kind_in_words,
    latest,
)
from retrieval_pipeline.ingest.line_stream import (
    SPACE,
    Line,
    LineBlock,
    Quarantine,
    line_blocks,
    numbered_lines,
    split_lines,
)

# records gathered before they are checked and kept as one Arrow table
BATCH_ROWS = 65_536

_FORMATS = {
    ".csv": "csv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".parquet": "parquet",
    ".qrels": "qrels",
    ".txt": "qrels",
}
JUDGMENT_SUFFIXES: tuple[str, ...] = (
    *_FORMATS,
    *(f"{suffix}.gz" for suffix, kind in _FORMATS.items() if kind != "parquet"),
)

_NULL_TEXT = pa.scalar(None, pa.string())
_QRELS_FIELDS = "a qrels line is `qid iter docno rel` (4 fields)"


class JudgmentsFileError(ValueError):
    """A judgments file that cannot be read at all; the message names it."""


@dataclass(frozen=True)
class Judgments:
    """The judgments read: one row per (query_id, doc_id), the quarantined lines, the counts."""

    table: pa.Table  # JUDGMENTS_SCHEMA, ordered by query_id then doc_id
    quarantine: pa.Table  # QUARANTINE_SCHEMA, in reading order
    files: int
    read: int  # records read: lines that are not blank, comments or a header; Parquet rows
    kept: int
    quarantined: int
    superseded: int  # kept, then replaced by a later judgment of the same pair
    skipped: int  # blank lines, comments, CSV headers
    repeats: tuple[str, ...] = field(default=())  # the first few replacements, in words

    @property
    def queries(self) -> int:
        """How many queries are judged."""
        return len(pc.unique(self.table["query_id"])) if self.table.num_rows else 0


def grades_by_query(table: pa.Table) -> dict[str, dict[str, float]]:
    """The judgments as `{query_id: {doc_id: grade}}`, for scoring one query at a time."""
    out: dict[str, dict[str, float]] = {}
    columns = (table[name].to_pylist() for name in ("query_id", "doc_id", "grade"))
    for query_id, doc_id, grade in zip(*columns, strict=True):
        out.setdefault(query_id, {})[doc_id] = grade
    return out


def judgment_files(
    sources: Sequence[str | Path] | str | Path, settings: S3Settings | None = None
) -> list[tuple[Location, str]]:
    """The files of `sources` (files, folders, `s3://` URLs) with their formats, in order."""
    if isinstance(sources, str | Path):
        sources = [sources]
    files: list[tuple[Location, str]] = []
    for source in sources:
        location = resolve(source, settings)
        found = list_files(location)
        if len(found) == 1 and found[0].path == location.path:  # a file named on its own
            files.append((location, format_of(location)))
        else:
            named = [f for f in found if f.name.lower().endswith(JUDGMENT_SUFFIXES)]
            files += [(f, format_of(f)) for f in named]
    return files


def read_judgments(
    sources: Sequence[str | Path] | str | Path, settings: S3Settings | None = None
) -> Judgments:
    """Read every judgments file of `sources` (files, folders, `s3://` URLs), in order."""
    files = judgment_files(sources, settings)
    collector = _Collector()
    for location, kind in files:
        collector.files += 1
        with store_errors(location.url, location.endpoint):
            if kind == "parquet":
                _read_parquet(location, collector)
            else:
                _read_text(location, kind, collector)
    return collector.finish(len(files))


def format_of(location: Location) -> str:
    """`qrels`, `csv`, `jsonl` or `parquet`: by the file's name, else by its content."""
    name = location.name.lower()
    for suffix, kind in _FORMATS.items():
        if name.endswith((suffix, f"{suffix}.gz")):
            return kind
    return _sniff(location)


def _sniff(location: Location) -> str:
    """The format of a file whose name does not say, from its first bytes and first record."""
    with store_errors(location.url, location.endpoint):
        with open_stream(location) as stream:
            if stream.read(4) == b"PAR1":
                return "parquet"
        with open_stream(location) as stream:
            gzipped = location.name.lower().endswith(".gz")
            for line in numbered_lines(stream, gzipped=gzipped):
                text = line.text.strip(SPACE)
                if not text or line.text.startswith("#"):
                    continue
                if text.startswith("{"):
                    return "jsonl"
                if "," in text and "query_id" in text:
                    return "csv"
                return "qrels"
    return "qrels"


class _Collector:
    """Kept rows as Arrow tables, quarantined lines, and the counts."""

    def __init__(self) -> None:
        self.kept: list[pa.Table] = []
        self.n_kept = 0
        self.quarantine = Quarantine()
        self.files = 0  # files begun so far: the current file's place in reading order
        self.skipped = 0

    def reject(self, source: str, line: int, field_name: str | None, reason: str, raw: str) -> None:
        self.quarantine.add(source, line, field_name, reason, raw, self.files)

    def keep(self, table: pa.Table) -> None:
        """Kept rows (JUDGMENTS_SCHEMA), numbered in reading order."""
        order = pa.array(np.arange(self.n_kept, self.n_kept + table.num_rows, dtype=np.int64))
        self.kept.append(table.append_column(ORDER, order))
        self.n_kept += table.num_rows

    def check(
        self,
        source: str,
        columns: Mapping[str, pa.Array],
        lines: pa.Array,
        raws: Sequence[str] | None,
        kind: str,
    ) -> None:
        """Check a batch column-wise; keep the good rows, quarantine the rest."""
        checked = check_columns(columns, source, lines, kind)
        for row, bad in checked.bad:
            raw = raws[row] if raws is not None else _row_json(columns, row)
            self.reject(source, lines[row].as_py(), bad.field, bad.reason, raw)
        self.keep(checked.kept)

    def finish(self, files: int) -> Judgments:
        table = pa.concat_tables(self.kept) if self.kept else KEPT_SCHEMA.empty_table()
        winners, repeats = latest(table)
        quarantine = self.quarantine.table()
        return Judgments(
            table=winners,
            quarantine=quarantine,
            files=files,
            read=self.n_kept + quarantine.num_rows,
            kept=self.n_kept,
            quarantined=quarantine.num_rows,
            superseded=self.n_kept - winners.num_rows,
            skipped=self.skipped,
            repeats=repeats,
        )


def _row_json(columns: Mapping[str, pa.Array], row: int) -> str:
    values = {name: array[row].as_py() for name, array in columns.items()}
    return json.dumps(values, default=str, ensure_ascii=False)


def _read_text(location: Location, kind: str, collector: _Collector) -> None:
    gzipped = location.name.lower().endswith(".gz")
    with open_stream(location) as stream:
        if kind == "qrels":
            for block in line_blocks(stream, gzipped=gzipped):
                _qrels_block(location.url, block, collector)
        elif kind == "jsonl":
            _read_jsonl(location.url, numbered_lines(stream, gzipped=gzipped), collector)
        else:
            _read_csv(location.url, line_blocks(stream, gzipped=gzipped), collector)


def _qrels_block(source: str, block: LineBlock, collector: _Collector) -> None:
    """A block of qrels lines, split and checked column-wise."""
    split = split_lines(
        block, source, collector.quarantine, (4, 4), _QRELS_FIELDS, False, collector.files
    )
    collector.skipped += split.skipped
    columns = {
        "query_id": pc.list_element(split.fields, 0),
        "doc_id": pc.list_element(split.fields, 2),
        "grade": pc.list_element(split.fields, 3),
    }
    collector.check(source, columns, split.numbers, split.texts, "qrels")


def _read_jsonl(source: str, lines: Iterator[Line], collector: _Collector) -> None:
    """JSON lines, each record checked on its own (its values may be of any JSON type)."""
    rows: dict[str, list[object]] = {name: [] for name in JUDGMENTS_SCHEMA.names}
    for line in lines:
        if line.error is not None:
            collector.reject(source, line.number, None, line.error, line.text)
            continue
        if not line.text.strip(SPACE):
            collector.skipped += 1
            continue
        try:
            obj = json.loads(line.text)
        except ValueError:
            collector.reject(source, line.number, None, "malformed JSON", line.text)
            continue
        if not isinstance(obj, dict):
            reason = f"not a JSON object (got {kind_in_words(obj)})"
            collector.reject(source, line.number, None, reason, line.text)
            continue
        try:
            values = check_judgment(obj, "jsonl")
        except Bad as bad:
            collector.reject(source, line.number, bad.field, bad.reason, line.text)
            continue
        for name, value in zip(rows, (*values, source, line.number), strict=True):
            rows[name].append(value)
        if len(rows["source_line"]) >= BATCH_ROWS:
            collector.keep(pa.Table.from_pydict(rows, schema=JUDGMENTS_SCHEMA))
            rows = {name: [] for name in JUDGMENTS_SCHEMA.names}
    collector.keep(pa.Table.from_pydict(rows, schema=JUDGMENTS_SCHEMA))


def _read_csv(source: str, blocks: Iterator[LineBlock], collector: _Collector) -> None:
    """CSV with a header row, checked a batch of records at a time; a record may span lines (a
    quoted newline) and is reported at its first line. An empty cell is a missing value."""
    lines = _CsvLines(blocks)
    reader = csv.reader(lines.texts(), strict=True)
    header: list[str] = []
    batch: list[list[str]] = []
    firsts: list[int] = []
    raws: list[str] = []
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            first, raw, _ = lines.record()
            collector.reject(source, first, None, f"malformed CSV ({exc})", raw)
            continue
        first, raw, damaged = lines.record()
        if damaged is not None:
            collector.reject(source, first, None, damaged, raw)
        elif not row:
            collector.skipped += 1  # a blank line
        elif not header:
            header = [cell.strip(SPACE) for cell in row]
            _require_columns(source, header)
            collector.skipped += 1
        elif len(row) != len(header):
            reason = f"has {len(row)} fields; the header has {len(header)}"
            collector.reject(source, first, None, reason, raw)
        else:
            batch.append(row)
            firsts.append(first)
            raws.append(raw)
            if len(batch) >= BATCH_ROWS:
                _check_csv(source, header, batch, firsts, raws, collector)
                batch, firsts, raws = [], [], []
    if batch:
        _check_csv(source, header, batch, firsts, raws, collector)


class _CsvLines:
    """The lines handed to the CSV reader, and those of the record it read last."""

    def __init__(self, blocks: Iterator[LineBlock]) -> None:
        self.blocks = blocks
        self.next_first = 1  # the first line of the next record
        self.number = 0  # the last line handed out
        self.pending: list[str] = []
        self.errors: list[str] = []

    def texts(self) -> Iterator[str]:
        for block in self.blocks:
            for offset, text in enumerate(block.texts):
                self.number = block.first + offset
                if block.errors and offset in block.errors:
                    self.errors.append(block.errors[offset])
                self.pending.append(text)
                yield text + "\n"

    def record(self) -> tuple[int, str, str | None]:
        """The record just read: its first line, its text and the first damage in it."""
        pending, first = self.pending, self.next_first
        raw = pending[0] if len(pending) == 1 else "\n".join(pending)
        damaged = None
        if self.errors:
            damaged = self.errors[0]
            self.errors.clear()
        self.next_first = self.number + 1
        pending.clear()
        return first, raw, damaged


def _check_csv(
    source: str,
    header: list[str],
    rows: list[list[str]],
    firsts: list[int],
    raws: list[str],
    collector: _Collector,
) -> None:
    cells = list(zip(*rows, strict=True))
    columns = {}
    for name in COLUMNS:
        if name in header:
            text = pa.array(cells[header.index(name)], pa.string())
            columns[name] = pc.if_else(pc.equal(text, ""), _NULL_TEXT, text)  # empty: missing
    collector.check(source, columns, pa.array(firsts, pa.int64()), raws, "csv")


def _require_columns(source: str, names: Sequence[str]) -> None:
    missing = [name for name in REQUIRED_COLUMNS if name not in names]
    if missing:
        raise JudgmentsFileError(
            f"{source}: no column {', '.join(missing)}; judgments need "
            f"{', '.join(REQUIRED_COLUMNS)} (has: {', '.join(names) or 'no columns'})"
        )


def _read_parquet(location: Location, collector: _Collector) -> None:
    """Parquet in row batches, checked column-wise; `source_line` is the row number, from 1."""
    with open_file(location) as handle:
        try:
            parquet = pq.ParquetFile(handle)
        except (pa.ArrowInvalid, OSError) as exc:
            raise JudgmentsFileError(
                f"{location.url}: not a readable Parquet file ({exc})"
            ) from exc
        names = parquet.schema_arrow.names
        _require_columns(location.url, names)
        wanted = [name for name in COLUMNS if name in names]
        first = 1
        for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=wanted):
            lines = pa.array(np.arange(first, first + batch.num_rows, dtype=np.int64))
            columns = {name: batch.column(name) for name in wanted}
            collector.check(location.url, columns, lines, None, "parquet")
            first += batch.num_rows
