"""Charts as SVG text, rendered on the server: no script, no network, no library.

Every label is escaped here; the result is safe to put in a page as is.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from html import escape

from markupsafe import Markup

# One colour per outcome, shared with the CSS (.s-succeeded etc.).
COLOURS = {
    "succeeded": "#2e7d32",
    "failed": "#c62828",
    "error": "#ef6c00",
    "ungraded": "#6a1b9a",
    "unfinished": "#9e9e9e",
}
_BAR = "#1565c0"
_FONT = 'font-family="system-ui, sans-serif" font-size="12"'


def _svg(width: int, height: int, body: list[str], title: str) -> Markup:
    return Markup(
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="{escape(title)}">'
        f"<title>{escape(title)}</title>{''.join(body)}</svg>"
    )


def stacked_bars(rows: Sequence[tuple[str, dict[str, int]]], title: str,
                 width: int = 640) -> Markup:
    """One horizontal bar per label, split by outcome (keys of ``COLOURS``)."""
    label_w, bar_h, gap = 160, 18, 8
    plot_w = width - label_w - 60
    height = max(1, len(rows)) * (bar_h + gap) + 24
    body: list[str] = []
    for i, (label, counts) in enumerate(rows):
        y = i * (bar_h + gap)
        total = sum(counts.values())
        body.append(f'<text x="0" y="{y + 13}" {_FONT}>{escape(label[:24])}</text>')
        x = float(label_w)
        for outcome, count in counts.items():
            if not count:
                continue
            w = plot_w * count / total
            body.append(
                f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar_h}" '
                f'fill="{COLOURS.get(outcome, _BAR)}"><title>{escape(outcome)}: {count}</title>'
                "</rect>"
            )
            x += w
        body.append(f'<text x="{label_w + plot_w + 6}" y="{y + 13}" {_FONT}>{total}</text>')
    legend_y = len(rows) * (bar_h + gap) + 14
    x = float(label_w)
    for outcome, colour in COLOURS.items():
        body.append(f'<rect x="{x}" y="{legend_y - 9}" width="10" height="10" fill="{colour}"/>'
                    f'<text x="{x + 14}" y="{legend_y}" {_FONT}>{outcome}</text>')
        x += 90
    return _svg(width, height, body, title)


def bars(items: Sequence[tuple[str, float, str]], title: str, *, maximum: float | None = None,
         width: int = 640, errors: Sequence[tuple[float, float] | None] = ()) -> Markup:
    """Horizontal bars: (label, value, text shown after the bar); ``errors``, one per
    item where given, an interval drawn as a whisker across its bar (error bars)."""
    if not items:
        return _svg(width, 24, [f'<text x="0" y="14" {_FONT}>no data</text>'], title)
    label_w, bar_h, gap = 160, 16, 6
    # Room after the bars for the longest text (about 7 px a character at 12 px).
    plot_w = max(120, width - label_w - 12 - 7 * max(len(text) for _, _, text in items))
    top = maximum if maximum is not None else max(
        (max([v, *(e[1] for e in errors[i:i + 1] if e)]) for i, (_, v, _) in enumerate(items)),
        default=0.0)
    height = max(1, len(items)) * (bar_h + gap)
    body: list[str] = []
    for i, (label, value, text) in enumerate(items):
        y = i * (bar_h + gap)
        w = plot_w * value / top if top > 0 else 0.0
        end = w
        body.append(
            f'<text x="0" y="{y + 12}" {_FONT}>{escape(label[:24])}</text>'
            f'<rect x="{label_w}" y="{y}" width="{max(w, 0.5):.1f}" height="{bar_h}" '
            f'fill="{_BAR}"/>')
        interval = errors[i] if i < len(errors) else None
        if interval is not None and top > 0:
            lo, hi = (label_w + plot_w * v / top for v in interval)
            mid = y + bar_h / 2
            body.append(
                f'<path class="error-bar" d="M {lo:.1f} {mid - 4} V {mid + 4} M {lo:.1f} {mid} '
                f'H {hi:.1f} M {hi:.1f} {mid - 4} V {mid + 4}" stroke="#212121" '
                f'stroke-width="1.5" fill="none"><title>{escape(text)}</title></path>')
            end = max(end, hi - label_w)
        body.append(f'<text x="{label_w + end + 6:.1f}" y="{y + 12}" {_FONT}>'
                    f"{escape(text)}</text>")
    return _svg(width, height, body, title)


def scatter(points: Sequence[tuple[str, float, float, tuple[float, float] | None]],
            title: str, *, width: int = 640, height: int = 240, x_title: str = "",
            y_title: str = "") -> Markup:
    """(label, x, y, y's interval) points on labelled axes, y from 0 to 1 (a rate), each
    with a vertical error bar and its label: cost against pass rate."""
    if not points:
        return _svg(width, 24, [f'<text x="0" y="14" {_FONT}>no data</text>'], title)
    left, right, top_m = 56, width - 120, 10
    bottom = height - 38
    plot_w, plot_h = right - left, bottom - top_m
    x_max = max(x for _, x, _, _ in points) or 1.0
    body: list[str] = []
    for label, x, y, interval in points:
        px = left + plot_w * x / x_max
        py = bottom - plot_h * y
        if interval is not None:
            lo, hi = (bottom - plot_h * v for v in interval)
            body.append(f'<path class="error-bar" d="M {px - 4:.1f} {lo:.1f} H {px + 4:.1f} '
                        f'M {px:.1f} {lo:.1f} V {hi:.1f} M {px - 4:.1f} {hi:.1f} H '
                        f'{px + 4:.1f}" stroke="#212121" stroke-width="1.5" fill="none"/>')
        body.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="4" fill="{_BAR}"><title>'
                    f"{escape(label)}: {escape(_number(x))}, {y:.1%}</title></circle>"
                    f'<text x="{px + 7:.1f}" y="{py + 4:.1f}" {_FONT}>{escape(label[:20])}</text>')
    body += _axes(left, right, top_m, bottom,
                  x_ticks=[(left + plot_w * f, _number(x_max * f)) for f in (0.0, 0.5, 1.0)],
                  y_ticks=[(bottom - plot_h * f, f"{f:.0%}") for f in (0.0, 0.5, 1.0)],
                  x_title=x_title, y_title=y_title, height=height)
    return _svg(width, height, body, title)


def histogram(values: Sequence[float], title: str, *, bins: int = 20, width: int = 640,
              height: int = 180, x_title: str = "", y_title: str = "") -> Markup:
    """Counts of ``values`` in equal-width bins from their minimum to their maximum, with
    both axes drawn and labelled (seconds along, counts up)."""
    if not values:
        return _svg(width, 24, [f'<text x="0" y="14" {_FONT}>no data</text>'], title)
    low, high = min(values), max(values)
    span = high - low or 1.0
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int((v - low) / span * bins))] += 1
    left, right, top_m = 48, width - 12, 8
    bottom = height - 38
    plot_w, plot_h = right - left, bottom - top_m
    top = max(counts)
    bar_w = plot_w / bins
    body: list[str] = []
    # Each bin's edges, as many decimals as it takes for neighbours to read apart.
    edges = _tick_seconds([low + span * i / bins for i in range(bins + 1)])
    for i, count in enumerate(counts):
        h = plot_h * count / top if top else 0
        body.append(
            f'<rect x="{left + i * bar_w + 0.5:.1f}" y="{bottom - h:.1f}" '
            f'width="{max(bar_w - 1, 0.5):.1f}" height="{h:.1f}" fill="{_BAR}"><title>'
            f"{edges[i]}-{edges[i + 1]}: {count}</title></rect>"
        )
    places = (0.0, 0.5, 1.0) if high > low else (0.0,)
    body += _axes(left, right, top_m, bottom,
                  x_ticks=list(zip((left + plot_w * f for f in places),
                                   _tick_seconds([low + (high - low) * f for f in places]),
                                   strict=True)),
                  y_ticks=[(bottom - plot_h * n / top, str(n))
                           for n in sorted({0, top // 2, top}) if top],
                  x_title=x_title, y_title=y_title, height=height)
    return _svg(width, height, body, title)


def steps(points: Sequence[tuple[float, float]], title: str, *, width: int = 640,
          height: int = 160, x_title: str = "", y_title: str = "",
          until: float | None = None) -> Markup:
    """A cumulative step line through (seconds, value) points, on labelled axes, drawn
    on to ``until`` seconds (the end of what it measures) when that is later.

    What is used so far never shrinks: a point below the highest before it (an agent
    whose own total at its end is less than its messages' reports added up) is drawn at
    that height, and what it said is written under the line."""
    if not points or not any(y for _, y in points):
        said = "no usage reported" if not points else f"0 {y_title} reported"
        return _svg(width, 24, [f'<text x="0" y="14" {_FONT}>{escape(said)}</text>'], title)
    below = points[-1][1] < max(y for _, y in points)
    note = (f"at its end it said {_number(points[-1][1])} {y_title} in all, less than "
            "what it reported on the way" if below else "")
    points = list(itertools.accumulate(points, lambda a, b: (b[0], max(a[1], b[1]))))
    if len({p[0] for p in points}) == 1 and (until or 0.0) <= points[0][0]:
        # All of it at one moment, the last: no line to draw; say what it was.
        x, y = points[-1]
        return _svg(width, 24, [f'<text x="0" y="14" {_FONT}>{escape(_number(y))} '
                                f"{escape(y_title)}, reported at once, {_seconds(x)} after "
                                "the start</text>"], title)
    x_max = max(max(p[0] for p in points), until or 0.0) or 1.0
    y_max = max(p[1] for p in points) or 1.0
    left, right, top_m = 76, width - 12, 8
    bottom = height - 38
    plot_w, plot_h = right - left, bottom - top_m
    path = [f"M {left} {bottom}"]
    previous_y = float(bottom)
    for x, y in points:
        px = left + plot_w * x / x_max
        py = bottom - plot_h * y / y_max
        path.append(f"L {px:.1f} {previous_y:.1f} L {px:.1f} {py:.1f}")
        previous_y = py
    path.append(f"L {right} {previous_y:.1f}")
    body = [f'<path d="{" ".join(path)}" fill="none" stroke="{_BAR}" stroke-width="2"/>']
    body += _axes(left, right, top_m, bottom,
                  x_ticks=[(left + plot_w * f, _seconds(x_max * f)) for f in (0.0, 0.5, 1.0)],
                  y_ticks=[(bottom - plot_h * f, _number(y_max * f)) for f in (0.0, 0.5, 1.0)],
                  x_title=x_title, y_title=y_title, height=height)
    if note:
        body.append(f'<text x="{left}" y="{height + 14}" {_FONT}>{escape(note)}</text>')
        height += 20
    return _svg(width, height, body, title)


def _axes(left: float, right: float, top: float, bottom: float, *,
          x_ticks: Sequence[tuple[float, str]], y_ticks: Sequence[tuple[float, str]],
          x_title: str, y_title: str, height: int) -> list[str]:
    """Two axis lines, their ticks with labels, and a title under each (escaped)."""
    axis = 'stroke="#5f6670" stroke-width="1"'
    body = [f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" {axis}/>',
            f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" {axis}/>']
    for x, label in x_ticks:
        anchor = "end" if x >= right - 1 else "middle" if x > left + 1 else "start"
        body.append(f'<line x1="{x:.1f}" y1="{bottom}" x2="{x:.1f}" y2="{bottom + 4}" {axis}/>'
                    f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="{anchor}" {_FONT}>'
                    f"{escape(label)}</text>")
    for y, label in y_ticks:
        body.append(f'<line x1="{left - 4}" y1="{y:.1f}" x2="{left}" y2="{y:.1f}" {axis}/>'
                    f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" {_FONT}>'
                    f"{escape(label)}</text>")
    if x_title:
        body.append(f'<text x="{(left + right) / 2:.1f}" y="{height - 4}" '
                    f'text-anchor="middle" {_FONT}>{escape(x_title)}</text>')
    if y_title:
        middle = (top + bottom) / 2
        body.append(f'<text x="12" y="{middle:.1f}" text-anchor="middle" '
                    f'transform="rotate(-90 12 {middle:.1f})" {_FONT}>{escape(y_title)}</text>')
    return body


def _seconds(value: float, digits: int = 1) -> str:
    if not math.isfinite(value):
        return "?"
    return f"{value:.{digits}f}s" if value < 120 else f"{value / 60:.{digits}f}m"


def _tick_seconds(values: Sequence[float]) -> list[str]:
    """``values`` as an axis labels them: with as many decimals as it takes (up to
    milliseconds' worth) for different values to read differently (durations of 3.21 s
    to 3.24 s read ``3.21s 3.23s 3.24s``, not ``3.2s`` three times)."""
    for digits in range(1, 4):
        labels = [_seconds(v, digits) for v in values]
        if len(set(labels)) == len(set(values)):
            break
    return labels


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.4g}"
