"""Hostile inputs through `retrieval-pipeline evaluate`, each in a fresh process with its peak
resident memory: the memory classes of issue 27 (a gzip bomb, one long line, many short bad lines)
and TREC runs of 1M, 4M and 12M lines (issue 32: `evaluate --trec-run`, whose memory grew with
the file).

    python bench/hostile.py [--shapes NAME,...] [--max-rss-gib 6] [--report hostile_<date>.md]

Each shape is written once under `bench/data/hostile/` (about 60 MB in all), then run with the
default settings (the 512MB DuckDB limit, no options). A row gives the exit status, the peak RSS
(ru_maxrss from wait4), the wall time, and the command's last line of output or error: what it
refused, and in which words. A process whose RSS passes `--max-rss-gib` is killed by its pid
(the machine is shared; before the fixes, 1 GB of newlines reached 22.4 GB), and its row says so.
The target after the fixes: every shape under 2 GiB, naming what it refused.
"""

from __future__ import annotations

import json
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common
from bench.common import machine_note, parse_args, run_process, write_report
from bench.evaluate_e2e import command
from bench.generate import DATA_ROOT

FOLDER = DATA_ROOT / "hostile"
MIB = 2**20
CHUNK = 16 * MIB


def _record(**changes: object) -> dict[str, object]:
    return {
        "trace_id": "t1",
        "query_id": "q1",
        "timestamp": "2026-11-30T10:00:00Z",
        "retrieved_ids": ["d1", "d2"],
        "relevant_ids": ["d1"],
    } | changes


def _newlines_gz(path: Path, total: int) -> None:
    """`total` newline bytes, gzip at level 9 (about 1,000:1), written a chunk at a time."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b"\n" * CHUNK
    with path.open("wb") as out:
        # one real record first, so the file is a trace file and not an empty one
        out.write(compressor.compress((json.dumps(_record()) + "\n").encode()))
        for _ in range(total // CHUNK):
            out.write(compressor.compress(block))
        out.write(compressor.flush())


def _long_field(path: Path, size: int, field: str) -> None:
    """One valid record whose string `field` has `size` bytes: a line of about `size` bytes."""
    path.write_text(json.dumps(_record(**{field: "x" * size})) + "\n")


def _big_lines(path: Path, count: int, size: int) -> None:
    """`count` valid records, each with a segment of `size` bytes."""
    with path.open("w") as out:
        for n in range(count):
            out.write(json.dumps(_record(trace_id=f"t{n}", segment="x" * size)) + "\n")


def _many_ids(path: Path, count: int) -> None:
    """One record retrieving `count` ids (d0, d1, ...): about 11 bytes an id."""
    ids = ", ".join(f'"d{n}"' for n in range(count))
    head = json.dumps(_record(retrieved_ids=[]))[:-1]  # without its closing brace
    path.write_text(head.replace('"retrieved_ids": []', f'"retrieved_ids": [{ids}]') + "}\n")


def _short_bad_lines(path: Path, count: int) -> None:
    """`count` lines `x` (not JSON), after one real record."""
    with path.open("w") as out:
        out.write(json.dumps(_record()) + "\n")
        for _ in range(count // 1_000_000):
            out.write("x\n" * 1_000_000)


def _trec_run(path: Path, lines: int, per_query: int = 100) -> None:
    """A TREC run of `lines` lines, `per_query` documents to a query, sorted by query as run
    files usually are (about 40 bytes a line), written a query at a time."""
    with path.open("w") as out:
        for query in range(lines // per_query):
            out.write(
                "".join(
                    f"q{query} Q0 d{(query * 7 + rank) % 100_000} {rank} {1000 - rank}.5 bench\n"
                    for rank in range(1, per_query + 1)
                )
            )


def _as_traces(path: Path) -> list[str]:
    return [str(path)]


def _as_trec_run(path: Path) -> list[str]:
    return ["--trec-run", str(path)]


@dataclass(frozen=True)
class Shape:
    name: str
    file: str
    write: Callable[[Path], object]
    what: str
    arguments: Callable[[Path], list[str]] = _as_traces


SHAPES = [
    Shape("control", "one_record.jsonl", lambda p: p.write_text(json.dumps(_record()) + "\n"),
          "one valid record: the process's floor"),
    Shape("bomb_256mb", "newlines_256mb.jsonl.gz", lambda p: _newlines_gz(p, 256 * MIB),
          "gzip bomb: a record, then 256 MiB of newlines"),
    Shape("bomb_1gb", "newlines_1gb.jsonl.gz", lambda p: _newlines_gz(p, 1024 * MIB),
          "gzip bomb: a record, then 1 GiB of newlines"),
    Shape("long_line_45mb", "long_line_45mb.jsonl", lambda p: _long_field(p, 45 * 10**6, "note"),
          "one line of 45 MB (an unused field)"),
    Shape("long_segment_45mb", "long_segment_45mb.jsonl",
          lambda p: _long_field(p, 45 * 10**6, "segment"), "one line of 45 MB (its segment)"),
    Shape("line_15mb", "line_15mb.jsonl", lambda p: _long_field(p, 15 * 2**20, "segment"),
          "one line of 15 MiB (its segment), under the 16 MiB limit: scored"),
    Shape("big_lines_2mb", "big_lines_2mb.jsonl", lambda p: _big_lines(p, 30, 2 * 2**20),
          "30 lines of 2 MiB (their segments): scored, each in a piece of its own"),
    Shape("ids_5m", "ids_5m.jsonl", lambda p: _many_ids(p, 5_000_000),
          "one line of 5M retrieved ids (about 54 MB)"),
    Shape("bad_lines_10m", "bad_lines_10m.jsonl", lambda p: _short_bad_lines(p, 10_000_000),
          "a record, then 10M lines `x` (20 MB)"),
    Shape("trec_run_1m", "trec_run_1m.txt", lambda p: _trec_run(p, 1_000_000),
          "a TREC run of 1M lines (10,000 queries of 100), --trec-run", _as_trec_run),
    Shape("trec_run_4m", "trec_run_4m.txt", lambda p: _trec_run(p, 4_000_000),
          "a TREC run of 4M lines (40,000 queries of 100), --trec-run", _as_trec_run),
    Shape("trec_run_12m", "trec_run_12m.txt", lambda p: _trec_run(p, 12_000_000),
          "a TREC run of 12M lines (120,000 queries of 100), --trec-run", _as_trec_run),
]  # fmt: skip


def ensure(shape: Shape) -> Path:
    """The shape's file, written on first use (a partial file never stays: written aside)."""
    path = FOLDER / shape.file
    if not path.is_file():
        FOLDER.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        shape.write(partial)
        partial.rename(path)
    return path


