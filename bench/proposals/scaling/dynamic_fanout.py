import os

import dagster as dg


@dg.op(out=dg.DynamicOut())
def fan():
    for i in range(3):
        yield dg.DynamicOutput(i, mapping_key=str(i))


@dg.op
def work(i: int) -> int:
    return i * 10


@dg.op
def total(xs: list[int]) -> int:
    return sum(xs)


def _executor():
    from dask_executor_fixed import fixed_dask_executor

    if os.environ.get("PROTO_EXECUTOR") == "stock":
        from dagster_dask import dask_executor

        return dask_executor.configured(
            {"cluster": {"existing": {"address": os.environ.get("PROTO_DASK", "x")}}}
        )
    return fixed_dask_executor.configured(
        {"cluster": {"existing": {"address": os.environ.get("PROTO_DASK", "x")}}}
    )


@dg.job(executor_def=_executor())
def dyn():
    total(fan().map(work).collect())


defs = dg.Definitions(jobs=[dyn])
