"""TREC run files (`qid Q0 docno rank score tag`) read as trace records, one per query.

A run file is what IR teams hand trec_eval; read here, each query becomes one trace whose
`retrieved_ids` are its documents in trec_eval's order, so that the pipeline scores a run as
trec_eval does. Pure: pyarrow, never DuckDB or Dagster.

The order is trec_eval's own: `form_res_rels.c` (usnistgov/trec_eval, commit f4253652) sorts a
query's results with `comp_sim_docno`: score (`sim`) descending, ties broken by
`strcmp(p2->docno, p1->docno)`, i.e. docno descending byte by byte; the rank column is never read
(`get_trec_results.c` skips it, and the `Q0` column too). Scores are compared as doubles.

A line is read as trec_eval reads it: whitespace-separated fields; blank lines and lines whose
first non-blank character is `#` are skipped; at least six fields, any after the sixth ignored
(`parse_results_line`). Where trec_eval stops at the first bad line, or refuses a document
ranked twice for a query ("duplicate docs"), here the line is quarantined with its file, line
and reason, and the rest is read: fewer than six fields, a score that is not a number or not
finite (`atof` would read `2.1abc` as 2.1 and `abc` as 0), a document already ranked for the
query (the first line is kept). Every line read is kept or quarantined: `read == kept +
quarantined`, blank lines and comments are `skipped`. A query named only on quarantined lines
has no trace and is not scored; `TrecRun.dropped` names it, and `evaluate` says so.

The records: `trace_id` and `query_id` are the qid (trec_eval's per-query key), `variant` is the
run tag of the query's first line, `segment` is `unknown`, and `timestamp` is `served_at`: by
default the run file's modification time, the moment the run was produced, against which the
corpus's stale-label rules are applied. `run_id` is the tag of the file's last line, as trec_eval's
`runid` line prints it.

Memory: `evaluate --trec-run` reads with `stream_trec_run`, bounded like trace files. A run file is
written grouped by query; a first pass checks every line a block at a time (line_stream), holding
one query's lines to drop its repeats, and keeps only the quarantined lines and the set of query
ids; the records are then made by a second pass, GROUP_LINES lines of whole queries at a time, as
the ingestion asks for them. A file whose query comes back after another one is read whole
(`read_trec_run`, which holds every line: memory grows with the file).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from retrieval_pipeline.ingest.filesystems import (
    Location,
    S3Settings,
    list_files,
    open_stream,
    resolve,
    store_errors,
)
from retrieval_pipeline.ingest.judgment_rules import NUMBER
from retrieval_pipeline.ingest.line_stream import (
    READ_BYTES,
    SPACE,
    LineBlock,
    Quarantine,
    line_blocks,
    split_lines,
    true_rows,
)
from retrieval_pipeline.store import DayBatches

# Lines of a streamed run gathered before their whole queries are made trace records.
GROUP_LINES = 65_536
RUN_FIELDS = "a run line is `qid Q0 docno rank score tag` (6 fields)"
TRACE_SCHEMA = pa.schema(
    [
        ("trace_id", pa.string()),
        ("query_id", pa.string()),
        ("timestamp", pa.string()),
        ("retrieved_ids", pa.list_(pa.string())),
        ("variant", pa.string()),
        ("segment", pa.string()),
    ]
)
_LINES = pa.schema(
    [
        ("query_id", pa.string()),
        ("doc_id", pa.string()),
        ("score", pa.float64()),
        ("tag", pa.string()),
        ("source_line", pa.int64()),
    ]
)


class TrecRunError(ValueError):
    """A run file that cannot be read at all; the message names it."""


@dataclass(frozen=True)
class TrecRun:
    """A run read: one trace record per query (TRACE_SCHEMA; a table, or batches read when asked
    for: `stream_trec_run`), the quarantined lines, counts."""

    records: pa.Table | DayBatches
    quarantine: pa.Table  # QUARANTINE_SCHEMA, by line
    source_file: str
    run_id: str | None
    read: int  # lines that are not blank or comments
    kept: int  # ranked documents
    quarantined: int
    skipped: int  # blank lines and comments
    queries: int = 0  # trace records
    # the queries named only on quarantined lines (their first field), sorted: they have no
    # valid run line, so no trace, and are not scored
    dropped: tuple[str, ...] = ()

    def table(self) -> pa.Table:
        """The records as one table (streamed ones read whole: for small runs and tests)."""
        if isinstance(self.records, pa.Table):
            return self.records
        return pa.Table.from_batches(list(self.records.batches()), schema=TRACE_SCHEMA)

    def ranked(self) -> dict[str, list[str]]:
        """`{query_id: [doc_id, ...]}` in trec_eval's order."""
        columns = self.table().select(["query_id", "retrieved_ids"]).to_pydict()
        return dict(zip(columns["query_id"], columns["retrieved_ids"], strict=True))


