"""The pipeline's configuration: one TOML file validated into typed models.

Knows nothing of Dagster. The file's path comes from an explicit argument, else the environment
variable `RETRIEVAL_PIPELINE_CONFIG`, else the built-in defaults (equal to `config.example.toml`).
Every problem is reported at once, in one `ConfigError` that names the file, each offending key
and what is allowed there.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping, Sequence
from datetime import date, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import pandas as pd
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from retrieval_pipeline import environment
from retrieval_pipeline.metrics import (
    DEFAULT_GMAX,
    DEFAULT_METRICS,
    RESIDUAL_SUFFIX,
    Metric,
    coverage_metric,
    parse_metric,
    parse_metrics,
    with_coverage,
    with_residuals,
)

CONFIG_ENV = "RETRIEVAL_PIPELINE_CONFIG"

BaselinePolicy = Literal["trailing_days", "previous_day", "pinned"]

DEFAULT_THRESHOLDS: dict[str, float] = {
    "ndcg@10": 0.65,
    "mrr": 0.65,
    "recall@20": 0.8,
    "map": 0.55,
}
DEFAULT_HEADLINE_METRICS: tuple[str, ...] = ("ndcg@10", "mrr")
# The A/B comparison's switch from resampling to the large-sample forms (`comparison`): from this
# many paired queries (interval) or nonzero paired differences (p-value) on. Below it a cell costs
# at most about 1000 * 9999 random signs and a bootstrap of 1000 values, some tens of
# milliseconds; resampling grows with n, the large-sample forms do not.
DEFAULT_NORMAL_APPROXIMATION_MIN_PAIRS = 1000
# The smallest allowed: the normal curve's error on the sign-flip p shrinks like 1 / k, and with
# only a few dozen differences it is not small next to a 0.05 level.
MIN_NORMAL_APPROXIMATION_PAIRS = 100
# The longest baseline or comparison window, in days (about ten years): the window is subtracted
# from the partition's date, and a million days reaches before year 1 and fails at run time.
MAX_WINDOW_DAYS = 3660


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message lists every problem found."""


def _canonical_metric(name: str) -> str:
    return parse_metric(name).name


def _unit_interval(value: float) -> float:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"must be a number in [0, 1], got {value!r}")
    return value


