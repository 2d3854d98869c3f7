"""Small inline-SVG charts (no JavaScript, no network): grouped bars, lines, worker timelines."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from html import escape

from kit.report.model import TimelineEvent

__all__ = ["EVENT_COLOURS", "PALETTE", "bar_chart", "colour", "line_chart", "nice_ticks", "timeline_pieces"]

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac")
EVENT_COLOURS = {"claim": "#4e79a7", "commit": "#59a14f", "complete": "#76b7b2", "heartbeat": "#bab0ac",
                 "fault": "#e15759", "crash": "#e15759", "pause": "#edc948"}
_FONT = 'font-family="system-ui, sans-serif" font-size="11"'


def _open_svg(width: int, height: int, title: str) -> str:
    return (f'<svg class="chart" role="img" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
            f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>')


def colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 1:
        return f"{value:.3g}"
    return f"{value:.2g}"


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high] (at least two)."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        high = low + 1.0
    raw = (high - low) / max(count, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    start = math.floor(low / step) * step
    ticks = [round(start, 12)]
    while (ticks[-1] < high or len(ticks) < 2) and len(ticks) < 60:
        ticks.append(round(start + len(ticks) * step, 12))
    return ticks


def _legend(labels: Sequence[tuple[str, str]], x: int, y: int) -> str:
    parts, offset = [], 0
    for label, fill in labels:
        parts.append(f'<rect x="{x + offset}" y="{y - 9}" width="10" height="10" fill="{fill}"/>'
                     f'<text x="{x + offset + 14}" y="{y}" {_FONT}>{escape(label)}</text>')
        offset += 24 + 7 * len(label)
    return "".join(parts)


def bar_chart(groups: Sequence[tuple[str, Sequence[float]]], labels: Sequence[str], unit: str, title: str) -> str:
    """Horizontal grouped bars: one group per row label, one bar per series (``labels``).

    When the values span more than two decades (one slow area beside many fast
    ones) the axis is logarithmic, so every bar stays readable; it says so.
    """
    bar, gap, left, width = 11, 8, 150, 760
    plot_w = width - left - 70
    top = 34
    height = top + sum(len(values) * bar + gap for _, values in groups) + 44
    positive = [v for _, values in groups for v in values if v > 0]
    peak = max(positive, default=1.0)
    log = bool(positive) and peak / min(positive) > 100
    if log:
        low_exp, high_exp = math.floor(math.log10(min(positive))), math.ceil(math.log10(peak))
        high_exp = max(high_exp, low_exp + 1)
        ticks = [10.0 ** e for e in range(low_exp, high_exp + 1)]

        def span(v: float) -> float:
            return plot_w * (math.log10(v) - low_exp) / (high_exp - low_exp) if v > 0 else 0.0
    else:
        ticks = nice_ticks(0.0, peak)

        def span(v: float) -> float:
            return plot_w * v / (ticks[-1] or 1.0)
    out = [_open_svg(width, height, title),
           _legend([(label, colour(i)) for i, label in enumerate(labels)], left, 16)]
    for tick in ticks:
        x = left + span(tick)
        out.append(f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{height - 38}" stroke="#ddd"/>'
                   f'<text x="{x:.1f}" y="{height - 24}" text-anchor="middle" {_FONT}>{_fmt(tick)}</text>')
    axis = f"{unit} (log scale)" if log else unit
    out.append(f'<text x="{left + plot_w}" y="{height - 6}" text-anchor="end" {_FONT}>{escape(axis)}</text>')
    y = top
    for name, values in groups:
        out.append(f'<text x="{left - 6}" y="{y + len(values) * bar / 2 + 4:.1f}" text-anchor="end" {_FONT}>'
                   f'{escape(name)}</text>')
        for i, value in enumerate(values):
            w = max(span(value), 0.5 if value > 0 else 0.0)
            out.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar - 1}" fill="{colour(i)}">'
                       f'<title>{escape(name)} · {escape(labels[i])}: {_fmt(value)} {escape(unit)}</title></rect>'
                       + (f'<text x="{left + w + 4:.1f}" y="{y + bar - 2}" {_FONT} fill="#555">{_fmt(value)}</text>'
                          if value > 0 else ""))
            y += bar
        y += gap
    out.append("</svg>")
    return "".join(out)


def line_chart(series: Sequence[tuple[str, Sequence[tuple[float, float]]]], x_unit: str, y_unit: str,
               title: str) -> str:
    """Lines (with point markers) of (x, y) series on shared axes."""
    width, height, left, right, top, bottom = 760, 290, 60, 20, 42, 40
    points = [p for _, pts in series for p in pts]
    xs = [x for x, _ in points] or [0.0, 1.0]
    ys = [y for _, y in points] or [0.0, 1.0]
    x_ticks = nice_ticks(min(xs), max(xs))
    y_ticks = nice_ticks(min(0.0, min(ys)), max(ys))
    x0, x1, y0, y1 = x_ticks[0], x_ticks[-1], y_ticks[0], y_ticks[-1]
    pw, ph = width - left - right, height - top - bottom

    def sx(x: float) -> float:
        return left + (x - x0) / ((x1 - x0) or 1.0) * pw

    def sy(y: float) -> float:
        return top + ph - (y - y0) / ((y1 - y0) or 1.0) * ph

    out = [_open_svg(width, height, title),
           _legend([(name, colour(i)) for i, (name, _) in enumerate(series)], left, 16)]
    for tick in y_ticks:
        out.append(f'<line x1="{left}" y1="{sy(tick):.1f}" x2="{width - right}" y2="{sy(tick):.1f}" stroke="#eee"/>'
                   f'<text x="{left - 6}" y="{sy(tick) + 4:.1f}" text-anchor="end" {_FONT}>{_fmt(tick)}</text>')
    for tick in x_ticks:
        out.append(f'<text x="{sx(tick):.1f}" y="{height - bottom + 16}" text-anchor="middle" {_FONT}>'
                   f'{_fmt(tick)}</text>')
    out.append(f'<line x1="{left}" y1="{top + ph}" x2="{width - right}" y2="{top + ph}" stroke="#888"/>'
               f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="#888"/>'
               f'<text x="{width - right}" y="{height - 6}" text-anchor="end" {_FONT}>{escape(x_unit)}</text>'
               f'<text x="{left - 6}" y="{top - 10}" text-anchor="end" {_FONT}>{escape(y_unit)}</text>')
    for i, (name, pts) in enumerate(series):
        ordered = sorted(pts)
        if len(ordered) > 1:
            path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in ordered)
            out.append(f'<polyline fill="none" stroke="{colour(i)}" stroke-width="1.5" points="{path}"/>')
        step = max(1, len(ordered) // 200)
        for x, y in ordered[::step]:
            out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2" fill="{colour(i)}">'
                       f'<title>{escape(name)}: {_fmt(y)} {escape(y_unit)} at {_fmt(x)} {escape(x_unit)}</title>'
                       f'</circle>')
    out.append("</svg>")
    return "".join(out)


def timeline_pieces(lanes: Sequence[tuple[str, Sequence[TimelineEvent]]], title: str) -> Iterator[str]:
    """One lane per worker; spans for events with an end, ticks for instants; colour by kind. In pieces, one
    per event, for a writer that streams them: the chart is never held whole (a stress run's timeline is
    thousands of events, a merged report's many times that)."""
    width, left, right, top, lane = 760, 110, 40, 34, 22
    height = top + lane * len(lanes) + 34
    events = [e for _, evs in lanes for e in evs]
    low = min((e.start for e in events), default=0.0)
    high = max((max(e.start, e.end or e.start) for e in events), default=1.0)
    ticks = nice_ticks(min(0.0, low), high)
    t0, t1 = ticks[0], ticks[-1]
    pw = width - left - right

    def sx(t: float) -> float:
        return left + (t - t0) / ((t1 - t0) or 1.0) * pw

    kinds = sorted({e.kind for e in events})
    yield _open_svg(width, height, title)
    yield _legend([(k, EVENT_COLOURS.get(k, colour(i + 6))) for i, k in enumerate(kinds)], left, 16)
    for tick in ticks:
        yield (f'<line x1="{sx(tick):.1f}" y1="{top - 4}" x2="{sx(tick):.1f}" y2="{height - 26}" stroke="#eee"/>'
               f'<text x="{sx(tick):.1f}" y="{height - 12}" text-anchor="middle" {_FONT}>{_fmt(tick)}</text>')
    yield f'<text x="{width - 4}" y="{height - 12}" text-anchor="end" {_FONT}>s</text>'
    for row, (worker, evs) in enumerate(lanes):
        y = top + row * lane
        yield (f'<text x="{left - 6}" y="{y + 14}" text-anchor="end" {_FONT}>{escape(worker)}</text>'
               f'<line x1="{left}" y1="{y + lane - 2}" x2="{width - right}" y2="{y + lane - 2}" stroke="#f3f3f3"/>')
        for event in evs:
            fill = EVENT_COLOURS.get(event.kind, colour(kinds.index(event.kind) + 6))
            tip = f"{worker} · {event.kind}" + (f" · {event.label}" if event.label else "") + \
                  f" at {_fmt(event.start)} s" + (f"–{_fmt(event.end)} s" if event.end is not None else "")
            if event.end is not None and event.end > event.start:
                w = max(sx(event.end) - sx(event.start), 1.0)
                yield (f'<rect x="{sx(event.start):.1f}" y="{y + 3}" width="{w:.1f}" height="{lane - 8}" '
                       f'fill="{fill}" opacity="0.85"><title>{escape(tip)}</title></rect>')
            else:
                yield (f'<rect x="{sx(event.start) - 1:.1f}" y="{y}" width="3" height="{lane - 2}" '
                       f'fill="{fill}"><title>{escape(tip)}</title></rect>')
    yield "</svg>"
