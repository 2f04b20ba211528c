"""Charts written directly as SVG: panels with linear axes holding bars, lines, points, interval
whiskers and reference lines, with tick labels, titles and a legend.

The reports' charts are simple, so they are drawn as SVG elements rather than through a plotting
library, whose general layout and drawing cost every nightly partition far more than these few
elements need (bench/README.md, "Where the time goes"). Text stays text, XML-escaped; its width
is estimated from its length (`text_width`), so margins are computed rather than measured. Pure:
numbers and strings in, an SVG document out; the same input gives the same bytes.

A `Chart` holds `Panel`s placed in pixels. A panel maps data coordinates to pixels over its
`x_range` and `y_range`, clips what it draws to its frame, and records each series it drew
(`Series`) so that legends and tests can read what is on it.
"""

from __future__ import annotations

import html
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

FONT_SIZE = 12
# Average advance of a character in the fallback sans-serif fonts, in ems (DejaVu Sans, the
# widest common one, averages about 0.6 over mixed text): margins sized with it do not clip.
_CHAR_EM = 0.62
_FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"
_INK = "#212121"
_GRID = "#E0E0E0"
_HATCH_ID = "hatch"

Kind = Literal["line", "bar", "point"]


def text_width(text: str, size: float = FONT_SIZE) -> float:
    """The estimated width in pixels of `text` at `size` (its longest line)."""
    return max((len(line) for line in text.split("\n")), default=0) * size * _CHAR_EM


def _coord(value: float) -> str:
    """A pixel coordinate (or length) as SVG text: two decimals at most and no trailing zeros,
    short, stable output (not a number for people: see `text.number`)."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """At most `count` + 1 round values (1, 2 or 5 times a power of ten apart) within
    [low, high], as many as that allows."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low] if math.isfinite(low) else []
    power = 10 ** math.floor(math.log10((high - low) / max(count, 1)))
    for step in (m * power for m in (1, 2, 5, 10, 20)):
        first, last = math.ceil(low / step - 1e-9), math.floor(high / step + 1e-9)
        if last - first <= count:
            break
    return [round(i * step, 12) + 0.0 for i in range(first, last + 1)]


def tick_label(value: float, ticks: Sequence[float]) -> str:
    """`value` with as many decimals as the spacing of `ticks` needs (0.2 -> one, 25 -> none)."""
    step = min((b - a for a, b in itertools.pairwise(ticks)), default=1.0)
    decimals = max(0, -math.floor(math.log10(step) + 1e-9)) if step > 0 else 0
    return f"{value:.{decimals}f}"


