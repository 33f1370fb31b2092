"""Charts as inline SVG, drawn on the server: the dashboard needs no script and no CDN (the bot may be
offline). Two kinds: a line chart of values over an ordered axis (commits, calibrations) and a strip
chart of groups of values with an interval (a PR's rounds and their CI). Every plotted value is a
`<circle class="point">` carrying its value in `data-value` and a `<title>` tooltip, so a reader
can hover and a test can find the data in the rendered page."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
WIDTH, HEIGHT = 540, 280
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 34, 58


@dataclass
class Series:
    name: str
    values: list[float | None]  # one per x label; None: no value there (the line breaks)


@dataclass
class Group:
    label: str
    values: list[float]
    interval: tuple[float, float] | None = None  # e.g. the bootstrap CI, drawn as a band
    note: str = ""


@dataclass
class _Axis:
    low: float
    high: float
    ticks: list[float] = field(default_factory=list)


def nice_axis(values: list[float], *, include: tuple[float, ...] = (), count: int = 5) -> _Axis:
    """An axis from a little below the smallest to a little above the largest value, on round ticks."""
    data = [v for v in values if v is not None and math.isfinite(v)] + list(include)
    if not data:
        return _Axis(0.0, 1.0, [0.0, 0.5, 1.0])
    low, high = min(data), max(data)
    if high - low < 1e-12:
        pad = abs(high) * 0.1 or 1.0
        low, high = low - pad, high + pad
    raw_step = (high - low) / max(1, count)
    magnitude = 10 ** math.floor(math.log10(raw_step))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw_step)
    start, stop = math.floor(low / step) * step, math.ceil(high / step) * step
    ticks = [round(start + i * step, 10) for i in range(int(round((stop - start) / step)) + 1)]
    return _Axis(start, stop, ticks)


def _fmt(value: float) -> str:
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"
    return f"{value:.3g}"


class _Canvas:
    def __init__(self, title: str, y_label: str, axis: _Axis, width: int = WIDTH, height: int = HEIGHT):
        self.width, self.height, self.axis = width, height, axis
        self.plot_w, self.plot_h = width - LEFT - RIGHT, height - TOP - BOTTOM
        label = escape(f"{title} ({y_label})" if y_label else title)
        self.parts = [
            f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
            f'height="{height}" role="img" aria-label="{label}"><title>{label}</title>',
            f'<text class="chart-title" x="{LEFT}" y="20" font-size="14" font-weight="600">{escape(title)}</text>',
        ]
        self._y_axis(y_label)

    def y(self, value: float) -> float:
        span = self.axis.high - self.axis.low
        return TOP + self.plot_h * (1 - (value - self.axis.low) / span)

    def _y_axis(self, y_label: str) -> None:
        for tick in self.axis.ticks:
            y = self.y(tick)
            self.parts.append(f'<line class="grid" x1="{LEFT}" x2="{LEFT + self.plot_w}" y1="{y:.1f}" y2="{y:.1f}" '
                              f'stroke="#e5e5e5"/>')
            self.parts.append(f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">'
                              f'{escape(_fmt(tick))}</text>')
        self.parts.append(f'<line class="axis" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{TOP + self.plot_h}" stroke="#333"/>')
        self.parts.append(f'<line class="axis" x1="{LEFT}" x2="{LEFT + self.plot_w}" y1="{TOP + self.plot_h}" '
                          f'y2="{TOP + self.plot_h}" stroke="#333"/>')
        if y_label:
            self.parts.append(f'<text class="axis-label" transform="translate(14 {TOP + self.plot_h / 2:.0f}) rotate(-90)" '
                              f'font-size="11" text-anchor="middle">{escape(y_label)}</text>')

    def x_labels(self, labels: list[str], xs: list[float]) -> None:
        every = max(1, math.ceil(len(labels) / 14))  # at most ~14 labels under the axis
        for i, (label, x) in enumerate(zip(labels, xs)):
            if i % every and i != len(labels) - 1:
                continue
            self.parts.append(f'<text class="tick" x="{x:.1f}" y="{TOP + self.plot_h + 16}" font-size="11" '
                              f'text-anchor="middle">{escape(label)}</text>')

    def hline(self, value: float, label: str, colour: str = "#888") -> None:
        if not self.axis.low <= value <= self.axis.high:
            return
        y = self.y(value)
        self.parts.append(f'<line class="reference" x1="{LEFT}" x2="{LEFT + self.plot_w}" y1="{y:.1f}" y2="{y:.1f}" '
                          f'stroke="{colour}" stroke-dasharray="4 3"/>')
        self.parts.append(f'<text class="reference-label" x="{LEFT + self.plot_w - 4}" y="{y - 4:.1f}" font-size="10" '
                          f'text-anchor="end" fill="{colour}">{escape(label)}</text>')

    def point(self, x: float, value: float, colour: str, series: str, tooltip: str, radius: float = 4) -> None:
        self.parts.append(
            f'<circle class="point" cx="{x:.1f}" cy="{self.y(value):.1f}" r="{radius}" fill="{colour}" '
            f'data-series="{escape(series)}" data-value="{value:.6g}"><title>{escape(tooltip)}</title></circle>'
        )

    def legend(self, names: list[str]) -> None:
        x = LEFT
        y = self.height - 14
        for i, name in enumerate(names):
            colour = PALETTE[i % len(PALETTE)]
            self.parts.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{colour}"/>')
            self.parts.append(f'<text class="legend" x="{x + 14}" y="{y}" font-size="11">{escape(name)}</text>')
            x += 24 + 7 * len(name)

    def svg(self) -> str:
        return "".join(self.parts) + "</svg>"


def line_chart(title: str, x_labels: list[str], series: list[Series], *, y_label: str = "",
               tooltips: list[str] | None = None, reference: tuple[float, str] | None = None) -> str:
    """Values over an ordered axis (commits, dates): one line and one dot per value of each series."""
    values = [v for s in series for v in s.values if v is not None]
    axis = nice_axis(values, include=(reference[0],) if reference else ())
    canvas = _Canvas(title, y_label, axis)
    n = len(x_labels)
    xs = [LEFT + canvas.plot_w * ((i + 0.5) / n) for i in range(n)] if n else []
    canvas.x_labels(x_labels, xs)
    if reference:
        canvas.hline(*reference)
    for k, s in enumerate(series):
        colour = PALETTE[k % len(PALETTE)]
        path, pen_down = [], False
        for x, value in zip(xs, s.values):
            if value is None:
                pen_down = False
                continue
            path.append(f"{'L' if pen_down else 'M'}{x:.1f},{canvas.y(value):.1f}")
            pen_down = True
        if path:
            canvas.parts.append(f'<path class="line" d="{" ".join(path)}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for i, (x, value) in enumerate(zip(xs, s.values)):
            if value is not None:
                where = tooltips[i] if tooltips else x_labels[i]
                canvas.point(x, value, colour, s.name, f"{s.name} at {where}: {_fmt(value)}")
    canvas.legend([s.name for s in series])
    return canvas.svg()


def strip_chart(title: str, groups: list[Group], *, y_label: str = "", reference: tuple[float, str] | None = None,
                band: tuple[float, float, str] | None = None) -> str:
    """Groups of values side by side, each value a dot, each group's interval a shaded bar; a dashed
    reference line (e.g. 0 %) and an optional band across the chart (e.g. the noise floor)."""
    values = [v for g in groups for v in g.values] + [b for g in groups if g.interval for b in g.interval]
    include = tuple(x for x in ((reference[0],) if reference else ()) + ((band[0], band[1]) if band else ()))
    axis = nice_axis(values, include=include)
    canvas = _Canvas(title, y_label, axis)
    n = len(groups)
    slot = canvas.plot_w / max(1, n)
    xs = [LEFT + slot * (i + 0.5) for i in range(n)]
    if band:
        top, bottom = canvas.y(max(band[0], band[1])), canvas.y(min(band[0], band[1]))
        canvas.parts.append(f'<rect class="band" x="{LEFT}" y="{top:.1f}" width="{canvas.plot_w}" '
                            f'height="{max(0.5, bottom - top):.1f}" fill="#f0e68c" opacity="0.35"><title>{escape(band[2])}</title></rect>')
    if reference:
        canvas.hline(*reference)
    canvas.x_labels([g.label for g in groups], xs)
    half = min(28.0, slot * 0.35)
    for i, (group, x) in enumerate(zip(groups, xs)):
        colour = PALETTE[0]
        if group.interval:
            lo, hi = min(group.interval), max(group.interval)
            canvas.parts.append(
                f'<rect class="interval" x="{x - half:.1f}" y="{canvas.y(hi):.1f}" width="{2 * half:.1f}" '
                f'height="{max(0.5, canvas.y(lo) - canvas.y(hi)):.1f}" fill="{colour}" opacity="0.15">'
                f'<title>{escape(f"{group.label}: interval {_fmt(lo)} … {_fmt(hi)}")}</title></rect>'
            )
        count = len(group.values)
        for j, value in enumerate(group.values):
            dx = (j - (count - 1) / 2) * min(8.0, (2 * half) / max(1, count))
            canvas.point(x + dx, value, colour, group.label, f"{group.label}, round {j + 1}: {_fmt(value)}")
        if group.values:
            middle = sorted(group.values)[count // 2] if count % 2 else sum(sorted(group.values)[count // 2 - 1: count // 2 + 1]) / 2
            y = canvas.y(middle)
            canvas.parts.append(f'<line class="median" x1="{x - half:.1f}" x2="{x + half:.1f}" y1="{y:.1f}" y2="{y:.1f}" '
                                f'stroke="#111" stroke-width="2"><title>{escape(f"{group.label}: median {_fmt(middle)}")}</title></line>')
    return canvas.svg()
