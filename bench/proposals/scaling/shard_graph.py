"""Prototype (docs/scaling.md): a daily asset sharded into N static shard steps and a merge step.

    export DAGSTER_HOME=/tmp/proto-home; mkdir -p $DAGSTER_HOME   # persistent: required
    cd bench/proposals/scaling
    dagster asset materialize -m shard_graph --select '*' --partition 2026-11-30
    dagster asset materialize -m shard_graph --select '*' \\
        --partition-range '2026-11-28...2026-11-30'
    # on a Dask cluster (python cluster.py ADDRESS_FILE, started with PROTO_POOL=duckdb set):
    export PROTO_EXECUTOR=dask PROTO_DASK=$(cat ADDRESS_FILE) PROTO_POOL=duckdb
    dagster asset materialize -m shard_graph --select '*' --partition 2026-11-30

`PROTO_SHARDS` (default 3) shards, `PROTO_SLEEP` seconds of work in each, `PROTO_POOL` the merge's
pool. The ops log their process ids: the shards run in separate processes (multiprocess) or on
both Dask workers, and the merge gets every shard's output through N named inputs.
"""

import os
import time

import dagster as dg

N = int(os.environ.get("PROTO_SHARDS", "3"))
POOL = os.environ.get("PROTO_POOL") or None
daily = dg.DailyPartitionsDefinition(start_date="2026-11-01", timezone="UTC")
SINGLE_RUN = dg.BackfillPolicy.single_run()


@dg.op(ins={"after": dg.In(dg.Nothing)})
def plan(context: dg.OpExecutionContext) -> list[str]:
    window = context.partition_time_window
    context.log.info(f"plan for {window.start}..{window.end} pid={os.getpid()}")
    return [f"f{i}" for i in range(7)]


def shard_op(index: int, count: int) -> dg.OpDefinition:
    @dg.op(name=f"shard_{index}_of_{count}")
    def shard(context: dg.OpExecutionContext, files: list[str]) -> dict:
        mine = files[index::count]
        time.sleep(float(os.environ.get("PROTO_SLEEP", "0")))
        key = context.partition_key if context.has_partition_key else context.partition_key_range
        context.log.info(f"shard {index}: {mine} pid={os.getpid()} key={key}")
        return {"index": index, "files": mine, "pid": os.getpid()}

    return shard


@dg.op(
    pool=POOL,
    ins={f"shard_{i}": dg.In() for i in range(N)},
    out={"traces": dg.Out(dg.Nothing), "query_metrics": dg.Out(dg.Nothing)},
)
def merge(context: dg.OpExecutionContext, **shards: dict):
    parts = list(shards.values())
    context.log.info(
        f"merge {sorted(p['index'] for p in parts)} pids={[p['pid'] for p in parts]}"
        f" mine={os.getpid()}"
    )
    yield dg.Output(None, "traces", metadata={"shards": len(parts)})
    yield dg.Output(None, "query_metrics")


@dg.asset(partitions_def=daily, backfill_policy=SINGLE_RUN)
def corpus_dep() -> None:
    return None


@dg.graph_multi_asset(
    outs={"traces": dg.AssetOut(), "query_metrics": dg.AssetOut()},
    partitions_def=daily,
    backfill_policy=SINGLE_RUN,
    ins={"corpus_dep": dg.AssetIn(dagster_type=dg.Nothing)},
)
def sharded(corpus_dep):
    files = plan(after=corpus_dep)
    parts = [shard_op(i, N)(files) for i in range(N)]
    return merge(**{f"shard_{i}": part for i, part in enumerate(parts)})


@dg.asset(partitions_def=daily, deps=["query_metrics"], pool=POOL, backfill_policy=SINGLE_RUN)
def segment_metrics(context: dg.AssetExecutionContext) -> None:
    context.log.info(f"segment_metrics pid={os.getpid()}")


@dg.asset_check(asset="traces", blocking=True)
def quarantine_rate() -> dg.AssetCheckResult:
    return dg.AssetCheckResult(passed=os.environ.get("PROTO_FAIL") != "1")


def _executor() -> dg.ExecutorDefinition:
    if os.environ.get("PROTO_EXECUTOR") == "dask":
        from dask_executor_fixed import fixed_dask_executor

        address = os.environ.get("PROTO_DASK", "unset on this worker")
        return fixed_dask_executor.configured({"cluster": {"existing": {"address": address}}})
    return dg.multiprocess_executor


defs = dg.Definitions(
    assets=[corpus_dep, sharded, segment_metrics],
    asset_checks=[quarantine_rate],
    jobs=[dg.define_asset_job("nightly", selection=dg.AssetSelection.all(), partitions_def=daily)],
    executor=_executor(),
)