MetricName = Annotated[str, AfterValidator(_canonical_metric)]
UnitFloat = Annotated[float, Field(strict=True), AfterValidator(_unit_interval)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ChecksConfig(_Section):
    """Limits behind the asset checks and the `insufficient` status."""

    min_annotated_traces: int = Field(default=20, ge=0, strict=True)
    min_coverage: UnitFloat = 0.3
    max_stale_label_rate: UnitFloat = 0.1
    max_quarantine_rate: UnitFloat = 0.05


def _gain_bound(value: float) -> float:
    if not -1.0 <= value <= 1.0:
        raise ValueError(f"must be a gain in [-1, 1] (output - input), got {value!r}")
    return value


GainFloat = Annotated[float, Field(strict=True, allow_inf_nan=False), AfterValidator(_gain_bound)]
# The stages a `[stages]` threshold may name: the retriever's are `thresholds` themselves.
RERANKER_STAGES = ("reranker_input", "reranker")


def _reranker_stage(value: str) -> str:
    if value not in RERANKER_STAGES:
        raise ValueError(
            f"must be 'reranker_input' or 'reranker' (the retriever's floors are [thresholds] "
            f"and [segment_thresholds]), got {value!r}"
        )
    return value


RerankerStage = Annotated[str, AfterValidator(_reranker_stage)]


class StagesConfig(_Section):
    """Per-stage limits behind the `reranker_stage` check (docs/spans.md, "Stages in the
    nightly"): a floor on each reranker stage's mean per segment and variant, and a floor on the
    reranker's gain over its input per segment, judged on the gain's mean (output - input)."""

    thresholds: dict[RerankerStage, dict[MetricName, UnitFloat]] = Field(default_factory=dict)
    min_gain: dict[MetricName, GainFloat] = Field(default_factory=dict)
    # a day without reranker spans fails the check instead of passing it
    require_reranker: bool = Field(default=False, strict=True)


class BaselineConfig(_Section):
    """Which days a partition is compared against in the regression report."""

    policy: BaselinePolicy = "trailing_days"
    trailing_days: int = Field(default=7, ge=1, le=MAX_WINDOW_DAYS, strict=True)
    pinned_date: date | None = None

    @model_validator(mode="after")
    def _pinned_needs_a_date(self) -> BaselineConfig:
        if self.policy == "pinned" and self.pinned_date is None:
            raise ValueError('policy "pinned" needs pinned_date = YYYY-MM-DD')
        if self.policy != "pinned" and self.pinned_date is not None:
            raise ValueError(f'pinned_date is used only with policy "pinned", not {self.policy!r}')
        return self

    def window(self, day: date) -> tuple[date, date]:
        """The baseline days for `day`, first and last inclusive."""
        if self.policy == "previous_day":
            previous = day - timedelta(days=1)
            return previous, previous
        if self.policy == "pinned":
            assert self.pinned_date is not None  # enforced by the validator
            return self.pinned_date, self.pinned_date
        return day - timedelta(days=self.trailing_days), day - timedelta(days=1)


class ComparisonConfig(_Section):
    """The `variant_comparison` asset: which two variants, over which days, and how it decides.

    The window of a partition day is that day and the `lookback_days - 1` days before it.
    `guarded_metrics` left unset follows the headline metrics (see `PipelineConfig`). From
    `normal_approximation_min_pairs` paired queries (nonzero paired differences for the p-value)
    on, a cell uses the large-sample forms instead of resampling (see `comparison`)."""

    control: str = Field(default="control", min_length=1, strict=True)
    candidate: str = Field(default="candidate", min_length=1, strict=True)
    lookback_days: int = Field(default=7, ge=1, le=MAX_WINDOW_DAYS, strict=True)
    alpha: float = Field(default=0.05, gt=0, lt=1, strict=True)
    guarded_metrics: tuple[MetricName, ...] = DEFAULT_HEADLINE_METRICS
    n_resamples: int = Field(default=9999, ge=1, strict=True)
    seed: int = Field(default=0, ge=0, strict=True)
    normal_approximation_min_pairs: int = Field(
        default=DEFAULT_NORMAL_APPROXIMATION_MIN_PAIRS,
        ge=MIN_NORMAL_APPROXIMATION_PAIRS,
        strict=True,
    )

    @model_validator(mode="after")
    def _two_variants(self) -> ComparisonConfig:
        if self.control == self.candidate:
            raise ValueError(
                f"control and candidate must be different variants, both are {self.control!r}"
            )
        return self

    def window(self, day: date) -> tuple[date, date]:
        """The days compared for partition `day`, first and last inclusive."""
        return day - timedelta(days=self.lookback_days - 1), day


class ClickLabelsConfig(_Section):
    """The optional `click_labels` asset: judgments from the store's click logs, debiased for
    position (docs/click-labels.md; the defaults are `labels.clicks`', a test holds them equal).
    The window of a partition day is that day and the `lookback_days - 1` days before it."""

    enabled: bool = Field(default=False, strict=True)
    lookback_days: int = Field(default=28, ge=1, strict=True)
    max_rank: int = Field(default=10, ge=2, le=100, strict=True)
    min_impressions: int = Field(default=20, ge=1, strict=True)
    # at least labels.clicks.MIN_CLIP (why there; a test holds them equal)
    clip: float = Field(default=0.1, ge=1e-6, le=1, allow_inf_nan=False, strict=True)
    cut_points: tuple[float, float, float] = (0.1, 0.25, 0.5)

    @field_validator("cut_points")
    @classmethod
    def _increasing(cls, value: tuple[float, float, float]) -> tuple[float, float, float]:
        if not (0 <= value[0] < value[1] < value[2]) or not all(map(math.isfinite, value)):
            raise ValueError(f"must be three increasing numbers >= 0, got {list(value)}")
        return value

    def window(self, day: date) -> tuple[date, date]:
        """The days whose click logs label partition `day`, first and last inclusive."""
        return day - timedelta(days=self.lookback_days - 1), day


def _attribute_name(value: str) -> str:
    if not value or value != value.strip():
        raise ValueError(
            f"must be a non-empty attribute name without surrounding spaces, got {value!r}"
        )
    return value


def _indexed_attribute_name(value: str) -> str:
    _attribute_name(value)
    rest = value.replace("{i}", "", 1)
    if "{i}" not in value or "{" in rest or "}" in rest:
        raise ValueError(f"must hold the list position as {{i}} exactly once, got {value!r}")
    return value


AttributeName = Annotated[str, Field(strict=True), AfterValidator(_attribute_name)]
IndexedAttributeName = Annotated[str, Field(strict=True), AfterValidator(_indexed_attribute_name)]


class TraceFormatConfig(_Section):
    """Which span attribute, or key of the span's `metadata` JSON, feeds each trace-record field
    when traces are read as spans (`ingest/spans.py`): OpenInference by default, and the
    OpenTelemetry GenAI convention's retrieval spans. `{i}` stands for a document's position;
    `topics_file` maps query texts onto query ids."""

    document_id_attribute: IndexedAttributeName = "retrieval.documents.{i}.document.id"
    reranker_input_id_attribute: IndexedAttributeName = "reranker.input_documents.{i}.document.id"
    reranker_output_id_attribute: IndexedAttributeName = "reranker.output_documents.{i}.document.id"
    # each document's metadata (a JSON object, or its text): its ids when the ids are kept there
    document_metadata_attribute: IndexedAttributeName = "retrieval.documents.{i}.document.metadata"
    reranker_input_metadata_attribute: IndexedAttributeName = (
        "reranker.input_documents.{i}.document.metadata"
    )
    reranker_output_metadata_attribute: IndexedAttributeName = (
        "reranker.output_documents.{i}.document.metadata"
    )
    # the key of a document's metadata holding its id; set, it wins over the document.id
    document_metadata_id_key: AttributeName | None = None
    genai_documents_attribute: AttributeName = "gen_ai.retrieval.documents"
    query_attribute: AttributeName = "input.value"
    genai_query_attribute: AttributeName = "gen_ai.retrieval.query.text"
    reranker_query_attribute: AttributeName = "reranker.query"
    metadata_attribute: AttributeName = "metadata"
    query_id_key: AttributeName = "query_id"
    segment_key: AttributeName = "segment"
    variant_key: AttributeName = "variant"
    relevant_ids_key: AttributeName = "relevant_ids"
    relevance_scores_key: AttributeName = "relevance_scores"
    label_source_key: AttributeName = "label_source"
    # query texts to query ids (`ingest/topics.py`): applied where the query id is the query text
    topics_file: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _distinct_metadata_keys(self) -> TraceFormatConfig:
        seen: dict[str, str] = {}
        for name, key in self.metadata_keys().items():
            if key in seen:
                raise ValueError(f"{seen[key]}_key and {name}_key are both {key!r}")
            seen[key] = name
        return self

    def metadata_keys(self) -> dict[str, str]:
        """Record field -> the metadata key that feeds it."""
        return {
            "query_id": self.query_id_key,
            "segment": self.segment_key,
            "variant": self.variant_key,
            "relevant_ids": self.relevant_ids_key,
            "relevance_scores": self.relevance_scores_key,
            "label_source": self.label_source_key,
        }


Executor = Literal["in_process", "multiprocess", "dask"]


class PhoenixConfig(_Section):
    """A Phoenix store both ways (docs/phoenix.md): document annotations named
    `label_annotation` read in as relevance labels from the annotator kinds in `label_kinds`
    (HUMAN over LLM over CODE on one document), and each scored span's metrics written back
    as CODE span annotations under `identifier` when `write_scores`, `batch_size` a request."""

    # one name, or several (`["relevance", "relevance_llm"]`): Phoenix 20 keeps one document
    # annotation per name, so an LLM judge writing beside people needs a name of its own; the
    # kind decides on one document, then the earlier name
    label_annotation: AttributeName | Annotated[tuple[AttributeName, ...], Field(min_length=1)] = (
        "relevance"
    )
    label_kinds: tuple[Literal["HUMAN", "LLM", "CODE"], ...] = ("HUMAN", "LLM")
    write_scores: bool = Field(default=True, strict=True)
    identifier: AttributeName = "retrieval_pipeline"
    batch_size: int = Field(default=1000, ge=1, le=1000, strict=True)

    def label_names(self) -> tuple[str, ...]:
        """The document annotation names read as labels, in the order they win within a kind."""
        names = self.label_annotation
        return (names,) if isinstance(names, str) else names


class ExecutionConfig(_Section):
    """How the nightly job runs (docs/scaling.md). `shards` > 1 splits each day's files into that
    many shard steps, which write their rows under `shard_root` (a folder or an `s3://` URL;
    unset: `<warehouse folder>/shards`) for one merge step; `executor` runs the steps in this
    process, in a process each, or on the Dask cluster at `dask_scheduler`."""

    shards: int = Field(default=1, ge=1, le=1024, strict=True)
    shard_root: str | None = Field(default=None, min_length=1)
    executor: Executor = "in_process"
    dask_scheduler: str | None = Field(default=None, pattern=r"^(tcp|tls|inproc|ucx)://.+")

    @model_validator(mode="after")
    def _dask_needs_a_scheduler(self) -> ExecutionConfig:
        if self.executor == "dask" and self.dask_scheduler is None:
            raise ValueError('executor "dask" needs dask_scheduler = "tcp://HOST:PORT"')
        if self.executor != "dask" and self.dask_scheduler is not None:
            raise ValueError(
                f'dask_scheduler is used only with executor "dask", not {self.executor!r}'
            )
        return self


class PipelineConfig(_Section):
    """The whole file. Metric names are stored in their canonical spelling (`ndcg@10`)."""

    metrics: tuple[str, ...] = DEFAULT_METRICS
    gain: Literal["exponential", "linear"] = "exponential"
    relevance_level: float = Field(default=1.0, gt=0, strict=True, allow_inf_nan=False)
    # the top of the grade scale for rbp@P and err@K (metrics.py states both)
    gmax: float = Field(default=DEFAULT_GMAX, gt=0, allow_inf_nan=False, strict=True)
    # every metric on the condensed list: unjudged retrieved documents removed before ranking
    judged_only: bool = Field(default=False, strict=True)
    # where the nightly's judgments are (files, folders, s3:// URLs), apart from the trace store;
    # empty: the store's own judgments/ folder (a Phoenix store has none)
    judgments: tuple[Annotated[str, Field(min_length=1)], ...] = ()
    headline_metrics: tuple[MetricName, ...] = DEFAULT_HEADLINE_METRICS
    thresholds: dict[MetricName, UnitFloat] = Field(
        default_factory=lambda: dict(DEFAULT_THRESHOLDS)
    )
    segment_thresholds: dict[str, dict[MetricName, UnitFloat]] = Field(default_factory=dict)
    checks: ChecksConfig = Field(default_factory=ChecksConfig)
    baseline: BaselineConfig = Field(default_factory=BaselineConfig)
    comparison: ComparisonConfig = Field(default_factory=ComparisonConfig)
    click_labels: ClickLabelsConfig = Field(default_factory=ClickLabelsConfig)
    trace_format: TraceFormatConfig = Field(default_factory=TraceFormatConfig)
    execution: ExecutionConfig = Field(default_factory=ExecutionConfig)
    phoenix: PhoenixConfig = Field(default_factory=PhoenixConfig)
    stages: StagesConfig = Field(default_factory=StagesConfig)
    # The first daily partition (YYYY-MM-DD); unset: the trace store's earliest day.
    start_date: date | None = None

    @field_validator("metrics", mode="before")
    @classmethod
    def _parse_metrics(cls, value: object) -> tuple[str, ...]:
        if not isinstance(value, str | list | tuple):
            raise ValueError("must be a list of metric names, e.g. ['ndcg@10', 'mrr']")
        # each rbp@P brings its residual, reported beside it (metrics.with_residuals)
        return tuple(metric.name for metric in with_residuals(parse_metrics(value)))

    @model_validator(mode="after")
    def _only_configured_metrics(self) -> PipelineConfig:
        # Left unset, the metric-keyed defaults follow the configured metrics instead of failing.
        if "thresholds" not in self.model_fields_set:
            self.thresholds = {m: v for m, v in DEFAULT_THRESHOLDS.items() if m in self.metrics}
        if "headline_metrics" not in self.model_fields_set:
            kept = tuple(m for m in DEFAULT_HEADLINE_METRICS if m in self.metrics)
            self.headline_metrics = kept or self.metrics[:1]
        if "guarded_metrics" not in self.comparison.model_fields_set:
            self.comparison.guarded_metrics = self.headline_metrics
        problems: list[str] = []
        named: list[tuple[str, Sequence[str]]] = [
            ("thresholds", list(self.thresholds)),
            ("headline_metrics", list(self.headline_metrics)),
            ("comparison.guarded_metrics", list(self.comparison.guarded_metrics)),
        ]
        named += [(f"segment_thresholds.{s}", list(t)) for s, t in self.segment_thresholds.items()]
        named += [(f"stages.thresholds.{s}", list(t)) for s, t in self.stages.thresholds.items()]
        named.append(("stages.min_gain", list(self.stages.min_gain)))
        for where, names in named:
            problems += [
                f"{where}: {name!r} is not among the configured metrics ({', '.join(self.metrics)})"
                for name in names
                if name not in self.metrics
            ]
            if where != "headline_metrics":
                problems += [
                    f"{where}: {name!r} is a bound (the most unjudged documents could add), "
                    "where higher is not better: it takes no threshold and guards nothing"
                    for name in names
                    if name.endswith(RESIDUAL_SUFFIX)
                ]
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def metric_objects(self) -> tuple[Metric, ...]:
        """The configured metrics as `metrics.Metric` objects."""
        return parse_metrics(list(self.metrics))

    def scored_metrics(self) -> tuple[Metric, ...]:
        """What the nightly run scores: the configured metrics and the list-level coverage
        (`metrics.coverage_metric`, judged@10 unless a judged@K is configured)."""
        return with_coverage(self.metric_objects())

    def coverage_metric(self) -> str:
        """The judged@K reported beside the annotation coverage."""
        return coverage_metric(self.metric_objects()).name

    def threshold(self, segment: str, metric: str) -> float | None:
        """The threshold that applies to `metric` on `segment` (override first), or None."""
        override = self.segment_thresholds.get(segment, {})
        return override.get(metric, self.thresholds.get(metric))


def thresholds_frame(config: PipelineConfig) -> pd.DataFrame:
    """The thresholds as a relation for SQL: segment (null = every segment), metric, threshold,
    min_annotated. Every configured metric has a default row, with a null threshold if none."""
    rows: list[dict[str, object]] = [
        {"segment": None, "metric": metric, "threshold": config.thresholds.get(metric)}
        for metric in config.metrics
    ]
    rows += [
        {"segment": segment, "metric": metric, "threshold": value}
        for segment, overrides in sorted(config.segment_thresholds.items())
        for metric, value in overrides.items()
    ]
    frame = pd.DataFrame(rows, columns=["segment", "metric", "threshold"])
    frame["segment"] = frame["segment"].astype(object)
    frame["metric"] = frame["metric"].astype(object)
    frame["threshold"] = frame["threshold"].astype("float64")
    frame["min_annotated"] = config.checks.min_annotated_traces
    return frame


# --- loading ---------------------------------------------------------------------------------

_SECTIONS: dict[tuple[str, ...], type[BaseModel]] = {
    (): PipelineConfig,
    ("checks",): ChecksConfig,
    ("baseline",): BaselineConfig,
    ("comparison",): ComparisonConfig,
    ("click_labels",): ClickLabelsConfig,
    ("trace_format",): TraceFormatConfig,
    ("execution",): ExecutionConfig,
    ("stages",): StagesConfig,
}
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _format_location(loc: Sequence[int | str]) -> str:
    parts: list[str] = []
    for item in loc:
        if item == "[key]":
            continue
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            text = item if _BARE_KEY.match(item) else f'"{item}"'
            parts.append(text if not parts else f".{text}")
    return "".join(parts)


def _format_error(error: Mapping[str, Any]) -> list[str]:
    loc = tuple(error["loc"])
    if error["type"] == "value_error" and not loc:
        # whole-file problems (one per line) already name their keys
        return str(error["ctx"]["error"]).splitlines()
    where = _format_location(loc)
    kind = error["type"]
    if kind == "extra_forbidden":
        parent = tuple(str(part) for part in loc[:-1])
        model = _SECTIONS.get(parent)
        allowed = ", ".join(model.model_fields) if model else "see config.example.toml"
        return [f"{where}: unknown key; allowed keys here: {allowed}"]
    if kind == "value_error":
        message = str(error["ctx"]["error"])
    elif kind == "literal_error":
        message = f"{error['msg'].replace('Input should be', 'must be')}, got {error['input']!r}"
    else:
        message = f"{error['msg'].replace('Input should', 'must')}, got {error['input']!r}"
    return [f"{where}: {message}"]


def config_from_mapping(data: Mapping[str, Any], source: str = "<config>") -> PipelineConfig:
    """Validate an already parsed TOML document; `source` names it in errors."""
    try:
        return PipelineConfig.model_validate(dict(data))
    except ValidationError as exc:
        lines = [line for error in exc.errors() for line in _format_error(error)]
        raise ConfigError(
            f"invalid pipeline config {source}:\n" + "\n".join(f"  - {line}" for line in lines)
        ) from None


def config_path(path: str | Path | None = None) -> Path | None:
    """The file to read: `path`, else $RETRIEVAL_PIPELINE_CONFIG, else None (defaults)."""
    return Path(path) if path is not None else environment.path(CONFIG_ENV)


def load_config(path: str | Path | None = None) -> PipelineConfig:
    """Read and validate the configuration (see `config_path`); raise `ConfigError`."""
    chosen = config_path(path)
    if chosen is None:
        return PipelineConfig()
    try:
        text = chosen.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read pipeline config {chosen}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"invalid pipeline config {chosen}: not UTF-8 text: byte 0x{exc.object[exc.start]:02x}"
            f" at offset {exc.start}"
        ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid pipeline config {chosen}: not valid TOML: {exc}") from None
    return config_from_mapping(data, source=str(chosen))