def padded_range(values: Sequence[float], pad: float = 0.05) -> tuple[float, float]:
    """The span of `values` widened by `pad` of itself each side (by `pad` when flat)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return 0.0, 1.0
    low, high = min(finite), max(finite)
    margin = (high - low) * pad if high > low else pad
    return low - margin, high + margin


@dataclass
class Series:
    """One series a panel drew: its legend label (None: not in the legend), colour, kind, and
    its points in data coordinates."""

    label: str | None
    colour: str
    kind: Kind
    xs: list[float]
    ys: list[float]


@dataclass
class Panel:
    """A plotting area at (`left`, `top`), `width` x `height` pixels, over `x_range` x `y_range`."""

    index: int
    left: float
    top: float
    width: float
    height: float
    x_range: tuple[float, float]
    y_range: tuple[float, float]
    title: str = ""
    x_ticks: list[tuple[float, str]] = field(default_factory=list)
    y_ticks: list[tuple[float, str]] = field(default_factory=list)
    grid: Literal["x", "y", "both", "none"] = "none"
    series: list[Series] = field(default_factory=list)
    _marks: list[str] = field(default_factory=list)

    def px(self, x: float) -> float:
        low, high = self.x_range
        return self.left + (x - low) / (high - low) * self.width

    def py(self, y: float) -> float:
        low, high = self.y_range
        return self.top + self.height - (y - low) / (high - low) * self.height

    def line(
        self, xs: Sequence[float], ys: Sequence[float], colour: str, label: str | None
    ) -> None:
        """A polyline with a dot at each point."""
        points = " ".join(
            f"{_coord(self.px(x))},{_coord(self.py(y))}" for x, y in zip(xs, ys, strict=True)
        )
        self._marks.append(
            f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.5"/>'
        )
        self._dots(xs, ys, colour, 2.5)
        self.series.append(Series(label, colour, "line", list(xs), list(ys)))

    def points(
        self, xs: Sequence[float], ys: Sequence[float], colour: str, label: str | None
    ) -> None:
        self._dots(xs, ys, colour, 3.5)
        self.series.append(Series(label, colour, "point", list(xs), list(ys)))

    def _dots(self, xs: Sequence[float], ys: Sequence[float], colour: str, radius: float) -> None:
        for x, y in zip(xs, ys, strict=True):
            self._marks.append(
                f'<circle cx="{_coord(self.px(x))}" cy="{_coord(self.py(y))}" r="{radius}"'
                f' fill="{colour}"/>'
            )

    def bars(
        self,
        xs: Sequence[float],
        values: Sequence[float],
        width: float,
        colour: str,
        label: str | None,
        failing: Sequence[bool] | None = None,
    ) -> None:
        """Vertical bars from 0 centred on `xs`, `width` wide in data units; a failing bar is
        hatched and outlined red."""
        for index, (x, value) in enumerate(zip(xs, values, strict=True)):
            left, right = self.px(x - width / 2), self.px(x + width / 2)
            top, bottom = sorted((self.py(value), self.py(0.0)))
            box = (
                f'x="{_coord(left)}" y="{_coord(top)}" width="{_coord(right - left)}"'
                f' height="{_coord(bottom - top)}"'
            )
            self._marks.append(f'<rect {box} fill="{colour}"/>')
            if failing is not None and failing[index]:
                self._marks.append(
                    f'<rect {box} fill="url(#{_HATCH_ID})" stroke="#C62828" stroke-width="1.6"/>'
                )
        self.series.append(Series(label, colour, "bar", list(xs), list(values)))

    def hbars(
        self,
        ys: Sequence[float],
        values: Sequence[float],
        height: float,
        colour: str,
        label: str | None,
        starts: Sequence[float] | None = None,
    ) -> None:
        """Horizontal bars from `starts` (default 0) centred on `ys`, `height` tall in data
        units."""
        begins = list(starts) if starts is not None else [0.0] * len(values)
        for y, value, start in zip(ys, values, begins, strict=True):
            top, bottom = self.py(y + height / 2), self.py(y - height / 2)
            left, right = sorted((self.px(start), self.px(start + value)))
            self._marks.append(
                f'<rect x="{_coord(left)}" y="{_coord(top)}" width="{_coord(right - left)}"'
                f' height="{_coord(bottom - top)}" fill="{colour}"/>'
            )
        self.series.append(Series(label, colour, "bar", list(values), list(ys)))

    def whiskers(
        self,
        intervals: Sequence[tuple[float, float, float]],
        horizontal: bool = False,
        colour: str = _INK,
        cap: float = 3.0,
    ) -> None:
        """Interval bars with caps `cap` pixels each side: (x, low, high) upright, or
        (y, low, high) across when `horizontal`."""
        for at, low, high in intervals:
            if horizontal:
                y, x1, x2 = self.py(at), self.px(low), self.px(high)
                path = f"M{_coord(x1)} {_coord(y)}H{_coord(x2)}"
                path += f"M{_coord(x1)} {_coord(y - cap)}V{_coord(y + cap)}"
                path += f"M{_coord(x2)} {_coord(y - cap)}V{_coord(y + cap)}"
            else:
                x, y1, y2 = self.px(at), self.py(low), self.py(high)
                path = f"M{_coord(x)} {_coord(y1)}V{_coord(y2)}"
                path += f"M{_coord(x - cap)} {_coord(y1)}H{_coord(x + cap)}"
                path += f"M{_coord(x - cap)} {_coord(y2)}H{_coord(x + cap)}"
            self._marks.append(f'<path d="{path}" stroke="{colour}" stroke-width="1.2"/>')

    def hline(
        self,
        y: float,
        start: float | None = None,
        end: float | None = None,
        colour: str = "#C62828",
    ) -> None:
        """A dashed horizontal line at `y` from `start` to `end` (default: across the panel)."""
        x1 = self.left if start is None else self.px(start)
        x2 = self.left + self.width if end is None else self.px(end)
        self._rule(x1, self.py(y), x2, self.py(y), colour)

    def vline(self, x: float, colour: str = "#C62828", dashed: bool = True) -> None:
        """A vertical line at `x` across the panel."""
        px = self.px(x)
        self._rule(px, self.top, px, self.top + self.height, colour, dashed)

    def _rule(
        self, x1: float, y1: float, x2: float, y2: float, colour: str, dashed: bool = True
    ) -> None:
        dash = ' stroke-dasharray="5 3"' if dashed else ""
        self._marks.append(
            f'<line x1="{_coord(x1)}" y1="{_coord(y1)}" x2="{_coord(x2)}" y2="{_coord(y2)}"'
            f' stroke="{colour}" stroke-width="1.2"{dash}/>'
        )

    def note(self, x: float, y: float, text: str, colour: str = "#757575") -> None:
        """Small text centred at a data point (e.g. "no data")."""
        self._marks.append(_text(self.px(x), self.py(y), text, FONT_SIZE - 2, "middle", colour))

    def svg(self) -> str:
        parts = []
        right, bottom = self.left + self.width, self.top + self.height
        if self.grid in ("x", "both"):
            parts += [_grid(self.px(v), self.top, self.px(v), bottom) for v, _ in self.x_ticks]
        if self.grid in ("y", "both"):
            parts += [_grid(self.left, self.py(v), right, self.py(v)) for v, _ in self.y_ticks]
        clip = f"clip{self.index}"
        parts.append(
            f'<clipPath id="{clip}"><rect x="{_coord(self.left)}" y="{_coord(self.top)}"'
            f' width="{_coord(self.width)}" height="{_coord(self.height)}"/></clipPath>'
            f'<g clip-path="url(#{clip})">{"".join(self._marks)}</g>'
            f'<rect x="{_coord(self.left)}" y="{_coord(self.top)}" width="{_coord(self.width)}"'
            f' height="{_coord(self.height)}" fill="none" stroke="#9E9E9E"/>'
        )
        for value, label in self.x_ticks:
            x = self.px(value)
            parts.append(f'<path d="M{_coord(x)} {_coord(bottom)}v4" stroke="#9E9E9E"/>')
            if label:
                parts.append(_text(x, bottom + 16, label, FONT_SIZE - 1, "middle"))
        for value, label in self.y_ticks:
            y = self.py(value)
            parts.append(f'<path d="M{_coord(self.left)} {_coord(y)}h-4" stroke="#9E9E9E"/>')
            if label:
                parts.append(_text(self.left - 6, y + 4, label, FONT_SIZE - 1, "end"))
        if self.title:
            parts.append(_text(self.left + self.width / 2, self.top - 7, self.title, FONT_SIZE))
        return "".join(parts)


def _grid(x1: float, y1: float, x2: float, y2: float) -> str:
    return (
        f'<line x1="{_coord(x1)}" y1="{_coord(y1)}" x2="{_coord(x2)}" y2="{_coord(y2)}"'
        f' stroke="{_GRID}"/>'
    )


def _text(
    x: float,
    y: float,
    text: str,
    size: float = FONT_SIZE,
    anchor: str = "middle",
    colour: str = _INK,
    rotate: float | None = None,
) -> str:
    """Escaped text at (x, y) (the first line's baseline); a newline starts a line below."""
    turn = f' transform="rotate({_coord(rotate)} {_coord(x)} {_coord(y)})"' if rotate else ""
    lines = text.split("\n")
    body = html.escape(lines[0], quote=True) + "".join(
        f'<tspan x="{_coord(x)}" dy="{_coord(size * 1.15)}">{html.escape(line, quote=True)}</tspan>'
        for line in lines[1:]
    )
    return (
        f'<text x="{_coord(x)}" y="{_coord(y)}" font-size="{_coord(size)}" text-anchor="{anchor}"'
        f' fill="{colour}"{turn}>{body}</text>'
    )


@dataclass
class Chart:
    """An SVG document `width` x `height` pixels: panels, free text and legends."""

    width: float
    height: float
    panels: list[Panel] = field(default_factory=list)
    _extras: list[str] = field(default_factory=list)

    def panel(
        self,
        left: float,
        top: float,
        width: float,
        height: float,
        x_range: tuple[float, float],
        y_range: tuple[float, float],
    ) -> Panel:
        added = Panel(len(self.panels), left, top, width, height, x_range, y_range)
        self.panels.append(added)
        return added

    def text(
        self,
        x: float,
        y: float,
        text: str,
        size: float = FONT_SIZE,
        anchor: str = "middle",
        rotate: float | None = None,
    ) -> None:
        self._extras.append(_text(x, y, text, size, anchor, _INK, rotate))

    def legend_height(self, entries: Sequence[Series]) -> float:
        """The height `legend` takes for `entries` across the chart's width."""
        return 20.0 * len(self._legend_rows(entries))

    def legend(self, entries: Sequence[Series], top: float) -> None:
        """A swatch and label per entry (its kind: bar, line or point), in centred rows from
        `top`, wrapped at the chart's width."""
        for row, items in enumerate(self._legend_rows(entries)):
            widths = [self._entry_width(entry) for entry in items]
            x = (self.width - sum(widths)) / 2
            y = top + 20 * row + 10
            for entry, width in zip(items, widths, strict=True):
                colour = entry.colour
                if entry.kind == "bar":
                    swatch = (
                        f'<rect x="{_coord(x)}" y="{_coord(y - 5)}" width="16" height="10"'
                        f' fill="{colour}"/>'
                    )
                elif entry.kind == "line":
                    swatch = (
                        f'<path d="M{_coord(x)} {_coord(y)}h16" stroke="{colour}"'
                        ' stroke-width="1.5"/>'
                        f'<circle cx="{_coord(x + 8)}" cy="{_coord(y)}" r="2.5" fill="{colour}"/>'
                    )
                else:
                    swatch = (
                        f'<circle cx="{_coord(x + 8)}" cy="{_coord(y)}" r="3.5" fill="{colour}"/>'
                    )
                self._extras.append(swatch)
                self._extras.append(_text(x + 21, y + 4, entry.label or "", FONT_SIZE - 1, "start"))
                x += width

    def _entry_width(self, entry: Series) -> float:
        return 21 + text_width(entry.label or "", FONT_SIZE - 1) + 14

    def _legend_rows(self, entries: Sequence[Series]) -> list[list[Series]]:
        rows: list[list[Series]] = []
        used = math.inf
        for entry in entries:
            width = self._entry_width(entry)
            if used + width > self.width - 20:
                rows.append([])
                used = 0.0
            rows[-1].append(entry)
            used += width
        return rows

    def svg(self) -> str:
        body = "".join(panel.svg() for panel in self.panels) + "".join(self._extras)
        hatch = (
            f'<defs><pattern id="{_HATCH_ID}" width="6" height="6" patternUnits="userSpaceOnUse"'
            ' patternTransform="rotate(45)"><path d="M0 0V6" stroke="#C62828"'
            ' stroke-width="1.5"/></pattern></defs>'
        )
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{_coord(self.width)}"'
            f' height="{_coord(self.height)}"'
            f' viewBox="0 0 {_coord(self.width)} {_coord(self.height)}"'
            f' font-family="{_FONT}">{hatch}'
            f'<rect width="100%" height="100%" fill="#FFFFFF"/>{body}</svg>'
        )
