"""Chart layouts both reports draw on: the segments' order, the variants' colours, a column of
bar panels over the segments and a panel with one labelled row per item.

Pure: names and numbers in, `svg.Chart`s out. Chart text goes through `text.printable` (no
control characters, shortened) and is XML-escaped when the chart is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from retrieval_pipeline.reports.svg import FONT_SIZE, Chart, Panel, Series, text_width
from retrieval_pipeline.segments import OVERALL_SEGMENT, segment_label
from retrieval_pipeline.text import printable


def segment_order(segments: Iterable[object]) -> list[str]:
    """Segment names sorted, the overall row last."""
    names = sorted({str(s) for s in segments})
    return [s for s in names if s != OVERALL_SEGMENT] + (
        [OVERALL_SEGMENT] if OVERALL_SEGMENT in names else []
    )


# matplotlib's tab10, the variants' colours in the regression report and the trend
_TAB10 = (
    "#1F77B4",
    "#FF7F0E",
    "#2CA02C",
    "#D62728",
    "#9467BD",
    "#8C564B",
    "#E377C2",
    "#7F7F7F",
    "#BCBD22",
    "#17BECF",
)


def variant_colours(variants: Iterable[str], leading: Sequence[str] = ()) -> dict[str, str]:
    """Each variant's colour, the same in every report and chart: tab10 in order, the `leading`
    variants first (the comparison's control, then candidate: blue, orange), the others sorted
    after them."""
    names = {str(v) for v in variants}
    ordered = [v for v in dict.fromkeys(leading) if v in names]
    ordered += sorted(names - set(ordered))
    return {name: _TAB10[index % 10] for index, name in enumerate(ordered)}


def intervals(
    bars: Iterable[tuple[float, float | None, float | None]],
) -> list[tuple[float, float, float]]:
    """The (position, low, high) of each bar that has both ends of its interval."""
    return [(at, low, high) for at, low, high in bars if low is not None and high is not None]


# The stacked bar panels in pixels: the legend above, the metric name and 0.0..1.0 beside the
# panels, segment names (at most 18 characters, turned 20 degrees) under the last one.
_BAR_LEFT, _BAR_RIGHT, _BAR_PANEL_HEIGHT, _BAR_GAP, _BAR_BOTTOM = 70.0, 16.0, 190.0, 14.0, 64.0
# The ticks of a share, 0.0 to 1.0 by 0.2.
SHARE_TICKS = [(v / 5, f"{v / 5:.1f}") for v in range(6)]


def bar_panels(
    metrics: Sequence[str], segments: Sequence[str], slots: int, legend: Sequence[Series]
) -> tuple[Chart, list[Panel]]:
    """A column of one panel per metric over the same segments (`slots` bars each), values
    0..1.05, the legend above and the segment names under the last panel."""
    width = max(600.0, 50.0 * len(segments) * slots + _BAR_LEFT + 60)
    chart = Chart(width, 0.0)
    top = chart.legend_height(legend) + 10
    chart.legend(legend, 4.0)
    step = _BAR_PANEL_HEIGHT + _BAR_GAP
    chart.height = top + step * len(metrics) - _BAR_GAP + _BAR_BOTTOM
    panels = []
    for row, metric in enumerate(metrics):
        panel = chart.panel(
            _BAR_LEFT,
            top + row * step,
            width - _BAR_LEFT - _BAR_RIGHT,
            _BAR_PANEL_HEIGHT,
            (-0.6, len(segments) - 0.4),
            (0.0, 1.05),
        )
        panel.y_ticks, panel.grid = SHARE_TICKS, "y"
        panel.x_ticks = [(index, "") for index in range(len(segments))]
        chart.text(16, panel.top + _BAR_PANEL_HEIGHT / 2, printable(metric, 20), rotate=-90)
        panels.append(panel)
    bottom = panels[-1].top + _BAR_PANEL_HEIGHT if panels else top
    for index, segment in enumerate(segments):
        x = panels[0].px(index) if panels else 0.0
        chart.text(x + 4, bottom + 16, printable(segment_label(segment), 18), 11, "end", -20)
    return chart, panels


# Charts with one labelled row per item (forest, coverage) in pixels: the labels' width on the
# left, the panel from the top, the x axis's ticks and label under it, then the legend.
_ROWS_TOP, _ROWS_AXIS, _ROWS_RIGHT = 12.0, 44.0, 16.0


def row_panel(
    labels: Sequence[str],
    row_height: float,
    x_range: tuple[float, float],
    axis_label: str,
    legend: Sequence[Series],
) -> tuple[Chart, Panel]:
    """A chart whose one panel has a row per label, the first at the top (row `i` at y
    `len(labels) - 1 - i`), over `x_range` with x grid lines, the axis label under it and the
    legend below; the caller sets the x ticks and draws."""
    left = max((text_width(label, FONT_SIZE - 1) for label in labels), default=0.0) + 16
    chart = Chart(max(720.0, left + 360), 0.0)
    height = row_height * max(len(labels), 1)
    chart.height = _ROWS_TOP + height + _ROWS_AXIS + chart.legend_height(legend)
    width = chart.width - left - _ROWS_RIGHT
    panel = chart.panel(left, _ROWS_TOP, width, height, x_range, (-0.6, len(labels) - 0.4))
    panel.y_ticks = [(len(labels) - 1 - index, label) for index, label in enumerate(labels)]
    panel.grid = "x"
    chart.text(left + width / 2, _ROWS_TOP + height + _ROWS_AXIS - 8, axis_label)
    chart.legend(legend, _ROWS_TOP + height + _ROWS_AXIS)
    return chart, panel
