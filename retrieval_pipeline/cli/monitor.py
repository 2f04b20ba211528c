"""`retrieval-pipeline monitor`: rolling windows and sustained-drop alerts on a growing JSONL file.

The same monitoring as the live Dagster sensor (`retrieval_pipeline.live`), for a team that does
not run Dagster. Imports only the standard library, click and the pure modules, so it starts
without pandas, DuckDB or Dagster.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import click

from retrieval_pipeline.cli.options import gain_option, metrics_option, relevance_level_option
from retrieval_pipeline.files import write_text_atomically
from retrieval_pipeline.live.events import (
    Alert,
    Event,
    Recovery,
    WindowSummary,
    iter_events,
    means_words,
    window_line,
)
from retrieval_pipeline.live.monitor import LiveMonitor, TraceListener
from retrieval_pipeline.live.rules import MonitorConfig, MonitorConfigError, rules_from_assignments
from retrieval_pipeline.live.tailing import Arrival, FileProgress, read_new_lines
from retrieval_pipeline.metrics import MetricConfigError
from retrieval_pipeline.records import RecordError, parse_line
from retrieval_pipeline.segments import segment_label
from retrieval_pipeline.text import json_text

ALERT_EXIT_CODE = 3
STATE_FILE_VERSION = 1
STDIN = "-"
_DEFAULTS = MonitorConfig()


@dataclass
class _Session:
    """One run of the command: the monitor, what was read, and how to print it."""

    monitor: LiveMonitor
    fmt: str
    show_segments: bool
    lines: int = 0
    bad: int = 0
    alerts_fired: int = 0
    windows: int = 0
    progress: FileProgress = field(default_factory=FileProgress)

    def feed(self, arrivals: Iterable[Arrival], stop_on_alert: bool) -> bool:
        """Validate, count and print; True when an alert fired and `stop_on_alert` asks to stop."""
        for arrival in arrivals:
            self.lines += 1
            try:
                record = parse_line(arrival.text)
            except RecordError as exc:
                self.bad += 1
                click.echo(f"{arrival.source}:{arrival.line}: {exc.reason}", err=True)
                continue
            if self.emit(self.monitor.observe(record)) and stop_on_alert:
                return True
        return False

    def emit(self, events: list[Event]) -> bool:
        """Print events; True when one of them is an alert."""
        fired = False
        for event, (kind, data) in zip(events, iter_events(events), strict=True):
            if self.fmt == "json":
                click.echo(json_text({"type": kind, **data}, ensure_ascii=True))
            else:
                for line in self.text(event):
                    click.echo(line)
            if isinstance(event, Alert):
                fired = True
                self.alerts_fired += 1
            elif isinstance(event, WindowSummary):
                self.windows += 1
        return fired

    def text(self, event: Event) -> Iterator[str]:
        if isinstance(event, Alert):
            yield f"ALERT (window {event.window_index}) {event.reason}"
        elif isinstance(event, Recovery):
            yield f"RECOVERED (window {event.window_index}) {event.reason}"
        else:
            yield window_line(event)
            if self.show_segments:
                for name, stats in event.segments.items():
                    yield (
                        f"  {segment_label(name)}: {stats.sampled} sampled, "
                        f"{stats.labelled} labelled; {means_words(stats.means)}"
                    )

    def summary(self) -> str:
        still_open = len(self.monitor.open_alerts())
        return (
            f"read {self.lines} lines: {self.lines - self.bad} records, {self.bad} bad; "
            f"{self.windows} windows closed; {self.alerts_fired} alerts fired, "
            f"{still_open} open"
        )


# --- state file -------------------------------------------------------------------------------


def _load_state(path: Path | None, source: str) -> tuple[dict[str, Any] | None, FileProgress]:
    if path is None or not path.exists():
        return None, FileProgress()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise click.ClickException(f"cannot read state file {path}: {exc}") from None
    if not isinstance(data, dict) or data.get("version") != STATE_FILE_VERSION:
        raise click.ClickException(
            f"state file {path} is not a monitor state of version {STATE_FILE_VERSION}"
        )
    if data.get("source") != source:
        raise click.ClickException(
            f"state file {path} follows {data.get('source')!r}, not {source!r}; "
            "use another state file or delete it"
        )
    try:
        progress = FileProgress(**data["progress"]) if data.get("progress") else FileProgress()
        return data["monitor"], progress
    except KeyError as exc:
        raise click.ClickException(_lacks(path, exc)) from None
    except TypeError as exc:
        raise click.ClickException(
            f"state file {path}: its progress cannot be read ({exc})"
        ) from None


def _lacks(path: Path | None, exc: KeyError) -> str:
    return f"state file {path} lacks the key {exc.args[0]!r}; delete it to start afresh"


def _save_state(path: Path | None, source: str, session: _Session) -> None:
    if path is None:
        return
    data = {
        "version": STATE_FILE_VERSION,
        "source": source,
        "progress": asdict(session.progress) if source != STDIN else None,
        "monitor": session.monitor.state(),
    }
    # a crash leaves the old state or the new one
    write_text_atomically(path, json_text(data, ensure_ascii=True) + "\n")


# --- reading ----------------------------------------------------------------------------------


def _stdin_arrivals(stream: BinaryIO) -> Iterator[Arrival]:
    for number, raw in enumerate(stream, start=1):
        text = raw.removesuffix(b"\n").removesuffix(b"\r")
        if number == 1:
            text = text.removeprefix(b"\xef\xbb\xbf")
        if text.strip():
            yield Arrival("<stdin>", number, text)


def _build_config(
    metrics: str,
    sample_rate: float,
    window_records: int | None,
    window_seconds: int | None,
    lateness_seconds: int,
    thresholds: tuple[str, ...],
    margins: tuple[str, ...],
    consecutive: int,
    min_labels: int,
    baseline_windows: int,
    gain: str,
    relevance_level: float,
) -> MonitorConfig:
    try:
        return MonitorConfig(
            metrics=tuple(metrics.split(",")),
            sample_rate=sample_rate,
            window_records=window_records,
            window_seconds=window_seconds,
            lateness_seconds=lateness_seconds,
            rules=rules_from_assignments(thresholds, margins),
            consecutive=consecutive,
            min_labels=min_labels,
            baseline_windows=baseline_windows,
            gain=gain,  # type: ignore[arg-type]  # click.Choice limits it
            relevance_level=relevance_level,
        )
    except (MonitorConfigError, MetricConfigError) as exc:
        raise click.UsageError(str(exc)) from None


@click.command("monitor")
@click.option(
    "--follow",
    "source",
    required=True,
    metavar="PATH|-",
    help="JSON-lines trace file to follow as it grows, or - for standard input.",
)
@click.option(
    "--once",
    is_flag=True,
    help="Read what the file holds now and stop (for tests and CI); the open window is closed "
    "as partial unless --state carries it to the next run.",
)
@click.option(
    "--window-records",
    type=click.IntRange(min=1),
    default=None,
    help=f"Close a window after N sampled traces (default {_DEFAULTS.window_records} when no "
    "--window-seconds).",
)
@click.option(
    "--window-seconds",
    type=click.IntRange(min=1),
    default=None,
    help="Fixed windows of N seconds of trace time (timestamps), aligned to the Unix epoch.",
)
@click.option(
    "--lateness-seconds",
    type=click.IntRange(min=0),
    default=_DEFAULTS.lateness_seconds,
    show_default=True,
    help="With --window-seconds: keep a window open this long past its end for late traces.",
)
@metrics_option(",".join(_DEFAULTS.metrics))
@click.option(
    "--sample-rate",
    type=click.FloatRange(0.0, 1.0),
    default=_DEFAULTS.sample_rate,
    show_default=True,
    help="Share of traces sampled, by a stable hash of trace_id (a rerun samples the same ones).",
)
@click.option(
    "--threshold",
    "thresholds",
    multiple=True,
    metavar="[SEGMENT:]METRIC=VALUE",
    help="Alert when the window mean stays below VALUE (repeatable; metric `coverage` for the "
    "share of sampled traces with labels; segment __all__ for the overall row).",
)
@click.option(
    "--margin",
    "margins",
    multiple=True,
    metavar="[SEGMENT:]METRIC=VALUE",
    help="Alert when the window mean stays more than VALUE below the trailing baseline.",
)
@click.option(
    "--baseline-windows",
    type=click.IntRange(min=1),
    default=_DEFAULTS.baseline_windows,
    show_default=True,
    help="The baseline is the mean of the previous B windows with enough labels that did not "
    "breach.",
)
@click.option(
    "--consecutive",
    type=click.IntRange(min=1),
    default=_DEFAULTS.consecutive,
    show_default=True,
    help="Windows in a row that must breach before an alert fires.",
)
@click.option(
    "--min-labels",
    type=click.IntRange(min=1),
    default=_DEFAULTS.min_labels,
    show_default=True,
    help="Labelled traces a window needs to count as evidence (sampled traces, for coverage).",
)
@gain_option
@relevance_level_option
@click.option(
    "--fail-on-alert",
    is_flag=True,
    help=f"Exit with status {ALERT_EXIT_CODE} when an alert fires (following: at once).",
)
@click.option(
    "--poll-seconds",
    type=click.FloatRange(min=0.01),
    default=1.0,
    show_default=True,
    help="How often a followed file is checked for new lines.",
)
@click.option(
    "--state",
    "state_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="JSON file carrying the file offset and the monitor's state across restarts.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    metavar="PORT",
    help="Serve Prometheus counters on http://127.0.0.1:PORT/metrics while running (0: a free "
    "port, printed); needs the prometheus extra. See docs/operations.md.",
)
@click.option("--segments", "show_segments", is_flag=True, help="Also print each segment.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text: one line per window and alert; json: one JSON object per line.",
)
def monitor(
    source: str,
    once: bool,
    window_records: int | None,
    window_seconds: int | None,
    lateness_seconds: int,
    metrics: str,
    sample_rate: float,
    thresholds: tuple[str, ...],
    margins: tuple[str, ...],
    baseline_windows: int,
    consecutive: int,
    min_labels: int,
    gain: str,
    relevance_level: float,
    fail_on_alert: bool,
    poll_seconds: float,
    state_path: Path | None,
    metrics_port: int | None,
    show_segments: bool,
    fmt: str,
) -> None:
    """Score sampled traces of a growing JSONL file in rolling windows and alert on sustained
    drops. Bad lines are reported (file:line: reason) on standard error and skipped."""
    config = _build_config(
        metrics,
        sample_rate,
        window_records,
        window_seconds,
        lateness_seconds,
        thresholds,
        margins,
        consecutive,
        min_labels,
        baseline_windows,
        gain,
        relevance_level,
    )
    key = STDIN if source == STDIN else str(Path(source).absolute())
    saved, progress = _load_state(state_path, key)
    with contextlib.ExitStack() as resources:
        on_trace = None if metrics_port is None else _serve_metrics(metrics_port, resources)
        try:
            live = LiveMonitor(config, saved, on_trace=on_trace)
        except MonitorConfigError as exc:
            raise click.ClickException(f"state file {state_path}: {exc}") from None
        except KeyError as exc:  # the monitor's own state, missing a part
            raise click.ClickException(_lacks(state_path, exc)) from None
        except (TypeError, ValueError, AttributeError) as exc:
            raise click.ClickException(f"state file {state_path} cannot be read ({exc})") from None
        session = _Session(live, fmt, show_segments, progress=progress)
        _run(session, source, key, once, state_path, poll_seconds, fail_on_alert)
    if fail_on_alert and session.alerts_fired:
        raise click.exceptions.Exit(ALERT_EXIT_CODE)


def _serve_metrics(port: int, resources: contextlib.ExitStack) -> TraceListener:
    """Start `/metrics` on 127.0.0.1:`port` until `resources` closes; the listener that feeds
    its counters. prometheus_client is imported only here, so the command starts without it."""
    try:
        from retrieval_pipeline.live.prometheus import LiveMetrics, MetricsServer
    except ModuleNotFoundError as exc:
        raise click.ClickException(str(exc)) from None
    metrics = LiveMetrics()
    server = MetricsServer(metrics.registry, port)
    try:
        server.start()
    except OSError as exc:
        raise click.ClickException(str(exc.strerror or exc)) from None
    resources.callback(server.stop)
    click.echo(f"serving metrics on {server.url}", err=True)
    return metrics.observe_trace


def _run(
    session: _Session,
    source: str,
    key: str,
    once: bool,
    state_path: Path | None,
    poll_seconds: float,
    fail_on_alert: bool,
) -> None:
    """Read the source until it ends, an alert stops it or the user interrupts; the state is
    saved and the summary printed whatever happens."""
    stopped = False
    try:
        if source == STDIN:
            stopped = session.feed(_stdin_arrivals(sys.stdin.buffer), fail_on_alert)
            ended = True
        else:
            # With --once and no state file nothing more is coming: a last line without its
            # newline is read too. Otherwise it waits until the writer finishes it.
            final = once and state_path is None

            def checkpoint() -> None:
                _save_state(state_path, key, session)

            stopped, ended = _follow(
                Path(source), session, once, final, poll_seconds, fail_on_alert, checkpoint
            )
        if ended and not stopped and state_path is None:
            session.emit(session.monitor.flush())
    except KeyboardInterrupt:
        pass
    finally:
        _save_state(state_path, key, session)
        click.echo(session.summary(), err=True)


def _follow(
    path: Path,
    session: _Session,
    once: bool,
    final: bool,
    poll_seconds: float,
    fail_on_alert: bool,
    checkpoint: Callable[[], None],
) -> tuple[bool, bool]:
    """Read new complete lines until stopped: (stopped on an alert, the input ended). The state
    is saved after every read that found lines, so a killed follower resumes where it was."""
    waiting_told = False
    while True:
        if path.is_file():
            arrivals, session.progress, problem = read_new_lines(
                path, session.progress, str(path), final=final, restart=True
            )
            if problem:
                click.echo(problem, err=True)
            stop = session.feed(arrivals, fail_on_alert and not once)
            if arrivals and not once:
                checkpoint()
            if stop:
                return True, False
        elif once:
            raise click.ClickException(f"{path}: no such file")
        elif not waiting_told:
            click.echo(f"waiting for {path} to appear", err=True)
            waiting_told = True
        if once:
            return False, True
        time.sleep(poll_seconds)