def _error_words(text: str) -> str:
    """The error a failed command printed, its first sentence or so; else its last line."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or line.startswith("[bench]")]
    chosen = errors[-1] if errors else (lines[-1] if lines else "")
    return chosen.split(" Possible solutions")[0][:200]


def measure(names: list[str]) -> list[str]:
    """One Markdown table row per shape."""
    rows = []
    for shape in (s for s in SHAPES if s.name in names):
        path = ensure(shape)
        proc = run_process([command(), "evaluate", *shape.arguments(path)])
        outcome = "ok" if proc.returncode == 0 else f"exit {proc.returncode}"
        if proc.returncode == 0:
            # the summary's first line (what was read, scored, quarantined) and the first reason
            lines = proc.stdout.splitlines()
            said = lines[0] if lines else ""
            reasons = [line.strip() for line in lines if line.startswith("  ")]
            if reasons:
                said += f" First: {reasons[0].replace(str(FOLDER) + '/', '')[:160]}"
        else:
            said = _error_words(proc.stderr)
        note = machine_note(proc.io_stall_s, proc.steal_s)
        rows.append(
            f"| {shape.name} | {shape.what} | {path.stat().st_size / MIB:,.1f} | {outcome} "
            f"| {proc.peak_rss_mib:,.0f} | {proc.wall_s:.1f} | {said.replace('|', '/')} | {note} |"
        )
        print(rows[-1], flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    args = parse_args(
        __doc__.splitlines()[0],
        argv,
        {
            "--shapes": {"default": ",".join(s.name for s in SHAPES)},
            "--max-rss-gib": {"type": float, "default": 6.0},
            "--report": {"default": None, "help": "keep the table as bench/results/REPORT"},
            "--label": {"default": "", "help": "what was measured, e.g. a commit"},
        },
    )
    common.MAX_RSS_GIB = args.max_rss_gib
    rows = measure([name for name in args.shapes.split(",") if name])
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"# Hostile inputs through `retrieval-pipeline evaluate` ({args.label or 'this tree'})",
        "",
        f"Measured {now} with `python bench/hostile.py`; default settings; a process past "
        f"{args.max_rss_gib:g} GiB of RSS is killed by the harness.",
        "",
        "| shape | what | file MiB | outcome | peak RSS MiB | wall s | said | machine |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
    ]
    if args.report:
        write_report(args.report, lines)
    else:
        print("\n".join(lines))


if __name__ == "__main__":
    main()
