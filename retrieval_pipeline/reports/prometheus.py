"""A day's numbers in Prometheus' text exposition format, for node-exporter's textfile collector.

The nightly run writes `$RETRIEVAL_PIPELINE_METRICS_DIR/retrieval_pipeline.prom` (`metrics_path`);
node-exporter, started with `--collector.textfile.directory` on that folder, serves it with its own
metrics, so a team's Prometheus and Grafana see the segment metrics without reading DuckDB. The
file is replaced whole (`files.write_atomically`), so the collector never reads half of one.

Every series is a gauge (`docs/operations.md` lists them). Names follow Prometheus' conventions:
the `retrieval_eval_` prefix, `_ratio` for values in [0, 1], `_timestamp_seconds` for times,
plain names for counts; labels are few and bounded: `segment` (`__all__` is every segment of a
variant pooled, as in the warehouse), `variant` and `metric`, never a query or a trace id. A value
that is missing or not a number (no trace scored, no threshold) is left out rather than written as
NaN, so an alert on it cannot pass by accident.

The file describes the newest day written to it: a run for an older day (a backfill of the past)
leaves it as it is (`write_metrics_file` says so), and a run that did not succeed keeps the last
success's time from the file it replaces.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from retrieval_pipeline import environment
from retrieval_pipeline.files import write_text_atomically
from retrieval_pipeline.segments import OVERALL_SEGMENT
from retrieval_pipeline.text import finite

METRICS_DIR_ENV = environment.METRICS_DIR
FILE_NAME = "retrieval_pipeline.prom"
PREFIX = "retrieval_eval"
# The warehouse's verdicts (sql/agg_segment_metrics.sql): every state is written, 1 for the row's.
STATUSES = ("pass", "fail", "insufficient", "no_threshold")
# What each segment-metric row must hold (the columns of sql/agg_segment_metrics.sql it uses).
ROW_KEYS = (
    "partition_date",
    "segment",
    "variant",
    "metric",
    "traces",
    "annotated_traces",
    "n",
    "mean",
    "ci_low",
    "ci_high",
    "threshold",
    "coverage",
    "status",
)
# Optional: the share of retrieved documents that carry a judgment (judged@K), per segment and
# variant, once the warehouse computes it.
JUDGED_KEY = "judged_share"


# a day's reranker stage means and gains, rows as stored (`warehouse.stages`)
StageSeries = tuple[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]]]


class MetricsFileError(ValueError):
    """Rows, counts or a metrics folder that cannot be written as a metrics file."""


class Quality(Protocol):
    """A day's data-quality counts, as the warehouse's `QualityCounts` holds them
    (`sql/agg_partition_quality.sql`); a rate is None when its denominator is 0."""

    @property
    def records_read(self) -> int: ...
    @property
    def quarantined_records(self) -> int: ...
    @property
    def labels(self) -> int: ...
    @property
    def stale_labels(self) -> int: ...
    @property
    def quarantine_rate(self) -> float | None: ...
    @property
    def stale_label_rate(self) -> float | None: ...


@dataclass(frozen=True)
class WriteOutcome:
    """Whether the file was replaced, and in words why not."""

    written: bool
    path: Path
    reason: str = ""


def metrics_path(environ: Mapping[str, str] | None = None) -> Path | None:
    """`$RETRIEVAL_PIPELINE_METRICS_DIR/retrieval_pipeline.prom`; None when the variable is unset
    or empty (no file is written). MetricsFileError naming the variable when it is not a folder."""
    value = (os.environ if environ is None else environ).get(METRICS_DIR_ENV, "").strip()
    if not value:
        return None
    folder = Path(value)
    if not folder.is_dir():
        raise MetricsFileError(f"{METRICS_DIR_ENV}={value}: not an existing folder")
    return folder / FILE_NAME


def _day(value: object, where: str) -> date:
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    to_date = getattr(value, "date", None)  # a pandas Timestamp
    if callable(to_date):
        result = to_date()
        if isinstance(result, date):
            return result
    if isinstance(value, str):
        try:
            return date.fromisoformat(value)
        except ValueError:
            pass
    raise MetricsFileError(f"{where}: partition_date {value!r} is not a date")


def _epoch(moment: datetime, what: str) -> float:
    if moment.tzinfo is None:
        raise MetricsFileError(f"{what} must carry a time zone, got {moment.isoformat()}")
    return moment.timestamp()


def check_rows(rows: Iterable[Mapping[str, Any]]) -> tuple[date, list[Mapping[str, Any]]]:
    """The rows' one day and the rows; MetricsFileError naming the row (its position, segment,
    variant and metric) when a key is missing, a segment, variant and metric come twice (the
    exposition would repeat a series, which Prometheus refuses), or the rows cover more than one
    day."""
    checked: list[Mapping[str, Any]] = []
    days: set[date] = set()
    seen: dict[tuple[str, str, str], int] = {}
    for index, row in enumerate(rows):
        missing = [key for key in ROW_KEYS if key not in row]
        where = f"segment-metric row {index}"
        if missing:
            raise MetricsFileError(f"{where}: missing {', '.join(missing)}")
        where += f" ({row['segment']}, {row['variant']}, {row['metric']})"
        series = (str(row["segment"]), str(row["variant"]), str(row["metric"]))
        if series in seen:
            raise MetricsFileError(f"{where}: the same series as row {seen[series]}")
        seen[series] = index
        if row["status"] not in STATUSES:
            raise MetricsFileError(f"{where}: status {row['status']!r} is not one of {STATUSES}")
        days.add(_day(row["partition_date"], where))
        checked.append(row)
    if len(days) != 1:
        found = ", ".join(sorted(day.isoformat() for day in days)) or "none"
        raise MetricsFileError(f"a metrics file describes one day; the rows hold: {found}")
    return days.pop(), checked


def _family(name: str, doc: str, labels: Sequence[str] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=list(labels))


def _row_order(row: Mapping[str, Any]) -> tuple[bool, str, str, str]:
    return (
        row["segment"] != OVERALL_SEGMENT,
        str(row["segment"]),
        str(row["variant"]),
        row["metric"],
    )


def _metric_families(rows: Sequence[Mapping[str, Any]]) -> Iterator[Metric]:
    """The per-row series: mean, interval, threshold, scored traces and verdict."""
    keys = ("segment", "variant", "metric")
    per_row = {
        "mean": _family(
            "metric_mean_ratio", "Mean of the metric over the day's scored traces.", keys
        ),
        "ci_low": _family(
            "metric_ci_lower_ratio", "Lower end of the mean's 95% interval (in [0, 1]).", keys
        ),
        "ci_high": _family(
            "metric_ci_upper_ratio", "Upper end of the mean's 95% interval (in [0, 1]).", keys
        ),
        "threshold": _family(
            "metric_threshold_ratio", "The threshold the mean is checked against.", keys
        ),
        "n": _family("metric_scored_traces", "Traces the metric was scored on.", keys),
    }
    status = _family(
        "metric_status",
        "The threshold check's verdict: 1 for the row's state, 0 for the others.",
        (*keys, "status"),
    )
    for row in sorted(rows, key=_row_order):
        labels = [str(row["segment"]), str(row["variant"]), str(row["metric"])]
        for column, family in per_row.items():
            value = finite(row[column])
            if value is not None:
                family.add_metric(labels, value)
        for state in STATUSES:
            status.add_metric([*labels, state], float(row["status"] == state))
    yield from per_row.values()
    yield status


def _group_families(rows: Sequence[Mapping[str, Any]]) -> Iterator[Metric]:
    """The per-segment-and-variant series: traces, annotated traces, coverage, judged share."""
    keys = ("segment", "variant")
    traces = _family("traces", "Valid traces of the day.", keys)
    annotated = _family("annotated_traces", "Traces with fresh labels (scored).", keys)
    coverage = _family(
        "annotation_coverage_ratio", "Share of the day's traces with fresh labels.", keys
    )
    judged = _family(
        "judged_ratio", "Share of retrieved documents that carry a judgment (judged@K).", keys
    )
    seen: set[tuple[str, str]] = set()
    for row in sorted(rows, key=_row_order):
        group = (str(row["segment"]), str(row["variant"]))
        if group in seen:
            continue
        seen.add(group)
        for family, value in (
            (traces, row["traces"]),
            (annotated, row["annotated_traces"]),
            (coverage, row["coverage"]),
            (judged, row.get(JUDGED_KEY)),
        ):
            figure = finite(value)
            if figure is not None:
                family.add_metric(list(group), figure)
    yield from (traces, annotated, coverage)
    if judged.samples:
        yield judged


def _stage_families(
    means: Sequence[Mapping[str, Any]], gains: Sequence[Mapping[str, Any]]
) -> Iterator[Metric]:
    """The reranker's stages (docs/spans.md, "Stages in the nightly"): whether the day had one,
    each stage's mean per segment and variant, and the gain over its input with its interval.
    A day without reranker spans gives `reranker_stage 0` and no other stage series."""
    present = _family("reranker_stage", "1 when the day's spans hold a reranker stage, else 0.")
    present.add_metric([], float(bool(means)))
    yield present
    if not means:
        return
    keys = ("stage", "segment", "variant", "metric")
    stage_mean = _family(
        "stage_metric_mean_ratio", "Mean of the metric over a reranker stage's records.", keys
    )
    for row in sorted(means, key=lambda r: (str(r["stage"]), *_row_order(r))):
        value = finite(row["mean"])
        if value is not None:
            stage_mean.add_metric([str(row[key]) for key in keys], value)
    yield stage_mean
    per_gain = {
        "gain": _family(
            "reranker_gain",
            "Reranker output - input, mean over paired spans.",
            ("segment", "metric"),
        ),
        "ci_low": _family(
            "reranker_gain_ci_lower", "Lower end of the gain's 95% interval.", ("segment", "metric")
        ),
        "ci_high": _family(
            "reranker_gain_ci_upper", "Upper end of the gain's 95% interval.", ("segment", "metric")
        ),
        "pairs": _family(
            "reranker_gain_pairs", "Reranker spans paired for the gain.", ("segment", "metric")
        ),
    }
    for row in gains:
        labels = [str(row["segment"]), str(row["metric"])]
        for column, family in per_gain.items():
            value = finite(row[column])
            if value is not None:
                family.add_metric(labels, value)
    yield from per_gain.values()


def _quality_families(quality: Quality) -> Iterator[Metric]:
    for name, doc, value in (
        ("records_read", "Records read: valid traces plus quarantined ones.", quality.records_read),
        ("quarantined_records", "Records quarantined, with a reason.", quality.quarantined_records),
        ("quarantine_ratio", "Quarantined records / records read.", quality.quarantine_rate),
        ("labels", "Labels on the day's traces.", quality.labels),
        (
            "stale_labels",
            "Labels left out as stale (document gone or newer).",
            quality.stale_labels,
        ),
        ("stale_label_ratio", "Stale labels / labels.", quality.stale_label_rate),
    ):
        figure = finite(value)
        if figure is not None:
            family = _family(name, doc)
            family.add_metric([], figure)
            yield family


def _time_families(
    day: date, run_at: datetime, last_success_at: datetime | None
) -> Iterator[Metric]:
    midnight = datetime(day.year, day.month, day.day, tzinfo=UTC)
    times = (
        ("partition_timestamp_seconds", "Start (UTC) of the day these numbers describe.", midnight),
        ("last_run_timestamp_seconds", "When the run that wrote this file ended.", run_at),
        ("last_success_timestamp_seconds", "When a run last passed every check.", last_success_at),
    )
    for name, doc, moment in times:
        if moment is not None:
            family = _family(name, doc)
            family.add_metric([], _epoch(moment, name))
            yield family


class _Snapshot:
    """A fixed set of metric families, as a collector for one registry."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def exposition(
    rows: Iterable[Mapping[str, Any]],
    quality: Quality,
    run_at: datetime,
    last_success_at: datetime | None,
    stages: StageSeries | None = None,
) -> str:
    """The text exposition of one day's segment-metric rows and quality counts, with the run's
    end (`run_at`) and the last successful run's (None: no run has succeeded yet); `stages`:
    the day's reranker stage means and gains, as stored (None: no stage series)."""
    day, checked = check_rows(rows)
    families = [
        *_time_families(day, run_at, last_success_at),
        *_metric_families(checked),
        *_group_families(checked),
        *_quality_families(quality),
        *(_stage_families(*stages) if stages is not None else ()),
    ]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(families))
    return generate_latest(registry).decode("utf-8")


