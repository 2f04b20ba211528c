"""Jobs for the Dask tests, at module level so that Dask's worker processes can import them
(Dagster reconstructs a job on the worker from its module and name)."""

import os

import dagster as dg
from dagster_dask import dask_executor


@dg.op
def squares() -> list[int]:
    """1, 4, 9, ..., 100."""
    return [n * n for n in range(1, 11)]


@dg.op
def total(values: list[int]) -> dict[str, int]:
    """The sum, and the process that computed it."""
    return {"sum": sum(values), "pid": os.getpid()}


@dg.job(executor_def=dask_executor)
def sum_of_squares() -> None:
    total(squares())
