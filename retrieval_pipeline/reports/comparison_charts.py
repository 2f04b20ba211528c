"""The comparison report's charts: each arm's mean per segment against the thresholds, the
differences with their intervals (a forest), and the queries per segment by pairing.
"""

from __future__ import annotations

from retrieval_pipeline.ab.compare import Comparison
from retrieval_pipeline.reports.charts import bar_panels, intervals, row_panel, variant_colours
from retrieval_pipeline.reports.svg import Chart, Series, nice_ticks, padded_range, tick_label
from retrieval_pipeline.segments import segment_label
from retrieval_pipeline.text import printable

# control, candidate: the first two of `charts.variant_colours`, as in the regression report
_ARM_COLOURS = tuple(variant_colours(["control", "candidate"], ("control", "candidate")).values())
_VERDICT_COLOURS = {
    "better": "#2E7D32",
    "worse": "#C62828",
    "no significant difference": "#616161",
    "not tested": "#9E9E9E",
}


def arm_colours(control: str, candidate: str) -> dict[str, str]:
    """The comparison charts' colours of the two arms, for a trend drawn beside them."""
    return variant_colours([control, candidate], (control, candidate))


def segment_bars_chart(comparison: Comparison) -> Chart:
    """Per metric, each segment's control and candidate means over their annotated traces (what
    thresholds judge) with their 95% intervals (`ab.stats.level_of`), and the segment's
    threshold as a red dashed line."""
    metrics, segments = comparison.metrics, comparison.segments
    names = (printable(comparison.control, 24), printable(comparison.candidate, 24))
    legend = [
        Series(name, colour, "bar", [], [])
        for name, colour in zip(names, _ARM_COLOURS, strict=True)
    ]
    chart, panels = bar_panels(metrics, segments, 2, legend)
    width = 0.38
    for panel, metric in zip(panels, metrics, strict=True):
        cells = [comparison.cell(segment, metric) for segment in segments]
        for arm, prefix in enumerate(("control", "candidate")):
            bars = []
            for index, cell in enumerate(cells):
                mean, low, high = (
                    getattr(cell, f"{prefix}_trace_{end}") for end in ("mean", "ci_low", "ci_high")
                )
                if mean is not None:
                    bars.append((index + (arm - 0.5) * width, mean, low, high))
            panel.bars(
                [b[0] for b in bars], [b[1] for b in bars], width, _ARM_COLOURS[arm], names[arm]
            )
            panel.whiskers(intervals((x, low, high) for x, _, low, high in bars))
        for index, cell in enumerate(cells):
            if cell.control_trace_mean is None and cell.candidate_trace_mean is None:
                panel.note(index, 0.05, "no data")
            if cell.threshold is not None:
                panel.hline(cell.threshold, index - 1.2 * width, index + 1.2 * width)
    return chart


def forest_chart(comparison: Comparison) -> Chart:
    """Candidate minus control for every tested cell, with its interval (the cell's `ci_method`);
    coloured by verdict."""
    tested = [(c, c.delta) for c in comparison.cells if c.delta is not None]
    legend = [
        Series(verdict, colour, "point", [], [])
        for verdict, colour in _VERDICT_COLOURS.items()
        if any(c.verdict == verdict for c, _ in tested)
    ]
    ends = [v for c, delta in tested for v in (delta, c.ci_low, c.ci_high) if v is not None]
    x_range = padded_range([0.0, *ends])
    chart, panel = row_panel(
        [printable(f"{segment_label(c.segment)} · {c.metric}", 44) for c, _ in tested],
        24.0,
        x_range,
        printable(f"{comparison.candidate} minus {comparison.control}", 60),
        legend,
    )
    panel.vline(0.0, colour="#212121", dashed=False)
    for verdict, colour in _VERDICT_COLOURS.items():
        chosen = [
            (len(tested) - 1 - row, cell, delta)
            for row, (cell, delta) in enumerate(tested)
            if cell.verdict == verdict
        ]
        if not chosen:
            continue
        panel.whiskers(
            intervals((y, cell.ci_low, cell.ci_high) for y, cell, _ in chosen),
            horizontal=True,
            colour=colour,
            cap=2.0,
        )
        panel.points([delta for *_, delta in chosen], [y for y, _, _ in chosen], colour, verdict)
    x_ticks = nice_ticks(*x_range)
    panel.x_ticks = [(v, tick_label(v, x_ticks)) for v in x_ticks]
    return chart


def coverage_chart(comparison: Comparison) -> Chart:
    """Queries per segment: paired, served by both but not paired, by one arm only."""
    rows = list(comparison.coverage)
    parts = (
        ("paired", "#2E7D32", "paired (tested)"),
        ("shared_unpaired", "#A5D6A7", "both served, not both annotated"),
        ("control_only", _ARM_COLOURS[0], printable(f"{comparison.control} only", 30)),
        ("candidate_only", _ARM_COLOURS[1], printable(f"{comparison.candidate} only", 30)),
    )
    totals = [sum(getattr(row, name) for name, _, _ in parts) for row in rows]
    high = max(totals, default=0) * 1.05 or 1.0
    chart, panel = row_panel(
        [printable(segment_label(r.segment), 30) for r in rows],
        36.0,
        (0.0, high),
        "queries",
        [Series(label, colour, "bar", [], []) for _, colour, label in parts],
    )
    ys = [float(len(rows) - 1 - index) for index in range(len(rows))]
    starts = [0.0] * len(rows)
    for name, colour, label in parts:
        values = [float(getattr(row, name)) for row in rows]
        panel.hbars(ys, values, 0.8, colour, label, starts)
        starts = [start + value for start, value in zip(starts, values, strict=True)]
    x_ticks = [v for v in nice_ticks(0.0, high) if v == int(v)]
    panel.x_ticks = [(v, f"{int(v):,}") for v in x_ticks]
    return chart