def _gauge(text: str, name: str) -> float | None:
    """The value of an unlabelled gauge in an exposition text; None when absent or unreadable."""
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and not sample.labels:
                    return float(sample.value)
    except (ValueError, TypeError):
        return None
    return None


def write_metrics_file(
    path: Path,
    rows: Iterable[Mapping[str, Any]],
    quality: Quality,
    run_at: datetime,
    succeeded: bool,
    stages: StageSeries | None = None,
) -> WriteOutcome:
    """Replace `path` with the day's exposition, unless it already describes a later day.

    `succeeded`: the run ended with every check passed; its end becomes the last success. A run
    that did not succeed keeps the previous file's last success (none if there was no file)."""
    day, checked = check_rows(rows)
    previous = path.read_text(encoding="utf-8") if path.is_file() else ""
    held = _gauge(previous, f"{PREFIX}_partition_timestamp_seconds")
    if held is not None:
        held_day = datetime.fromtimestamp(held, UTC).date()
        if held_day > day:
            return WriteOutcome(
                False, path, f"kept: it holds {held_day.isoformat()}, later than {day.isoformat()}"
            )
    last_success: datetime | None = run_at if succeeded else None
    if not succeeded:
        kept = _gauge(previous, f"{PREFIX}_last_success_timestamp_seconds")
        last_success = datetime.fromtimestamp(kept, UTC) if kept is not None else None
    write_text_atomically(path, exposition(checked, quality, run_at, last_success, stages))
    return WriteOutcome(True, path)


def record_success(path: Path, day: date, at: datetime) -> WriteOutcome:
    """Set the file's last success to `at` when it describes `day` (every check of that day
    passed: the deploy gate approved it); leave it alone when it describes another day or is
    missing."""
    if not path.is_file():
        return WriteOutcome(False, path, "no metrics file to update")
    text = path.read_text(encoding="utf-8")
    held = _gauge(text, f"{PREFIX}_partition_timestamp_seconds")
    held_day = datetime.fromtimestamp(held, UTC).date() if held is not None else None
    if held_day != day:
        holds = held_day.isoformat() if held_day else "no day"
        return WriteOutcome(False, path, f"kept: it holds {holds}, not {day.isoformat()}")
    name = f"{PREFIX}_last_success_timestamp_seconds"
    success = _family("last_success_timestamp_seconds", "When a run last passed every check.")
    success.add_metric([], _epoch(at, name))
    families: list[Metric] = []
    for family in text_string_to_metric_families(text):
        if family.name != name:
            families.append(family)
        if family.name == f"{PREFIX}_last_run_timestamp_seconds":
            families.append(success)
    if success not in families:
        families.append(success)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(families))
    write_text_atomically(path, generate_latest(registry).decode("utf-8"))
    return WriteOutcome(True, path)
