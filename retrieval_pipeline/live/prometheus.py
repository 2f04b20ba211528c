"""Live metric values as Prometheus counters, served on `/metrics` for Prometheus to scrape.

For every scored trace the monitor adds its value to a sum and one to a count, per metric,
segment and variant (a summary without quantiles: `retrieval_live_metric_ratio_sum` and
`_count`), never per query or trace. PromQL then computes the mean over any window as a ratio of
rates, and the ratio adds up across replicas and restarts (a counter reset is what `rate` expects):

    sum by (metric, segment, variant) (rate(retrieval_live_metric_ratio_sum[5m]))
      / sum by (metric, segment, variant) (rate(retrieval_live_metric_ratio_count[5m]))

Traces seen, sampled and labelled are counted per segment and variant too, so the labelled share
(the monitor's `coverage`) is a ratio of rates as well. There is no row for every segment pooled:
`sum` over `segment` is that row, and a pooled series would count each trace twice.

Segment and variant names come from the traces; so that a stream of new names cannot grow the
series without bound, names past the first `max_segments` segments (`max_variants` variants) are
counted under `__other__`, and `retrieval_live_label_overflow_total` counts those traces.

Imported only when metrics are served (`retrieval-pipeline monitor --metrics-port`), so that the
monitor starts without `prometheus_client`; it needs the `prometheus` extra.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING
from wsgiref.simple_server import WSGIServer

try:
    from prometheus_client import CollectorRegistry, Counter, Summary, generate_latest
    from prometheus_client.exposition import start_http_server
except ModuleNotFoundError as exc:  # pragma: no cover - exercised without the extra installed
    raise ModuleNotFoundError(
        "serving live metrics needs prometheus_client: "
        "pip install 'retrieval-pipeline[prometheus]'",
        name=exc.name,
    ) from exc

if TYPE_CHECKING:
    from retrieval_pipeline.records import TraceRecord

PREFIX = "retrieval_live"
OTHER = "__other__"
DEFAULT_HOST = "127.0.0.1"


class LiveMetrics:
    """The live counters, in a registry of their own (not the process-wide default one).

    Thread-safe: the monitor adds while the HTTP server's thread reads."""

    def __init__(self, max_segments: int = 100, max_variants: int = 20) -> None:
        if max_segments < 1 or max_variants < 1:
            raise ValueError("max_segments and max_variants must be at least 1")
        self.registry = CollectorRegistry(auto_describe=True)
        group = ("segment", "variant")
        self._values = Summary(
            f"{PREFIX}_metric_ratio",
            "Per-trace metric values of labelled sampled traces: sum and count.",
            ("metric", *group),
            registry=self.registry,
        )
        self._traces = Counter(
            f"{PREFIX}_traces", "Traces the monitor read.", group, registry=self.registry
        )
        self._sampled = Counter(
            f"{PREFIX}_sampled_traces", "Traces in the sample.", group, registry=self.registry
        )
        self._labelled = Counter(
            f"{PREFIX}_labelled_traces",
            "Sampled traces with labels (scored).",
            group,
            registry=self.registry,
        )
        self._overflow = Counter(
            f"{PREFIX}_label_overflow",
            f"Traces counted under {OTHER} as their segment or variant came past the limit.",
            registry=self.registry,
        )
        self._limits = {"segment": max_segments, "variant": max_variants}
        self._names: dict[str, set[str]] = {"segment": set(), "variant": set()}
        self._lock = threading.Lock()

    def _label(self, kind: str, name: str) -> tuple[str, bool]:
        """The label value for a name, and whether it overflowed into OTHER."""
        with self._lock:
            names = self._names[kind]
            if name in names:
                return name, False
            if len(names) < self._limits[kind]:
                names.add(name)
                return name, False
        return OTHER, True

    def observe(
        self, segment: str, variant: str, sampled: bool, scores: Mapping[str, float] | None
    ) -> None:
        """Count one trace: read; in the sample if `sampled`; labelled and scored when `scores`
        is not None (one value in [0, 1] per metric). ValueError naming the metric for a value
        that is not a number in [0, 1]; nothing is counted then."""
        if scores is not None:
            if not sampled:
                raise ValueError("a trace outside the sample has no scores")
            for metric, value in scores.items():
                # NaN fails the range test too: one would spoil the sum for good.
                if (
                    isinstance(value, bool)
                    or not isinstance(value, int | float)
                    or not 0.0 <= value <= 1.0
                ):
                    raise ValueError(f"{metric}: value {value!r} is not a number in [0, 1]")
        segment_label, over_segment = self._label("segment", segment)
        variant_label, over_variant = self._label("variant", variant)
        if over_segment or over_variant:
            self._overflow.inc()
        self._traces.labels(segment_label, variant_label).inc()
        if not sampled:
            return
        self._sampled.labels(segment_label, variant_label).inc()
        if scores is None:
            return
        self._labelled.labels(segment_label, variant_label).inc()
        for metric, value in scores.items():
            self._values.labels(metric, segment_label, variant_label).observe(float(value))

    def observe_trace(
        self, record: TraceRecord, sampled: bool, scores: Mapping[str, float] | None
    ) -> None:
        """`observe` for a trace record: a `live.monitor.TraceListener`."""
        self.observe(record.segment, record.variant, sampled, scores)

    def exposition(self) -> str:
        """What `/metrics` serves, in the text exposition format."""
        return generate_latest(self.registry).decode("utf-8")


class MetricsServer:
    """`/metrics` for a registry on `host:port` (port 0: a free one), in a daemon thread.

    `start()` returns the port; `stop()` shuts the server down and waits for its thread. Also a
    context manager. Bound to 127.0.0.1 unless told otherwise: put a proxy or an agent in front
    to expose it further."""

    def __init__(self, registry: CollectorRegistry, port: int, host: str = DEFAULT_HOST) -> None:
        if not 0 <= port <= 65535:
            raise ValueError(f"metrics port must be in 0..65535, got {port}")
        self._registry = registry
        self._requested = port
        self.host = host
        self.port: int | None = None
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The address of `/metrics`; ValueError before `start()`."""
        if self.port is None:
            raise ValueError("the metrics server is not started")
        return f"http://{self.host}:{self.port}/metrics"

    def start(self) -> int:
        if self._server is not None:
            raise ValueError(f"the metrics server already serves {self.url}")
        try:
            server, thread = start_http_server(
                self._requested, addr=self.host, registry=self._registry
            )
        except OSError as exc:
            raise OSError(
                exc.errno, f"cannot serve /metrics on {self.host}:{self._requested}: {exc.strerror}"
            ) from exc
        self._server, self._thread = server, thread
        self.port = int(server.server_port)
        return self.port

    def stop(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join()

    def __enter__(self) -> MetricsServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