def read_trec_run(
    source: str | Path,
    served_at: datetime | None = None,
    settings: S3Settings | None = None,
) -> TrecRun:
    """Read one TREC run file (local or `s3://`, gzipped when its name ends in `.gz`)."""
    location = _run_file(source, settings)
    with store_errors(location.url, location.endpoint):
        when = served_at or _modified(location)
        reader = _RunLines(location.url)
        for block in _blocks(location):
            reader.kept.append(reader.block(block))
    return reader.finish(when)


def stream_trec_run(
    source: str | Path,
    served_at: datetime | None = None,
    settings: S3Settings | None = None,
) -> TrecRun:
    """`read_trec_run` with memory bounded by a block of lines and the largest query, where the
    file's lines are grouped by query (as run files are written): a first pass checks every line
    and counts; the records are batches of whole queries, made by a second pass when asked for.
    A file whose query comes back after another one is read whole (`read_trec_run`)."""
    location = _run_file(source, settings)
    with store_errors(location.url, location.endpoint):
        when = served_at or _modified(location)
        survey = _Survey(location.url)
        for block in _blocks(location):
            if not survey.block(block):
                return read_trec_run(source, when, settings)
        survey.close_group()
    quarantine = survey.reader.quarantine.table()
    return TrecRun(
        records=DayBatches(location.url, lambda: _record_batches(location, when)),
        quarantine=quarantine,
        source_file=location.url,
        run_id=survey.run_id,
        read=survey.kept + quarantine.num_rows,
        kept=survey.kept,
        quarantined=quarantine.num_rows,
        skipped=survey.reader.skipped,
        queries=len(survey.done),
        dropped=_dropped(quarantine, survey.done),
    )


def _run_file(source: str | Path, settings: S3Settings | None) -> Location:
    location = resolve(source, settings)
    files = list_files(location)
    if len(files) != 1 or files[0].path != location.path:
        raise TrecRunError(f"{location.url}: a TREC run is one file, not a folder")
    return location


def _blocks(location: Location) -> Iterator[LineBlock]:
    with open_stream(location) as stream:
        gzipped = location.name.lower().endswith(".gz")
        yield from line_blocks(stream, gzipped=gzipped, read_bytes=READ_BYTES)


def _dropped(quarantine: pa.Table, queries: set[str] | pa.Array) -> tuple[str, ...]:
    """The first fields of quarantined lines that name no query of `queries`, sorted."""
    if not quarantine.num_rows:
        return ()
    trimmed = pc.utf8_trim(quarantine["raw_record"], SPACE)
    firsts = pc.list_element(pc.ascii_split_whitespace(trimmed), 0)
    named = set(pc.drop_null(firsts).to_pylist())
    known = queries if isinstance(queries, set) else set(queries.to_pylist())
    return tuple(sorted(named - known))


