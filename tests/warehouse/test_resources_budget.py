"""DuckDB's threads and memory limit chosen together (retrieval_pipeline.resources_budget)."""

import pytest

from retrieval_pipeline.resources_budget import (
    FLOOR_BYTES,
    MEMORY_LIMIT_ENV,
    MIB,
    PER_THREAD_BYTES,
    THREADS_ENV,
    BudgetError,
    Machine,
    choose,
    from_environment,
    parse_memory_size,
    parse_threads,
    this_machine,
)

GIB = 2**30


def test_the_constants_are_the_measured_ones() -> None:
    assert PER_THREAD_BYTES == 128 * MIB
    assert FLOOR_BYTES == 512 * MIB


@pytest.mark.parametrize(
    ("cores", "memory_gib", "threads", "limit_mib"),
    [
        (1, None, 1, 512),  # one core, memory unknown: the floor
        (2, 24, 2, 512),  # this machine: 2 x 128 = 256 MiB, raised to the floor
        (4, 16, 4, 512),  # 4 x 128 = 512 MiB, the floor itself
        (8, 64, 8, 8 * 128),
        (16, 128, 16, 16 * 128),  # the machine: 2 GiB, where 512MB failed
        (64, 8, 32, 32 * 128),  # half of 8 GiB holds 4096 / 128 = 32 threads, not 64
        (16, 1, 4, 512),  # half of 1 GiB holds 512 / 128 = 4 threads
        (16, 0.25, 1, 512),  # half of 256 MiB holds 1 thread; the floor still applies
    ],
)
def test_default_threads_per_core_within_half_the_memory(
    cores: int, memory_gib: float | None, threads: int, limit_mib: int
) -> None:
    memory = int(memory_gib * GIB) if memory_gib is not None else None
    budget = choose(Machine(cores, memory))
    assert (budget.threads, budget.memory_limit) == (threads, f"{limit_mib}MiB")
    assert budget.memory_bytes == limit_mib * MIB
    assert budget.config() == {"threads": threads, "memory_limit": f"{limit_mib}MiB"}


def test_threads_given_bring_their_memory() -> None:
    # forced to 16 threads on this 2-core machine: 16 x 128 MiB
    budget = choose(Machine(2, 24 * GIB), threads_text="16")
    assert (budget.threads, budget.memory_limit) == (16, f"{16 * 128}MiB")
    assert THREADS_ENV in budget.reason
    # a few threads still get the floor
    assert choose(Machine(2, 24 * GIB), threads_text=" 3 ").memory_limit == "512MiB"


def test_memory_given_caps_the_threads() -> None:
    # 8GB = 8e9 bytes holds 8e9 // (128 * 2**20) = 59 threads; 16 cores cap it at 16
    assert 8 * 10**9 // PER_THREAD_BYTES == 59
    budget = choose(Machine(16, 128 * GIB), memory_text="8GB")
    assert (budget.threads, budget.memory_limit, budget.memory_bytes) == (16, "8GB", 8 * 10**9)
    # 1GB = 1e9 bytes holds 1e9 // 134217728 = 7 threads of the 16 cores
    assert 10**9 // PER_THREAD_BYTES == 7
    budget = choose(Machine(16, 128 * GIB), memory_text="1GB")
    assert (budget.threads, budget.memory_limit) == (7, "1GB")
    # the old default, given explicitly on 16 cores: 512e6 // 134217728 = 3 threads
    assert choose(Machine(16, 128 * GIB), memory_text="512MB").threads == 3
    assert MEMORY_LIMIT_ENV in choose(Machine(16, None), memory_text="512MB").reason


def test_both_given_are_kept_and_a_thin_share_is_named() -> None:
    budget = choose(Machine(2, 24 * GIB), threads_text="16", memory_text="512MB")
    assert (budget.threads, budget.memory_limit) == (16, "512MB")
    # 512e6 / 16 = 32e6 bytes = 30 MiB a thread, under 128
    assert f"{512 * 10**6 // 16 // MIB} MiB a thread" in budget.reason
    assert "may run out of memory" in budget.reason
    roomy = choose(Machine(2, 24 * GIB), threads_text="2", memory_text="4GB")
    assert "may run out" not in roomy.reason


def test_a_share_divides_the_machine() -> None:
    # four shards on a 16-core, 128 GiB machine: 4 cores each, 4 x 128 = 512 MiB each
    assert choose(Machine(16, 128 * GIB), share=4).config() == {
        "threads": 4,
        "memory_limit": "512MiB",
    }
    # four shards on 16 cores and 4 GiB: 1 GiB each, half of it holds 4 threads
    assert choose(Machine(16, 4 * GIB), share=4).threads == 4
    # more shards than cores: one thread each
    assert choose(Machine(2, 24 * GIB), share=4).threads == 1
    # a percentage is of this process's share: 50% of 16 GiB / 2 = 4 GiB
    assert choose(Machine(16, 16 * GIB), memory_text="50%", share=2).memory_bytes == 4 * GIB
    with pytest.raises(ValueError, match="share"):
        choose(Machine(2, None), share=0)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("512MB", 512 * 10**6),
        ("512mb", 512 * 10**6),
        ("1G", 10**9),
        ("1.5GB", 1_500_000_000),
        ("2GiB", 2 * GIB),
        ("8 GB", 8 * 10**9),
        ("3 MiB", 3 * MIB),
        ("25%", 2 * GIB),
    ],
)
def test_memory_sizes_as_duckdb_reads_them(text: str, size: int) -> None:
    assert parse_memory_size(text, 8 * GIB) == size


@pytest.mark.parametrize("text", ["lots", "512", "12 parsecs", "-1GB", "0.5KB", "GB"])
def test_a_bad_memory_size_names_the_variable(text: str) -> None:
    with pytest.raises(BudgetError, match=MEMORY_LIMIT_ENV):
        parse_memory_size(text, 8 * GIB)


def test_a_percentage_needs_the_machines_memory() -> None:
    with pytest.raises(BudgetError, match="memory is unknown"):
        choose(Machine(2, None), memory_text="50%")


@pytest.mark.parametrize("text", ["0", "-2", "1.5", "two", ""])
def test_a_bad_thread_count_names_the_variable(text: str) -> None:
    with pytest.raises(BudgetError, match=THREADS_ENV):
        parse_threads(text)


def test_blank_variables_count_as_unset() -> None:
    machine = Machine(16, 128 * GIB)
    env = {THREADS_ENV: " ", MEMORY_LIMIT_ENV: ""}
    assert from_environment(env, machine) == choose(machine)
    env = {THREADS_ENV: "abc"}
    # read through retrieval_pipeline.environment, as every variable is
    with pytest.raises(ValueError, match=f"{THREADS_ENV}='abc': must be a whole number"):
        from_environment(env, machine)


def test_this_machine_is_within_what_the_process_may_use() -> None:
    import os

    machine = this_machine()
    assert 1 <= machine.cores <= len(os.sched_getaffinity(0))
    assert machine.memory_bytes is None or machine.memory_bytes > 0
