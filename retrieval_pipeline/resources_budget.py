"""How many threads DuckDB runs and how much memory it may hold, chosen together; pure.

DuckDB starts one worker thread per core it sees, while its `memory_limit` is one budget shared by
all of them, and some of its operators hold memory per thread that they cannot spill (the
per-trace list aggregates of `evaluate`'s table, the metric step's hash tables). A fixed limit
therefore fails on a machine with many cores: at 512MB, 1M traces through `evaluate` fail with
"Out of Memory Error" at 8 or more threads and pass at 4 (docs/scaling.md, "Threads and memory").

The rule: each thread gets `PER_THREAD_BYTES`, the limit is never below `FLOOR_BYTES` (about the old
fixed default, so a machine of up to four cores runs much as before), and when the threads' memory
would pass `MACHINE_SHARE` of the memory this process may use, the threads are cut to what fits
instead. `RETRIEVAL_PIPELINE_DUCKDB_THREADS` and `RETRIEVAL_PIPELINE_DUCKDB_MEMORY_LIMIT` override
either side; given one, the other follows from it by the same rule; given both, both are used as
they are. A `share` divides the machine between processes that run at once (the shards of a
nightly day on one machine), so that together they stay within it.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from retrieval_pipeline import environment

THREADS_ENV = environment.DUCKDB_THREADS
MEMORY_LIMIT_ENV = environment.DUCKDB_MEMORY_LIMIT

MIB = 2**20
# The least limit: about the old fixed default (512MB, which DuckDB reads as 488 MiB).
FLOOR_BYTES = 512 * MIB
# Memory per DuckDB thread. Measured at 1M traces (docs/scaling.md): `evaluate`'s per-trace table
# failed at 8 threads in 512MB (64 MiB a thread) and passed in 768MB (92 MiB a thread); 128 MiB a
# thread is also DuckDB's own stated minimum.
PER_THREAD_BYTES = 128 * MIB
# Of the memory this process may use, the part DuckDB's limit may take: DuckDB's guide advises
# 50-60% because some of its allocations are outside the limit, and pyarrow's pieces need room.
MACHINE_SHARE = 0.5

# DuckDB's memory units: decimal (KB = 1000 B) and binary (KiB = 1024 B), a bare K/M/G/T being
# decimal as DuckDB reads it, and a percentage of the machine's memory.
_UNITS = {
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*|%)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Machine:
    """What one process may use: CPUs it may run on, and memory (None: unknown)."""

    cores: int
    memory_bytes: int | None


@dataclass(frozen=True)
class DuckDBBudget:
    """DuckDB's `threads` and `memory_limit` for one connection, and why, in words."""

    threads: int
    memory_limit: str  # as DuckDB takes it: the variable's text, or whole MiB ("2048MiB")
    memory_bytes: int
    reason: str

    def config(self) -> dict[str, object]:
        """The settings as `duckdb.connect(config=...)` takes them."""
        return {"threads": self.threads, "memory_limit": self.memory_limit}


class BudgetError(ValueError):
    """A variable that does not say a thread count or a memory size; the message names it."""


def parse_threads(text: str, name: str = THREADS_ENV) -> int:
    """A thread count: a whole number of at least 1."""
    stripped = text.strip()
    if not stripped.isdigit() or int(stripped) < 1:
        raise BudgetError(f"{name} must be a whole number of threads >= 1, not {text!r}")
    return int(stripped)


def parse_memory_size(text: str, machine_bytes: int | None, name: str = MEMORY_LIMIT_ENV) -> int:
    """Bytes of a DuckDB memory size ("512MB", "4GiB", "8 GB", "50%" of `machine_bytes`)."""
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else ""
    if match is None or (unit != "%" and unit not in _UNITS):
        raise BudgetError(
            f"{name} must be a memory size such as 512MB, 4GB or 8GiB (units: B, KB, MB, GB, "
            f"TB, KiB, MiB, GiB, TiB, or % of the machine's memory), not {text!r}"
        )
    number = float(match.group(1))
    if unit == "%":
        if machine_bytes is None:
            raise BudgetError(f"{name}={text!r}: this machine's memory is unknown; give a size")
        size = int(number / 100 * machine_bytes)
    else:
        size = int(number * _UNITS[unit])
    if size < MIB:
        raise BudgetError(f"{name} must be at least 1MiB, not {text!r}")
    return size


def _mib_text(size: int) -> str:
    return f"{size // MIB}MiB"