def _query_runs(lines: pa.Table) -> list[tuple[int, int]]:
    """(start, end) of each run of one query_id in `lines`, in order."""
    starts = _group_starts(lines, ("query_id",)).tolist()
    return list(zip(starts, [*starts[1:], lines.num_rows], strict=True))


class _Survey:
    """The first pass of `stream_trec_run`: every line checked, each query's lines (held one
    query at a time) rid of repeats, counted; `block` is False once a query comes back."""

    def __init__(self, source: str) -> None:
        self.reader = _RunLines(source)
        self.done: set[str] = set()
        self.current: str | None = None
        self.group: list[pa.Table] = []
        self.kept = 0
        self.run_id: str | None = None

    def block(self, block: LineBlock) -> bool:
        lines = self.reader.block(block)
        for start, end in _query_runs(lines):
            query = lines["query_id"][start].as_py()
            if query != self.current:
                self.close_group()
                if query in self.done:
                    return False
                self.current = query
            self.group.append(lines.slice(start, end - start))
        return True

    def close_group(self) -> None:
        if self.current is None:
            return
        kept = self.reader.without_repeats(pa.concat_tables(self.group))
        self.kept += kept.num_rows
        last = pc.index(kept["source_line"], pc.max(kept["source_line"])).as_py()
        self.run_id = kept["tag"][last].as_py()
        self.done.add(self.current)
        self.current, self.group = None, []


def _record_batches(location: Location, served_at: datetime) -> Iterator[pa.RecordBatch]:
    """The second pass: trace records of whole queries, about GROUP_LINES lines at a time."""
    reader = _RunLines(location.url)  # its quarantine was told by the first pass
    held: list[pa.Table] = []
    held_rows = 0
    for block in _blocks(location):
        lines = reader.block(block)
        held.append(lines)
        held_rows += lines.num_rows
        if held_rows >= GROUP_LINES:
            lines = pa.concat_tables(held)
            last_start = _query_runs(lines)[-1][0]
            if last_start:  # every query before the last one is whole
                yield from _whole_queries(reader, lines.slice(0, last_start), served_at)
                held = [lines.slice(last_start)]
                held_rows = held[0].num_rows
    if held_rows:
        yield from _whole_queries(reader, pa.concat_tables(held), served_at)


def _whole_queries(
    reader: _RunLines, lines: pa.Table, served_at: datetime
) -> Iterator[pa.RecordBatch]:
    yield from _records(reader.without_repeats(lines), served_at).to_batches()


def _modified(location: Location) -> datetime:
    info = location.filesystem.get_file_info(location.path)
    mtime = info.mtime
    if mtime is None:
        return datetime.now(UTC)
    return mtime if mtime.tzinfo is not None else mtime.replace(tzinfo=UTC)


