"""The optional `click_labels` asset: a day's judgments from the store's click logs, debiased for
position (docs/click-labels.md), for the days and queries no annotator labelled.

Thin wiring: the work is `labels.command.labels_from_clicks`. For partition day D the click logs
of D and the `click_labels.lookback_days - 1` days before it (`clicks/date=YYYY-MM-DD/` in the
trace store) are read; the judgments (`label_source = "clicks"`) and PROPENSITIES.json are written
beside the warehouse, `click_labels/date=D/`, where a judgments reader takes them. Defined only
when `[click_labels] enabled = true` (`defs.build_defs`), so a pipeline without click logs has no
such asset. It touches no table: no DuckDB pool.
"""

from pathlib import Path

import dagster as dg

from retrieval_pipeline import gate
from retrieval_pipeline.config import PipelineConfig
from retrieval_pipeline.defs.nightly.assets import GROUP, SINGLE_RUN, range_metadata
from retrieval_pipeline.defs.partitions import daily_partitions, partition_days
from retrieval_pipeline.defs.resources import (
    PipelineSettingsResource,
    TraceStoreResource,
    WarehouseResource,
)
from retrieval_pipeline.labels.clicks import ClickLabelOptions
from retrieval_pipeline.labels.command import ClickLabelsRun, labels_from_clicks, summary_lines
from retrieval_pipeline.store import ClickLogStore, TraceStoreError

FOLDER = "click_labels"


def output_folder(warehouse: WarehouseResource, day_text: str) -> Path:
    """Where the click labels of a day are written: beside the warehouse file."""
    return warehouse.folder() / FOLDER / f"date={day_text}"


def _options(config: PipelineConfig) -> ClickLabelOptions:
    section = config.click_labels
    return ClickLabelOptions(
        section.max_rank, section.min_impressions, section.clip, tuple(section.cut_points)
    )


@dg.asset(
    partitions_def=daily_partitions,
    backfill_policy=SINGLE_RUN,
    group_name=GROUP,
    kinds={"python"},
)
def click_labels(
    context: dg.AssetExecutionContext,
    trace_store: TraceStoreResource,
    warehouse: WarehouseResource,
    settings: PipelineSettingsResource,
) -> dg.MaterializeResult:
    """Judgments from the click logs of the look-back window ending at each day: examination
    propensities by intervention harvesting, inverse-propensity-weighted click rates, grades
    0..3; pairs with too few impressions left unjudged."""
    start, end = partition_days(context)
    config = settings.load()
    store = trace_store.get_store()
    if not isinstance(store, ClickLogStore):
        raise dg.Failure(description=f"{store.describe()} holds no click logs (no click_files)")
    runs: list[tuple[str, ClickLabelsRun]] = []
    for day in gate.days_between(start, end):
        first, last = config.click_labels.window(day)
        try:
            files = [f for d in gate.days_between(first, last) for f in store.click_files(d)]
        except TraceStoreError as exc:
            raise dg.Failure(description=str(exc)) from exc
        folder = output_folder(warehouse, day.isoformat())
        try:
            run = labels_from_clicks(
                files,
                folder / "judgments.parquet",
                folder / "PROPENSITIES.json",
                _options(config),
                folder / "quarantine.jsonl",
            )
        except (ValueError, OSError) as exc:
            raise dg.Failure(description=f"click labels of {day.isoformat()}: {exc}") from exc
        context.log.info("\n".join(summary_lines(run)))
        runs.append((day.isoformat(), run))
    day_text, last_run = runs[-1]
    metadata: dict[str, dg.RawMetadataValue] = {
        **range_metadata(start, end),
        "summary": "\n".join(f"{d}: {summary_lines(r)[1]}" for d, r in runs),
        "label_source": "clicks",
        "impressions_used": last_run.counts.used,
        "impressions_quarantined": last_run.counts.quarantined,
        "labelled_pairs": last_run.labels.judgments.num_rows,
        "unjudged_pairs": last_run.labels.unjudged,
        "judgments": dg.MetadataValue.path(
            str(output_folder(warehouse, day_text) / "judgments.parquet")
        ),
    }
    for rank, value in last_run.propensities.values.items():
        metadata[f"propensity rank {rank}"] = float("nan") if value is None else value
    return dg.MaterializeResult(metadata=metadata)
