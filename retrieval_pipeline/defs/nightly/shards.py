"""The nightly's `traces`, `labels` and `query_metrics` of a sharded day: one graph-backed asset
whose shard steps run at once under the job's executor (docs/scaling.md, "In Dagster").

`[execution] shards = N` (N > 1) builds `shard_plan` -> `shard_0_of_N` ... -> `shard_merge`: a
static fan-out, built when the definitions load, because the Dask executor plans a run's steps
once at its start (a `DynamicOutput` fan-out would silently run none of its shards there), and
N named inputs into the merge rather than one fan-in list (which arrives empty under Dask). Only
`shard_merge` opens the warehouse (pool `duckdb`); the shards score their files in private
databases and write them under the shard root. The three asset keys are the single-process ones,
so checks, downstream assets and selections are unchanged.
"""

import os
from datetime import date
from pathlib import Path
from typing import Any

import dagster as dg

from retrieval_pipeline import gate
from retrieval_pipeline.defs.executor import POOL
from retrieval_pipeline.defs.nightly.assets import GROUP, SINGLE_RUN, range_metadata
from retrieval_pipeline.defs.partitions import daily_partitions, partition_days
from retrieval_pipeline.defs.resources import (
    PipelineSettingsResource,
    TraceStoreResource,
    WarehouseResource,
)
from retrieval_pipeline.ingest.files import TraceFileError
from retrieval_pipeline.ingest.span_pieces import SpanReading
from retrieval_pipeline.resources_budget import this_machine
from retrieval_pipeline.shards import DayFile, day_files, deal, default_root, shard_folder
from retrieval_pipeline.store import TraceStoreError
from retrieval_pipeline.warehouse.shards import (
    MergedDay,
    ShardOutputError,
    export_judgments,
    merge_shards,
    run_shard,
)


@dg.op(ins={"after": dg.In(dg.Nothing)}, pool=POOL)
def shard_plan(
    context: dg.OpExecutionContext,
    trace_store: TraceStoreResource,
    warehouse: WarehouseResource,
    settings: PipelineSettingsResource,
) -> dict[str, Any]:
    """Each day's files dealt to the shards, the corpus snapshot and the judgments they all score
    against, and where they write."""
    start, end = partition_days(context)
    execution = settings.load().execution
    store = trace_store.get_store()
    try:
        days = {
            day.isoformat(): [
                [vars(file) for file in share]
                for share in deal(day_files(store.trace_files(day)), execution.shards)
            ]
            for day in gate.days_between(start, end)
        }
        corpus = store.corpus_file()
        root = execution.shard_root or default_root(warehouse.folder())
        # the judgments the `judgments` asset loaded, as the traces of one process would see them
        with warehouse.get_connection() as conn:
            judged = export_judgments(conn, root, context.run.run_id)
    except (TraceStoreError, OSError) as exc:
        raise dg.Failure(description=str(exc)) from exc
    return {
        "root": root,
        "run_id": context.run.run_id,
        "corpus": str(corpus) if corpus is not None else None,
        "judgments": [judged] if judged else [],
        "keep_retrieved_ids": warehouse.store_retrieved_ids,  # as one process would store them
        "days": days,
    }


def _share(executor: str, shards: int) -> int:
    """How many shards run at once on this machine: all of them, up to one per core, under the
    multiprocess executor; one per process elsewhere (on Dask, set the DuckDB variables on the
    workers to divide a machine between them)."""
    return min(shards, this_machine().cores) if executor == "multiprocess" else 1


def shard_op(index: int, count: int) -> dg.OpDefinition:
    """The step of shard `index` of `count`: its files of every day of the run."""

    @dg.op(name=f"shard_{index}_of_{count}")
    def shard(
        context: dg.OpExecutionContext, settings: PipelineSettingsResource, plan: dict[str, Any]
    ) -> dict[str, Any]:
        config = settings.load()
        share = _share(config.execution.executor, count)
        corpus = Path(plan["corpus"]) if plan["corpus"] else None
        manifests = {}
        for day_text, shares in plan["days"].items():
            day = date.fromisoformat(day_text)
            files = [DayFile(**file) for file in shares[index]]
            folder = shard_folder(plan["root"], day, plan["run_id"], index, count)
            try:
                manifests[day_text] = run_shard(
                    files, day, corpus, config.scored_metrics(), config.gain,
                    config.relevance_level, folder, index, share,
                    gmax=config.gmax, judged_only=config.judged_only,
                    spans=SpanReading(config.trace_format), judgments=plan["judgments"],
                    keep_retrieved_ids=plan["keep_retrieved_ids"],
                )  # fmt: skip
            except (TraceFileError, OSError) as exc:
                raise dg.Failure(description=f"shard {index}, {day_text}: {exc}") from exc
            context.log.info(
                f"shard {index} of {count}, {day_text}: {len(files)} file(s),"
                f" {manifests[day_text]['read']} records read (process {os.getpid()})"
            )
        return manifests

    return shard