class _RunLines:
    """Lines checked a block at a time; kept lines held as Arrow tables until the end."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.kept: list[pa.Table] = []
        self.quarantine = Quarantine()
        self.skipped = 0

    def reject(self, line: int, field: str | None, reason: str, raw: str) -> None:
        self.quarantine.add(self.source, line, field, reason, raw)

    def block(self, block: LineBlock) -> pa.Table:
        """The block's lines checked: the good ones (_LINES), the others quarantined."""
        split = split_lines(block, self.source, self.quarantine, (6, None), RUN_FIELDS, True)
        self.skipped += split.skipped
        fields, numbers, kept_texts = split.fields, split.numbers, split.texts
        score_text = pc.list_element(fields, 4)
        is_number = pc.match_substring_regex(score_text, f"^{NUMBER}$")
        scores = pc.cast(pc.if_else(is_number, score_text, pa.scalar("0")), pa.float64())
        valid = pc.and_(is_number, pc.is_finite(scores))
        for offset in true_rows(pc.invert(valid)):
            text = score_text[offset].as_py()
            what = "not finite" if is_number[offset].as_py() or _odd(text) else "not a number"
            self.reject(numbers[offset].as_py(), "score", f"score is {what} (got {text!r})",
                        kept_texts[offset])  # fmt: skip
        table = pa.table(
            [
                pc.list_element(fields, 0),
                pc.list_element(fields, 2),
                scores,
                pc.list_element(fields, 5),
                numbers,
            ],
            schema=_LINES,
        )
        return table.filter(valid)

    def finish(self, served_at: datetime) -> TrecRun:
        lines = pa.concat_tables(self.kept) if self.kept else _LINES.empty_table()
        lines = self.without_repeats(lines)
        quarantine = self.quarantine.table()
        run_id = None
        if lines.num_rows:
            last = pc.index(lines["source_line"], pc.max(lines["source_line"])).as_py()
            run_id = lines["tag"][last].as_py()
        records = _records(lines, served_at)
        return TrecRun(
            records=records,
            queries=records.num_rows,
            dropped=_dropped(quarantine, records["query_id"].combine_chunks()),
            quarantine=quarantine,
            source_file=self.source,
            run_id=run_id,
            read=lines.num_rows + quarantine.num_rows,
            kept=lines.num_rows,
            quarantined=quarantine.num_rows,
            skipped=self.skipped,
        )

    def without_repeats(self, lines: pa.Table) -> pa.Table:
        """Each (query, document) once: the first line kept, later ones quarantined."""
        order = [("query_id", "ascending"), ("doc_id", "ascending"), ("source_line", "ascending")]
        ranked = lines.sort_by(order)
        starts = _group_starts(ranked, ("query_id", "doc_id"))
        if len(starts) == ranked.num_rows:
            return lines
        first_of_group = np.zeros(ranked.num_rows, dtype=bool)
        first_of_group[starts] = True
        group_first = starts[np.searchsorted(starts, np.arange(ranked.num_rows), side="right") - 1]
        for row in np.flatnonzero(~first_of_group).tolist():
            query, doc = ranked["query_id"][row].as_py(), ranked["doc_id"][row].as_py()
            kept_line = ranked["source_line"][int(group_first[row])].as_py()
            reason = f"document {doc} is already ranked for query {query} (line {kept_line})"
            line = ranked["source_line"][row].as_py()
            self.reject(line, "docno", reason, f"{query} {doc}")
        return ranked.filter(pa.array(first_of_group))


def _odd(text: str) -> bool:
    try:
        return not np.isfinite(float(text))
    except ValueError:
        return False


def _group_starts(table: pa.Table, keys: tuple[str, ...]) -> np.ndarray:
    """Where each run of equal `keys` begins in `table` (sorted by them)."""
    n = table.num_rows
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for key in keys:
        column = table[key]
        differs = pc.not_equal(column.slice(1), column.slice(0, n - 1))
        change[1:] |= differs.to_numpy()
    return np.flatnonzero(change)


def _records(lines: pa.Table, served_at: datetime) -> pa.Table:
    """One trace per query: documents by score descending, docno descending on ties."""
    ranked = lines.sort_by(
        [("query_id", "ascending"), ("score", "descending"), ("doc_id", "descending")]
    )
    starts = _group_starts(ranked, ("query_id",))
    offsets = pa.array(np.append(starts, ranked.num_rows), pa.int32())
    retrieved = pa.ListArray.from_arrays(offsets, ranked["doc_id"].combine_chunks())
    query_ids = ranked["query_id"].take(pa.array(starts))
    # the tag of each query's first line in the file
    by_line = lines.sort_by([("query_id", "ascending"), ("source_line", "ascending")])
    tags = by_line["tag"].take(pa.array(_group_starts(by_line, ("query_id",))))
    stamp = served_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    n = len(starts)
    return pa.table(
        [
            query_ids,
            query_ids,
            pa.repeat(pa.scalar(stamp), n) if n else pa.array([], pa.string()),
            retrieved,
            tags,
            pa.repeat(pa.scalar("unknown"), n) if n else pa.array([], pa.string()),
        ],
        schema=TRACE_SCHEMA,
    )
