"""Where ingestion's time goes: one day of the generated store through `ingest_traces`.

    python bench/ingest_phases.py --sizes 1000000

Each size runs the real ingestion of the nightly job (its day's JSONL.gz into a new file
warehouse with the default memory limit: the valid traces written beside the file, the
quarantined records straight in) in this process, with a timer around each phase; `--inserted`
inserts the traces instead, as before the nightly wrote them beside. Phases in the read-ahead
thread (inflating gzip, splitting lines) and in the write-behind thread (writing a piece)
overlap the main thread's validation of the
next piece; "waiting for the reader" is the main thread's time with nothing to validate, "waiting
for the writer" its time before the piece before has been stored.
The process's user and system CPU and its minor page faults (rusage) cover the whole ingestion.
Writes `bench/results/ingest_phases_n<N>.md`.
"""

from __future__ import annotations

import inspect
import resource
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import machine_note, machine_waits, parse_args, waited_since, write_report
from bench.generate import dataset

# (module, function, phase): the functions timed, by the phase they stand for, each in the module
# that calls it (the module whose name for it is replaced)
TIMED = (
    ("GzipStream", "inflate", "(reader thread) inflate gzip"),
    ("jsonl", "jsonl_piece", "(reader thread) split lines into Arrow"),
    ("parallel_validation", "stage_records", "validate (both lanes) + repeated ids"),
    ("validation", "_record_fields", "of which the fields pass (agg_record_fields: json_keys)"),
    ("validation", "_plain_fields", "of which the plain lane's parse (pyarrow.json)"),
    ("validation", "_trace_records", "of which sql/stg_trace_records.sql over a lane's fields"),
    ("validation", "keep_first_occurrences", "of which repeated ids (keep_first_occurrences)"),
    ("TracesFile", "keep_valid", "(writer thread) write the valid traces beside the file"),
    ("ingestion", "_insert_piece", "(writer thread) insert each piece (straight in: a new day)"),
)

# wall seconds by phase
Seconds = defaultdict[str, float]


def timed(module: ModuleType | type, name: str, phase: str, seconds: Seconds) -> None:
    """Replace `module.name` by the same function adding its time to `seconds[phase]` (for a
    generator, the time of each item it hands out)."""
    function = getattr(module, name)

    def timing(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            seconds[phase] += time.perf_counter() - start

    def iterating(*args: Any, **kwargs: Any) -> Iterator[Any]:
        items = function(*args, **kwargs)
        while True:
            start = time.perf_counter()
            item = next(items, timing)  # `timing`: a sentinel no generator hands out
            seconds[phase] += time.perf_counter() - start
            if item is timing:
                return
            yield item

    setattr(module, name, iterating if inspect.isgeneratorfunction(function) else timing)


def waited(module: ModuleType, seconds: Seconds) -> None:
    """Time the main thread's waits for the next piece of the read-ahead thread."""
    read_ahead: Callable[[Iterator[Any]], Iterator[Any]] = module.read_ahead

    def waiting(pieces: Iterator[Any]) -> Iterator[Any]:
        ahead = read_ahead(pieces)
        while True:
            start = time.perf_counter()
            piece = next(ahead, None)
            seconds["waiting for the reader"] += time.perf_counter() - start
            if piece is None:
                return
            yield piece

    setattr(module, "read_ahead", waiting)  # noqa: B010 (a module's name replaced)


def waited_for_writer(module: ModuleType, seconds: Seconds) -> None:
    """Time the main thread's calls to the write-behind's `write`, which wait for the piece
    before to be stored (handing the next one over takes no time)."""
    written_behind = module._written_behind

    @contextmanager
    def timing(*args: Any) -> Iterator[Callable[..., None]]:
        with written_behind(*args) as write:

            def waiting(*write_args: Any) -> None:
                start = time.perf_counter()
                try:
                    write(*write_args)
                finally:
                    seconds["waiting for the writer"] += time.perf_counter() - start

            yield waiting

    setattr(module, "_written_behind", timing)  # noqa: B010 (a module's name replaced)


def measure(size: int, seed: int, inserted: bool = False) -> list[str]:
    from retrieval_pipeline.ingest import jsonl
    from retrieval_pipeline.ingest.gzip import GzipStream
    from retrieval_pipeline.warehouse import ingestion, parallel_validation, validation
    from retrieval_pipeline.warehouse.connection import connect, memory_limit
    from retrieval_pipeline.warehouse.day_rows import TracesFile

    modules: dict[str, ModuleType | type] = {
        "GzipStream": GzipStream,
        "jsonl": jsonl,
        "ingestion": ingestion,
        "parallel_validation": parallel_validation,
        "validation": validation,
        "TracesFile": TracesFile,
    }
    seconds: Seconds = defaultdict(float)
    for module, name, phase in TIMED:
        timed(modules[module], name, phase, seconds)
    waited(ingestion, seconds)
    waited_for_writer(ingestion, seconds)
    ds = dataset(size, seed)
    (day_file,) = (ds.store / "traces").rglob("*.jsonl.gz")
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as folder:
        conn = connect(Path(folder) / "w.duckdb", {"memory_limit": memory_limit()})
        machine_before = machine_waits()
        before = resource.getrusage(resource.RUSAGE_SELF)
        start = time.perf_counter()
        counts = ingestion.ingest_traces(
            conn, [day_file], partition_date=ds.day, traces_beside=not inserted
        )
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_SELF)
        io_stall, steal = waited_since(machine_before)
        conn.close()
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    lines = [
        f"# Ingestion of {size:,} traces (one day, JSONL.gz, into a new file warehouse)",
        "",
        f"`python bench/ingest_phases.py --sizes {size}{' --inserted' if inserted else ''}`:"
        f" {counts.read:,} records read, "
        f"{counts.valid:,} valid; memory limit {memory_limit()}.",
        "",
        "| phase | wall s | share of the ingestion |",
        "|---|---|---|",
    ]
    for _, _, phase in TIMED:
        lines.append(f"| {phase} | {seconds[phase]:.2f} | {seconds[phase] / wall:.0%} |")
    for wait in ("waiting for the reader", "waiting for the writer"):
        lines.append(f"| {wait} | {seconds[wait]:.2f} | {seconds[wait] / wall:.0%} |")
    lines += [
        f"| the whole ingestion | {wall:.2f} | 100% |",
        "",
        f"CPU: {user:.1f} s user and {system:.1f} s system for {wall:.1f} s of wall time "
        f"({(user + system) / wall:.2f} cores busy on average); "
        f"{after.ru_minflt - before.ru_minflt:,} minor page faults.",
    ]
    if note := machine_note(io_stall, steal):
        lines += ["", f"{note} (common.machine_waits)."]
    return lines


def main(argv: list[str] | None = None) -> None:
    inserted = {"action": "store_true", "help": "insert the traces (as before they went beside)"}
    args = parse_args(__doc__.splitlines()[0], argv, {"--inserted": inserted})
    for size in args.sizes:
        write_report(f"ingest_phases_n{size}.md", measure(size, args.seed, args.inserted))


if __name__ == "__main__":
    main()