def choose(
    machine: Machine,
    threads_text: str | None = None,
    memory_text: str | None = None,
    share: int = 1,
) -> DuckDBBudget:
    """DuckDB's threads and memory limit on `machine`, divided between `share` processes, with
    the variables' texts (None or blank: not set) taking precedence."""
    if share < 1:
        raise ValueError(f"share must be at least 1, not {share}")
    cores = max(1, machine.cores // share)
    whole = machine.memory_bytes // share if machine.memory_bytes is not None else None
    given_threads = parse_threads(threads_text) if threads_text and threads_text.strip() else None
    given_memory = (
        parse_memory_size(memory_text, whole) if memory_text and memory_text.strip() else None
    )
    if given_threads is not None and given_memory is not None:
        assert memory_text is not None
        per_thread = given_memory // given_threads
        note = (
            f" ({per_thread // MIB} MiB a thread, under the {PER_THREAD_BYTES // MIB} MiB a"
            " thread some statements need: DuckDB may run out of memory)"
            if per_thread < PER_THREAD_BYTES
            else ""
        )
        reason = f"{THREADS_ENV} and {MEMORY_LIMIT_ENV} as given{note}"
        return DuckDBBudget(given_threads, memory_text.strip(), given_memory, reason)
    if given_memory is not None:
        assert memory_text is not None
        threads = max(1, min(cores, given_memory // PER_THREAD_BYTES))
        reason = (
            f"{MEMORY_LIMIT_ENV} as given; {threads} thread(s): at most one per"
            f" {PER_THREAD_BYTES // MIB} MiB of it and one per core ({cores})"
        )
        return DuckDBBudget(threads, memory_text.strip(), given_memory, reason)
    if given_threads is not None:
        size = max(FLOOR_BYTES, given_threads * PER_THREAD_BYTES)
        reason = (
            f"{THREADS_ENV} as given; memory {PER_THREAD_BYTES // MIB} MiB a thread, at least"
            f" {FLOOR_BYTES // MIB} MiB"
        )
        return DuckDBBudget(given_threads, _mib_text(size), size, reason)
    threads = cores
    reason = f"one thread per core ({cores}), {PER_THREAD_BYTES // MIB} MiB each"
    if whole is not None:
        budget = int(whole * MACHINE_SHARE)
        fitting = max(1, budget // PER_THREAD_BYTES)
        if fitting < threads:
            threads = fitting
            reason = (
                f"{threads} thread(s) of {cores} core(s): {PER_THREAD_BYTES // MIB} MiB each"
                f" within {MACHINE_SHARE:.0%} of {whole / 2**30:.1f} GiB"
            )
    size = max(FLOOR_BYTES, threads * PER_THREAD_BYTES)
    if size == FLOOR_BYTES:
        reason += f", at least {FLOOR_BYTES // MIB} MiB in all"
    return DuckDBBudget(threads, _mib_text(size), size, reason)


def this_machine() -> Machine:
    """The CPUs this process may run on (its affinity, within a cgroup's CPU quota) and the
    memory it may use (physical memory, within a cgroup's limit)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = _cgroup_cpu_quota()
    if quota is not None:
        cores = max(1, min(cores, math.ceil(quota)))
    memory: int | None = None
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        memory = None
    limit = _cgroup_memory_limit()
    if limit is not None:
        memory = limit if memory is None else min(memory, limit)
    return Machine(cores=max(1, cores), memory_bytes=memory)


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _cgroup_cpu_quota() -> float | None:
    """CPUs a cgroup v2 quota allows (`cpu.max`: "quota period"), None without one."""
    text = _read("/sys/fs/cgroup/cpu.max")
    if not text:
        return None
    parts = text.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        return int(parts[0]) / int(parts[1])
    except (ValueError, ZeroDivisionError):
        return None


def _cgroup_memory_limit() -> int | None:
    """Bytes a cgroup v2 memory limit allows (`memory.max`), None without one."""
    text = _read("/sys/fs/cgroup/memory.max")
    if not text or text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def from_environment(
    environ: Mapping[str, str] | None = None, machine: Machine | None = None, share: int = 1
) -> DuckDBBudget:
    """`choose` on this machine (or `machine`) with the variables of `environ` (os.environ)."""
    # each variable checked where every variable is (`environment`), its name in the message
    threads = environment.duckdb_threads(environ)
    memory = environment.memory_limit(environ, default="")
    return choose(
        machine or this_machine(),
        None if threads is None else str(threads),
        memory or None,
        share,
    )


# Parallel validation (docs/scaling.md, "Parallel validation"): one piece validated per this many
# DuckDB threads, at most MAX_DEFAULT_WORKERS. Each piece's statements and pyarrow's parse are
# multi-threaded already, so a worker a core would only queue them; provisional until a sweep on a
# machine with the cores sets it (bench/threads.py).
THREADS_PER_VALIDATION_WORKER = 4
MAX_DEFAULT_WORKERS = 8


def validation_workers(threads: int, environ: Mapping[str, str] | None = None) -> int:
    """How many pieces an ingestion validates at once: $RETRIEVAL_PIPELINE_VALIDATION_WORKERS,
    else one per THREADS_PER_VALIDATION_WORKER of DuckDB's `threads` (rounded up, at most
    MAX_DEFAULT_WORKERS): 1, today's single validating thread, up to four threads. Each worker
    holds a piece, so memory is that of the workers' pieces plus the one read ahead and the one
    being written."""
    given = environment.validation_workers(environ)
    if given is not None:
        return given
    return max(1, min(MAX_DEFAULT_WORKERS, math.ceil(threads / THREADS_PER_VALIDATION_WORKER)))