def merge_op(count: int) -> dg.OpDefinition:
    """The step that merges `count` shards into the warehouse and materializes the three assets."""

    @dg.op(
        name="shard_merge",
        pool=POOL,
        ins={f"shard_{i}": dg.In(dict) for i in range(count)},
        out={
            "traces": dg.Out(dg.Nothing),
            "labels": dg.Out(dg.Nothing),
            "query_metrics": dg.Out(dg.Nothing),
        },
    )
    def shard_merge(
        context: dg.OpExecutionContext,
        warehouse: WarehouseResource,
        **shards: dict[str, Any],
    ) -> Any:
        start, end = partition_days(context)
        merged: list[MergedDay] = []
        with warehouse.get_connection() as conn:
            for day in gate.days_between(start, end):
                manifests = [shards[f"shard_{i}"][day.isoformat()] for i in range(count)]
                try:
                    merged.append(merge_shards(conn, day, manifests))
                except ShardOutputError as exc:
                    raise dg.Failure(description=str(exc)) from exc
        yield from _outputs(start, end, merged)

    return shard_merge


def _outputs(start: date, end: date, merged: list[MergedDay]) -> Any:
    """The three assets' materializations, with the counts the single-process assets report
    (the merge's: the shards' counts less the records repeated across them)."""
    labels, stale = sum(m.labels for m in merged), sum(m.stale_labels for m in merged)
    traces, annotated = sum(m.valid for m in merged), sum(m.annotated for m in merged)
    read = sum(m.read for m in merged)
    quarantined = sum(m.quarantined for m in merged)
    repeated = sum(m.repeated_across_shards for m in merged)
    shards = merged[0].shards if merged else 0
    rows_folder = merged[0].rows_folder if merged else ""
    summary = (
        f"{read} records from {sum(m.files for m in merged)} file(s) in {shards} shards: "
        f"{read - quarantined} valid, {quarantined} quarantined"
        f" ({repeated} repeating a trace_id another shard held first); the rows stay in the"
        f" shards' files, placed beside the warehouse in {rows_folder} (not inserted)"
    )
    yield dg.Output(
        None,
        "traces",
        metadata={
            **range_metadata(start, end),
            "summary": summary,
            "records_read": read,
            "records_valid": read - quarantined,
            "records_quarantined": quarantined,
            "quarantine_rate": quarantined / read if read else float("nan"),
            "shards": shards,
            "shards_with_files": max((m.shards_with_files for m in merged), default=0),
            "repeated_across_shards": repeated,
            "rows_folder": dg.MetadataValue.path(rows_folder),
        },
    )
    yield dg.Output(
        None,
        "labels",
        metadata={
            **range_metadata(start, end),
            "summary": f"{labels} labels, {stale} dropped as stale",
            "labels": labels,
            "stale_labels": stale,
            "stale_label_rate": stale / labels if labels else float("nan"),
        },
    )
    yield dg.Output(
        None,
        "query_metrics",
        metadata={
            **range_metadata(start, end),
            "summary": f"{traces} traces scored: {annotated} annotated",
            "traces": traces,
            "annotated_traces": annotated,
            "coverage": annotated / traces if traces else float("nan"),
        },
    )


def sharded_day(shards: int) -> dg.AssetsDefinition:
    """`traces`, `labels` and `query_metrics` of a day split into `shards` shard steps."""
    shard_ops = [shard_op(index, shards) for index in range(shards)]
    merge = merge_op(shards)

    @dg.graph_multi_asset(
        name="sharded_day",
        outs={
            "traces": dg.AssetOut(
                group_name=GROUP, description="The day's trace records, validated in shards."
            ),
            "labels": dg.AssetOut(
                group_name=GROUP, description="The day's labels, marked fresh or stale."
            ),
            "query_metrics": dg.AssetOut(
                group_name=GROUP, description="Every configured metric for each trace."
            ),
        },
        ins={
            "corpus": dg.AssetIn(dagster_type=dg.Nothing),
            "judgments": dg.AssetIn(dagster_type=dg.Nothing),
        },
        partitions_def=daily_partitions,
        backfill_policy=SINGLE_RUN,
    )
    def sharded(corpus: Any, judgments: Any) -> Any:
        plan = shard_plan(after=[corpus, judgments])
        parts = {f"shard_{index}": op(plan) for index, op in enumerate(shard_ops)}
        return merge(**parts)

    return sharded
